"""The shared MLflow tracking server of scripts/local-mlflow-server.sh (PostgreSQL behind `mlflow server`):
stage jobs logging to it at once lose no run, nor do they with the default SQLite file; starting it again while
it runs changes nothing; it binds the address asked for (MLFLOW_HOST), for the nodes of a cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import mlflow
import pytest
from workspace import ROOT

from twoscale.pipeline.observers import run_names, tracking

pytestmark = pytest.mark.cluster

SCRIPT = ROOT / "scripts/local-mlflow-server.sh"
STATE = ROOT / ".cluster/mlflow"
JOBS = 8

# A stage job as the stages run one: a nested run under the invocation's parent, with params, a metric curve
# and an artifact. It waits for the others (a `go` file) so that all of them write at once.
STAGE_JOB = """
import sys, time
from pathlib import Path

from twoscale.pipeline.observers import tracking

job, folder = int(sys.argv[1]), Path(sys.argv[2])
(folder / f"ready-{job}").touch()
while not (folder / "go").exists():
    time.sleep(0.05)
with tracking.stage_run("train", {}, {"recipe": "paper", "seed": str(job)}):
    tracking.log_params({"train.steps": 20, "train.learning_rate": 0.003})
    tracking.log_curves([{"step": step, "train_loss": 1 / step} for step in range(1, 21)])
    tracking.log_metrics({"final_val_loss": 0.5, "job": job})
    history = folder / f"history-{job}.csv"
    history.write_text("step,loss\\n1,1.0\\n")
    tracking.log_artifact(history)
"""


def script(command: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), command], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **env})


@pytest.fixture(scope="module")
def server() -> str:
    """The server's URI; started by the script if it is not up, and left running (a cluster's jobs share it)."""
    started = script("start")
    assert started.returncode == 0, f"start failed:\n{started.stderr}"
    return started.stdout.strip().removeprefix("export MLFLOW_TRACKING_URI=")


@pytest.fixture(params=["server", "sqlite"])
def store(request, tmp_path, monkeypatch) -> str:
    """The tracking server (shared by every test: a test reads only its own invocation's runs), or a new SQLite
    file of the default kind; its URI."""
    if request.param == "server":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", request.getfixturevalue("server"))
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv(tracking.ORCHESTRATOR_ENV, "snakemake")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    return tracking.tracking_uri()


def run_jobs(parent: str, folder: Path) -> list[subprocess.CompletedProcess]:
    """The jobs started at once, as Snakemake starts them: under its invocation's run and its stage runs."""
    groups = json.dumps(tracking.start_stage_groups(parent, ["train"]))
    env = {**os.environ, tracking.PARENT_ENV: parent, tracking.STAGE_GROUPS_ENV: groups}
    jobs = [subprocess.Popen([sys.executable, "-c", STAGE_JOB, str(job), str(folder)],
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
    experiment = client.get_experiment_by_name(run_names.EXPERIMENT)
    everything = client.search_runs([experiment.experiment_id])
    groups = [run for run in everything if run.data.tags.get("mlflow.parentRunId") == parent]
    assert [run.info.run_name for run in groups] == ["train"]  # one run of the stage, whatever ran at once
    nested = [run for run in everything if run.data.tags.get("mlflow.parentRunId") == groups[0].info.run_id]
    runs = [client.get_run(parent), *groups, *nested]
    assert len(nested) == JOBS
    assert sorted(int(run.data.tags["seed"]) for run in nested) == list(range(JOBS))
    assert {run.info.status for run in runs} == {"FINISHED"}
    for run in nested:
        assert {"stage", "recipe", "seed", "orchestrator", "git_commit", "params_hash"} <= set(run.data.tags)
        assert run.data.params == {"train.steps": "20", "train.learning_rate": "0.003"}
        assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 20
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


def answers(url: str, host_header: str | None = None) -> int | None:
    """The HTTP status `url` answers with (under another Host header if given); None if nothing listens."""
    request = urllib.request.Request(url, headers={"Host": host_header} if host_header else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError:
        return None


def test_the_server_binds_the_address_asked_for_and_prints_the_uri_the_nodes_use(server):
    """MLFLOW_HOST binds another address than 127.0.0.1 (a cluster's nodes cannot reach this machine's loopback):
    the printed URI carries it, a run logs through it, and a Host header the server does not know is refused. While
    the server runs on 127.0.0.1, asking for another address is refused. The server is put back as it was."""
    address = next(iter(subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()), None)
    if address is None or ":" in address:
        pytest.skip("this machine has no IPv4 address besides the loopback")
    port = server.rsplit(":", 1)[1]
    refused = script("start", MLFLOW_HOST=address)
    assert refused.returncode == 1 and "run stop first" in refused.stderr, refused.stderr
    assert script("status").returncode == 0  # the running server untouched
    try:
        assert script("stop").returncode == 0
        started = script("start", MLFLOW_HOST=address)
        assert started.returncode == 0, started.stderr
        uri = f"http://{address}:{port}"
        assert started.stdout == f"export MLFLOW_TRACKING_URI={uri}\n"
        assert "without authentication" in started.stderr  # the warning of an open, non-loopback bind
        assert answers(f"{uri}/health") == 200
        assert answers(f"http://127.0.0.1:{port}/health") is None  # bound to that address alone
        search = f"{uri}/api/2.0/mlflow/experiments/search?max_results=1"
        assert answers(search) == 200 and answers(search, host_header=f"elsewhere.invalid:{port}") == 403
        client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = client.create_experiment(f"test-bind-{uuid.uuid4().hex[:12]}")
        run = client.create_run(experiment)
        client.log_metric(run.info.run_id, "loss", 0.5)
        client.set_terminated(run.info.run_id)
        assert client.get_run(run.info.run_id).data.metrics == {"loss": 0.5}
        assert script("start").stdout == f"export MLFLOW_TRACKING_URI={uri}\n"  # a plain start takes it as it is
    finally:
        script("stop")
        again = script("start")
    assert again.returncode == 0 and again.stdout == f"export MLFLOW_TRACKING_URI={server}\n", again.stderr
