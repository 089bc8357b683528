"""The shared MLflow tracking server of scripts/local-mlflow-server.sh (PostgreSQL behind `mlflow server`):
stage jobs logging to it at once lose no run, nor do they with the default SQLite file; starting it again while
it runs changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import mlflow
import pytest
from workspace import ROOT

from twoscale.pipeline import tracking

pytestmark = pytest.mark.cluster

SCRIPT = ROOT / "scripts/local-mlflow-server.sh"
STATE = ROOT / ".cluster/mlflow"
JOBS = 8

# A stage job as the stages run one: a nested run under the invocation's parent, with params, a metric curve
# and an artifact. It waits for the others (a `go` file) so that all of them write at once.
STAGE_JOB = """
import sys, time
from pathlib import Path

import mlflow

from twoscale.pipeline import tracking

tracking.EXPERIMENT, job, folder = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
(folder / f"ready-{job}").touch()
while not (folder / "go").exists():
    time.sleep(0.05)
with tracking.stage_run("train", f"hash-{job}", {"recipe": "paper", "seed": str(job)}):
    mlflow.log_params({"train.steps": 20, "train.learning_rate": 0.003})
    for step in range(1, 21):
        mlflow.log_metric("train_loss", 1 / step, step=step)
    mlflow.log_metrics({"final_val_loss": 0.5, "job": job})
    history = folder / f"history-{job}.csv"
    history.write_text("step,loss\\n1,1.0\\n")
    mlflow.log_artifact(str(history))
"""


def script(command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), command], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def server() -> str:
    """The server's URI; started by the script if it is not up, and left running (a cluster's jobs share it)."""
    started = script("start")
    assert started.returncode == 0, f"start failed:\n{started.stderr}"
    return started.stdout.strip().removeprefix("export MLFLOW_TRACKING_URI=")


@pytest.fixture(params=["server", "sqlite"])
def store(request, tmp_path, monkeypatch) -> str:
    """A fresh experiment in the tracking server, or in a new SQLite file of the default kind; its URI."""
    if request.param == "server":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", request.getfixturevalue("server"))
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setattr(tracking, "EXPERIMENT", f"test-{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv(tracking.ORCHESTRATOR_ENV, "snakemake")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    return tracking.tracking_uri()


def run_jobs(parent: str, folder: Path) -> list[subprocess.CompletedProcess]:
    env = {**os.environ, tracking.PARENT_ENV: parent}
    jobs = [subprocess.Popen([sys.executable, "-c", STAGE_JOB, tracking.EXPERIMENT, str(job), str(folder)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for job in range(JOBS)]
    deadline = time.monotonic() + 300
    while len(list(folder.glob("ready-*"))) < JOBS and all(job.poll() is None for job in jobs):
        assert time.monotonic() < deadline, "the jobs did not get ready in 300 s"
        time.sleep(0.1)
    (folder / "go").touch()
    return [finish(job) for job in jobs]


def finish(job: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = job.communicate(timeout=600)
    return subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)


def test_parallel_stage_jobs_each_leave_one_finished_nested_run(store, tmp_path):
    parent = tracking.start_pipeline_run("snakemake", f"test-{uuid.uuid4().hex}")
    done = run_jobs(parent, tmp_path)
    tracking.end_pipeline_run(parent, "FINISHED")

    failed = [job.stderr[-2000:] for job in done if job.returncode]
    assert not failed, f"{len(failed)} of {JOBS} jobs failed; the first one's error:\n{(failed or [''])[0]}"
    client = mlflow.MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name(tracking.EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    assert [run.info.run_id for run in runs if "mlflow.parentRunId" not in run.data.tags] == [parent]
    nested = [run for run in runs if run.data.tags.get("mlflow.parentRunId") == parent]
    assert len(runs) == JOBS + 1
    assert sorted(int(run.data.tags["seed"]) for run in nested) == list(range(JOBS))
    assert {run.info.status for run in runs} == {"FINISHED"}
    for run in nested:
        assert {"stage", "recipe", "seed", "orchestrator", "git_commit", "params_hash"} <= set(run.data.tags)
        assert run.data.params == {"train.steps": "20", "train.learning_rate": "0.003"}
        assert len(client.get_metric_history(run.info.run_id, "train_loss")) == 20
        assert run.data.metrics["job"] == int(run.data.tags["seed"])
        artifacts = [artifact.path for artifact in client.list_artifacts(run.info.run_id)]
        assert artifacts == [f"history-{run.data.tags['seed']}.csv"]
    # behind the server, artifacts go through it (to its --artifacts-destination), not to a path of this machine
    expected = "mlflow-artifacts:" if store.startswith("http") else "file:"
    assert experiment.artifact_location.startswith(expected)


def test_status_says_up_and_a_second_start_changes_nothing(server):
    status = script("status")
    assert status.returncode == 0, status.stdout + status.stderr
    up = [line.split(":")[0] for line in status.stdout.splitlines() if ": up" in line]
    assert up == ["postgresql", "mlflow server"]
    pid_files = (STATE / "server.pid", STATE / "postgres/postmaster.pid")
    pids = {path: path.read_text().split()[0] for path in pid_files}
    again = script("start")
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"export MLFLOW_TRACKING_URI={server}\n"
    assert {path: path.read_text().split()[0] for path in pids} == pids
