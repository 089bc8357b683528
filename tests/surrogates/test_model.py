"""The Raptor surrogate: with one block per teacher layer, the teacher's weights and unit gains it is the teacher;
fresh, it starts near the identity map; phases must tile the layers."""

from __future__ import annotations

import pytest
import torch

from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.surrogates.model import RaptorSurrogate, SurrogateConfig

torch.set_num_threads(1)


def plain_config(n_layer: int = 4, norm: str = "pre", groups=()) -> ModelConfig:
    return ModelConfig(vocab_size=29, n_layer=n_layer, n_head=2, n_embd=16, block_size=10, dropout=0.0, bias=True,
                       groups=groups, norm=norm)


def teacher_and_tokens(n_layer: int = 4) -> tuple[LoopedGPT, torch.Tensor]:
    torch.manual_seed(0)
    teacher = LoopedGPT(plain_config(n_layer)).double().eval()
    return teacher, torch.randint(0, 29, (2, 9), generator=torch.Generator().manual_seed(1))


def test_one_block_per_layer_with_the_teachers_weights_and_unit_gains_is_the_teacher():
    teacher, idx = teacher_and_tokens()
    L = teacher.config.n_layer
    surrogate = RaptorSurrogate(SurrogateConfig(teacher.config, tuple((i, i) for i in range(L)), 8, 1.0)).double()
    for block, layer in zip(surrogate.blocks, teacher.blocks, strict=True):
        block.block.load_state_dict(layer.state_dict())
        gains = block.gains(3, torch.zeros(1))
        assert torch.equal(gains, torch.ones(3, dtype=gains.dtype))  # the gains start at exactly 1
    with torch.no_grad():
        expected = teacher(idx, [], record_trajectories=True)
        states = surrogate.rollout(expected.depth_states[0])
        logits = teacher.lm_head(teacher.ln_f(states[-1]))
    assert len(states) == L
    for got, want in zip(states, expected.depth_states[1:], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(logits, expected.logits.double(), rtol=0, atol=1e-10)


def test_blocks_are_shared_within_a_phase_and_read_the_layer_index():
    teacher, idx = teacher_and_tokens(n_layer=5)
    surrogate = RaptorSurrogate(SurrogateConfig(teacher.config, ((0, 1), (2, 4)), 8, 0.1)).double()
    assert surrogate.layer_blocks == [0, 0, 1, 1, 1]
    assert sum(p.numel() for p in surrogate.parameters()) == 2 * sum(
        p.numel() for p in surrogate.blocks[0].parameters())
    with torch.no_grad():
        for p in surrogate.blocks[1].gains.parameters():  # gains that differ by layer
            p.normal_()
        x = teacher.embed(idx).double()
        by_hand = surrogate.blocks[0](surrogate.blocks[0](x, 1), 2)
        for layer in range(2, 5):
            by_hand = surrogate.blocks[1](by_hand, layer + 1)
        torch.testing.assert_close(surrogate.rollout(x)[-1], by_hand)
        assert not torch.allclose(surrogate.blocks[1](x, 3), surrogate.blocks[1](x, 4))


def test_a_fresh_surrogate_starts_near_the_identity_map():
    teacher, idx = teacher_and_tokens()
    surrogate = RaptorSurrogate(SurrogateConfig(teacher.config, ((0, 3),), 8, 1e-5)).double()
    with torch.no_grad():
        x = teacher.embed(idx).double()
        change = (surrogate.rollout(x)[-1] - x).norm() / x.norm()
    assert 0 < change < 1e-3


@pytest.mark.parametrize("phases", [((0, 1), (3, 3)), ((1, 3),), ((0, 1), (2, 4)), ((0, 2), (2, 3)), ()])
def test_phases_that_do_not_tile_the_layers_are_refused(phases):
    with pytest.raises(ValueError, match="do not tile"):
        SurrogateConfig(plain_config(), phases, 8, 1e-5)


def test_the_teacher_must_be_a_plain_pre_ln_gpt():
    with pytest.raises(ValueError, match="no looped groups"):
        SurrogateConfig(plain_config(groups=((1, 2),)), ((0, 3),), 8, 1e-5)
    with pytest.raises(ValueError, match="pre-LN"):
        SurrogateConfig(plain_config(norm="sandwich"), ((0, 3),), 8, 1e-5)


def test_config_round_trips_through_a_dict():
    config = SurrogateConfig(plain_config(), ((0, 1), (2, 3)), 8, 1e-5)
    assert SurrogateConfig.from_dict(config.to_dict()) == config
