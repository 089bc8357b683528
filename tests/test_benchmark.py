"""The benchmark: its model-FLOPs count of a training step against PyTorch's own FLOP counter on real steps, and its
training-only run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode

from twoscale.config.parameter_files import load_params, read_raw
from twoscale.models.looped_gpt import ModelConfig
from twoscale.training.flops import training_step_flops
from twoscale.training.trainer import build_state, train_step

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("injection", ["none", "add", "adapter"])
@pytest.mark.parametrize("loops", [[6, 2], [1, 9]])
def test_training_step_flops_match_torch_flop_counter(injection, loops):
    torch.manual_seed(0)
    train = load_params(ROOT / "configs/smoke.yaml").train  # backprop depth 4: some steps run without gradients
    config = ModelConfig(vocab_size=50, n_layer=4, n_head=2, n_embd=16, block_size=8, dropout=0.0, bias=False,
                         groups=((1, 1), (2, 2)), injection=injection)
    state = build_state(config, train, 0, torch.device("cpu"))
    x, y = torch.randint(0, 50, (3, 8)), torch.randint(0, 50, (3, 8))
    with FlopCounterMode(display=False) as counter:  # bf16 on the CPU: attention as plain matmuls, all counted
        train_step(state, x, y, loops, train, torch.device("cpu"), torch.bfloat16)
    assert training_step_flops(config, loops, train.loops.backprop_depth, 3) == counter.get_total_flops()


def test_training_step_flops_by_hand():
    # 3 layers, the middle one looped 3 times, gradients through 2; C = 4, T = 2, V = 10, batch 1
    config = ModelConfig(vocab_size=10, n_layer=3, n_head=1, n_embd=4, block_size=2, dropout=0.0, bias=False,
                         groups=((1, 1),))
    block = 2 * 2 * 12 * 16 + 4 * 1 * 2 * 2 * 4  # linear layers on 2 tokens; attention scores and mixing
    head = 2 * 2 * 4 * 10
    forward = head + block + 3 * block + block
    with_grad = head + block + 2 * block + block
    assert training_step_flops(config, [3], 2, 1) == forward + 2 * with_grad


def test_benchmark_training_only_needs_the_token_arrays_alone(tmp_path):
    """No checkpoint, sweep or sample result exists: --training-only times every recipe's training in both
    precisions and nothing else."""
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "train.npy", np.random.default_rng(0).integers(0, 300, 20_000, dtype=np.int64))
    (data / "stats.json").write_text(json.dumps({"vocab_size": 300, "unigram_val_loss": 5.0}))
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["runtime"].update(device="cpu", threads=1)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    done = subprocess.run([sys.executable, "-m", "twoscale", "benchmark", "--params", "params.yaml",
                           "--training-only", "--data-dir", "data", "--training-steps", "1", "--repeats", "1",
                           "--out", "bench.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "bench.json").read_text())
    recipes = load_params(tmp_path / "params.yaml").recipes
    assert [(row["recipe"], row["precision"]) for row in report["training"]] == [
        (recipe, precision) for recipe in recipes for precision in ("fp32", "bf16")]
    assert report["step_costs"] == report["latency"] == report["sampler"] == []
    assert "training throughput" in done.stdout and "exit decision" not in done.stdout
