"""The dynamics of depth (docs/methods.md#block-recurrent-surrogates), on unit-normalised residual states
x̂_l = x_l / ‖x_l‖.

For states at depth positions l = 0..D-1 of the same tokens:
  directional convergence  cos(x̂_l, x̂_{D-1}), mean over tokens: how close the direction already is to the last
  angular speed            arccos(x̂_l · x̂_{l+1}) (radians), mean over tokens: how far one layer turns the state
  stable rank              ‖U‖_F² / ‖U‖_2² of the update field U_l = x̂_{l+1} − x̂_l (tokens × C): how many
                           directions the layer's updates span across tokens (1: every token moves the same way)
and, for the phases, two summaries per sequence (its mean token state and its last token state).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


class DepthDynamics:
    """The three measures over many batches. Means are running sums; the stable rank comes from the update field's
    Gram matrix UᵀU (C × C), summed over batches: ‖U‖_F² is its trace and ‖U‖_2² its largest eigenvalue."""

    def __init__(self) -> None:
        self.convergence: Tensor | None = None
        self.angle: Tensor | None = None
        self.gram: Tensor | None = None
        self.tokens = 0

    def add(self, states: Tensor) -> None:
        """states (D, ..., C): the same tokens at every depth position."""
        u = F.normalize(states.double(), dim=-1).reshape(states.shape[0], -1, states.shape[-1])
        convergence = (u * u[-1:]).sum(-1).sum(-1)
        angle = (u[:-1] * u[1:]).sum(-1).clamp(-1.0, 1.0).arccos().sum(-1)
        update = u[1:] - u[:-1]
        gram = update.transpose(1, 2) @ update
        if self.gram is None:
            self.convergence, self.angle, self.gram = convergence, angle, gram
        else:
            self.convergence, self.angle, self.gram = (self.convergence + convergence, self.angle + angle,
                                                       self.gram + gram)
        self.tokens += u.shape[1]

    def result(self) -> dict[str, list[float]]:
        """convergence (D values, the last is 1); angular_speed and stable_rank (D-1 values, one per step
        l -> l+1; a step that moves no token has stable rank 0)."""
        if self.gram is None:
            raise ValueError("no states added")
        top = torch.linalg.eigvalsh(self.gram)[:, -1]
        trace = self.gram.diagonal(dim1=1, dim2=2).sum(-1)
        rank = torch.where(top > 0, trace / top.clamp_min(1e-300), torch.zeros_like(top))
        return {"convergence": (self.convergence / self.tokens).tolist(),
                "angular_speed": (self.angle / self.tokens).tolist(), "stable_rank": rank.tolist()}


def sequence_summaries(states: Tensor) -> Tensor:
    """(D, B, T, C) -> (D, 2B, C): every sequence's mean token state and its last token state (Raptor's two
    summaries per input, for a causal language model)."""
    return torch.cat([states.mean(dim=2), states[:, :, -1]], dim=1)
