"""The orchestrator killed outright (kill -9 of Snakemake and its jobs, as when a terminal or a node dies) in the
middle of training: Snakemake asks for its lock to be released, then the next run finishes what was asked of it,
resuming the interrupted training, and closes the MLflow runs the dead processes left RUNNING as KILLED. What was
asked is every training of the smoke set (what follows training is the end-to-end tests' work)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import mlflow
import pytest
import yaml
from workspace import ROOT, attempt, copy_repository, environment, run

pytestmark = pytest.mark.e2e


def trainings(repo: Path) -> list[str]:
    """The final metrics of every training (recipes' and teachers') of the parameter set."""
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    return [f"results/train/{name}/seed_{seed}/metrics.json" for name in [*raw["recipes"], *raw["teachers"]]
            for seed in raw["runtime"]["seeds"]]


def test_a_workflow_killed_during_training_finishes_when_run_again(tmp_path):
    repo = copy_repository(tmp_path / "repo", ROOT / "configs/smoke.yaml")
    targets = trainings(repo)
    snakemake = subprocess.Popen(["snakemake", "--cores", "2", *targets], cwd=repo, env=environment(),
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

    locked = attempt(["snakemake", "--cores", "2", *targets], repo)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
    run(["snakemake", "--unlock"], repo)
    run(["snakemake", "--cores", "2", *targets], repo)
    assert "resuming from step" in "".join(p.read_text() for p in (repo / "logs/train").rglob("*.log"))
    assert all((repo / target).is_file() for target in targets)
    assert "Nothing to be done" in run(["snakemake", "--dry-run", "--cores", "1", *targets], repo)

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("twoscale")
    statuses = [r.info.status for r in client.search_runs([experiment.experiment_id])]
    assert "RUNNING" not in statuses
    assert statuses.count("KILLED") >= 2  # the dead invocation's parent run and its training job(s)
