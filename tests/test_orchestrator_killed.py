"""The orchestrator killed outright (kill -9 of Snakemake and its jobs, as when a terminal or a node dies) in the
middle of training: Snakemake asks for its lock to be released, then the next run finishes the workflow, resuming the
interrupted training, and closes the MLflow runs the dead processes left RUNNING as KILLED."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import mlflow
import pytest
from workspace import ROOT, attempt, copy_repository, environment, run

pytestmark = pytest.mark.e2e


def test_a_workflow_killed_during_training_finishes_when_run_again(tmp_path):
    repo = copy_repository(tmp_path / "repo", ROOT / "configs/smoke.yaml")
    snakemake = subprocess.Popen(["snakemake", "--cores", "2"], cwd=repo, env=environment(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any((repo / "results/.resume").rglob("step_*.pt")):  # a training run is under way
            assert snakemake.poll() is None, "the workflow ended before any training checkpoint"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(snakemake.pid, signal.SIGKILL)
        snakemake.wait()

    locked = attempt(["snakemake", "--cores", "2"], repo)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
    run(["snakemake", "--unlock"], repo)
    run(["snakemake", "--cores", "2"], repo)
    assert "resuming from step" in "".join(p.read_text() for p in (repo / "logs/train").rglob("*.log"))
    assert "Nothing to be done" in run(["snakemake", "--dry-run", "--cores", "1"], repo)

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("twoscale")
    statuses = [r.info.status for r in client.search_runs([experiment.experiment_id])]
    assert "RUNNING" not in statuses
    assert statuses.count("KILLED") >= 2  # the dead invocation's parent run and its training job(s)
