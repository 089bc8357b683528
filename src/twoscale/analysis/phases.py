"""Phases of the unrolled depth, as in the block-recurrent hypothesis
(docs/methods.md#block-recurrent-surrogates).

Take the residual stream at every depth position of the unrolled network (embedding, then after every layer
application, loops included: `ModelOutput.depth_states`), average the cosine similarity between positions over
tokens, and split depth into contiguous phases that maximise the cosine distance *between* phases. The split is
exact: dynamic programming over contiguous segments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

Tensor = torch.Tensor


# --- similarity ---------------------------------------------------------------------------------------------


def _similarity_sum(states: Tensor) -> Tensor:
    """Σ_n cos(state_i,n, state_j,n) for all depth pairs (D, D), float64. A zero state counts as cosine 0."""
    u = F.normalize(states.double(), dim=-1)
    # summing the per-token dot products over tokens = one dot product over the flattened (N, C)
    flat = u.reshape(u.shape[0], -1)
    return flat @ flat.T


def cosine_similarity_matrix(states: Tensor) -> Tensor:
    """S[i, j] = mean over tokens of cos(state_i, state_j); states (D, N, C) -> (D, D), float64."""
    return _similarity_sum(states) / states.shape[1]


class SimilarityAccumulator:
    """`cosine_similarity_matrix` over many batches: sums per-token cosines, divides by the token count at
    the end. Memory O(D²)."""

    def __init__(self) -> None:
        self.total: Tensor | None = None
        self.n_tokens = 0

    def add(self, states: Tensor) -> None:
        """states (D, N, C), or (D, B, T, C) which is flattened to tokens."""
        states = states.reshape(states.shape[0], -1, states.shape[-1])
        batch = _similarity_sum(states).cpu()
        self.total = batch if self.total is None else self.total + batch
        self.n_tokens += states.shape[1]

    def matrix(self) -> Tensor:
        if self.total is None:
            raise ValueError("no states added")
        return self.total / self.n_tokens


# --- phases -------------------------------------------------------------------------------------------------


def _check_segments(D: int, segments: Sequence[tuple[int, int]]) -> None:
    starts = [first for first, _ in segments]
    ends = [last for _, last in segments]
    if not segments or starts[0] != 0 or ends[-1] != D - 1 or any(
        first > last for first, last in segments
    ) or any(e + 1 != s for e, s in zip(ends, starts[1:])):
        raise ValueError(f"segments {list(segments)} do not tile depth positions 0..{D - 1} contiguously")


def cut_value(similarity: Tensor, segments: Sequence[tuple[int, int]]) -> float:
    """Σ (1 − S[i, j]) over ordered pairs (i, j) in different segments (each unordered pair twice if S is
    symmetric).

    segments: inclusive (first, last) ranges tiling 0..D−1 in order."""
    dist = 1.0 - similarity.double()
    D = dist.shape[0]
    _check_segments(D, segments)
    label = torch.empty(D, dtype=torch.long)
    for s, (first, last) in enumerate(segments):
        label[first : last + 1] = s
    across = label[:, None] != label[None, :]
    return float(dist[across].sum())


def segment_phases(similarity: Tensor, n_phases: int) -> list[tuple[int, int]]:
    """Split depth 0..D−1 into `n_phases` contiguous phases maximising `cut_value`; inclusive (first, last)
    ranges.

    Max cut = total distance − within-phase distance, so minimise Σ_phases Σ_{i,j in phase} (1 − S[i, j]) by
    dynamic programming over where the last phase starts, with 2-D prefix sums: O(n_phases · D²). Ties are
    broken deterministically (the earliest start of each last phase)."""
    if similarity.dim() != 2 or similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"similarity must be square (D, D), got {tuple(similarity.shape)}")
    D = similarity.shape[0]
    if not 1 <= n_phases <= D:
        raise ValueError(f"n_phases must be in [1, {D}], got {n_phases}")
    dist = 1.0 - similarity.double().cpu().numpy()
    if not np.isfinite(dist).all():
        raise ValueError("similarity has non-finite entries")
    P = np.zeros((D + 1, D + 1))
    P[1:, 1:] = dist.cumsum(0).cumsum(1)
    a = np.arange(D + 1)

    def within(starts: np.ndarray, end: int) -> np.ndarray:
        """Within-distance of positions starts..end−1, for each start (half-open)."""
        return P[end, end] - P[starts, end] - P[end, starts] + P[starts, starts]

    # cost[m, j]: least within-distance splitting positions 0..j−1 into m phases
    # back[m, j]: where the last of those m phases starts
    cost = np.full((n_phases + 1, D + 1), np.inf)
    back = np.zeros((n_phases + 1, D + 1), dtype=int)
    cost[0, 0] = 0.0
    for m in range(1, n_phases + 1):
        for j in range(m, D + 1):
            starts = a[m - 1 : j]
            total = cost[m - 1, starts] + within(starts, j)
            best = int(np.argmin(total))
            cost[m, j], back[m, j] = total[best], starts[best]
    segments, end = [], D
    for m in range(n_phases, 0, -1):
        start = int(back[m, end])
        segments.append((start, end - 1))
        end = start
    return segments[::-1]
