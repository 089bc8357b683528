"""One orchestrator at a time per checkout, reading one version of the parameters.

Snakemake and DVC write the same folders; run together, one would remove or rewrite what the other is building.
A Snakemake run therefore registers itself in DVC's own lock of the files it writes (.dvc/tmp/rwlock) as the writer
of data/ and results/, for as long as it runs. DVC checks that lock before it removes or rebuilds any stage's
outputs, so `dvc repro` stops at once and names the Snakemake run in its way; a Snakemake run that finds DVC working
(holding the repository's lock, or reading or writing those folders) refuses to start, naming the DVC process.
An entry left by a killed process is dropped by the next one that looks (DVC checks the process is alive).

A Snakemake run reads its parameter file once, when it starts, into a snapshot named by its content; its jobs read
that snapshot, so a parameter file edited while the run is under way changes nothing of the run, and the next run
reruns what the edit changed (Snakemake recorded the values its jobs were built from).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import atomic_path, finite_or_null, interrupted, write_json
from twoscale.config.parameter_files import changed_keys, is_overlay, parse_yaml, resolved_from, shown_keys
from twoscale.config.params import HASH_CHARS, ParamsError
from twoscale.pipeline.declaration.jobs import stages
from twoscale.pipeline.records.provenance import (
    RECORDS,
    BuildCheck,
    Job,
    Record,
    digested_fields,
    record_path,
    with_digest,
)

WRITTEN = ("data", "results")  # what the pipeline writes
SNAPSHOTS = Path(".snakemake/twoscale/params")
SNAPSHOT_ENV = "TWOSCALE_PARAMS_SNAPSHOT"  # how the jobs Snakemake spawns (on a cluster node) find the snapshot


def params_snapshot(path: str | Path, folder: Path = SNAPSHOTS) -> Path:
    """A copy of the parameter set at `path` in `folder`, named by a hash of its content (written once): the file's
    bytes, or for an overlay the whole set it resolves to (`parameter_files.read_raw`), so that every job reads one
    complete set however its base changes while the run is under way."""
    try:
        content = Path(path).read_bytes()
    except OSError as exc:
        raise ParamsError(f"{path}: cannot read ({exc.strerror})") from None
    with contextlib.suppress(yaml.YAMLError):
        raw = parse_yaml(content)
        if is_overlay(raw):  # resolved from the bytes read above, so the snapshot is named by what it holds
            content = yaml.safe_dump(resolved_from(raw, Path(path), str(path)), sort_keys=False).encode()
    snapshot = folder / f"{hashlib.sha256(content).hexdigest()[:HASH_CHARS]}.yaml"
    if not snapshot.is_file():
        with atomic_path(snapshot, now=True) as tmp:
            tmp.write_bytes(content)
    return snapshot


def _in_the_way(message: str, lock_file: Path) -> str:
    """One line naming the DVC process in the way, from DVC's lock message or the lock file's process id."""
    holder = re.search(r"\(PID (\d+)\): (.*)", message)
    if holder:
        who = f"pid {holder.group(1)}: {holder.group(2).strip()}"
    else:
        pid = lock_file.read_text().strip() if lock_file.is_file() else ""
        who = f"pid {pid}, holding {lock_file}" if pid else f"holding {lock_file}"
    tool = "Snakemake" if re.search(r"(^|/)snakemake\b", who.split(": ", 1)[-1]) else "DVC"
    return f"{tool} is running in this checkout ({who}): wait for it to finish or stop it, then run again"


@contextlib.contextmanager
def written_by(root: Path, command: str) -> Iterator[None]:
    """While open, this process is the writer of data/ and results/ in DVC's lock, under `command`. Raises
    TwoscaleError, in one line, when DVC is at work in the checkout. Outside a DVC repository it does nothing."""
    if not (root / ".dvc").is_dir():
        yield
        return
    from dvc.lock import LockError
    from dvc.repo import Repo
    from dvc.rwlock import rwlock

    held = contextlib.ExitStack()
    with Repo(str(root)) as repo:
        hardlink = repo.config["core"].get("hardlink_lock", False)
        try:
            with repo.lock:  # DVC edits its file lock only while holding this one: the check and the claim are one step
                held.enter_context(rwlock(repo.tmp_dir, repo.fs, command, [],
                                          [str(root.resolve() / name) for name in WRITTEN], hardlink))
        except LockError as exc:
            raise TwoscaleError(_in_the_way(str(exc), Path(repo.tmp_dir) / "lock")) from None
    with held:
        yield


def scheduler_woken_by_jobs(scheduler) -> None:
    """Snakemake's job scheduler woken by its jobs only, for a local run. Its limit on job submissions
    (--max-jobs-per-timespan, 100 a second by default) arms a one-second timer after every round that leaves a ready
    job waiting (for cores, or for a job that runs alone), and the round that timer starts arms another: the timers
    multiply with every job that ends while others wait (2,050 rounds for the smoke set's 51 jobs on 2 cores, about
    7 of the 33 CPU-s that Snakemake and its commands took; 50 rounds without the limit). A local run submits far
    fewer than 100 jobs a second: the limit has nothing to hold back there. A cluster run keeps it."""
    scheduler.job_rate_limiter = None


def as_typed(value):
    """Snakemake's --config values with the strings it leaves inside a nested value ("train={steps: 100}" gives
    {"steps": "100"}) read as the YAML they were typed as (100, [1, 2], true; other text stays text)."""
    if isinstance(value, dict):
        return {key: as_typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_typed(item) for item in value]
    if isinstance(value, str) and value.strip():
        with contextlib.suppress(yaml.YAMLError):
            return yaml.safe_load(value)
    return value


ORCHESTRATOR_PID_ENV = "TWOSCALE_ORCHESTRATOR_PID"  # "<host> <pid>" of the Snakemake run that started a job


def orchestrator_named() -> str:
    """This process as the orchestrator its jobs watch (`watch_orchestrator`)."""
    return f"{socket.gethostname()} {os.getpid()}"


def watch_orchestrator(every_s: float = 2.0) -> None:
    """In a job that a Snakemake run on this machine started: stop the job (SIGTERM to itself: its outputs do not
    land) once that run is gone, killed outright, instead of running on unseen and writing beside the next run's
    jobs. Nothing for a job run by hand, by DVC or on another machine (a Slurm node)."""
    host, _, pid = os.environ.get(ORCHESTRATOR_PID_ENV, "").partition(" ")
    if host != socket.gethostname() or not pid.isdigit():
        return

    def watch() -> None:
        while True:
            time.sleep(every_s)
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                print(f"the Snakemake run that started this job (pid {pid}) is gone: stopping", file=sys.stderr,
                      flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:  # there, another user's: not ours, but there
                continue

    threading.Thread(target=watch, name="orchestrator-watch", daemon=True).start()


CONFIG_OPTIONS = ("--config", "-C", "--configfile", "--configfiles")  # Snakemake's options that name the parameters


def without_config_options(arguments: list[str]) -> list[str]:
    """Snakemake's command-line arguments without those that give parameters (`CONFIG_OPTIONS`, each with the
    values that follow it)."""
    kept, skipping = [], False
    for argument in arguments:
        if argument in CONFIG_OPTIONS or argument.startswith(tuple(f"{option}=" for option in CONFIG_OPTIONS)):
            skipping = argument in CONFIG_OPTIONS
        elif skipping and not argument.startswith("-"):
            continue
        else:
            skipping = False
            kept.append(argument)
    return kept


def override_command(params_file: str | Path, settings: dict, arguments: list[str] | None = None) -> str:
    """The shell command that runs Snakemake's `--config KEY=VALUE` settings the project's way: an overlay of
    `params_file` holding them (Snakemake takes only top-level keys, `train={steps: 100}`), written to
    configs/override.yaml (configs/<name>-override.yaml over another set than params.yaml; -2, -3... where that file
    is there, and never written over), run with --configfile and the rest of the user's Snakemake `arguments`
    (`--cores all` if none), so that its results go to a folder of their own (runs/override/) and the parameter
    file's stay as they are."""
    stem = Path(params_file).stem
    name = "override" if stem == "params" else f"{stem}-override"
    overlay = next(path for number in itertools.count(1)
                   if not (path := Path("configs") / f"{name}{'' if number == 1 else f'-{number}'}.yaml").exists())
    lines = [f"base: {Path(os.path.relpath(params_file, overlay.parent)).as_posix()}"]
    lines += [yaml.safe_dump({key: value}, default_flow_style=True, width=10**6).strip()[1:-1]
              for key, value in as_typed(settings).items()]
    quoted = " ".join(shlex.quote(line) for line in lines)
    options = " ".join(shlex.quote(argument) for argument in without_config_options(arguments or [])) or (
        "--cores all")
    return f"(set -C; printf '%s\\n' {quoted} > {overlay}) && snakemake {options} --configfile {overlay}"


def stale_outputs(outputs: list[str], config: dict, params_file: Path) -> list[str]:
    """Those of the set's outputs that are there but are not what their build records describe, or were built from
    other parameter values or other inputs than the set's (`provenance.BuildCheck`, the check a job makes of what it
    reads): a file replaced by hand (its modification time kept or not), or restored by `dvc checkout` without its
    record; a folder or other non-file where a file belongs (its job then refuses to write over it, in one line);
    and those whose landing a kill interrupted (their job's rerun rolls it back). Snakemake, which looks at times
    and at its own records, would call them current and the jobs reading them would refuse them; the default target
    has Snakemake rebuild them. TwoscaleError in one line for an unreadable record of an interrupted landing."""
    check = BuildCheck(config, params_file)
    stale = []
    for path in map(Path, outputs):
        if interrupted(path) or interrupted(record_path(path)):  # its job's next run rolls the landing back
            stale.append(str(path))
            continue
        if path.exists() and not path.is_file():  # a folder, a socket...: only a file is an output
            stale.append(str(path))
            continue
        try:
            if path.is_file() and Record.read(path) is not None:  # one without a record is read unchecked
                check.file(path)
        except TwoscaleError:
            stale.append(str(path))
    return stale



def dvc_stage_names(config: dict) -> set[str]:
    """Every job of the pipeline under `config` by DVC's name for it (`jobs.Stage.dvc_name`)."""
    return {stage.dvc_name(job) for stage in stages(config) for job in stage.jobs()}


def drop_stages_gone(lock: Path, names: set[str]) -> list[str]:
    """Remove from dvc.lock the entries of stages that dvc.yaml no longer has (`names`: `dvc_stage_names`), which
    `dvc commit` keeps: a stage renamed or a matrix item taken out would stay recorded for good.
    The rest of the file stays as DVC wrote it (DVC's own round-trip writer). The names removed."""
    from dvc.utils.serialize import modify_yaml

    if not lock.is_file():
        return []
    with modify_yaml(str(lock)) as data:
        gone = [name for name in data.get("stages", {}) if name not in names]
        for name in gone:
            del data["stages"][name]
    return gone


def relock(root: Path) -> list[str]:
    """Record in `root`'s dvc.lock the checkout's source files for every stage it records, as `dvc commit` would,
    and the values params.yaml holds of parameter keys a stage declares but the lock does not record (keys declared
    since), leaving out keys no longer declared and keeping what it records of outputs and of every other parameter:
    for a change shown to leave every output as it was (docs/development.md#a-change-to-the-plumbing), which
    would otherwise need the default run redone. A stage the lock does not record is left to run. TwoscaleError,
    nothing written, where a stage has keys declared since and params.yaml no longer holds a value the lock records
    for it: the run was made with another file, whose values of the new keys are not known. The names of the entries
    changed."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo
    from dvc.stage.serialize import to_single_stage_lockfile
    from dvc.utils.serialize import modify_yaml
    from dvc_data.hashfile.hash_info import HashInfo

    with Repo(str(root)) as repo:
        entries = {}
        for stage in repo.index.stages:
            if stage.cmd:
                for dep in stage.deps:
                    if isinstance(dep, ParamsDependency):
                        dep.hash_info = HashInfo(dep.PARAM_PARAMS, _with_keys_declared_since(
                            stage.name, (dep.hash_info.value if dep.hash_info else None) or {}, dep.read_params()))
                    elif dep.def_path.startswith("src/"):
                        dep.save()
                entries[stage.name] = to_single_stage_lockfile(stage)
    with modify_yaml(str(root / "dvc.lock")) as data:
        changed = [name for name, entry in entries.items() if name in data["stages"] and data["stages"][name] != entry]
        for name in changed:
            data["stages"][name] = entries[name]
    return changed


def _with_keys_declared_since(name: str, recorded: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A job's recorded parameter values for the keys it declares now (`current`, read alike): the values recorded,
    those of keys no longer declared left out, with the current values of the keys declared since; refused where
    some were declared since and a value recorded is not current (the run was made with another file)."""
    kept = {key: value for key, value in recorded.items() if key in current}
    declared_since = {key: value for key, value in current.items() if key not in recorded}
    if declared_since:
        differing = changed_keys(kept, {key: current[key] for key in kept})
        if differing:
            raise TwoscaleError(f"{name}: records {shown_keys(differing)} other than params.yaml holds, so the "
                                f"run was made with another file: {shown_keys(sorted(declared_since))}, declared "
                                "since, cannot be given its values (rerun it)")
    return {**kept, **declared_since}


def default_run_records(root: Path, config: dict[str, Any]) -> list[Path]:
    """The build records, under the checkout `root`, of the files that the jobs of `config` (params.yaml's) write in
    its layout: the default run's, not those of archived runs kept elsewhere (results/gpu)."""
    written = {output for stage in stages(config) for output in stage.job_outputs()}
    found = (path for folder in WRITTEN for path in (root / folder).rglob(f"{RECORDS}/*.json"))
    return sorted(path for path in found
                  if (path.parent.parent / path.name.removesuffix(".json")).relative_to(root).as_posix() in written)


def record_declared_keys(root: Path, config: dict[str, Any]) -> list[Path]:
    """Add to the default run's build records (`default_run_records`) the values under `config` of the parameter
    keys their job's stage declares but they do not record (keys declared since they were written), leaving out keys
    no longer declared and keeping every other value they record, as `relock` does for dvc.lock (refused, nothing
    written, where a recorded value is not current). A record of a job that `config` does not hold is left alone.
    The records changed."""
    updates = {}
    for path in default_run_records(root, config):
        raw = digested_fields(path)
        declared = finite_or_null(Job(raw["stage"], raw["job"]).params(config) or {})
        params = _with_keys_declared_since(str(path.relative_to(root)), raw["params"], declared)
        if params != raw["params"]:
            updates[path] = with_digest({**raw, "params": params})
    for path, raw in updates.items():
        write_json(path, raw)
    return list(updates)
