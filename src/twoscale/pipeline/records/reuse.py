"""Jobs one parameter set's run can take from another's: the study's seed-1337 jobs are the default run's.

A job of the target set is taken when the source set's run has built it as the target set would: the same stage
and job (recipe, seed, ...), every output there with a build record that describes it, made from the target set's
parameter values, from inputs that pass the same check down to the corpus (`provenance.BuildCheck`, the check a stage
makes of what it reads). Gathering stages never qualify (their parameters list the runs), nor does anything built
from their outputs. Taken files are copied with their records, logs and benchmark files, their modification times
kept, so that Snakemake sees them as built (it lacks its own metadata for them, which it does not rerun for); a job
whose outputs the target run already has is left alone.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twoscale.config.errors import TwoscaleError
from twoscale.pipeline.declaration.dependencies import declaration
from twoscale.pipeline.declaration.jobs import ITEM, benchmark_path, rooted, stages
from twoscale.pipeline.declaration.snakemake_rules import log_path
from twoscale.pipeline.records.provenance import BuildCheck, Record, record_path


@dataclass(frozen=True)
class TakenJob:
    stage: str
    job: dict[str, str]
    files: tuple[tuple[Path, Path], ...]  # (source, target): outputs, then the log and benchmark file where present


def _relative(path: str, root: str) -> str:
    return path.removeprefix(f"{root}/") if root else path


def _log_and_benchmark(stage: str) -> tuple[str, str]:
    """The job's log and benchmark file as patterns of its wildcards, under the checkout's folders."""
    log = ITEM.sub(r"{\1}", log_path(declaration()[stage]["cmd"]))
    return log, benchmark_path(log)


def _built_as_target_would(check: BuildCheck, path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        if Record.read(path) is None:  # no record: nothing vouches for it
            return False
        check.file(path)
    except TwoscaleError:  # not what its record describes, a record edited by hand, other parameters or inputs
        return False
    return True


def shared_jobs(source: dict[str, Any], source_root: Path, target: dict[str, Any], target_root: Path,
                target_file: Path) -> list[TakenJob]:
    """The target set's jobs that the source set's run (under `source_root`) has built as the target would, and
    that the target run (under `target_root`) has not: in the declaration's order, so a job's inputs come first."""
    check = BuildCheck(target, target_file)
    source_jobs = {stage.name: stage.jobs() for stage in stages(source, source_root.as_posix())}
    roots = ("" if target_root == Path(".") else target_root.as_posix(),
             "" if source_root == Path(".") else source_root.as_posix())
    taken = []
    for stage in stages(target, target_root.as_posix()):
        log, benchmark = _log_and_benchmark(stage.name)
        for job in stage.jobs():
            if job not in source_jobs.get(stage.name, []):
                continue
            targets = [Path(path.format(**job)) for path in stage.outputs]
            sources = [Path(rooted(_relative(str(path), roots[0]), roots[1])) for path in targets]
            if any(path.exists() for path in targets) or not all(
                    _built_as_target_would(check, path) for path in sources):
                continue
            extra = [(Path(rooted(pattern.format(**job), roots[1])), Path(rooted(pattern.format(**job), roots[0])))
                     for pattern in (log, benchmark)]
            taken.append(TakenJob(stage.name, job, (*zip(sources, targets), *[pair for pair in extra
                                                                                if pair[0].is_file()])))
    return taken


def copy_jobs(taken: list[TakenJob]) -> None:
    """Copy each taken job's files and the outputs' build records, modification times kept (the outputs last, so a
    job interrupted here is missing an output and runs again)."""
    for job in taken:
        for source, target in reversed(job.files):
            target.parent.mkdir(parents=True, exist_ok=True)
            if record_path(source).is_file():
                record_path(target).parent.mkdir(exist_ok=True)
                shutil.copy2(record_path(source), record_path(target))
            shutil.copy2(source, target)


def summary(taken: list[TakenJob]) -> str:
    counts = Counter(job.stage for job in taken)
    return ", ".join(f"{stage} {count}" for stage, count in counts.items()) or "none"
