"""Training pieces against hand-computed values, checkpoints, and resume after a kill through the real CLI."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import yaml
from records import digest_by_hand

from twoscale.__main__ import main
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import sha256_file
from twoscale.config.parameter_files import read_raw
from twoscale.config.params import LoopSchedule, TrainParams, params_hash
from twoscale.models.looped_gpt import ModelConfig
from twoscale.pipeline.observers import run_names, tracking
from twoscale.training.batches import evaluate_loss, evaluation_starts, random_batch, windows
from twoscale.training.device import training_dtype
from twoscale.training.trainer import (
    WALL_CLOCK,
    build_state,
    compile_blocks,
    latest_resumable,
    learning_rate,
    load_model,
    read_checkpoint,
    restore_state,
    sample_loop_counts,
    save_checkpoint,
    train,
)

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


def schedule(distribution: str, mean: float = 3.0, sigma: float = 0.5, max: int = 8) -> LoopSchedule:
    return LoopSchedule(distribution=distribution, mean=mean, sigma=sigma, max=max, backprop_depth=2,
                        straight_through=False)


def train_params(**overrides) -> TrainParams:
    fields = dict(
        steps=10, batch_size=4, learning_rate=1.0, min_lr_ratio=0.1, warmup_steps=2, weight_decay=0.1,
        beta1=0.9, beta2=0.95, grad_clip=1.0, loops=schedule("uniform", max=3), eval_loops=2, eval_every=5,
        eval_batches=1, checkpoint_steps=[5, 10],
    )
    return TrainParams(**{**fields, **overrides})


def tiny_config(dropout: float = 0.0, block_size: int = 8) -> ModelConfig:
    return ModelConfig(vocab_size=50, n_layer=3, n_head=2, n_embd=16, block_size=block_size, dropout=dropout,
                       bias=False, groups=((1, 1),))


def markov_tokens(n: int, vocab: int, seed: int) -> np.ndarray:
    """Deterministic pseudo-text: every token has 3 likely successors, so a model can learn something."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab, (vocab, 3))
    choice = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
    ids = np.empty(n, dtype=np.uint16)
    ids[0] = 0
    for i in range(1, n):
        ids[i] = successors[ids[i - 1], choice[i]]
    return ids


# --- loop counts ------------------------------------------------------------------------------------------


def test_fixed_loop_counts_are_always_the_max():
    generator = torch.Generator().manual_seed(0)
    assert all(sample_loop_counts(schedule("fixed", max=7), 3, generator) == [7, 7, 7] for _ in range(20))


def test_uniform_loop_counts_cover_one_to_max():
    generator = torch.Generator().manual_seed(0)
    draws = [c for _ in range(300) for c in sample_loop_counts(schedule("uniform", max=5), 3, generator)]
    assert set(draws) == {1, 2, 3, 4, 5}


def test_poisson_lognormal_mean_is_mean_plus_one():
    # r = Poisson(exp t) + 1 with t ~ N(log 3 - 0.5^2/2, 0.5): E[exp t] = 3, so E[r] = 4, and
    # Var[r] = E[rate] + Var[rate] = 3 + 9 (exp(0.25) - 1) = 5.556. max=1000 makes clipping negligible.
    counts = np.array(sample_loop_counts(schedule("poisson_lognormal", 3.0, 0.5, max=1000), 100_000,
                                         torch.Generator().manual_seed(0)))
    assert counts.min() >= 1
    standard_error = counts.std() / math.sqrt(len(counts))
    assert abs(counts.mean() - 4.0) < 4 * standard_error
    assert counts.var() == pytest.approx(3 + 9 * (math.exp(0.25) - 1), rel=0.05)


def test_poisson_lognormal_is_clipped_to_max():
    generator = torch.Generator().manual_seed(1)
    counts = sample_loop_counts(schedule("poisson_lognormal", 6.0, 0.5, max=3), 2000, generator)
    assert set(counts) == {1, 2, 3}


@pytest.mark.parametrize("distribution", ["uniform", "poisson_lognormal"])
def test_same_seed_same_loop_counts(distribution):
    def draw(seed):
        generator = torch.Generator().manual_seed(seed)
        return [sample_loop_counts(schedule(distribution), 3, generator) for _ in range(50)]

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


# --- learning-rate schedule -------------------------------------------------------------------------------

# peak 1.0, floor 0.1, warmup 2 of 10 steps: warmup (k+1)/2, then 0.1 + 0.45 (1 + cos(pi (k-2)/8))
HAND_LR = [0.5, 1.0, 1.0, 0.96574579, 0.86819805, 0.72220754, 0.55, 0.37779246, 0.23180195, 0.13425421]


@pytest.mark.parametrize(
    ("step", "expected"), [(0, 0.5), (1, 1.0), (2, 1.0), (6, 0.55), (9, 0.13425421), (10, 0.1)]
)
def test_learning_rate_hand_values(step, expected):
    assert learning_rate(step, train_params()) == pytest.approx(expected, abs=1e-8)


def test_learning_rate_without_warmup_starts_at_the_peak():
    assert learning_rate(0, train_params(warmup_steps=0)) == pytest.approx(1.0)
    assert learning_rate(5, train_params(warmup_steps=0)) == pytest.approx(0.55)


def test_training_uses_the_schedule_step_by_step(tmp_path):
    ids = markov_tokens(400, 50, seed=0)
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    train(state, ids, ids[:100], train_params(), CPU, tmp_path / "out", tmp_path / "resume", "fp")
    assert [row["step"] for row in state.history] == list(range(1, 11))
    assert [row["lr"] for row in state.history] == pytest.approx(HAND_LR, abs=1e-8)


def test_a_run_whose_loss_turns_non_finite_stops_and_keeps_its_last_good_checkpoint(tmp_path):
    ids = markov_tokens(400, 50, seed=0)
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)

    def poison_after_step_6(step, row):
        if step == 6:
            with torch.no_grad():
                next(state.model.parameters()).fill_(math.nan)

    with pytest.raises(TwoscaleError) as info:
        train(state, ids, ids[:100], train_params(), CPU, tmp_path / "out", tmp_path / "resume", "fp",
              poison_after_step_6)
    assert str(info.value).startswith("training diverged at step 7 (loss nan")
    assert f"the last good checkpoint, step 5, is kept in {tmp_path / 'resume'}" in str(info.value)
    assert sorted(p.name for p in (tmp_path / "resume").iterdir()) == ["step_5.pt"]
    assert not (tmp_path / "out" / "step_10.pt").exists()


def test_identical_runs_write_byte_identical_checkpoints(tmp_path):
    ids = markov_tokens(400, 50, seed=0)
    for name in ("a", "b"):
        state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
        train(state, ids, ids[:100], train_params(), CPU, tmp_path / name, tmp_path / f"{name}-resume", "fp")
    assert (tmp_path / "a/step_10.pt").read_bytes() == (tmp_path / "b/step_10.pt").read_bytes()


def test_a_checkpoint_before_the_last_holds_the_weights_alone_and_the_last_the_state_to_resume(tmp_path):
    """Lean checkpoints: step 5 of a 10-step run holds what names its weights and the weights, those of the resume
    folder's whole checkpoint of step 5 (which a resume reads), in under half its bytes (Adam keeps two moments per
    weight); step 10, the run's last, is the whole checkpoint."""
    ids = markov_tokens(400, 50, seed=0)
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    train(state, ids, ids[:100], train_params(), CPU, tmp_path / "out", tmp_path / "resume", "fp")
    lean, whole = read_checkpoint(tmp_path / "out/step_5.pt"), read_checkpoint(tmp_path / "resume/step_5.pt")
    assert set(lean) == {"format", "fingerprint", "step", "model_config", "model", "history"}
    assert {"optimizer", "scheduler", "generator", "torch_rng"} <= set(whole)
    assert differing_tensors(lean["model"], whole["model"]) == []
    assert json.dumps(lean["history"]) == json.dumps(whole["history"])  # NaN where nothing was evaluated
    assert (tmp_path / "out/step_5.pt").stat().st_size < 0.5 * (tmp_path / "resume/step_5.pt").stat().st_size
    assert (tmp_path / "out/step_10.pt").read_bytes() == (tmp_path / "resume/step_10.pt").read_bytes()
    assert load_model(tmp_path / "out/step_5.pt")[1]["step"] == 5  # what the measuring stages read


# --- precision --------------------------------------------------------------------------------------------

BF16_TOLERANCE = 0.05  # nats: bf16 autocast may move a short run's held-out loss this much against float32


def test_bf16_training_ends_within_tolerance_of_float32(tmp_path):
    params = train_params(steps=60, batch_size=8, learning_rate=1e-2, warmup_steps=5, eval_every=60,
                          checkpoint_steps=[60])
    chain = markov_tokens(4800, 50, seed=0)
    ids, val = chain[:4000], chain[4000:]
    untrained, losses = {}, {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        state = build_state(tiny_config(), params, seed=0, device=CPU)
        untrained[name] = evaluate_loss(state.model, val, [2], 16, 8, CPU)
        train(state, ids, val, params, CPU, tmp_path / name, tmp_path / f"{name}-resume", "fp", dtype=dtype)
        losses[name] = evaluate_loss(state.model, val, [2], 16, 8, CPU)  # both read in float32
    assert untrained["fp32"] - losses["fp32"] > 0.5  # it learned, so the comparison means something
    assert losses["bf16"] != losses["fp32"]  # and bf16 really ran
    assert abs(losses["bf16"] - losses["fp32"]) < BF16_TOLERANCE


def test_compiled_layers_give_the_eager_layers_loss_and_gradients_up_to_rounding():
    """runtime.compile: the compiled layers compute what the eager ones do, so one batch's loss and every
    parameter's gradient agree up to float32 rounding (compilation fuses and reorders the arithmetic)."""
    if not shutil.which("g++"):
        pytest.skip("no C++ compiler for torch.compile's CPU backend")
    ids = markov_tokens(400, 50, seed=0)
    x, y = random_batch(ids, 4, 8, torch.Generator().manual_seed(0))
    results = {}
    for compiled in (False, True):
        torch.compiler.reset()
        model = build_state(tiny_config(), train_params(), seed=0, device=CPU).model
        if compiled:
            compile_blocks(model, CPU)
        loss = model(x, [3], targets=y, backprop_depth=2).loss
        loss.backward()
        gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results[compiled] = (loss.item(), gradient)
    assert results[True][0] == pytest.approx(results[False][0], rel=1e-6)
    assert torch.allclose(results[True][1], results[False][1], rtol=1e-4, atol=1e-7)


def test_compiling_for_the_cpu_without_a_compiler_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    with pytest.raises(TwoscaleError, match=r"^runtime.compile: compiling for the CPU needs a C\+\+ compiler"):
        compile_blocks(state.model, CPU)


@pytest.mark.parametrize(("precision", "capabilities", "expected"), [
    ("auto", {"avx512_bf16": True}, torch.bfloat16),
    ("auto", {"amx_bf16": True}, torch.bfloat16),
    ("auto", {"avx512_bf16": False, "avx2": True}, torch.float32),
    ("fp32", {"avx512_bf16": True}, torch.float32),
    ("bf16", {}, torch.bfloat16),
])
def test_training_precision_on_the_cpu(monkeypatch, precision, capabilities, expected):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    assert training_dtype(precision, CPU) == expected


# --- batches and evaluation windows -----------------------------------------------------------------------


def test_windows_targets_are_inputs_shifted_by_one():
    ids = (np.arange(30, dtype=np.uint16) * 7) % 31  # 0, 7, 14, 21, 28, 4, 11, ...
    x, y = windows(ids, [0, 3, 26], block_size=3)
    assert x.dtype == y.dtype == torch.int64
    assert x.tolist() == [[0, 7, 14], [21, 28, 4], [27, 3, 10]]
    assert y.tolist() == [[7, 14, 21], [28, 4, 11], [3, 10, 17]]


def test_random_batch_windows_are_in_range_and_reach_the_last_one():
    ids = np.arange(20, dtype=np.uint16)  # each token is its own position
    generator = torch.Generator().manual_seed(0)
    starts = set()
    for _ in range(200):
        x, y = random_batch(ids, batch_size=4, block_size=8, generator=generator)
        assert torch.equal(y, x + 1)
        assert torch.equal(x, x[:, :1] + torch.arange(8))
        starts.update(x[:, 0].tolist())
    assert starts == set(range(12))  # 20 tokens, windows of 8 + 1 target: starts 0..11


def test_evaluation_starts_are_evenly_spread_over_the_whole_split():
    # last start 100 - 8 - 1 = 91; linspace 0, 22.75, 45.5, 68.25, 91 rounded
    assert evaluation_starts(100, 8, 5) == [0, 23, 46, 68, 91]
    assert evaluation_starts(9, 8, 2) == [0, 0]  # exactly one window fits


def test_evaluation_starts_on_too_short_validation_is_an_error():
    expected = r"validation split has 8 tokens, fewer than model.block_size \+ 1 = 9"
    with pytest.raises(TwoscaleError, match=expected):
        evaluation_starts(8, 8, 1)


def test_evaluate_loss_averages_fixed_windows_and_keeps_the_mode():
    torch.manual_seed(0)
    state = build_state(tiny_config(dropout=0.2), train_params(), seed=0, device=CPU)
    model, val = state.model, markov_tokens(40, 50, seed=3)
    model.train()
    got = evaluate_loss(model, val, [2], n_windows=4, batch_size=3, device=CPU)  # a partial last batch
    assert model.training
    model.eval()
    losses = []
    with torch.no_grad():
        for start in [0, 10, 21, 31]:  # linspace(0, 40 - 8 - 1, 4) rounded
            window = torch.from_numpy(val[start : start + 9].astype(np.int64))[None]
            logp = torch.log_softmax(model(window[:, :-1], [2]).logits, dim=-1)
            losses.append(-logp[0, torch.arange(8), window[0, 1:]].mean().item())
    assert got == pytest.approx(sum(losses) / 4, rel=1e-5)


def test_train_rejects_a_split_without_one_window(tmp_path):
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    ids = markov_tokens(100, 50, seed=0)
    with pytest.raises(TwoscaleError, match="training split has 8 tokens"):
        train(state, ids[:8], ids, train_params(), CPU, tmp_path / "out", tmp_path / "resume", "fp")


def test_train_accepts_a_split_of_exactly_one_window(tmp_path):
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    ids = markov_tokens(100, 50, seed=0)
    train(state, ids[:9], ids, train_params(), CPU, tmp_path / "out", tmp_path / "resume", "fp")
    assert state.step == 10


# --- checkpoints ------------------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path) -> tuple[Path, torch.nn.Module]:
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    state.step, state.history = 7, [{"step": 7, "train_loss": 3.5, "val_loss": math.nan}]
    path = tmp_path / "ckpt" / "step_7.pt"
    save_checkpoint(path, state, "fingerprint-a")
    return path, state.model


def test_checkpoint_round_trip_with_weights_only(saved):
    path, model = saved
    assert isinstance(torch.load(path, weights_only=True), dict)  # nothing that needs unpickling of code
    payload = read_checkpoint(path)
    assert (payload["step"], payload["fingerprint"], payload["format"]) == (7, "fingerprint-a", 1)
    assert payload["history"][0]["train_loss"] == 3.5 and math.isnan(payload["history"][0]["val_loss"])
    assert ModelConfig.from_dict(payload["model_config"]) == model.config


def test_load_model_reproduces_the_saved_models_logits(saved):
    path, model = saved
    idx = torch.tensor([[1, 5, 9, 2, 49, 0]])
    with torch.no_grad():
        expected = model.eval()(idx, [3]).logits
        loaded, meta = load_model(path)
        got = loaded(idx, [3]).logits
    assert not loaded.training and meta["step"] == 7
    assert loaded.wte.weight is loaded.lm_head.weight
    assert torch.equal(got, expected)


def test_truncated_checkpoint_is_an_error_naming_the_path(saved, tmp_path):
    path, _ = saved
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(TwoscaleError, match=f"{truncated}: not a readable checkpoint"):
        read_checkpoint(truncated)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(np.random.default_rng(0).bytes(5000)), "not a readable checkpoint"),
        (lambda p: p.write_text("hello"), "not a readable checkpoint"),
        (lambda p: torch.save({"format": 99, "model": {}}, p), "not a twoscale checkpoint"),
        (lambda p: torch.save([1, 2, 3], p), "not a twoscale checkpoint"),
        (lambda p: None, "checkpoint not found"),
    ],
)
def test_foreign_or_missing_file_is_an_error_naming_the_path(tmp_path, make, message):
    path = tmp_path / "step_3.pt"
    make(path)
    with pytest.raises(TwoscaleError, match=f"^{path}: {message}"):
        read_checkpoint(path)


def test_resume_ignores_checkpoints_of_other_parameters(tmp_path):
    old, new = train_params(), train_params(learning_rate=0.5)
    old_fp, new_fp = params_hash(old), params_hash(new)
    assert old_fp != new_fp
    state = build_state(tiny_config(), old, seed=0, device=CPU)
    for step in (5, 10):
        state.step = step
        save_checkpoint(tmp_path / f"step_{step}.pt", state, old_fp)
    assert latest_resumable(tmp_path, new_fp) is None  # another learning rate: start from step 0
    assert latest_resumable(tmp_path, old_fp)["step"] == 10  # the same parameters: the newest checkpoint


def test_resume_takes_the_newest_readable_matching_checkpoint(tmp_path):
    state = build_state(tiny_config(), train_params(), seed=0, device=CPU)
    for step, fingerprint in [(2, "a"), (9, "a"), (10, "b")]:
        state.step = step
        save_checkpoint(tmp_path / f"step_{step}.pt", state, fingerprint)
    (tmp_path / "step_30.pt").write_bytes(b"half a checkpoint")
    assert latest_resumable(tmp_path, "a")["step"] == 9  # not 2 (older), not 10 (other), not 30 (unreadable)
    assert latest_resumable(tmp_path / "missing", "a") is None


class Interrupt(Exception):
    pass


def differing_tensors(got: dict, expected: dict) -> list[str]:
    assert got.keys() == expected.keys()
    return [key for key, value in expected.items() if not torch.equal(got[key], value)]


def test_restored_state_continues_exactly_like_an_uninterrupted_run(tmp_path):
    # dropout > 0 so the global torch RNG matters as well as the batch/loop generator and the optimizer state
    params = train_params(steps=12, checkpoint_steps=[4, 8, 12], loops=schedule("poisson_lognormal", max=4),
                          learning_rate=3e-3)
    ids, val = markov_tokens(600, 50, seed=0), markov_tokens(100, 50, seed=1)

    def run(out: str, interrupt_at: int | None = None):
        state = build_state(tiny_config(dropout=0.1), params, seed=3, device=CPU)
        payload = latest_resumable(tmp_path / f"{out}-resume", "fp")
        if payload is not None:
            restore_state(state, payload)

        def progress(step, row):
            if step == interrupt_at:
                raise Interrupt

        try:
            train(state, ids, val, params, CPU, tmp_path / out, tmp_path / f"{out}-resume", "fp", progress)
        except Interrupt:
            return None
        return state

    reference = run("a")
    assert run("b", interrupt_at=10) is None  # killed after step 10: the newest checkpoint is step 8
    assert read_checkpoint(tmp_path / "b" / "step_8.pt")["step"] == 8
    resumed = run("b")
    assert differing_tensors(resumed.model.state_dict(), reference.model.state_dict()) == []
    # the checkpoint written after the resume has the uninterrupted run's bytes (its optimizer state was read back
    # from a file, with keys of its own: written canonically, they pickle alike)
    assert sha256_file(tmp_path / "b" / "step_12.pt") == sha256_file(tmp_path / "a" / "step_12.pt")
    assert [r["train_loss"] for r in resumed.history] == [r["train_loss"] for r in reference.history]
    assert [r["mean_loops"] for r in resumed.history] == [r["mean_loops"] for r in reference.history]


# --- resume after SIGKILL, through the real CLI -------------------------------------------------------------


def write_data_dir(path: Path) -> None:
    path.mkdir()
    np.save(path / "train.npy", markov_tokens(20_000, 300, seed=0))
    np.save(path / "val.npy", markov_tokens(3_000, 300, seed=1))
    (path / "tokenizer.json").write_text("{}")  # only hashed into the resume fingerprint
    stats = {"vocab_size": 300, "unigram_val_loss": 5.0, "corpus_sha256": "0" * 64}
    (path / "stats.json").write_text(json.dumps(stats))


def write_params(path: Path, **train) -> None:
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["runtime"].update(device="cpu", threads=1)
    raw["model"]["dropout"] = 0.1  # the global RNG state must be restored too
    # 80 steps after the checkpoint at 20: a wide window to kill the run before it ends
    raw["train"].update({"steps": 100, "checkpoint_steps": [10, 20, 50, 100], **train})
    path.write_text(yaml.safe_dump(raw))


def test_killed_training_resumes_and_ends_with_the_same_weights(tmp_path):
    write_data_dir(tmp_path / "data")
    write_params(tmp_path / "params.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("TWOSCALE_MLFLOW_PARENT_RUN", "DVC_ROOT")}
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}", MLFLOW_DISABLE_TELEMETRY="true",
               OMP_NUM_THREADS="1")

    def command(run: str, params: str = "params.yaml") -> list[str]:
        return [sys.executable, "-m", "twoscale", "train", "--params", params, "--recipe", "paper",
                "--seed", "1337", "--data-dir", "data", "--out-dir", f"out-{run}", "--resume-dir", f"resume-{run}",
                "--log", f"{run}.log"]

    def complete(run: str, params: str = "params.yaml") -> None:
        done = subprocess.run(command(run, params), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    complete("a")  # uninterrupted
    assert "resuming" not in (tmp_path / "a.log").read_text()

    resume_b = tmp_path / "resume-b"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen(command("b"), cwd=tmp_path, env=env, **quiet)
    try:
        deadline = time.monotonic() + 240
        while not list(resume_b.glob("paper/seed_1337/*/step_20.pt")):
            assert proc.poll() is None, "run b ended before its step-20 checkpoint"
            assert time.monotonic() < deadline
            time.sleep(0.002)
    finally:
        proc.send_signal(signal.SIGKILL)  # also when the wait failed: leave no process behind
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    [interrupted] = resume_b.glob("paper/seed_1337/*")  # one folder, named by the run's fingerprint
    kept = sorted(path.name for path in interrupted.iterdir())
    left = sorted(int(name.split("_")[1].removesuffix(".pt")) for name in kept)
    assert left[-1] < 100 and not (tmp_path / "out-b/checkpoints/step_100.pt").exists(), "killed too late"
    shutil.rmtree(tmp_path / "out-b")  # what an orchestrator does with a failed job's outputs

    shutil.copytree(resume_b, tmp_path / "resume-c")  # the same interrupted run, missing an earlier checkpoint
    broken_dir = Path("resume-c") / interrupted.relative_to(resume_b)
    (tmp_path / broken_dir / "step_10.pt").unlink()
    broken = subprocess.run(command("c"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert broken.returncode == 2
    assert broken.stderr.strip().splitlines()[-1] == (
        f"twoscale train: error: {broken_dir}: the interrupted run lacks step_10.pt; delete {broken_dir} to train "
        "from the start")
    assert "Traceback" not in broken.stderr

    # another parameter set for the same recipe and seed, into the same folders, trains from its start: it neither
    # resumes from run b's checkpoints nor deletes them, and leaves none of them among its outputs
    write_params(tmp_path / "other.yaml", steps=30, checkpoint_steps=[15, 30], learning_rate=1e-3)
    (tmp_path / "out-b/checkpoints").mkdir(parents=True)
    for name in kept:  # as a run of run b's parameters would have left them
        shutil.copyfile(interrupted / name, tmp_path / "out-b/checkpoints" / name)
    complete("b", "other.yaml")
    assert sorted(path.name for path in interrupted.iterdir()) == kept
    checkpoints = tmp_path / "out-b/checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir() if p.is_file()) == ["step_15.pt", "step_30.pt"]
    assert sorted(p.name for p in (checkpoints / ".built").glob("*.json")) == ["step_15.pt.json", "step_30.pt.json"]
    other_log = (tmp_path / "b.log").read_text()
    assert "resuming" not in other_log
    assert f"kept: {interrupted.relative_to(tmp_path)}, an interrupted run of other parameters" in other_log

    # what a kill during a write leaves (a checkpoint half-written into the resume state, an output not yet moved
    # into place): the next run removes it, and DVC never sees it (.dvcignore)
    leftovers = [interrupted / ".step_50.pt.k1ll3d_x.tmp", checkpoints / ".step_100.pt.k1ll3d_x.tmp",
                 checkpoints / ".built/.step_100.pt.json.k1ll3d_x.tmp"]
    for leftover in leftovers:
        leftover.write_bytes(b"half")
    complete("b")
    assert not any(leftover.exists() for leftover in leftovers)
    assert f"resuming from step {left[-1]} of an interrupted run" in (tmp_path / "b.log").read_text()
    assert not resume_b.exists() and not (tmp_path / "resume-a").exists()
    steps = ["step_10.pt", "step_100.pt", "step_20.pt", "step_50.pt"]  # the other run's and their records gone
    assert sorted(p.name for p in checkpoints.iterdir() if p.is_file()) == steps
    assert sorted(p.name for p in (checkpoints / ".built").glob("*.json")) == [f"{step}.json" for step in steps]

    final_a = read_checkpoint(tmp_path / "out-a/checkpoints/step_100.pt")
    final_b = read_checkpoint(tmp_path / "out-b/checkpoints/step_100.pt")
    assert differing_tensors(final_b["model"], final_a["model"]) == []
    # equal in bytes too, the checkpoints written after the resume included: DVC sees the same files
    for step in steps:
        assert sha256_file(checkpoints / step) == sha256_file(tmp_path / "out-a/checkpoints" / step), step
    history_a, history_b = (pl.read_parquet(tmp_path / f"out-{r}/history.parquet") for r in "ab")
    assert history_b["step"].to_list() == list(range(1, 101))
    for column in ("train_loss", "val_loss", "lr", "mean_loops"):
        assert history_b[column].to_list() == history_a[column].to_list(), column
    # the steps run before the kill were timed by another process: no timings for them
    assert history_b["seconds"].head(left[-1]).null_count() == left[-1]
    assert history_b["seconds"].tail(100 - left[-1]).null_count() == 0
    losses = history_a["train_loss"]
    assert losses.head(10).mean() > losses.tail(10).mean() + 0.1  # it learned something


def test_a_training_whose_tracking_fails_leaves_no_output_and_keeps_what_it_trained(tmp_path, monkeypatch):
    from mlflow.models import Model

    write_data_dir(tmp_path / "data")
    write_params(tmp_path / "params.yaml", steps=20, checkpoint_steps=[10, 20])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    argv = ["train", "--params", "params.yaml", "--recipe", "paper", "--seed", "1337", "--data-dir", "data",
            "--out-dir", "out", "--resume-dir", "resume", "--log", "train.log"]

    def store_gone(*args, **kwargs):
        raise TwoscaleError("the tracking store went away")

    with monkeypatch.context() as patched:  # the model is logged last, after every output was written
        patched.setattr(Model, "log", store_gone)
        assert main(argv) == 2
    assert not (tmp_path / "out").exists()  # no metrics.json, history or checkpoint that looks finished
    assert sorted(path.name for path in (tmp_path / "resume").rglob("step_*.pt")) == ["step_10.pt", "step_20.pt"]

    assert main(argv) == 0  # nothing left to train: the outputs land from what was kept
    assert "resuming from step 20 of an interrupted run" in (tmp_path / "train.log").read_text()
    landed = sorted(path.name for path in (tmp_path / "out").rglob("*") if path.is_file())
    outputs = ["history.csv", "history.parquet", "metrics.json", "step_10.pt", "step_20.pt"]
    records = [f"{name}{suffix}" for name in outputs for suffix in (".json", ".stat")]  # its record, its hash cache
    assert landed == sorted(outputs + records)
    assert not (tmp_path / "resume").exists()


TIMED = {"tokens_per_s", "model_tflops_per_s", "peak_tflops", "mfu", "mfu_datasheet"}  # metrics.json's clock


def test_training_writes_the_same_outputs_with_tracking_on_and_off(tmp_path, monkeypatch):
    """Tracking observes a stage and is not among its sources (dependencies.OBSERVERS), which holds only if no output
    depends on it: the stage that logs the most (curves, a dataset, a registered model) writes the same checkpoints
    and build records with it off, byte for byte, and the same history and metrics but for their clock readings."""
    write_data_dir(tmp_path / "data")
    write_params(tmp_path / "params.yaml", steps=20, checkpoint_steps=[10, 20])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    for setting in ("on", "off"):
        monkeypatch.setenv(tracking.TRACKING_ENV, setting)
        assert main(["train", "--params", "params.yaml", "--recipe", "paper", "--seed", "1337", "--data-dir", "data",
                     "--out-dir", setting, "--resume-dir", f"resume-{setting}", "--log", f"{setting}.log"]) == 0
        if setting == "on":  # the premise: tracking on logs the run, and off adds nothing to the store
            import mlflow

            client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
            [run] = client.search_runs([client.get_experiment_by_name(run_names.EXPERIMENT).experiment_id])
            assert len(client.get_metric_history(run.info.run_id, "val/loss")) == 2
            assert client.search_model_versions() != []
            logged = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*") if path.is_file())
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")
                  if path.is_file() and not path.is_relative_to(tmp_path / "off") and path.name != "off.log") == logged

    outputs = sorted(path.relative_to(tmp_path / "on") for path in (tmp_path / "on").rglob("*") if path.is_file())
    assert outputs == sorted(path.relative_to(tmp_path / "off") for path in (tmp_path / "off").rglob("*")
                             if path.is_file())
    timed = {"history.csv", "history.parquet", "metrics.json"}
    for path in outputs:
        on, off = tmp_path / "on" / path, tmp_path / "off" / path
        if path.name in timed:
            continue
        if path.suffix == ".json" and path.name.removesuffix(".json") in timed:  # a record: its output's hash
            record_on, record_off = json.loads(on.read_text()), json.loads(off.read_text())
            assert [record["digest"] for record in (record_on, record_off)] == [
                digest_by_hand(record) for record in (record_on, record_off)], path
            untimed = {"sha256": None, "size": None, "digest": None}  # the digest covers the output's hash
            assert {**record_on, **untimed} == {**record_off, **untimed}, path
        elif path.suffix != ".stat":  # a hash cache holds the file's inode and times
            assert on.read_bytes() == off.read_bytes(), path
    history_on, history_off = (pl.read_parquet(tmp_path / setting / "history.parquet") for setting in ("on", "off"))
    assert history_on.drop(WALL_CLOCK).equals(history_off.drop(WALL_CLOCK))
    metrics_on, metrics_off = (json.loads((tmp_path / setting / "metrics.json").read_text())
                               for setting in ("on", "off"))
    assert {key for key in metrics_on if metrics_on[key] != metrics_off[key]} <= TIMED
    assert metrics_on.keys() == metrics_off.keys() and metrics_on["val_loss"] == metrics_off["val_loss"]


@pytest.mark.parametrize("setting", ["maybe", "OFF", ""])
def test_a_tracking_setting_other_than_on_or_off_stops_the_stage_in_one_line(tmp_path, monkeypatch, capsys,
                                                                               setting):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(tracking.TRACKING_ENV, setting)
    write_data_dir(tmp_path / "data")
    write_params(tmp_path / "params.yaml", steps=10, checkpoint_steps=[10])
    assert main(["train", "--params", "params.yaml", "--recipe", "paper", "--seed", "1337", "--data-dir", "data",
                 "--out-dir", "out", "--resume-dir", "resume"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"twoscale train: error: TWOSCALE_TRACKING={setting!r}: set it to on or off")
    assert not (tmp_path / "out").exists()


def test_resume_check_finds_cpu_training_bitwise_reproducible_and_resumed(tmp_path):
    """scripts/resume_check.py, the check docs/running.md reports for CUDA, on the CPU: both pairs equal bit for bit
    (what the kill test above establishes on its own), the killed run resumed from its first checkpoint."""
    write_data_dir(tmp_path / "data")
    write_params(tmp_path / "params.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("TWOSCALE_MLFLOW_PARENT_RUN", "DVC_ROOT")}
    done = subprocess.run([sys.executable, str(ROOT / "scripts/resume_check.py"), "--params", "params.yaml",
                           "--recipe", "paper", "--steps", "60", "--data-dir", "data", "--work", "check"],
                          cwd=tmp_path, env=env | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["b_resumed"] and report["b_killed_with_checkpoints"][0] == "step_30.pt"
    for pair in ("uninterrupted_twice", "killed_and_resumed"):
        assert report[pair]["bitwise_equal"] and report[pair]["max_abs_weight_diff"] == 0.0
