"""MLflow tracking: one parent run per pipeline invocation, one nested run per stage job.

The store is `sqlite:///<root>/mlflow.db` with artifacts in `<root>/mlartifacts` (MLFLOW_TRACKING_URI overrides;
the root is DVC_ROOT under `dvc exp`, else the working directory, which both orchestrators set to the repo root).
Snakemake creates the store and the parent run in `onstart` (a new sqlite store hit by parallel jobs fails in its
migrations) and hands the parent's id to jobs through TWOSCALE_MLFLOW_PARENT_RUN. Under DVC, stages run one after
another; the first creates the parent run, keyed by the `dvc` process, and the rest find it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

EXPERIMENT = "twoscale"
PARENT_ENV = "TWOSCALE_MLFLOW_PARENT_RUN"
ORCHESTRATOR_ENV = "TWOSCALE_ORCHESTRATOR"
INVOCATION_TAG = "twoscale.invocation"
# the MLflow UI opens a model-training experiment on its runs table (a GenAI one on traces and an assistant)
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def project_root() -> Path:
    return Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()


def tracking_uri(root: Path | None = None) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root or project_root()) / 'mlflow.db'}"


def _mlflow():
    import mlflow  # imported lazily: it takes seconds, and pure cores and tests must not pay for it

    return mlflow


def ensure_store(root: Path | None = None) -> str:
    """Create the store and the experiment if needed; return the experiment id."""
    root = root or project_root()
    mlflow = _mlflow()
    mlflow.set_tracking_uri(tracking_uri(root))
    experiment = mlflow.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return mlflow.create_experiment(EXPERIMENT, artifact_location=(root / "mlartifacts").as_uri(),
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


def _dvc_invocation() -> str | None:
    """An id of the `dvc` process this stage runs under, if any."""
    import psutil

    for process in psutil.Process().parents():
        try:
            cmdline = process.cmdline()
        except psutil.Error:
            continue
        if any(Path(part).name == "dvc" for part in cmdline[:2]) or cmdline[1:3] == ["-m", "dvc"]:
            return f"dvc-{process.pid}-{int(process.create_time())}"
    return None


def orchestrator() -> str:
    if os.environ.get(ORCHESTRATOR_ENV):
        return os.environ[ORCHESTRATOR_ENV]
    return "dvc" if _dvc_invocation() else "cli"


def start_pipeline_run(orchestrator_name: str, invocation: str, tags: dict[str, str] | None = None) -> str:
    """Create the parent run of one pipeline invocation and return its id."""
    mlflow = _mlflow()
    experiment_id = ensure_store()
    client = mlflow.MlflowClient()
    run = client.create_run(
        experiment_id,
        run_name=f"pipeline ({orchestrator_name})",
        tags={
            INVOCATION_TAG: invocation,
            "orchestrator": orchestrator_name,
            "git_commit": git_commit(),
            "mlflow.runName": f"pipeline ({orchestrator_name})",
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
    invocation = _dvc_invocation()
    if invocation is None:
        return None
    mlflow = _mlflow()
    experiment_id = ensure_store()
    found = mlflow.MlflowClient().search_runs(
        [experiment_id], filter_string=f"tags.`{INVOCATION_TAG}` = '{invocation}'", max_results=1
    )
    return found[0].info.run_id if found else start_pipeline_run(orchestrator_name, invocation)


@contextlib.contextmanager
def stage_run(stage: str, params_hash: str, tags: dict[str, str] | None = None) -> Iterator[Any]:
    """A nested MLflow run for one stage job, under the invocation's parent run when there is one."""
    mlflow = _mlflow()
    experiment_id = ensure_store()
    orchestrator_name = orchestrator()
    parent = _parent_run_id(orchestrator_name)
    run_tags = {
        "stage": stage,
        "orchestrator": orchestrator_name,
        "git_commit": git_commit(),
        "params_hash": params_hash,
        **(tags or {}),
    }
    name = " ".join([stage, *(f"{k}={v}" for k, v in (tags or {}).items())])
    with mlflow.start_run(experiment_id=experiment_id, run_name=name, parent_run_id=parent, tags=run_tags) as run:
        yield run
    if parent and not os.environ.get(PARENT_ENV):
        # under DVC nobody closes the parent: mark it finished after each stage (the next one reopens it)
        mlflow.MlflowClient().set_terminated(parent, status="FINISHED")
