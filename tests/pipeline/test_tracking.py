"""The MLflow store the stages log to: a model-training experiment, so that the UI opens on its runs; runs
owned by a host and process, closed as KILLED when that process is stopped or gone; a training run comparable
with others by its machine's use, its corpus and its registered model."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import mlflow
import mlflow.pyfunc
import numpy as np
import pytest
import torch
from workspace import smoke_params

from twoscale.__main__ import main
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import outputs_land_together, write_text
from twoscale.config.parameter_files import load_params
from twoscale.config.params import params_hash
from twoscale.pipeline.observers import mlflow_store, tracking
from twoscale.training.trainer import load_model, read_checkpoint


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


def test_the_experiment_and_a_pipeline_run_say_what_they_hold(store):
    """The UI's description of each: the experiment's note names its layout; an invocation's run names who ran it."""
    run_id = tracking.start_pipeline_run("snakemake", "snakemake-12345")
    experiment = client(store).get_experiment_by_name("twoscale")
    assert "one run per stage job" in experiment.tags["mlflow.note.content"]
    note = client(store).get_run(run_id).data.tags["mlflow.note.content"]
    assert note.startswith("One invocation of the workflow by snakemake (snakemake-12345)")


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
    assert sorted(tracking.close_abandoned_runs()) == sorted([made["dead"], made["reused"]])
    status = {name: runs.get_run(run_id).info.status for name, run_id in made.items()}
    assert status == {"dead": "KILLED", "alive": "RUNNING", "reused": "KILLED", "elsewhere": "RUNNING"}


STAGE_THAT_WAITS = """
import signal, sys, time
from twoscale.__main__ import stop
from twoscale.pipeline.observers import mlflow_store, tracking
signal.signal(signal.SIGTERM, stop)
with tracking.stage_run("train", {}) as run:
    print(run.run_id, flush=True)
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
    """...and described by what its stage does (the stage module's docstring), which the MLflow UI shows."""
    import twoscale.stages.measure  # noqa: F401  (a stage job has its module loaded)

    origin = {"precision": "float64", "machine": "Test CPU, 2 CPUs", "torch": "2.13.0"}
    with tracking.stage_run("measure", {}, {"recipe": "huginn", "seed": "1"}, origin) as run:
        run_id = run.run_id
    logged = client(store).get_run(run_id)
    assert logged.info.run_name == "measure recipe=huginn seed=1"
    assert {key: logged.data.tags[key] for key in origin} == origin
    assert logged.data.tags["recipe"] == "huginn" and logged.data.tags["stage"] == "measure"
    assert logged.data.tags["mlflow.note.content"].startswith("Stage `measure`: the geometry of the loop iterates")


def test_a_stage_run_logs_the_parameter_sections_it_is_given_flat_and_tags_their_hash(store, tmp_path):
    params = load_params(smoke_params(tmp_path))
    with tracking.stage_run("measure", {"measure": params.measure, "train": params.train}) as run:
        pass
    logged = client(store).get_run(run.run_id).data
    raw = params.measure.model_dump(mode="json")
    assert logged.params["measure.n_sequences"] == str(raw["n_sequences"])
    assert logged.params["train.loops.max"] == str(params.train.loops.max)
    assert logged.params["measure.loss_loops"] == str(raw["loss_loops"])  # a list stays one value
    assert not any(key.startswith(("sweep.", "model.")) for key in logged.params)
    assert logged.tags["params_hash"] == params_hash(params.measure, params.train)


def test_only_finite_numbers_are_logged_as_metrics(store):
    """A summary whose metric could not be measured holds null (None) or NaN; MLflow refuses None outright."""
    row = {"a": 1.5, "b": None, "c": float("nan"), "d": float("inf"), "e": np.float32(0.25), "f": np.int64(3),
           "g": True, "h": "text"}
    assert tracking.finite_metrics(row) == {"a": 1.5, "e": 0.25, "f": 3.0}
    with tracking.stage_run("geometry", {}) as run:
        tracking.log_metrics(row)
    metrics = client(store).get_run(run.run_id).data.metrics
    assert {key: value for key, value in metrics.items() if not key.startswith("system/")} == {
        "a": 1.5, "e": 0.25, "f": 3.0}


def test_a_training_s_metrics_stand_in_sections_by_their_first_word(store):
    """MLflow's UI groups metrics by the part of their name before "/": the curves of training and validation and
    the final numbers each in its own section, other names as they are."""
    row = {"train_loss": 4.5, "val_loss": 4.75, "val_loss_loops_2": 4.25, "lr": 0.003, "tokens_per_s": 900.0,
           "trained": 1.0, "value": 2.0}
    with tracking.stage_run("train", {}) as run:
        tracking.log_curves([{"step": 10, **row}])
        tracking.log_metrics({"final_val_loss": 4.0, "final_step": 20})
    metrics = client(store).get_run(run.run_id).data.metrics
    assert {key: value for key, value in metrics.items() if not key.startswith("system/")} == {
        "train/loss": 4.5, "val/loss": 4.75, "val/loss_loops_2": 4.25, "lr": 0.003, "tokens_per_s": 900.0,
        "trained": 1.0, "value": 2.0, "final/val_loss": 4.0, "final/step": 20.0}


# --- a training run, comparable with others: its machine's use, its corpus, its registered model ------------


def stage_runs(store, stage: str) -> list:
    return client(store).search_runs([tracking.ensure_store()], filter_string=f"tags.stage = '{stage}'")


def test_a_training_run_records_its_machine_use_its_corpus_as_a_dataset_and_its_registered_final_model(
        store, monkeypatch):
    (store / "a.txt").write_text("Some text of the play, with words enough to train on.\n" * 400)
    params = smoke_params(store, data={"source": "text", "text_files": ["a.txt"]}, tokenize={"vocab_size": 300},
                          runtime={"device": "cpu", "threads": 1}, train={"steps": 10, "checkpoint_steps": [5, 10]})
    monkeypatch.chdir(store)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.05")  # samples within a short run too
    monkeypatch.setenv(tracking.ORCHESTRATOR_ENV, "snakemake")  # the workflow's training: the recipe's model
    for argv in (["corpus", "--out-dir", "raw"], ["tokenize", "--corpus-dir", "raw", "--out-dir", "prepared"],
                 ["train", "--recipe", "paper", "--seed", "1337", "--data-dir", "prepared", "--out-dir", "out"]):
        assert main([argv[0], "--params", str(params), *argv[1:]]) == 0
    manifest = json.loads((store / "raw/manifest.json").read_text())

    [train] = stage_runs(store, "train")  # every stage samples; the training runs long enough to keep samples
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= set(train.data.metrics)

    [corpus] = train.inputs.dataset_inputs
    assert corpus.dataset.digest == manifest["sha256"][:36]  # as much of the hash as an MLflow store keeps
    assert corpus.dataset.name == "text: a.txt, first 300000 characters"  # the smoke set's cut
    assert [(tag.key, tag.value) for tag in corpus.tags] == [("mlflow.data.context", "training")]

    [version] = client(store).search_model_versions("name = 'twoscale-paper'")
    assert version.run_id == train.info.run_id
    assert client(store).search_logged_models([tracking.ensure_store()],
                                              filter_string=f"source_run_id = '{train.info.run_id}'")
    assert version.tags == {"recipe": "paper", "seed": "1337", "step": "10"}
    served = mlflow.pyfunc.load_model(f"models:/twoscale-paper/{version.version}")
    final = read_checkpoint(store / "out/checkpoints/step_10.pt")["model"]
    assert all(served.unwrap_python_model().model.state_dict()[key].equal(value) for key, value in final.items())
    model, _ = load_model(store / "out/checkpoints/step_10.pt")  # the checkpoint, read by the trainer's loader
    vocabulary = model.config.vocab_size
    signature = served.metadata.signature
    assert [(spec.name, spec.type, spec.shape) for spec in signature.inputs.inputs] == [
        (None, np.dtype("int64"), (-1, -1))]  # token ids
    assert signature.outputs.inputs[0].shape == (-1, -1, vocabulary)
    assert [(param.name, param.default) for param in signature.params.params] == [("loops", 1)]
    ids = np.array([[5, 17, 42, 99], [1, 2, 3, 4]], dtype=np.int64)
    with torch.no_grad():
        for loops in (1, 3):
            expected = model(torch.as_tensor(ids), [loops] * model.n_groups).logits.float().numpy()
            np.testing.assert_allclose(served.predict(ids, params={"loops": loops}), expected, rtol=1e-5, atol=1e-5)
    assert served.predict(ids).shape == (2, 4, vocabulary)


JOB_LOGGING_THE_CORPUS = """
import sys, time
from pathlib import Path
import mlflow
from twoscale.pipeline.observers import mlflow_store, tracking
store, me, other = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
with tracking.stage_run("train", {}, {"seed": me}):
    (store / me).touch()
    while not (store / other).exists():  # both jobs log at one moment
        time.sleep(0.001)
    tracking.log_dataset("corpus", "ab" * 32, str(store), context="training")
"""


def test_two_jobs_logging_the_same_corpus_at_one_moment_both_record_it_as_one_dataset(store):
    """Two trainings that end together log their corpus at once: without a retry, one of the two fails."""
    env = {**os.environ, "DVC_ROOT": str(store)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop(tracking.PARENT_ENV, None)
    tracking.ensure_store()
    for round_ in range(3):
        a, b = f"a{round_}", f"b{round_}"
        jobs = [subprocess.Popen([sys.executable, "-c", JOB_LOGGING_THE_CORPUS, str(store), me, other], env=env,
                                 stderr=subprocess.PIPE, text=True) for me, other in ((a, b), (b, a))]
        for job in jobs:
            assert job.wait(timeout=120) == 0, job.stderr.read()[-2000:]
    runs = stage_runs(store, "train")
    assert len(runs) == 6
    digests = [[dataset.dataset.digest for dataset in run.inputs.dataset_inputs] for run in runs]
    assert digests == [["ab" * 18]] * 6
    with sqlite3.connect(store / "mlflow.db") as db:
        assert db.execute("SELECT count(*) FROM datasets").fetchone() == (1,)


def test_a_training_on_tokens_that_do_not_name_their_corpus_stops_in_one_line_before_it_trains(store, monkeypatch,
                                                                                                  capsys):
    """Token arrays made before the tokenize stage recorded the corpus they are of."""
    (store / "prepared").mkdir()
    for name in ("train", "val"):
        np.save(store / "prepared" / f"{name}.npy", np.arange(3000, dtype=np.uint16) % 300)
    (store / "prepared/stats.json").write_text(json.dumps({"vocab_size": 300, "unigram_val_loss": 5.7}))
    params = smoke_params(store, runtime={"device": "cpu", "threads": 1})
    monkeypatch.chdir(store)
    argv = ["train", "--params", str(params), "--recipe", "paper", "--seed", "1337", "--data-dir", "prepared",
            "--out-dir", "out"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "twoscale train: error: prepared/stats.json does not name the corpus its tokens were made of (it was written "
        "before the tokenize stage recorded it): rerun the tokenize stage")
    assert not (store / "out").exists() and not (store / "mlflow.db").exists()


# --- a store that cannot be used: one line naming it, within a bounded wait ---------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free again once closed: nothing listens there


def test_a_tracking_server_that_refuses_connections_is_named_in_one_line(store, monkeypatch):
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(TwoscaleError) as info:
        tracking.ensure_store()
    assert str(info.value).startswith(f"MLflow tracking server {uri} did not answer within 10 s (")
    assert "\n" not in str(info.value)


def test_a_tracking_server_that_accepts_but_never_answers_is_given_up_after_the_timeout():
    with socket.socket() as silent:  # connections queue in its backlog, and nothing ever reads or answers them
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(TwoscaleError, match=f"^MLflow tracking server {uri} did not answer within 0.5 s"):
            mlflow_store.check_server_answers(uri, timeout=0.5)


def test_a_server_that_answers_with_any_http_status_is_up():
    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the name http.server calls)
            self.send_error(401)

        def log_message(self, *args):
            pass

    with http.server.HTTPServer(("127.0.0.1", 0), Refusing) as server:
        thread = threading.Thread(target=server.handle_request)
        thread.start()
        mlflow_store.check_server_answers(f"http://127.0.0.1:{server.server_address[1]}", timeout=5)
        thread.join()


def test_a_corrupt_store_is_named_in_one_line(store):
    (store / "mlflow.db").write_bytes(b"not a database" * 100)
    with pytest.raises(TwoscaleError) as info:
        tracking.ensure_store()
    assert str(info.value) == (f"{store / 'mlflow.db'}: the MLflow store cannot be used ((sqlite3.DatabaseError) "
                               "file is not a database)")


def test_a_locked_store_is_named_in_one_line_and_nothing_else_is_printed(store, capfd):
    tracking.ensure_store()
    holder = sqlite3.connect(store / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than MLflow waits
    try:
        with pytest.raises(TwoscaleError) as info:
            tracking.ensure_store()
    finally:
        holder.close()
    assert str(info.value) == (f"{store / 'mlflow.db'}: the MLflow store cannot be used ((sqlite3.OperationalError) "
                               "database is locked)")
    assert "Traceback" not in capfd.readouterr().err


def test_a_stage_facing_a_server_that_does_not_answer_stops_in_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "a.txt").write_text("Some text.\n" * 50)
    params = smoke_params(tmp_path, data={"source": "text", "text_files": ["a.txt"]})
    uri = f"http://127.0.0.1:{closed_port()}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    env.pop(tracking.PARENT_ENV, None)
    done = subprocess.run([sys.executable, "-m", "twoscale", "corpus", "--params", str(params), "--out-dir", "raw"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"twoscale corpus: error: MLflow tracking server {uri} did not answer within 10 s")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "raw").exists()


# --- a Slurm run logging to a SQLite file ----------------------------------------------------------------------


@pytest.mark.parametrize("uri", ["sqlite:////work/repo/mlflow.db", "sqlite:///mlflow.db", "SQLITE:////x/m.db"])
def test_a_slurm_run_logging_to_a_sqlite_file_is_warned_in_one_line_naming_the_file(uri):
    warning = tracking.sqlite_on_slurm_warning(uri, submits_to_slurm=True)
    assert warning is not None and "\n" not in warning
    assert warning.startswith("warning:") and "MLFLOW_TRACKING_URI" in warning
    assert uri.split(":///", 1)[1] in warning


@pytest.mark.parametrize("uri", ["http://login01:5050", "https://mlflow.example.org",
                                 "postgresql+psycopg://mlflow@db:5432/mlflow", "file:///shared/mlruns"])
def test_a_slurm_run_logging_elsewhere_is_not_warned(uri):
    assert tracking.sqlite_on_slurm_warning(uri, submits_to_slurm=True) is None


@pytest.mark.parametrize("uri", ["sqlite:////work/repo/mlflow.db", "http://127.0.0.1:5050"])
def test_a_run_on_this_machine_is_not_warned(uri):
    assert tracking.sqlite_on_slurm_warning(uri, submits_to_slurm=False) is None


def test_ctrl_c_while_interrupts_are_held_is_raised_once_the_block_is_done():
    done = []
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN where the suite runs in the background
    with pytest.raises(KeyboardInterrupt):
        with tracking.interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the block ran to its end")
    assert done == ["the block ran to its end"]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_training_run_by_hand_or_of_another_parameter_set_registers_its_model_apart_from_the_defaults():
    from twoscale.stages.train import registered_name

    default = Path("results/train/paper/seed_1337")
    smoke = Path("runs/smoke/results/train/paper/seed_1337")
    assert registered_name("paper", "snakemake", default) == registered_name("paper", "dvc", default) \
        == "twoscale-paper"
    assert registered_name("paper", "cli", default) == "twoscale-paper-by-hand"
    assert registered_name("paper", "snakemake", smoke) == "twoscale-smoke-paper"
    assert registered_name("paper", "cli", smoke) == "twoscale-smoke-paper-by-hand"


def test_a_server_whose_health_page_answers_while_its_api_stalls_is_given_up_after_the_timeout():
    class HealthyButStalled(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # the name http.server calls
            if self.path == "/health":
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"OK")
            else:  # the store behind it hangs: no answer before the client gives up
                time.sleep(3)

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), HealthyButStalled) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(TwoscaleError) as info:
            mlflow_store.check_server_answers(uri, timeout=0.5)
        server.shutdown()
    assert str(info.value) == (f"MLflow tracking server {uri} did not answer within 0.5 s (timed out): start it, or "
                               "unset MLFLOW_TRACKING_URI to log to mlflow.db")


def test_a_long_error_is_cut_at_a_word_and_says_so():
    from twoscale.config.errors import first_line

    text = "API request to endpoint /api/2.0/mlflow/runs/create failed with exception " * 8
    line = first_line(RuntimeError(text + "\nmore"), limit=100)
    kept = line.removesuffix(" …")
    assert len(line) <= 100 and kept != line
    assert text.startswith(kept) and text[len(kept)] == " "  # whole words only
    assert len(kept) > 80  # as many as fit
    assert first_line(RuntimeError()) == "RuntimeError"


def test_a_stage_run_is_finished_once_its_outputs_have_landed_and_not_if_they_do_not(store, tmp_path):
    """The stage's work ends, then its outputs land: the run is FINISHED only then. Where they do not land (the
    parameter file changed under it, a write failed, a stop while landing) the run says so."""
    with outputs_land_together():
        with tracking.stage_run("measure", {}) as landed:
            write_text(tmp_path / "landed.txt", "landed\n")
        assert client(store).get_run(landed.run_id).info.status == "RUNNING"  # its output waits
    assert client(store).get_run(landed.run_id).info.status == "FINISHED"
    with pytest.raises(TwoscaleError), outputs_land_together():
        with tracking.stage_run("measure", {}) as refused:
            write_text(tmp_path / "refused.txt", "refused\n")
        raise TwoscaleError("params.yaml changed while the stage ran")
    tracking.outputs_not_landed("FAILED")
    assert client(store).get_run(refused.run_id).info.status == "FAILED"
    assert client(store).get_run(landed.run_id).info.status == "FINISHED"
    assert not (tmp_path / "refused.txt").exists()


STAGE_KILLED_WHILE_LANDING = """
import os, signal, sys
import mlflow  # its own store, not the shared writer's
from twoscale.config.io import outputs_land_together, write_text
from twoscale.pipeline.observers import tracking
with outputs_land_together(lambda waiting: os.kill(os.getpid(), signal.SIGKILL)):
    with tracking.stage_run("measure", {}) as run:
        print(run.run_id, flush=True)
        write_text(sys.argv[1], "never lands")
"""


def test_a_stage_killed_outright_while_its_outputs_land_is_not_left_finished(store, tmp_path):
    """SIGKILL after the stage's work, as its outputs land: its run was FINISHED before they landed; now it is
    left open and closed KILLED (here by the next invocation's sweep, as when no writer saw it go)."""
    env = {**os.environ, "DVC_ROOT": str(store)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop(tracking.PARENT_ENV, None)
    done = subprocess.run([sys.executable, "-c", STAGE_KILLED_WHILE_LANDING, str(tmp_path / "out.txt")],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == -signal.SIGKILL
    run_id = done.stdout.strip()
    assert not (tmp_path / "out.txt").exists()
    tracking.close_abandoned_runs()
    assert client(store).get_run(run_id).info.status == "KILLED"


def parent_of(store, run_id: str) -> str:
    return client(store).get_run(run_id).data.tags["mlflow.parentRunId"]


def test_snakemake_s_jobs_of_a_stage_are_nested_under_one_run_of_that_stage(store, monkeypatch):
    """The invocation's run holds a run per stage (made before any job, as Snakemake's onstart does), each stage
    run its jobs; a stage run no job ran under is removed when the invocation ends, the others end with it."""
    parent = tracking.start_pipeline_run("snakemake", "snakemake-test")
    groups = tracking.start_stage_groups(parent, ["claims", "geometry", "measure"])
    monkeypatch.setenv(tracking.PARENT_ENV, parent)
    monkeypatch.setenv(tracking.STAGE_GROUPS_ENV, json.dumps(groups))
    with tracking.stage_run("measure", {}, {"recipe": "paper", "seed": "1"}) as first:
        pass
    with tracking.stage_run("measure", {}, {"recipe": "huginn", "seed": "1"}) as second:
        pass
    with tracking.stage_run("geometry", {}) as gathered:
        pass
    tracking.end_pipeline_run(parent, "FINISHED")
    assert parent_of(store, first.run_id) == parent_of(store, second.run_id) == groups["measure"]
    assert parent_of(store, gathered.run_id) == groups["geometry"]
    measure = client(store).get_run(groups["measure"])
    assert (measure.info.run_name, parent_of(store, groups["measure"])) == ("measure", parent)
    assert measure.info.status == "FINISHED" and "stage" not in measure.data.tags  # not among the jobs by stage
    assert measure.data.tags["mlflow.note.content"].startswith("Stage `measure`: the geometry of the loop iterates")
    assert client(store).get_run(groups["claims"]).info.lifecycle_stage == "deleted"


def test_dvc_s_jobs_of_a_stage_find_the_run_of_that_stage_the_first_one_made(store, monkeypatch):
    """Under DVC (one job at a time, no orchestrator hook) the first job of a stage makes its run, the next finds
    it; the invocation's run and the stage's are FINISHED after each job."""
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.delenv(tracking.STAGE_GROUPS_ENV, raising=False)
    monkeypatch.setattr(tracking, "_dvc_process", os.getpid)
    runs = []
    for seed in ("1", "2"):
        with tracking.stage_run("distill", {}, {"recipe": "plain", "seed": seed}) as run:
            runs.append(run.run_id)
    group = parent_of(store, runs[0])
    assert parent_of(store, runs[1]) == group
    stage_run = client(store).get_run(group)
    assert stage_run.info.run_name == "distill" and stage_run.info.status == "FINISHED"
    invocation = client(store).get_run(parent_of(store, group))
    assert invocation.data.tags["orchestrator"] == "dvc" and invocation.info.status == "FINISHED"


def test_under_dvc_a_job_s_stage_and_invocation_runs_end_only_after_its_own(store, monkeypatch, tmp_path):
    """While the job's outputs wait to land its run is open, and so are the runs that hold it; they end after it
    (they ended first, FINISHED above a RUNNING job, before)."""
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.delenv(tracking.STAGE_GROUPS_ENV, raising=False)
    monkeypatch.setattr(tracking, "_dvc_process", os.getpid)

    def statuses(run_id: str) -> list[str]:
        group = parent_of(store, run_id)
        return [client(store).get_run(run).info.status for run in (run_id, group, parent_of(store, group))]

    with outputs_land_together():
        with tracking.stage_run("distill", {}, {"recipe": "plain", "seed": "1"}) as run:
            write_text(tmp_path / "out.txt", "waits to land\n")
        assert statuses(run.run_id) == ["RUNNING"] * 3
    assert statuses(run.run_id) == ["FINISHED"] * 3
