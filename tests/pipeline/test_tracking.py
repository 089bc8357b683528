"""The MLflow store the stages log to: a model-training experiment, so that the UI opens on its runs; runs
owned by a host and process, closed as KILLED when that process is stopped or gone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import mlflow
import numpy as np
import pytest

from twoscale.pipeline import tracking


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    return tmp_path


def kind(store) -> str | None:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    return client.get_experiment_by_name("twoscale").tags.get("mlflow.experimentKind")


def test_a_new_store_holds_a_model_training_experiment(store):
    tracking.ensure_store()
    assert kind(store) == "custom_model_development"


def test_an_experiment_made_before_gets_the_kind(store):
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    mlflow.create_experiment("twoscale", tags={"mlflow.experimentKind": "genai_development"})
    tracking.ensure_store()
    assert kind(store) == "custom_model_development"


def client(store) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")


def dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def test_runs_left_running_by_dead_processes_of_this_host_are_closed_as_killed(store):
    experiment = tracking.ensure_store()
    runs = client(store)
    mine_dead = {**tracking.owner_tags(), tracking.PID_TAG: str(dead_pid())}
    mine_alive = tracking.owner_tags()
    reused_pid = {**tracking.owner_tags(), tracking.PROCESS_START_TAG: "1"}  # this pid, another process's start
    elsewhere = {**mine_dead, tracking.HOST_TAG: "another-node"}
    made = {name: runs.create_run(experiment, tags=tags).info.run_id for name, tags in
            {"dead": mine_dead, "alive": mine_alive, "reused": reused_pid, "elsewhere": elsewhere}.items()}
    assert sorted(tracking.close_abandoned_runs(experiment)) == sorted([made["dead"], made["reused"]])
    status = {name: runs.get_run(run_id).info.status for name, run_id in made.items()}
    assert status == {"dead": "KILLED", "alive": "RUNNING", "reused": "KILLED", "elsewhere": "RUNNING"}


STAGE_THAT_WAITS = """
import signal, sys, time
from twoscale.__main__ import stop
from twoscale.pipeline import tracking
signal.signal(signal.SIGTERM, stop)
with tracking.stage_run("train", "hash") as run:
    print(run.info.run_id, flush=True)
    time.sleep(60)
"""


def test_a_stage_job_stopped_by_sigterm_ends_its_run_killed(store):
    env = {**os.environ, "DVC_ROOT": str(store)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop(tracking.PARENT_ENV, None)
    job = subprocess.Popen([sys.executable, "-c", STAGE_THAT_WAITS], stdout=subprocess.PIPE, text=True, env=env)
    run_id = job.stdout.readline().strip()
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) != 0
    run = client(store).get_run(run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags[tracking.HOST_TAG] == socket.gethostname()
    assert run.data.tags[tracking.PID_TAG] == str(job.pid)


def test_a_stage_run_is_named_by_its_tags_and_also_tagged_with_its_origin(store):
    origin = {"precision": "float64", "machine": "Test CPU, 2 CPUs", "torch": "2.13.0"}
    with tracking.stage_run("measure", "hash", {"recipe": "huginn", "seed": "1"}, origin) as run:
        run_id = run.info.run_id
    logged = client(store).get_run(run_id)
    assert logged.info.run_name == "measure recipe=huginn seed=1"
    assert {key: logged.data.tags[key] for key in origin} == origin
    assert logged.data.tags["recipe"] == "huginn" and logged.data.tags["stage"] == "measure"


def test_only_finite_numbers_are_logged_as_metrics(store):
    """A summary whose metric could not be measured holds null (None) or NaN; MLflow refuses None outright."""
    row = {"a": 1.5, "b": None, "c": float("nan"), "d": float("inf"), "e": np.float32(0.25), "f": np.int64(3),
           "g": True, "h": "text"}
    assert tracking.finite_metrics(row) == {"a": 1.5, "e": 0.25, "f": 3.0}
    with tracking.stage_run("geometry", "hash") as run:
        tracking.log_metrics(row)
    assert client(store).get_run(run.info.run_id).data.metrics == {"a": 1.5, "e": 0.25, "f": 3.0}
