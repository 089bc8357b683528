"""Bad input to a stage: one clear line on stderr, exit code 2, and no output written."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from workspace import smoke_params

RUN = ("--recipe", "paper", "--seed", "1337")  # a training run of the smoke parameters


def stage(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run(
        [sys.executable, "-m", "twoscale", *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def assert_one_line_error(result: subprocess.CompletedProcess, stage_name: str, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("twoscale ")]
    assert len(lines) == 1 and lines[0].startswith(f"twoscale {stage_name}: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_corpus_from_empty_text_files(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n")
    params = smoke_params(tmp_path, data={"source": "text", "text_files": ["empty.txt"]})
    result = stage(tmp_path, "corpus", "--params", str(params), "--out-dir", "raw")
    assert_one_line_error(result, "corpus", "corpus is empty")
    assert not (tmp_path / "raw").exists()


def test_corpus_from_missing_text_files(tmp_path):
    params = smoke_params(tmp_path, data={"source": "text", "text_files": ["books/*.txt"]})
    result = stage(tmp_path, "corpus", "--params", str(params), "--out-dir", "raw")
    assert_one_line_error(result, "corpus", "books/*.txt")


def test_corpus_into_unwritable_directory(tmp_path):
    (tmp_path / "a.txt").write_text("Some text.\n" * 50)
    (tmp_path / "blocker").write_text("a file where a directory should be")
    params = smoke_params(tmp_path, data={"source": "text", "text_files": ["a.txt"]})
    result = stage(tmp_path, "corpus", "--params", str(params), "--out-dir", "blocker/raw")
    assert_one_line_error(result, "corpus", "cannot write", "blocker/raw")


def test_tokenize_without_corpus(tmp_path):
    params = smoke_params(tmp_path)
    result = stage(tmp_path, "tokenize", "--params", str(params), "--corpus-dir", "raw", "--out-dir", "prepared")
    assert_one_line_error(result, "tokenize", "corpus not found")
    assert not (tmp_path / "prepared").exists()


def test_tokenize_with_corpus_not_matching_manifest(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw/corpus.txt").write_text("abc\n")
    (tmp_path / "raw/manifest.json").write_text(json.dumps({"n_chars": 99, "documents": []}))
    params = smoke_params(tmp_path)
    result = stage(tmp_path, "tokenize", "--params", str(params), "--corpus-dir", "raw", "--out-dir", "prepared")
    assert_one_line_error(result, "tokenize", "does not match its manifest")


@pytest.fixture
def tiny_data(tmp_path) -> Path:
    data = tmp_path / "prepared"
    data.mkdir()
    ids = np.arange(3000, dtype=np.uint16) % 300
    np.save(data / "train.npy", ids)
    np.save(data / "val.npy", ids[:100])
    (data / "tokenizer.json").write_text("{}")
    stats = {"vocab_size": 300, "unigram_val_loss": 5.7, "corpus_sha256": "0" * 64}
    (data / "stats.json").write_text(json.dumps(stats))
    return data


def test_train_context_longer_than_corpus(tmp_path, tiny_data):
    params = smoke_params(tmp_path, model={"block_size": 512})
    result = stage(tmp_path, "train", "--params", str(params), *RUN, "--data-dir", "prepared", "--out-dir", "out")
    assert_one_line_error(result, "train", "model.block_size = 512", "validation 100 tokens")
    assert not (tmp_path / "out").exists()


def test_train_with_corrupt_token_array(tmp_path, tiny_data):
    (tiny_data / "val.npy").write_bytes(b"not an array")
    params = smoke_params(tmp_path)
    result = stage(tmp_path, "train", "--params", str(params), *RUN, "--data-dir", "prepared", "--out-dir", "out")
    assert_one_line_error(result, "train", "val.npy", "not a token array")
    assert not (tmp_path / "out").exists()


def test_train_without_data(tmp_path):
    params = smoke_params(tmp_path)
    result = stage(tmp_path, "train", "--params", str(params), *RUN, "--data-dir", "prepared", "--out-dir", "out")
    assert_one_line_error(result, "train", "stats.json", "not found")


@pytest.mark.parametrize("run, message", [
    (("--recipe", "loopy", "--seed", "1337"),
     "'loopy' is neither under recipes nor under teachers (known: huginn, paper, plain)"),
    (("--recipe", "paper", "--seed", "7"), "seed 7 is not in runtime.seeds [1337]"),
])
def test_train_of_a_run_not_in_the_parameters(tmp_path, tiny_data, run, message):
    params = smoke_params(tmp_path)
    result = stage(tmp_path, "train", "--params", str(params), *run, "--data-dir", "prepared", "--out-dir", "out")
    assert_one_line_error(result, "train", message)
    assert not (tmp_path / "out").exists()


def test_unknown_stage_is_rejected(tmp_path):
    result = stage(tmp_path, "measure-everything")
    assert result.returncode == 2
    assert "invalid choice: 'measure-everything'" in result.stderr


def measure(tmp_path: Path, checkpoint: Path, params: Path, train_metrics: str = "metrics.json"
            ) -> subprocess.CompletedProcess:
    (tmp_path / "metrics.json").write_text('{"precision": "float32", "machine": "a CPU", "torch": "2"}')
    return stage(tmp_path, "measure", "--params", str(params), *RUN, "--checkpoint", str(checkpoint),
                 "--train-metrics", train_metrics, "--data-dir", "prepared", "--out-dir", "measured")


def test_measure_with_corrupt_checkpoint(tmp_path, tiny_data):
    checkpoint = tmp_path / "step_10.pt"
    checkpoint.write_bytes(b"\x80\x02garbage")
    result = measure(tmp_path, checkpoint, smoke_params(tmp_path))
    assert_one_line_error(result, "measure", "step_10.pt", "not a readable checkpoint")
    assert not (tmp_path / "measured").exists()


def test_measure_with_checkpoint_of_other_model_parameters(tmp_path, tiny_data):
    from twoscale.config.parameter_files import load_params
    from twoscale.training.trainer import build_state, model_config, save_checkpoint

    trained = load_params(smoke_params(tmp_path, model={"n_embd": 16}))
    config = model_config(trained.model, vocab_size=300)
    save_checkpoint(tmp_path / "step_10.pt", build_state(config, trained.train, 0, torch.device("cpu")), "fp")
    result = measure(tmp_path, tmp_path / "step_10.pt", smoke_params(tmp_path))  # n_embd back to the smoke value
    assert_one_line_error(result, "measure", "trained with other model parameters (n_embd)")
    assert not (tmp_path / "measured").exists()


def save_trained(path: Path, params: Path, data: Path, step: int, seed: int = 1337, **train) -> None:
    """A checkpoint at `step` of run paper/`seed` as the train stage would save it from `params` (with `train`
    changed) and the data in `data`, under `path`."""
    from twoscale.config.parameter_files import load_params
    from twoscale.training.trainer import build_state, model_config, run_fingerprint, save_checkpoint

    trained = load_params(params)
    run = trained.run("paper", 1337)
    run = dataclasses.replace(run, seed=seed, train=run.train.model_copy(update=train))
    state = build_state(model_config(run.model, vocab_size=300), run.train, seed, torch.device("cpu"))
    state.step = step
    save_checkpoint(path, state, run_fingerprint(trained.runtime, run, data))


def test_measure_without_the_training_metrics(tmp_path, tiny_data):
    params = smoke_params(tmp_path)
    save_trained(tmp_path / "step_10.pt", params, tiny_data, 10)
    result = measure(tmp_path, tmp_path / "step_10.pt", params, train_metrics="train/metrics.json")
    assert_one_line_error(result, "measure", "train/metrics.json: not found")
    assert not (tmp_path / "measured").exists()


def changed_val_ids(data: Path) -> None:
    np.save(data / "val.npy", np.load(data / "val.npy")[::-1].copy())


@pytest.mark.parametrize(("saved", "named", "change", "message"), [
    ({"step": 10}, "step_40.pt", None, "step_40.pt: holds training step 10, so its name must be step_10.pt"),
    ({"step": 10}, "copy.pt", None, "copy.pt: holds training step 10, so its name must be step_10.pt"),
    ({"step": 3}, "step_3.pt", None, "step_3.pt: step 3 is not one of train.checkpoint_steps [10, 40]"),
    ({"step": 10, "seed": 7}, "step_10.pt", None,
     "step_10.pt: not trained with the train and runtime parameters and seed 1337 of paper in force; rerun train"),
    ({"step": 10, "learning_rate": 0.5}, "step_10.pt", None, "not trained with the train and runtime parameters"),
    ({"step": 10}, "step_10.pt", changed_val_ids,
     "step_10.pt: trained on other data than the prepared data in force; rerun train"),
])
def test_measure_refuses_a_checkpoint_that_is_not_what_its_path_and_the_parameters_say(
        tmp_path, tiny_data, saved, named, change, message):
    params = smoke_params(tmp_path)
    save_trained(tmp_path / named, params, tiny_data, **saved)
    if change is not None:
        change(tiny_data)
    result = measure(tmp_path, tmp_path / named, params)
    assert_one_line_error(result, "measure", message)
    assert not (tmp_path / "measured").exists()


def test_a_checkpoint_of_the_parameters_in_force_is_measured(tmp_path, tiny_data):
    """The control of the refusals above: the same checkpoint, named and trained as the parameters say."""
    params = smoke_params(tmp_path, measure={"n_sequences": 2, "batch_size": 2, "max_loops": 3, "loss_loops": [1]})
    save_trained(tmp_path / "step_10.pt", params, tiny_data, 10)
    result = measure(tmp_path, tmp_path / "step_10.pt", params)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((tmp_path / "measured/summary.json").read_text())["step"] == 10


def test_sweep_of_a_strategy_not_in_the_parameters(tmp_path, tiny_data):
    result = stage(tmp_path, "sweep", "--params", str(smoke_params(tmp_path)), *RUN, "--strategy", "telepathy",
                   "--checkpoint", "step_10.pt", "--data-dir", "prepared", "--out", "sweep/telepathy.parquet",
                   "--depth-out", "sweep/telepathy.depth.parquet")
    assert_one_line_error(result, "sweep", "'telepathy'", "known: acceleration, fixed")
    assert not (tmp_path / "sweep").exists()


def test_tradeoff_without_the_sweep_tables(tmp_path):
    result = stage(tmp_path, "tradeoff", "--params", str(smoke_params(tmp_path)), "--strategies-dir", "sweep",
                   "--latency-dir", "latency", "--out-dir", "out")
    assert_one_line_error(result, "tradeoff", "latency/huginn/seed_1337.parquet", "not found")
    assert not (tmp_path / "out").exists() and not (tmp_path / "figures").exists()


def test_tradeoff_with_a_truncated_latency_table(tmp_path):
    table = tmp_path / "latency/huginn/seed_1337.parquet"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"PAR1\x00\x00")  # a parquet file's magic, then nothing
    result = stage(tmp_path, "tradeoff", "--params", str(smoke_params(tmp_path)), "--strategies-dir", "sweep",
                   "--latency-dir", "latency", "--out-dir", "out")
    assert_one_line_error(result, "tradeoff", "latency/huginn/seed_1337.parquet: not a readable table")
    assert not (tmp_path / "out").exists() and not (tmp_path / "figures").exists()


def test_sample_on_a_recipe_it_does_not_sample(tmp_path):
    params = smoke_params(tmp_path)
    result = stage(tmp_path, "sample", "--params", str(params), *RUN, "--checkpoint", "none.pt",
                   "--data-dir", "prepared", "--out-dir", "sampled")
    assert_one_line_error(result, "sample", "--recipe 'paper' is not under sample.recipes (huginn)")
    assert not (tmp_path / "sampled").exists()


def test_sample_with_a_bad_setting_names_the_key(tmp_path):
    params = smoke_params(tmp_path, sample={"inner_loops": [0]})
    result = stage(tmp_path, "sample", "--params", str(params), "--recipe", "huginn", "--seed", "1337",
                   "--checkpoint", "none.pt", "--data-dir", "prepared", "--out-dir", "sampled")
    assert_one_line_error(result, "sample", "sample.inner_loops.0 = 0")
    assert not (tmp_path / "sampled").exists()


TEACHER = ("--recipe", "plain", "--seed", "1337")  # the smoke parameters' plain GPT


def test_phases_of_a_looped_recipe(tmp_path):
    result = stage(tmp_path, "phases", "--params", str(smoke_params(tmp_path)), *RUN, "--checkpoint", "none.pt",
                   "--data-dir", "prepared", "--out-dir", "phased")
    assert_one_line_error(result, "phases", "--recipe 'paper' is not under teachers (plain)")
    assert not (tmp_path / "phased").exists()


@pytest.mark.parametrize("blocks, phases, message", [
    ("3", {"phases": {"1": [[0, 4]], "2": [[0, 0], [1, 4]]}},
     "--blocks 3 is not distilled for seed 1337 (distill.blocks, curve_blocks: [1, 2])"),
    ("2", {"phases": {"1": [[0, 4]]}}, "phases.json: no phases for k = 2"),
    ("2", None, "phases.json: not found"),
    ("2", '{"phases": ', "phases.json: not valid JSON (Expecting value at line 1)"),
    ("2", {"phases": {"2": [[0, 0], [1, 4]]}}, "train/metrics.json: not found"),
])
def test_distill_without_its_phases_or_the_teachers_metrics(tmp_path, blocks, phases, message):
    if phases is not None:
        (tmp_path / "phases.json").write_text(phases if isinstance(phases, str) else json.dumps(phases))
    result = stage(tmp_path, "distill", "--params", str(smoke_params(tmp_path)), *TEACHER, "--blocks", blocks,
                   "--checkpoint", "none.pt", "--train-metrics", "train/metrics.json", "--phases", "phases.json",
                   "--data-dir", "prepared", "--out-dir", "distilled")
    assert_one_line_error(result, "distill", message)
    assert not (tmp_path / "distilled").exists()


def test_surrogates_without_the_distill_outputs(tmp_path, tiny_data):
    result = stage(tmp_path, "surrogates", "--params", str(smoke_params(tmp_path)), "--train-dir", "train",
                   "--distill-dir", "distill", "--data-dir", "prepared", "--out-dir", "out")
    assert_one_line_error(result, "surrogates", "distill/plain/seed_1337/k_1/evaluation.json", "not found")
    assert not (tmp_path / "out").exists() and not (tmp_path / "figs").exists()


def test_a_parameter_file_edited_while_a_stage_runs_leaves_no_output(tmp_path, monkeypatch, capsys):
    import yaml

    import twoscale.stages.corpus as corpus_stage
    from twoscale.__main__ import main

    (tmp_path / "a.txt").write_text("Some text.\n" * 50)
    params = smoke_params(tmp_path, data={"source": "text", "text_files": ["a.txt"]})
    build = corpus_stage.build_corpus

    def edited_meanwhile(*args, **kwargs):
        raw = yaml.safe_load(params.read_text())
        raw["measure"]["max_loops"] = 6
        params.write_text(yaml.safe_dump(raw))
        return build(*args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr(corpus_stage, "build_corpus", edited_meanwhile)
    assert main(["corpus", "--params", "params.yaml", "--out-dir", "raw"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "twoscale corpus: error: params.yaml changed while the stage ran (measure.max_loops): its outputs were not "
        "written; run it again")
    assert not (tmp_path / "raw").exists()


def test_a_file_a_stage_cannot_write_is_one_line_with_the_traceback_in_its_log(tmp_path, monkeypatch, capsys):
    import twoscale.tools.schema as schema_stage
    from twoscale.__main__ import main

    def denied(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(schema_stage, "write_text", denied)
    assert main(["schema", "--out", str(tmp_path / "schema.json"), "--log", str(tmp_path / "schema.log")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [  # a job's start line (it has a log), then the error
        f"twoscale schema ({tmp_path / 'schema.log'}): started",
        f"twoscale schema: error: {tmp_path / 'schema.json'}: Permission denied"]
    log = (tmp_path / "schema.log").read_text()
    *_, error, usage = log.splitlines()  # the error, then the job's record of its own use
    assert "Traceback" in log and error.endswith(f"{tmp_path / 'schema.json'}: Permission denied")
    assert usage.startswith("resources used: cpu_s=")


def test_claims_page_without_the_claims(tmp_path):
    result = stage(tmp_path, "claims_page", "--params", str(smoke_params(tmp_path)), "--claims", "claims.md",
                   "--out", "claims.html")
    assert_one_line_error(result, "claims_page", "claims.md: not found (run claims first)")
    assert not (tmp_path / "claims.html").exists()
