"""The MLflow writer that the jobs of one store share: one process for many jobs, none of which loads MLflow; it
ends the runs of a job killed outright, holds none of a job's files, and leaves when idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import mlflow
import psutil
import pytest

from twoscale.pipeline.observers import run_names, tracking
from twoscale.pipeline.observers.tracking_writer import IDLE_ENV, writer_files

JOB = """
import sys, time
from twoscale.pipeline.observers import tracking
with tracking.stage_run("geometry", {}, {"seed": sys.argv[1]}) as run:
    tracking.log_metrics({"value": float(sys.argv[1])})
    print(run.run_id, tracking.store().call("ping"), "mlflow" in sys.modules, flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def job_env(tmp_path):
    env = {**os.environ, "DVC_ROOT": str(tmp_path), IDLE_ENV: "5"}
    for name in ("MLFLOW_TRACKING_URI", tracking.PARENT_ENV, tracking.ORCHESTRATOR_ENV):
        env.pop(name, None)
    return env


def run_job(env, seed: int, sleep: float = 0.0) -> tuple[str, int, bool]:
    done = subprocess.run([sys.executable, "-c", JOB, str(seed), str(sleep)], env=env, capture_output=True, check=False,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    run_id, writer, loaded = done.stdout.split()
    return run_id, int(writer), loaded == "True"


def runs(tmp_path) -> dict[str, mlflow.entities.Run]:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(run_names.EXPERIMENT)
    return {run.info.run_id: run for run in client.search_runs([experiment.experiment_id])}


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_jobs_share_one_writer_which_holds_none_of_their_files_and_leaves_when_idle(tmp_path, job_env):
    first, writer, loaded = run_job(job_env, 1)  # capture_output: returns only once the job's pipes close
    assert not loaded  # the job never loaded MLflow
    assert psutil.pid_exists(writer)  # returned while the writer lives on: it holds none of the job's pipes
    second, same_writer, _ = run_job(job_env, 2)
    assert same_writer == writer
    logged = runs(tmp_path)
    assert {logged[first].data.metrics["value"], logged[second].data.metrics["value"]} == {1.0, 2.0}
    assert {logged[run].info.status for run in (first, second)} == {"FINISHED"}

    socket_file = writer_files(tracking.tracking_uri(tmp_path), tmp_path)[0]
    assert wait_for(lambda: not psutil.pid_exists(writer) and not socket_file.exists())
    third, new_writer, _ = run_job(job_env, 3)
    assert new_writer != writer and runs(tmp_path)[third].info.status == "FINISHED"


def test_a_job_killed_outright_has_its_run_ended_killed_by_the_writer_at_once(tmp_path, job_env):
    job = subprocess.Popen([sys.executable, "-c", JOB, "1", "60"], env=job_env, stdout=subprocess.PIPE, text=True)
    run_id = job.stdout.readline().split()[0]
    assert runs(tmp_path)[run_id].info.status == "RUNNING"
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=30)
    assert wait_for(lambda: runs(tmp_path)[run_id].info.status == "KILLED", timeout=10)


JOB_OUTLIVING_ITS_WRITER = """
import sys, time
from pathlib import Path
from twoscale.pipeline.observers import tracking
go = Path(sys.argv[1])
with tracking.stage_run("geometry", {}) as run:
    print(run.run_id, tracking.store().call("ping"), flush=True)
    while not go.exists():
        time.sleep(0.05)
    tracking.log_metrics({"after": 1.0})
    print(tracking.store().call("ping"), flush=True)
"""


def test_a_job_whose_writer_is_killed_goes_on_with_another(tmp_path, job_env):
    """As Slurm ends a job with every process of its cgroup, a writer another job started there."""
    go = tmp_path / "go"
    job = subprocess.Popen([sys.executable, "-c", JOB_OUTLIVING_ITS_WRITER, str(go)], env=job_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id, first_writer = job.stdout.readline().split()
    os.kill(int(first_writer), signal.SIGKILL)
    assert wait_for(lambda: not psutil.pid_exists(int(first_writer)))
    go.touch()
    second_writer = job.stdout.readline().strip()
    assert job.wait(timeout=60) == 0, job.stderr.read()[-2000:]
    assert second_writer and int(second_writer) != int(first_writer)
    run = runs(tmp_path)[run_id]
    assert run.info.status == "FINISHED" and run.data.metrics == {"after": 1.0}


READ_ONLY = ("(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush block if this "
             "flush is occurring prematurely)\n(sqlite3.OperationalError) attempt to write a readonly database\n"
             "[SQL: INSERT INTO runs ...]")


@pytest.mark.parametrize(("raised", "said"), [
    (KeyError(), "the MLflow store unused.db: KeyError"),
    (ValueError("bad run id\nmore"), "the MLflow store unused.db: ValueError: bad run id"),
    # what a read-only store raises, from SQLAlchemy through MLflow: its cause, not the preamble
    (RuntimeError(READ_ONLY), "the MLflow store unused.db: RuntimeError: (sqlite3.OperationalError) attempt to write "
                              "a readonly database"),
])
def test_an_mlflow_error_reaches_the_job_as_one_line_naming_the_store_its_type_and_cause(raised, said, tmp_path):
    from twoscale.pipeline.observers import tracking_writer

    class Raising:
        def log_params(self, *args):
            raise raised

    store = tracking_writer._StoreOnce("sqlite:///unused.db", tmp_path, 1.0)
    store._store = Raising()
    assert tracking_writer._answer(store, "log_params", ("run",), {}, set()) == ("error", said)
