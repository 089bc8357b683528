"""MLflow tracking: one parent run per pipeline invocation, one nested run per stage job.

The store is `sqlite:///<root>/mlflow.db` with artifacts in `<root>/mlartifacts` (MLFLOW_TRACKING_URI overrides;
the root is DVC_ROOT under `dvc exp`, else the working directory, which both orchestrators set to the repo root).
A tracking server (an http URI) keeps the artifacts where it was told to, so that every node reaches them.
Snakemake creates the store and the parent run in `onstart` (a new sqlite store hit by parallel jobs fails in its
migrations) and hands the parent's id to jobs through TWOSCALE_MLFLOW_PARENT_RUN. Under DVC, stages run one after
another; the first creates the parent run, keyed by the `dvc` process, and the rest find it.

A tracking server that does not answer fails a stage or a workflow at its start, within SERVER_TIMEOUT_S seconds,
in one line naming its URI; later requests give up after a few quick retries (MLflow's own default retries for
about four minutes). A store that cannot be opened (a corrupt or locked SQLite file) is named in one line too.

Every run carries the host and process that own it. A job that fails or is stopped ends its run FAILED or KILLED;
a process killed outright cannot, so each new invocation closes, as KILLED, the runs still RUNNING whose process on
this host is gone (never a run of another host, which may be alive on a shared tracking server).
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from twoscale.pipeline.errors import Stopped, TwoscaleError
from twoscale.pipeline.io import waiting_file

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# A request to a tracking server: 3 retries 1, 2 and 4 s apart, each attempt at most 30 s (MLflow: 7 retries up to
# 120 s apart)
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
SERVER_TIMEOUT_S = 10
# A run with system metrics samples CPU, memory, disk, network (and NVIDIA GPUs where nvidia-ml-py finds one) every
# 10 s, MLflow's default made explicit: a sample costs its thread about 10 ms (docs/running.md#tracking)
os.environ.setdefault("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "10")

EXPERIMENT = "twoscale"
PARENT_ENV = "TWOSCALE_MLFLOW_PARENT_RUN"
ORCHESTRATOR_ENV = "TWOSCALE_ORCHESTRATOR"
INVOCATION_TAG = "twoscale.invocation"
HOST_TAG, PID_TAG, PROCESS_START_TAG = "twoscale.host", "twoscale.pid", "twoscale.process_start"
# the MLflow UI opens a model-training experiment on its runs table (a GenAI one on traces and an assistant)
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
DATASET_DIGEST_CHARS = 36  # the most of a dataset's digest an MLflow store keeps
DATASET_ATTEMPTS = 3


def project_root() -> Path:
    return Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()


def tracking_uri(root: Path | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root or project_root()) / 'mlflow.db'}"


def _mlflow():
    import mlflow  # imported lazily: it takes seconds, and pure cores and tests must not pay for it

    return mlflow


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def is_sqlite(uri: str) -> bool:
    return urlsplit(uri).scheme.lower() == "sqlite"


def store_name(uri: str) -> str:
    """The file of a SQLite store, else the URI."""
    return uri.split(":///", 1)[1] if is_sqlite(uri) else uri


def sqlite_on_slurm_warning(uri: str, submits_to_slurm: bool) -> str | None:
    """The one-line warning for a run whose jobs go to Slurm nodes while the tracking store is a SQLite file, which
    writers on several nodes lock and corrupt over a network file system; None when that is not so."""
    if not submits_to_slurm or not is_sqlite(uri):
        return None
    return (f"warning: the Slurm jobs will log to the SQLite file {store_name(uri)}, which jobs on "
            "several nodes lock and corrupt over a network file system: set MLFLOW_TRACKING_URI to a tracking server "
            "(docs/running.md#a-shared-tracking-server)")


def artifact_location(uri: str, root: Path) -> str | None:
    """Where a new experiment of the store at `uri` keeps its artifacts: `<root>/mlartifacts`, or, behind a
    tracking server, where the server chooses (its --artifacts-destination: a path of this machine is wrong on
    another node)."""
    if is_server(uri):
        return None
    return (root / "mlartifacts").as_uri()


def check_server_answers(uri: str, timeout: float = SERVER_TIMEOUT_S) -> None:
    """TwoscaleError in one line unless the tracking server at `uri` answers (any HTTP status: a proxy asking for
    credentials answers too) within `timeout` seconds."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            pass
    except urllib.error.HTTPError:
        pass
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TwoscaleError(f"MLflow tracking server {uri} did not answer within {timeout:g} s ({reason}): start "
                            "it, or unset MLFLOW_TRACKING_URI to log to mlflow.db") from None


def ensure_store(root: Path | None = None) -> str:
    """Create the store and the experiment if needed; return the experiment id. A server that does not answer or a
    store that cannot be opened is a TwoscaleError naming it."""
    root = root or project_root()
    mlflow = _mlflow()
    uri = tracking_uri(root)
    if is_server(uri):
        check_server_answers(uri)
    mlflow.set_tracking_uri(uri)
    database_log = logging.getLogger("mlflow.store.db.utils")  # logs a failing query with its traceback
    level = database_log.level
    database_log.setLevel(logging.CRITICAL)
    try:
        return _experiment_id(mlflow, uri, root)
    except Exception as exc:  # MLflow, SQLAlchemy and requests raise many types; the first line says which
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise TwoscaleError(f"{store_name(uri)}: the MLflow store cannot be used ({first_line})") from None
    finally:
        database_log.setLevel(level)


def _experiment_id(mlflow, uri: str, root: Path) -> str:
    experiment = mlflow.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return mlflow.create_experiment(EXPERIMENT, artifact_location=artifact_location(uri, root),
                                        tags=EXPERIMENT_KIND)
    if any(experiment.tags.get(key) != value for key, value in EXPERIMENT_KIND.items()):  # a store made before
        for key, value in EXPERIMENT_KIND.items():
            mlflow.MlflowClient().set_experiment_tag(experiment.experiment_id, key, value)
    return experiment.experiment_id


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
    import psutil

    process = psutil.Process(pid)
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(process.pid),
            PROCESS_START_TAG: str(int(process.create_time()))}


def _owner_alive(tags: dict[str, str]) -> bool:
    import psutil

    try:
        return int(psutil.Process(int(tags[PID_TAG])).create_time()) == int(tags[PROCESS_START_TAG])
    except (psutil.Error, KeyError, ValueError):
        return False


def close_abandoned_runs(experiment_id: str) -> list[str]:
    """Mark KILLED the runs still RUNNING whose owning process on this host is gone; return their ids."""
    client = _mlflow().MlflowClient()
    running = client.search_runs([experiment_id], filter_string=(
        f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{socket.gethostname()}'"))
    abandoned = [run.info.run_id for run in running if not _owner_alive(run.data.tags)]
    for run_id in abandoned:
        client.set_terminated(run_id, status="KILLED")
    return abandoned


def _dvc_process() -> int | None:
    """The pid of the `dvc` process this stage runs under, if any."""
    import psutil

    for process in psutil.Process().parents():
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
    mlflow = _mlflow()
    experiment_id = ensure_store()
    close_abandoned_runs(experiment_id)
    client = mlflow.MlflowClient()
    run = client.create_run(
        experiment_id,
        run_name=f"pipeline ({orchestrator_name})",
        tags={
            INVOCATION_TAG: invocation,
            "orchestrator": orchestrator_name,
            "git_commit": git_commit(),
            "mlflow.runName": f"pipeline ({orchestrator_name})",
            **owner_tags(pid),
            **(tags or {}),
        },
    )
    return run.info.run_id


def end_pipeline_run(run_id: str, status: str) -> None:
    mlflow = _mlflow()
    mlflow.set_tracking_uri(tracking_uri())
    mlflow.MlflowClient().set_terminated(run_id, status=status)


def _parent_run_id(orchestrator_name: str) -> str | None:
    if os.environ.get(PARENT_ENV):
        return os.environ[PARENT_ENV]
    dvc = _dvc_process()
    if dvc is None:
        return None
    invocation = _dvc_invocation(dvc)
    mlflow = _mlflow()
    experiment_id = ensure_store()
    found = mlflow.MlflowClient().search_runs(
        [experiment_id], filter_string=f"tags.`{INVOCATION_TAG}` = '{invocation}'", max_results=1
    )
    return found[0].info.run_id if found else start_pipeline_run(orchestrator_name, invocation, pid=dvc)


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """Log an output file to the active run under its own name, also while it waits to land with the stage's other
    outputs (`outputs_land_together`)."""
    mlflow = _mlflow()
    path = Path(path)
    waiting = waiting_file(path)
    if waiting == path:
        mlflow.log_artifact(str(path), artifact_path)
        return
    with tempfile.TemporaryDirectory() as folder:
        named = Path(folder) / path.name
        shutil.copyfile(waiting, named)
        mlflow.log_artifact(str(named), artifact_path)


def log_dataset(name: str, sha256: str, source: str, context: str) -> None:
    """Log a dataset input of the active run, by name, digest (the first DATASET_DIGEST_CHARS of its `sha256`) and
    source (a path or URI), for `context` (training, evaluation)."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():  # a path is a local source for two of MLflow's schemes, both the same class
        warnings.filterwarnings("ignore", "The specified dataset source can be interpreted in multiple ways")
        resolved = resolve_dataset_source(source)
    dataset = MetaDataset(resolved, name=name, digest=sha256[:DATASET_DIGEST_CHARS])
    mlflow = _mlflow()
    # MLflow looks the dataset up and inserts it when absent, so two jobs logging the same corpus at one moment (two
    # trainings ending together) can both find it absent: the second insert breaks the store's uniqueness and
    # fails. Tried again, it finds the winner's row.
    for attempt in range(DATASET_ATTEMPTS):
        try:
            mlflow.log_input(dataset, context=context)
            return
        except mlflow.exceptions.MlflowException:
            if attempt == DATASET_ATTEMPTS - 1:
                raise


def finite_metrics(values: Mapping[str, Any]) -> dict[str, float]:
    """The entries MLflow can log as metrics: finite numbers. A value that could not be measured (None, as a
    table's null reads back, or NaN) and infinities are left out, as are non-numbers."""
    return {key: float(value) for key, value in values.items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)}


def log_metrics(values: Mapping[str, Any], step: int | None = None) -> None:
    """Log the `finite_metrics` of `values` to the active run (MLflow refuses None outright)."""
    _mlflow().log_metrics(finite_metrics(values), step=step)


@contextlib.contextmanager
def stage_run(stage: str, params_hash: str, tags: dict[str, str] | None = None,
              origin: dict[str, str] | None = None, system_metrics: bool = False) -> Iterator[Any]:
    """A nested MLflow run for one stage job, under the invocation's parent run when there is one, named by the
    stage and `tags`; `origin` (what computed its numbers: arithmetic, processor, torch) is tagged too. With
    `system_metrics`, a thread samples the machine's use (system/* metrics) while the run is open."""
    mlflow = _mlflow()
    experiment_id = ensure_store()
    orchestrator_name = orchestrator()
    parent = _parent_run_id(orchestrator_name)
    run_tags = {
        "stage": stage,
        "orchestrator": orchestrator_name,
        "git_commit": git_commit(),
        "params_hash": params_hash,
        **owner_tags(),
        **(tags or {}),
        **(origin or {}),
    }
    name = " ".join([stage, *(f"{k}={v}" for k, v in (tags or {}).items())])
    with mlflow.start_run(experiment_id=experiment_id, run_name=name, parent_run_id=parent, tags=run_tags,
                          log_system_metrics=system_metrics) as run:
        try:
            yield run
        except (KeyboardInterrupt, Stopped):
            mlflow.end_run(status="KILLED")
            raise
    if parent and not os.environ.get(PARENT_ENV):
        # under DVC nobody closes the parent: mark it finished after each stage (the next one reopens it)
        mlflow.MlflowClient().set_terminated(parent, status="FINISHED")
