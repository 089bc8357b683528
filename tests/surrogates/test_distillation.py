"""Distillation into a block-recurrent surrogate: the annealing schedule and learning rate by hand, both stages'
losses against hand-written ones, that distillation lowers the loss, the surrogate's file, and the control."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from twoscale.config.errors import TwoscaleError
from twoscale.config.params import LoopSchedule, TrainParams
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.surrogates.distillation import (
    cosine_lr,
    distill,
    load_surrogate,
    phase_loss,
    rollout_loss,
    save_surrogate,
    teacher_forcing_weight,
    teacher_states,
    train_plain_gpt,
)
from twoscale.surrogates.model import RaptorSurrogate, SurrogateConfig
from twoscale.training.trainer import load_model

torch.set_num_threads(1)
CPU = torch.device("cpu")


def plain(n_layer: int = 4) -> ModelConfig:
    return ModelConfig(vocab_size=31, n_layer=n_layer, n_head=2, n_embd=16, block_size=8, dropout=0.0, bias=False,
                       groups=())


def teacher_and_surrogate(phases=((0, 1), (2, 3))) -> tuple[LoopedGPT, RaptorSurrogate]:
    torch.manual_seed(0)
    teacher = LoopedGPT(plain()).eval().requires_grad_(False)
    return teacher, RaptorSurrogate(SurrogateConfig(teacher.config, phases, 8, 0.1))


def tokens(n: int = 400) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 31, n).astype(np.uint16)


@pytest.mark.parametrize("step, expected", [(0, 1.0), (5, 0.8), (20, 0.2), (25, 0.0), (60, 0.0), (99, 0.0)])
def test_teacher_forcing_falls_from_one_to_zero_over_the_first_quarter(step, expected):
    assert teacher_forcing_weight(step, 100, 0.25) == pytest.approx(expected)


def test_without_annealing_there_is_no_teacher_forcing():
    assert teacher_forcing_weight(0, 100, 0.0) == 0.0
    assert teacher_forcing_weight(0, 100, 1.0) == 1.0 and teacher_forcing_weight(50, 100, 1.0) == 0.5


@pytest.mark.parametrize("step, expected", [(0, 1.0), (5, 0.55), (10, 0.1)])
def test_cosine_learning_rate_from_the_peak_to_a_tenth(step, expected):
    assert cosine_lr(step, 11, 1.0) == pytest.approx(expected)


def test_phase_loss_mixes_one_step_and_rollout_mse_per_phase():
    teacher, surrogate = teacher_and_surrogate()
    states = teacher_states(teacher, torch.from_numpy(tokens(16).astype(np.int64)).view(2, 8))
    with torch.no_grad():
        b0, b1 = surrogate.blocks
        one_step = (sum(F.mse_loss(b0(states[i], i + 1), states[i + 1]) for i in (0, 1)) / 2
                    + sum(F.mse_loss(b1(states[i], i + 1), states[i + 1]) for i in (2, 3)) / 2)
        x0, x2 = b0(states[0], 1), b1(states[2], 3)
        rollout = ((F.mse_loss(x0, states[1]) + F.mse_loss(b0(x0, 2), states[2])) / 2
                   + (F.mse_loss(x2, states[3]) + F.mse_loss(b1(x2, 4), states[4])) / 2)
        assert phase_loss(surrogate, states, 1.0).item() == pytest.approx(one_step.item(), rel=1e-6)
        assert phase_loss(surrogate, states, 0.0).item() == pytest.approx(rollout.item(), rel=1e-6)
        assert phase_loss(surrogate, states, 0.25).item() == pytest.approx(
            0.25 * one_step.item() + 0.75 * rollout.item(), rel=1e-6)
        x = states[0]
        full = []
        for layer, block in enumerate((b0, b0, b1, b1)):
            x = block(x, layer + 1)
            full.append(F.mse_loss(x, states[layer + 1]))
        assert rollout_loss(surrogate, states).item() == pytest.approx(sum(full).item() / 4, rel=1e-6)


def test_distillation_lowers_the_rollout_error_and_leaves_the_teacher_alone():
    teacher, surrogate = teacher_and_surrogate()
    frozen = {k: v.clone() for k, v in teacher.state_dict().items()}
    ids = tokens()
    probe = torch.from_numpy(ids[:64].astype(np.int64)).view(8, 8)
    with torch.no_grad():
        before = rollout_loss(surrogate, teacher_states(teacher, probe)).item()
    history = distill(surrogate, teacher, ids, 30, 30, 8, 3e-3, 0.25, torch.Generator().manual_seed(0), CPU)
    with torch.no_grad():
        after = rollout_loss(surrogate, teacher_states(teacher, probe)).item()
    assert after < 0.5 * before
    assert [row["stage"] for row in history] == ["phases"] * 30 + ["rollout"] * 30
    assert history[0]["teacher_forcing"] == 1.0 and history[8]["teacher_forcing"] == 0.0
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in frozen.items())
    assert not surrogate.training


def test_surrogate_file_round_trip_and_errors(tmp_path):
    teacher, surrogate = teacher_and_surrogate()
    save_surrogate(tmp_path / "s.pt", surrogate, {"teacher": "plain", "seed": 3})
    save_surrogate(tmp_path / "again" / "other.pt", surrogate, {"teacher": "plain", "seed": 3})
    assert (tmp_path / "s.pt").read_bytes() == (tmp_path / "again" / "other.pt").read_bytes()  # no file names inside
    loaded, meta = load_surrogate(tmp_path / "s.pt")
    assert meta == {"teacher": "plain", "seed": 3} and loaded.config == surrogate.config
    x = teacher.embed(torch.zeros(1, 5, dtype=torch.long))
    with torch.no_grad():
        torch.testing.assert_close(loaded.rollout(x)[-1], surrogate.eval().rollout(x)[-1])
    with pytest.raises(TwoscaleError, match="not found"):
        load_surrogate(tmp_path / "missing.pt")
    torch.save({"format": 99}, tmp_path / "other.pt")
    with pytest.raises(TwoscaleError, match="not a twoscale surrogate"):
        load_surrogate(tmp_path / "other.pt")


def test_the_control_is_a_plain_gpt_trained_and_saved_after_its_last_step(tmp_path):
    train = TrainParams(steps=6, batch_size=4, learning_rate=1e-2, min_lr_ratio=0.1, warmup_steps=1,
                        weight_decay=0.1, beta1=0.9, beta2=0.95, grad_clip=1.0,
                        loops=LoopSchedule(distribution="fixed", mean=1.0, sigma=1.0, max=1, backprop_depth=1,
                                           straight_through=False),
                        eval_loops=1, eval_every=3, eval_batches=1, checkpoint_steps=[3, 6])
    ids = tokens()
    model = train_plain_gpt(plain(n_layer=2), train, 0, ids, ids, CPU, torch.float32, tmp_path / "k_2/control.pt")
    loaded, meta = load_model(tmp_path / "k_2/control.pt")
    assert meta["step"] == 6 and loaded.config.n_layer == 2 and loaded.n_groups == 0
    assert sorted(p.name for p in (tmp_path / "k_2").iterdir()) == ["control.pt"]  # nothing else left behind
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    assert math.isfinite(meta["history"][-1]["train_loss"])
