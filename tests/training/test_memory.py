"""The memory floor of a training run, against counts made by hand, and the one-line refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.config.parameter_files import load_params
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.training import memory

ROOT = Path(__file__).resolve().parents[2]


def plain(n_embd: int, n_layer: int = 1) -> ModelConfig:
    return ModelConfig(vocab_size=50, n_layer=n_layer, n_head=2, n_embd=n_embd, block_size=8, dropout=0.0,
                       bias=True, groups=())


def schedule(mean: float, backprop_depth: int, batch_size: int = 4):
    train = load_params(ROOT / "params.yaml").train
    loops = train.loops.model_copy(update={"mean": mean, "backprop_depth": backprop_depth})
    return train.model_copy(update={"loops": loops, "batch_size": batch_size})


def test_parameters_counted_without_allocating_match_gpt2_by_hand():
    d, vocab, block = 16, 50, 8
    per_layer = 12 * d * d + 13 * d  # attention (4 d^2 + 4 d), MLP (8 d^2 + 5 d), two LayerNorms (4 d)
    by_hand = vocab * d + block * d + 2 * per_layer + 2 * d  # tied head, final LayerNorm
    config = plain(d, n_layer=2)
    assert memory.parameter_count(config) == by_hand
    assert by_hand == sum(p.numel() for p in LoopedGPT(config).parameters())


def test_backpropagated_layers_count_the_loops_up_to_the_backprop_depth():
    looped = ModelConfig(vocab_size=40, n_layer=6, n_head=2, n_embd=16, block_size=16, dropout=0.0, bias=True,
                         groups=((1, 1), (2, 3), (4, 4)))
    assert memory.backpropagated_layers(looped, schedule(mean=10, backprop_depth=2)) == 2 + 4 * 2
    assert memory.backpropagated_layers(looped, schedule(mean=1, backprop_depth=8)) == 2 + 4 * 1
    assert memory.backpropagated_layers(plain(16, n_layer=3), schedule(mean=10, backprop_depth=8)) == 3


def test_the_floor_adds_optimizer_state_and_activations():
    config, train = plain(16), schedule(mean=1, backprop_depth=1, batch_size=4)
    tokens = 4 * 8
    activations = 34 * tokens * 16 + 5 * tokens * 8 * 2
    assert memory.training_bytes(config, train) == 16 * memory.parameter_count(config) + activations


def test_a_run_is_refused_one_byte_past_its_floor(monkeypatch):
    config, train = plain(16), schedule(mean=1, backprop_depth=1, batch_size=4)
    floor = 16 * 4240 + 19_968  # AdamW's 16 bytes per parameter (4,240 counted above) and one layer's activations
    monkeypatch.setattr(memory, "available_bytes", lambda device: floor)
    memory.check_fits(config, train, torch.device("cpu"))
    monkeypatch.setattr(memory, "available_bytes", lambda device: floor - 1)
    with pytest.raises(TwoscaleError) as info:
        memory.check_fits(config, train, torch.device("cpu"))
    assert str(info.value).startswith("training needs at least 0.0 GiB (model, gradients, AdamW state and one "
                                      "batch's activations) but cpu has 0.0 GiB free")


def test_a_model_too_big_for_the_machine_is_refused_in_one_line():
    with pytest.raises(TwoscaleError) as info:
        memory.check_fits(plain(2**20), schedule(mean=1, backprop_depth=1), torch.device("cpu"))
    message = str(info.value)
    d, tokens = 2**20, 4 * 8
    parameters = 50 * d + 8 * d + 12 * d * d + 13 * d + 2 * d
    gib = (16 * parameters + 34 * tokens * d + 5 * tokens * 8 * 2) / 2**30
    assert message.startswith(f"training needs at least {gib:.1f} GiB") and "\n" not in message
