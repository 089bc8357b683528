"""The dynamics of depth on hand-built states: known angles, known update ranks, additivity over batches; and the
two summaries per sequence that the teacher's phases are built from."""

from __future__ import annotations

import math

import pytest
import torch

from twoscale.analysis.phases import SimilarityAccumulator, segment_phases
from twoscale.surrogates.dynamics import DepthDynamics, sequence_summaries


def rotating_states(angle: float, depth: int, norms=(1.0, 3.0)) -> torch.Tensor:
    """(depth, 2 tokens, 3): each token turns by `angle` per position in the x-y plane, at its own norm."""
    turns = torch.arange(depth, dtype=torch.float64) * angle
    unit = torch.stack([turns.cos(), turns.sin(), torch.zeros(depth, dtype=torch.float64)], dim=-1)
    return torch.stack([unit * n for n in norms], dim=1)


def test_angular_speed_and_convergence_of_a_steady_rotation():
    dynamics = DepthDynamics()
    dynamics.add(rotating_states(0.3, depth=5))
    result = dynamics.result()
    assert result["angular_speed"] == pytest.approx([0.3] * 4, abs=1e-12)
    assert result["convergence"] == pytest.approx([math.cos(0.3 * (4 - i)) for i in range(5)], abs=1e-12)


def test_stable_rank_is_one_when_every_token_moves_the_same_way():
    same = DepthDynamics()
    same.add(rotating_states(0.3, depth=3))  # both tokens take the same unit-sphere step
    assert same.result()["stable_rank"] == pytest.approx([1.0, 1.0], abs=1e-9)


def test_stable_rank_of_four_tokens_leaving_one_direction_along_their_own_axes():
    """x = e0 -> e0 + e_i/2 for token i: on the unit sphere every update is a e0 + b e_i with a = 1/√1.25 − 1 and
    b = 0.5/√1.25, so U Uᵀ = a² 11ᵀ + b² I has eigenvalues b² + 4a² (once) and b² (three times), and the stable
    rank is (4a² + 4b²) / (4a² + b²) ≈ 3.45."""
    start = torch.zeros(4, 5, dtype=torch.float64)
    start[:, 0] = 1.0
    end = start.clone()
    end[torch.arange(4), torch.arange(1, 5)] = 0.5
    dynamics = DepthDynamics()
    dynamics.add(torch.stack([start, end]))
    a, b = 1 / math.sqrt(1.25) - 1, 0.5 / math.sqrt(1.25)
    assert dynamics.result()["stable_rank"] == pytest.approx([(4 * a**2 + 4 * b**2) / (4 * a**2 + b**2)], rel=1e-9)


def test_a_layer_that_moves_nothing_has_stable_rank_zero_and_speed_zero():
    states = torch.ones(3, 4, 6, dtype=torch.float64)
    dynamics = DepthDynamics()
    dynamics.add(states)
    result = dynamics.result()
    assert result["stable_rank"] == [0.0, 0.0] and result["angular_speed"] == pytest.approx([0.0, 0.0], abs=1e-6)


def test_batches_add_up_to_the_whole():
    states = torch.randn(4, 6, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    whole, parts = DepthDynamics(), DepthDynamics()
    whole.add(states)
    parts.add(states[:, :2])
    parts.add(states[:, 2:])
    for name, values in whole.result().items():
        assert parts.result()[name] == pytest.approx(values, rel=1e-10), name


def test_result_before_any_states_is_an_error():
    with pytest.raises(ValueError, match="no states"):
        DepthDynamics().result()


def test_sequence_summaries_are_the_mean_and_the_last_token():
    states = torch.arange(2 * 3 * 4 * 2, dtype=torch.float64).reshape(2, 3, 4, 2)
    summaries = sequence_summaries(states)
    assert summaries.shape == (2, 6, 2)
    torch.testing.assert_close(summaries[1, 1], states[1, 1].mean(0))
    torch.testing.assert_close(summaries[0, 3 + 2], states[0, 2, -1])


@pytest.mark.parametrize("k, expected", [(1, [(0, 7)]), (2, [(0, 2), (3, 7)]), (3, [(0, 2), (3, 5), (6, 7)])])
def test_phases_from_summaries_of_constructed_layer_blocks(k, expected):
    """Eight layers whose outputs point along three directions (layers 0-2, 3-5, 6-7), plus noise: max-cut on the
    summaries' cosine distances finds those blocks."""
    generator = torch.Generator().manual_seed(3)
    axes = torch.eye(16, dtype=torch.float64)[[0, 5, 10]]
    block_of_layer = [0, 0, 0, 1, 1, 1, 2, 2]
    states = torch.stack([axes[b].expand(3, 7, 16) for b in block_of_layer])
    states = states + 0.05 * torch.randn(states.shape, generator=generator, dtype=torch.float64)
    similarity = SimilarityAccumulator()
    similarity.add(sequence_summaries(states))
    assert segment_phases(similarity.matrix(), k) == expected
