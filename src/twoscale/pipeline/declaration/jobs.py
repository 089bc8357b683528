"""The jobs of the declared pipeline (stages.yaml) under one parameter set: each stage's wildcards and their
values, its input and output files as patterns of them, under the set's root.

Translation of the declaration (DVC's syntax):
  ${item.recipe}         the job's own wildcard, {recipe};
  ${train.steps}         a parameter value, written in;
  .../step_{step}.pt     one file per checkpoint step (train.checkpoint_steps); DVC tracks its folder;
  a folder input         every output of every job that lies inside it (DVC: the folder); a folder of the job's
                         own wildcards, those outputs with the wildcards kept.

The declaration's paths lie under data/, results/ and logs/ of the checkout, where the default parameter set
(params.yaml) writes; any other set puts them under its own root (runs/<name>/, params.results_root). A stage
checks what it reads against these (twoscale.pipeline.records.provenance); the Snakemake rules say the same in their own
syntax (twoscale.pipeline.declaration.snakemake_rules), and tests check both orchestrators plan exactly these jobs.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from twoscale.pipeline.declaration.dependencies import PER_CHECKPOINT, declaration, inside, lookup, output_paths

ITEM = re.compile(r"\$\{item\.(\w+)\}")
WILDCARD = re.compile(r"\{(\w+)\}")  # a job's own wildcard in a stage's path
PARAMETER = re.compile(r"\$\{([\w.]+)\}")
CHECKPOINT_STEPS = "train.checkpoint_steps"
ROOTED = ("data", "results", "logs")  # the top folders of what the stages write, moved under a parameter set's root


@dataclass(frozen=True)
class Stage:
    name: str
    wildcards: tuple[tuple[str, tuple[str, ...]], ...]  # per wildcard, the values its jobs take
    inputs: tuple[str, ...]  # files, as patterns of the wildcards
    outputs: tuple[str, ...]

    def jobs(self) -> list[dict[str, str]]:
        """Every job's wildcard values."""
        names = [name for name, _ in self.wildcards]
        return [dict(zip(names, values)) for values in itertools.product(*(v for _, v in self.wildcards))]

    def job_outputs(self) -> list[str]:
        return [path.format(**job) for job in self.jobs() for path in self.outputs]

    def dvc_name(self, job: dict[str, str]) -> str:
        """DVC's name for one of its jobs: the stage, then its matrix values in the matrix's order (tokenize,
        train@paper-1337, measure@paper-1337-40)."""
        return self.name + ("@" + "-".join(job.values()) if job else "")


def segment_pattern(path: str, placeholder: re.Pattern) -> re.Pattern:
    """A path as a pattern in which each `placeholder` ({recipe}, or ${item.recipe}) matches one path segment."""
    return re.compile("[^/]+".join(map(re.escape, placeholder.split(path)[::2])))


def matrix_values(config: dict[str, Any], expression: str) -> tuple[str, ...]:
    """A matrix entry's values: ${recipes} -> the recipe names (a mapping's keys), ${runtime.seeds} -> '1337', ..."""
    return tuple(str(item) for item in lookup(config, parameter_key(expression)))


def parameter_key(expression: str) -> str:
    """'${runtime.seeds}' -> 'runtime.seeds'."""
    return PARAMETER.fullmatch(expression).group(1)


def path_pattern(path: str, config: dict[str, Any]) -> str:
    """A declared path as a pattern of the job's wildcards, parameter values written in."""
    path = ITEM.sub(r"{\1}", path)
    return PARAMETER.sub(lambda found: str(lookup(config, found.group(1))), path)


def benchmark_path(log: str) -> str:
    """Where Snakemake writes a job's benchmark file (its wall and CPU seconds), from its log's path."""
    return "results/benchmarks/" + log.removeprefix("logs/").removesuffix(".log") + ".tsv"


def rooted(path: str, root: str) -> str:
    """A declared path under the parameter set's root ('' for the checkout itself)."""
    return f"{root}/{path}" if root and path.split("/", 1)[0] in ROOTED else path


def _outputs(stage: dict[str, Any], config: dict[str, Any], root: str) -> list[str]:
    paths = []
    for path in output_paths(stage):
        pattern = rooted(path_pattern(path, config), root)
        if PER_CHECKPOINT in path:  # not ${item.step}, which is the job's own step
            paths += [pattern.replace(PER_CHECKPOINT, str(step)) for step in lookup(config, CHECKPOINT_STEPS)]
        else:
            paths.append(pattern)
    return paths


def _declared(name: str, stage: dict[str, Any], config: dict[str, Any], root: str) -> Stage:
    return Stage(
        name=name,
        wildcards=tuple((wildcard, matrix_values(config, expression))
                        for wildcard, expression in stage.get("matrix", {}).items()),
        inputs=tuple(rooted(path_pattern(path, config), root) for path in stage["inputs"]),
        outputs=tuple(_outputs(stage, config, root)),
    )


def stages(config: dict[str, Any], root: str | PurePosixPath = ".") -> list[Stage]:
    """Every stage's jobs, their paths under `root` (the checkout itself by default), with a folder input replaced
    by every output of every job inside that folder (none, when no job writes there: a stage with no teachers to
    read)."""
    root = "" if PurePosixPath(root) == PurePosixPath(".") else PurePosixPath(root).as_posix()
    declared = [_declared(name, stage, config, root) for name, stage in declaration().items()]
    patterns = [path for stage in declared for path in stage.outputs]
    every_output = [path for stage in declared for path in stage.job_outputs()]

    def files(path: str) -> list[str]:
        if not any(inside(pattern, path) for pattern in patterns):
            return [path]
        if "{" not in path:
            return [output for output in every_output if inside(output, path)]
        # a folder of the job's own wildcards: the outputs inside it, its wildcards kept (the same for every job)
        folder = segment_pattern(path + "/", WILDCARD)
        return list(dict.fromkeys(path + "/" + output[match.end():] for output in every_output
                                  if (match := folder.match(output))))

    return [replace(stage, inputs=tuple(f for path in stage.inputs for f in files(path))) for stage in declared]
