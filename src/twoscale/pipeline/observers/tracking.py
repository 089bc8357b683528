"""MLflow tracking: one parent run per pipeline invocation, nested under it a run per stage, and under that a run
per stage job.

The store is `sqlite:///<root>/mlflow.db` with artifacts in `<root>/mlartifacts` (MLFLOW_TRACKING_URI overrides;
the root is DVC_ROOT under `dvc exp`, else the working directory, which both orchestrators set to the repo root).
A tracking server (an http URI) keeps the artifacts where it was told to, so that every node reaches them.
Snakemake creates the store, the parent run and its stage runs in `onstart` (a new sqlite store hit by parallel
jobs fails in its migrations; two jobs starting together would make a stage's run twice) and hands their ids to
jobs through TWOSCALE_MLFLOW_PARENT_RUN and TWOSCALE_MLFLOW_STAGE_RUNS. Under DVC, stages run one after another;
the first creates the parent run, keyed by the `dvc` process, and the rest find it; a stage's first job makes its
stage run, the next find it.

A tracking server that does not answer fails a stage or a workflow at its start, within SERVER_TIMEOUT_S seconds,
in one line naming its URI; later requests give up after a few quick retries (MLflow's own default retries for
about four minutes). A store that cannot be opened (a corrupt or locked SQLite file) is named in one line too.

Every run carries the host and process that own it. A job ends its run FINISHED once its outputs have landed, and
FAILED or KILLED when it fails or is stopped, its outputs landing or not; a process killed outright cannot (also
while its outputs land), so its writer ends its open runs KILLED when its connection drops, and each new
invocation closes, as KILLED, the runs still RUNNING whose process on this host is gone (never a run of another
host, which may be alive on a shared tracking server).

With TWOSCALE_TRACKING=off nothing is logged: the stages write the same outputs either way (tested), which is
why this package's modules are not among any stage's sources (`dependencies.OBSERVERS`).

The calls that need MLflow are `mlflow_store.Store`'s. A job sends them to the store's writer (`tracking_writer`),
which loads MLflow once for every job; a process that has loaded MLflow already (a test, a notebook) runs them
itself.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import json
import math
import numbers
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from twoscale.config.errors import Stopped, TwoscaleError
from twoscale.config.io import once_landed, waiting_file
from twoscale.config.params import DataParams, params_hash
from twoscale.pipeline.observers.run_names import (
    DESCRIPTION_TAG,
    HOST_TAG,
    INVOCATION_TAG,
    PID_TAG,
    PROCESS_START_TAG,
    is_sqlite,
    store_name,
)
from twoscale.pipeline.preload import COMMAND_PID_ENV

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# A request to a tracking server: 3 retries 1, 2 and 4 s apart, each attempt at most 30 s (MLflow: 7 retries up to
# 120 s apart)
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
SERVER_TIMEOUT_S = 10
# Every stage run samples the machine's CPU, memory, disk, network (and NVIDIA GPUs where nvidia-ml-py finds one) as
# system metrics every 2 s (MLflow's default, 10 s, leaves nothing of a stage shorter than that, and MLflow drops
# the last sample): a sample costs the store's writer about 10 ms (docs/running.md#tracking)
os.environ.setdefault("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "2")

TRACKING_ENV = "TWOSCALE_TRACKING"  # on (the default) or off
PARENT_ENV = "TWOSCALE_MLFLOW_PARENT_RUN"
STAGE_GROUPS_ENV = "TWOSCALE_MLFLOW_STAGE_RUNS"  # the invocation's stage runs by stage, as JSON (Snakemake's)
ORCHESTRATOR_ENV = "TWOSCALE_ORCHESTRATOR"


def project_root() -> Path:
    return Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()


def tracking_uri(root: Path | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root or project_root()) / 'mlflow.db'}"


def sqlite_on_slurm_warning(uri: str, submits_to_slurm: bool) -> str | None:
    """The one-line warning for a run whose jobs go to Slurm nodes while the tracking store is a SQLite file, which
    writers on several nodes lock and corrupt over a network file system; None when that is not so."""
    if not submits_to_slurm or not is_sqlite(uri):
        return None
    return (f"warning: the Slurm jobs will log to the SQLite file {store_name(uri)}, which jobs on "
            "several nodes lock and corrupt over a network file system: set MLFLOW_TRACKING_URI to a tracking server "
            "(docs/running.md#a-shared-tracking-server)")


def tracking_on() -> bool:
    value = os.environ.get(TRACKING_ENV, "on")
    if value not in ("on", "off"):
        raise TwoscaleError(f"{TRACKING_ENV}={value!r}: set it to on or off")
    return value == "on"


class Untracked:
    """The store while tracking is off: it takes every call and keeps nothing."""

    def __getattr__(self, operation: str):
        return lambda *args, **kwargs: None


def store(root: Path | None = None):
    """The store this process logs to (`mlflow_store.Store`'s calls): its own where MLflow is loaded here already,
    else the writer of `tracking_writer`, which saves each job MLflow's seconds of start-up; `Untracked` while
    tracking is off."""
    if not tracking_on():
        return Untracked()
    root = root or project_root()
    uri = tracking_uri(root)
    if "mlflow" in sys.modules:
        from twoscale.pipeline.observers.mlflow_store import local_store

        return local_store(uri, root, SERVER_TIMEOUT_S)
    from twoscale.pipeline.observers.tracking_writer import connect

    return connect(uri, root, SERVER_TIMEOUT_S)


def ensure_store(root: Path | None = None) -> str:
    """Create the store and the experiment if needed; return the experiment id. A server that does not answer or a
    store that cannot be opened is a TwoscaleError naming it."""
    return store(root).experiment_id()


def close_abandoned_runs() -> list[str]:
    """Mark KILLED the runs still RUNNING whose owning process on this host is gone; return their ids."""
    return store().close_abandoned_runs()


def git_commit(root: Path | None = None) -> str:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root or project_root(), capture_output=True, text=True
        )
    except OSError:  # no git on this machine
        return "unknown"
    return result.stdout.strip() or "unknown"


def owner_tags(pid: int | None = None) -> dict[str, str]:
    """The host and process (this one by default) that own a run; the start time tells a reused pid apart."""
    import socket

    import psutil

    process = psutil.Process(pid)
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(process.pid),
            PROCESS_START_TAG: str(int(process.create_time()))}


def _dvc_process() -> int | None:
    """The pid of the `dvc` process this stage runs under, if any: among its parents, or, for a job forked from the
    preloaded interpreter, its command's."""
    import psutil

    command = psutil.Process(int(os.environ.get(COMMAND_PID_ENV, os.getpid())))
    for process in command.parents():
        try:
            cmdline = process.cmdline()
        except psutil.Error:
            continue
        if any(Path(part).name == "dvc" for part in cmdline[:2]) or cmdline[1:3] == ["-m", "dvc"]:
            return process.pid
    return None


def _dvc_invocation(pid: int) -> str:
    import psutil

    return f"dvc-{pid}-{int(psutil.Process(pid).create_time())}"


def orchestrator() -> str:
    if os.environ.get(ORCHESTRATOR_ENV):
        return os.environ[ORCHESTRATOR_ENV]
    return "dvc" if _dvc_process() else "cli"


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block is raised as KeyboardInterrupt once the block is done. Raised where it
    arrives, it may land in a garbage-collection callback of SQLAlchemy, where Python prints and ignores it, and a
    workflow stopped while it opened its MLflow store would run on."""
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def start_pipeline_run(orchestrator_name: str, invocation: str, tags: dict[str, str] | None = None,
                       pid: int | None = None) -> str:
    """Close the runs abandoned by dead processes of this host, then create the parent run of one pipeline
    invocation, owned by process `pid` (this one by default), and return its id."""
    return store().start_pipeline_run(f"pipeline ({orchestrator_name})", {
        DESCRIPTION_TAG: f"One invocation of the workflow by {orchestrator_name} ({invocation}): a run per stage "
                         "is nested under this one, and each stage job's run under its stage's.",
        INVOCATION_TAG: invocation,
        "orchestrator": orchestrator_name,
        "git_commit": git_commit(),
        **owner_tags(pid),
        **(tags or {}),
    })


def end_pipeline_run(run_id: str, status: str) -> None:
    """End an invocation's run and its stage runs as `status`, deleting the stage runs no job ran under."""
    tracked = store()
    tracked.end_stage_groups(run_id, status)
    tracked.end_run(run_id, status)


def _parent_run_id(orchestrator_name: str) -> str | None:
    if os.environ.get(PARENT_ENV):
        return os.environ[PARENT_ENV]
    dvc = _dvc_process()
    if dvc is None:
        return None
    invocation = _dvc_invocation(dvc)
    return store().find_pipeline_run(invocation) or start_pipeline_run(orchestrator_name, invocation, pid=dvc)


@dataclass(frozen=True)
class StageRun:
    run_id: str


_open_runs: list[tuple[Any, str]] = []  # this process's stage runs and their stores, innermost last
_unlanded_runs: list[tuple[Any, str, tuple[str, ...]]] = []  # those whose work is done, outputs yet to land


def _current_run() -> tuple[Any, str]:
    """The store and id of the innermost open stage run: where the log_ calls go."""
    if not _open_runs:
        raise RuntimeError("no stage run is open: log inside `stage_run`")
    return _open_runs[-1]


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """Log an output file to the open stage run under its own name, also while it waits to land with the stage's
    other outputs (`outputs_land_together`)."""
    path = Path(path)
    waiting = waiting_file(path)
    tracked, run_id = _current_run()
    if waiting == path:
        tracked.log_artifact(run_id, str(path.resolve()), artifact_path)
        return
    with tempfile.TemporaryDirectory() as folder:
        named = Path(folder) / path.name
        shutil.copyfile(waiting, named)
        tracked.log_artifact(run_id, str(named), artifact_path)


def log_dataset(name: str, sha256: str, source: str, context: str) -> None:
    """Log a dataset input of the open stage run, by name, digest (the first characters of its `sha256` that the
    store keeps) and source (a path or URI), for `context` (training, evaluation)."""
    tracked, run_id = _current_run()
    tracked.log_dataset(run_id, name, sha256, source, context)


def log_training_corpus(data: DataParams, sha256: str, data_dir: Path) -> None:
    """The training's corpus (its `sha256`, read from `data_dir`) as a dataset of the open stage run, named by where
    it comes from (`describe_source`): read here, so that no stage reads the data section only to log it."""
    from twoscale.data.corpus import describe_source  # imported where a training logs, not by every job

    log_dataset(describe_source(data), sha256, str(data_dir.resolve()), context="training")


def finite_metrics(values: Mapping[str, Any]) -> dict[str, float]:
    """The entries MLflow can log as metrics: finite numbers. A value that could not be measured (None, as a
    table's null reads back, or NaN) and infinities are left out, as are non-numbers."""
    return {key: float(value) for key, value in values.items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)}


SECTIONS = ("train", "val", "final")  # a metric named <section>_<rest> is shown as <section>/<rest>


def sectioned(name: str) -> str:
    """A metric's name in MLflow, where the UI groups metrics by what comes before the first "/": a training's
    curves and final numbers apart (train_loss: train/loss, val_loss: val/loss, final_val_loss: final/val_loss); a
    name that starts with none of SECTIONS is kept."""
    section, _, rest = name.partition("_")
    return f"{section}/{rest}" if section in SECTIONS and rest else name


def log_metrics(values: Mapping[str, Any], step: int | None = None) -> None:
    """Log the `finite_metrics` of `values` to the open stage run (MLflow refuses None outright), `sectioned`."""
    tracked, run_id = _current_run()
    tracked.log_metrics(run_id, {sectioned(key): value for key, value in finite_metrics(values).items()}, step)


def log_curves(rows: list[dict[str, Any]], step_key: str = "step") -> None:
    """Log every finite value of each row as a point of its column's `sectioned` curve at the row's step."""
    points = [(sectioned(key), value, int(row[step_key])) for row in rows
              for key, value in finite_metrics(row).items() if key != step_key]
    tracked, run_id = _current_run()
    tracked.log_points(run_id, points)


def log_params(values: Mapping[str, Any]) -> None:
    tracked, run_id = _current_run()
    tracked.log_params(run_id, dict(values))


def set_tags(tags: Mapping[str, str]) -> None:
    tracked, run_id = _current_run()
    tracked.set_tags(run_id, dict(tags))


def log_model(model, registered_name: str, tags: dict[str, str], pip_requirements: list[str]) -> None:
    """Log the PyTorch `model` to the open stage run and register it as a version of `registered_name`."""
    import torch

    with tempfile.TemporaryDirectory() as folder:
        model_file = Path(folder) / "model.pt"
        torch.save(model, model_file)
        tracked, run_id = _current_run()
        tracked.log_model(run_id, str(model_file), registered_name, tags, pip_requirements)


def flat_params(sections: Mapping[str, Any]) -> dict[str, Any]:
    """Nested parameter sections (pydantic models or dicts) as flat MLflow params: {'train.loops.max': 8, ...}."""
    flat: dict[str, Any] = {}
    for name, section in sections.items():
        raw = section.model_dump(mode="json") if hasattr(section, "model_dump") else section
        flat.update(flat_params({f"{name}.{key}": value for key, value in raw.items()})
                    if isinstance(raw, dict) else {name: raw})
    return flat


def stage_description(stage: str) -> str | None:
    """What a stage does: its module's docstring, read from its source (an orchestrator need not import it)."""
    spec = importlib.util.find_spec(f"twoscale.stages.{stage}")
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text())) if spec and spec.origin else None


def start_stage_groups(parent: str, stages: list[str]) -> dict[str, str]:
    """Make, under the invocation run `parent`, the run gathering each stage's jobs (before any job starts, so that
    no two jobs race to make one); their ids by stage, for `STAGE_GROUPS_ENV`."""
    tracked = store()
    return {stage: tracked.stage_group_run(parent, stage, stage_description(stage)) for stage in stages}


def _stage_group(tracked: Any, parent: str, stage: str, description: str | None) -> str:
    """The run gathering the invocation's jobs of `stage`: made by the orchestrator (Snakemake), else found or made
    here (under DVC, one job at a time)."""
    made = json.loads(os.environ.get(STAGE_GROUPS_ENV) or "{}")
    return made.get(stage) or tracked.stage_group_run(parent, stage, description)


@contextlib.contextmanager
def stage_run(stage: str, sections: Mapping[str, BaseModel], tags: dict[str, str] | None = None,
              origin: dict[str, str] | None = None) -> Iterator[StageRun]:
    """A nested MLflow run for one stage job, under the invocation's parent run when there is one, named by the
    stage and `tags`, described by its stage module's docstring, with the parameter `sections` the stage reads
    ({'measure': params.measure}) as its params and their hash as a tag; `origin` (what computed its numbers:
    arithmetic, processor, torch) is tagged too. The machine's use is sampled (system/* metrics) while the run is
    open. It ends FINISHED once the outputs written in it have landed (at once where none wait: `once_landed`),
    FAILED on an error, KILLED when stopped; a process killed outright before its outputs land leaves it RUNNING,
    for its writer or the next invocation to close KILLED. Under DVC the job's stage and invocation runs are then
    marked FINISHED too (no orchestrator hook closes them; the next job of the invocation reopens them)."""
    tracked = store()
    orchestrator_name = orchestrator()
    parent = _parent_run_id(orchestrator_name)
    description = stage_description(stage)
    run_tags = {
        **({DESCRIPTION_TAG: description} if description else {}),
        "stage": stage,
        "orchestrator": orchestrator_name,
        "git_commit": git_commit(),
        "params_hash": params_hash(*sections.values()),
        **owner_tags(),
        **(tags or {}),
        **(origin or {}),
    }
    name = " ".join([stage, *(f"{k}={v}" for k, v in (tags or {}).items())])
    group = _stage_group(tracked, parent, stage, description) if parent else None
    # under DVC nobody closes the parents: each job marks them finished once its own run has ended (the next reopens)
    closed_after = (group, parent) if parent and not os.environ.get(PARENT_ENV) else ()
    run_id = tracked.start_run(name, run_tags, group, system_metrics=True)
    _open_runs.append((tracked, run_id))
    status = "FAILED"
    try:
        log_params(flat_params(sections))
        yield StageRun(run_id)
        status = "FINISHED"
    except (KeyboardInterrupt, Stopped):
        status = "KILLED"
        raise
    finally:
        _open_runs.remove((tracked, run_id))
        if status == "FINISHED":
            _unlanded_runs.append((tracked, run_id, closed_after))
            once_landed(functools.partial(_landed, tracked, run_id, closed_after))
        else:
            _end(tracked, run_id, status, closed_after)


def _landed(tracked: Any, run_id: str, closed_after: tuple[str, ...]) -> None:
    _unlanded_runs.remove((tracked, run_id, closed_after))
    _end(tracked, run_id, "FINISHED", closed_after)


def _end(tracked: Any, run_id: str, status: str, closed_after: tuple[str, ...]) -> None:
    """End a stage job's run, then the runs that hold it where its job closes them (`closed_after`, under DVC)."""
    tracked.end_run(run_id, status)
    for holder in closed_after:
        tracked.end_run(holder, "FINISHED")


def outputs_not_landed(status: str) -> None:
    """End as `status` (FAILED, KILLED) the stage runs of this process whose work was done but whose outputs did
    not land (refused after the work, a write that failed, a stop while they landed): the run did not give what it
    would have said. Nothing more is said where the store cannot be reached: the stage's own error is the one to
    read."""
    while _unlanded_runs:
        tracked, run_id, closed_after = _unlanded_runs.pop()
        with contextlib.suppress(TwoscaleError, OSError):
            _end(tracked, run_id, status, closed_after)
