"""Depth phases (docs/methods.md#block-recurrent-surrogates): the similarity matrix on hand-built states, its
additivity over batches, the exact segmentation against brute force, and the unrolled states against the
model's own forward pass."""

from __future__ import annotations

import itertools

import pytest
import torch

from twoscale.analysis.phases import (
    SimilarityAccumulator,
    cosine_similarity_matrix,
    cut_value,
    segment_phases,
)

torch.set_num_threads(1)


def test_similarity_of_identical_orthogonal_and_opposite_states():
    e0, e1 = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 0.5])
    # depth positions 0..3 for two tokens: same direction (scaled), orthogonal, opposite
    states = torch.stack([
        torch.stack([e0, e1]),
        torch.stack([2 * e0, 7 * e1]),
        torch.stack([e1, e0]),
        torch.stack([-e0, -e1]),
    ])  # (D=4, N=2, C=2)
    S = cosine_similarity_matrix(states)
    expected = torch.tensor([
        [1.0, 1.0, 0.0, -1.0],
        [1.0, 1.0, 0.0, -1.0],
        [0.0, 0.0, 1.0, 0.0],
        [-1.0, -1.0, 0.0, 1.0],
    ], dtype=torch.float64)
    torch.testing.assert_close(S, expected)


def test_similarity_is_a_mean_over_tokens_and_additive_over_batches():
    g = torch.Generator().manual_seed(0)
    states = torch.randn(5, 11, 8, generator=g)
    naive = torch.zeros(5, 5, dtype=torch.float64)
    for i in range(5):
        for j in range(5):
            naive[i, j] = torch.cosine_similarity(states[i].double(), states[j].double(), dim=-1).mean()
    torch.testing.assert_close(cosine_similarity_matrix(states), naive)

    acc = SimilarityAccumulator()
    acc.add(states[:, :4])
    acc.add(states[:, 4:5])
    acc.add(states[:, 5:].reshape(5, 2, 3, 8))  # (D, B, T, C) is flattened to tokens
    assert acc.n_tokens == 11
    torch.testing.assert_close(acc.matrix(), naive)
    with pytest.raises(ValueError):
        SimilarityAccumulator().matrix()


def compositions(D: int, n: int):
    """Every split of 0..D-1 into n contiguous non-empty segments."""
    for cuts in itertools.combinations(range(1, D), n - 1):
        bounds = (0, *cuts, D)
        yield [(bounds[i], bounds[i + 1] - 1) for i in range(n)]


def test_segment_phases_equals_brute_force_on_random_matrices():
    g = torch.Generator().manual_seed(1)
    for trial in range(60):
        D = int(torch.randint(1, 9, (1,), generator=g))
        if trial % 2:
            S = cosine_similarity_matrix(torch.randn(D, 3, 4, generator=g).cumsum(0))  # a drifting stream
        else:
            S = torch.rand(D, D, generator=g, dtype=torch.float64) * 2 - 1  # anything, even asymmetric
        for n in range(1, D + 1):
            found = segment_phases(S, n)
            assert len(found) == n
            best = max(cut_value(S, c) for c in compositions(D, n))
            assert cut_value(S, found) == pytest.approx(best, abs=1e-9), (D, n)


def test_segment_phases_recovers_obvious_blocks():
    g = torch.Generator().manual_seed(2)
    basis = torch.linalg.qr(torch.randn(16, 3, generator=g))[0].T  # 3 orthonormal directions
    lengths = (2, 3, 4)
    states = torch.cat([basis[b].expand(L, 6, 16) for b, L in enumerate(lengths)])  # (D=9, N=6, C=16)
    states = states + 0.01 * torch.randn(states.shape, generator=g)
    S = cosine_similarity_matrix(states)
    assert segment_phases(S, 3) == [(0, 1), (2, 4), (5, 8)]
    assert segment_phases(S, 1) == [(0, 8)]
    assert segment_phases(S, 9) == [(i, i) for i in range(9)]


def test_cut_value_by_hand_and_validation():
    S = torch.tensor([[1.0, 0.5, -1.0], [0.5, 1.0, 0.0], [-1.0, 0.0, 1.0]])
    assert cut_value(S, [(0, 2)]) == 0.0
    assert cut_value(S, [(0, 1), (2, 2)]) == pytest.approx(2 * (2.0 + 1.0))  # pairs (0,2), (1,2), both orders
    for bad in ([(0, 0), (2, 2)], [(1, 2)], [(0, 1)], []):
        with pytest.raises(ValueError):
            cut_value(S, bad)
    for n in (0, 4):
        with pytest.raises(ValueError):
            segment_phases(S, n)
    with pytest.raises(ValueError):
        segment_phases(S[:2], 1)
    with pytest.raises(ValueError):
        segment_phases(torch.full((2, 2), float("nan")), 1)
