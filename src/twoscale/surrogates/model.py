"""Block-recurrent surrogate of a plain (non-looped) GPT: Raptor (docs/methods.md#block-recurrent-surrogates).

The teacher's L layers are split into k contiguous phases. The surrogate keeps one shared block per phase and
applies it once for every teacher layer of that phase, starting from the teacher's embedding output:

    x_0 = teacher embedding,   x_l = block_{phase(l)}(x_{l-1}, l)   for l = 1..L

Each block is the teacher's pre-LN block with LayerScale on both branches, and a small depth-conditioning MLP of the
raw layer index l gives three gains: on the attention branch, on the MLP branch and on the block's whole update

    h = x + g_attn(l) γ_attn ⊙ Attn(LN1(x)),   h' = h + g_mlp(l) γ_mlp ⊙ MLP(LN2(h)),   out = x + g_out(l) (h' − x)

With unit gains and unit LayerScale a block is exactly the teacher's block. The gains start at 1 (the MLP's output
layer starts at zero) and LayerScale small, so a fresh block starts near the identity map. The surrogate reads
logits through the teacher's frozen final norm and LM head (`models.looped_gpt.LoopedGPT.ln_f`, `.lm_head`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from twoscale.models.looped_gpt import Block, ModelConfig, init_gpt2_weights

Tensor = torch.Tensor


@dataclass(frozen=True)
class SurrogateConfig:
    teacher: ModelConfig  # the plain GPT whose layers the surrogate replaces (its block architecture)
    phases: tuple[tuple[int, int], ...]  # inclusive 0-based layer ranges tiling 0..L-1, one shared block each
    depth_hidden: int  # width of the depth-conditioning MLP
    layerscale_init: float  # initial LayerScale of both branches (Raptor: 1e-5)

    def __post_init__(self) -> None:
        check_phases(self.phases, self.teacher.n_layer)
        if self.teacher.groups:
            raise ValueError("the teacher of a surrogate is a plain GPT (no looped groups)")
        if self.teacher.norm != "pre":
            raise ValueError(f"the surrogate's blocks are pre-LN; the teacher has norm {self.teacher.norm!r}")

    def layer_blocks(self) -> list[int]:
        """Which block computes each teacher layer 0..L-1."""
        return [b for b, (first, last) in enumerate(self.phases) for _ in range(first, last + 1)]

    def to_dict(self) -> dict:
        return {**asdict(self), "teacher": self.teacher.to_dict(), "phases": [list(p) for p in self.phases]}

    @classmethod
    def from_dict(cls, raw: dict) -> SurrogateConfig:
        return cls(teacher=ModelConfig.from_dict(raw["teacher"]), phases=tuple(tuple(p) for p in raw["phases"]),
                   depth_hidden=raw["depth_hidden"], layerscale_init=raw["layerscale_init"])


def check_phases(phases: Sequence[tuple[int, int]], n_layer: int) -> None:
    """Phases must tile layers 0..n_layer-1 in order."""
    expected = 0
    for first, last in phases:
        if first != expected or last < first:
            break
        expected = last + 1
    else:
        if expected == n_layer and phases:
            return
    raise ValueError(f"phases {[tuple(p) for p in phases]} do not tile layers 0..{n_layer - 1} in order")


class DepthGains(nn.Module):
    """g(l) = 1 + MLP(l): three gains (attention branch, MLP branch, block output) from the raw layer index."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = nn.Linear(1, hidden)
        self.out = nn.Linear(hidden, 3)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, layer: int, like: Tensor) -> Tensor:
        index = torch.tensor([[float(layer)]], device=like.device, dtype=self.hidden.weight.dtype)
        return 1.0 + self.out(F.silu(self.hidden(index)))[0]


class SurrogateBlock(nn.Module):
    def __init__(self, teacher: ModelConfig, depth_hidden: int, layerscale_init: float):
        super().__init__()
        self.block = Block(teacher)
        self.attn_scale = nn.Parameter(torch.full((teacher.n_embd,), layerscale_init))
        self.mlp_scale = nn.Parameter(torch.full((teacher.n_embd,), layerscale_init))
        self.gains = DepthGains(depth_hidden)

    def forward(self, x: Tensor, layer: int) -> Tensor:
        """The state after teacher layer `layer` (1-based), from the state before it."""
        g_attn, g_mlp, g_out = self.gains(layer, x)
        block = self.block
        h = x + g_attn * self.attn_scale * block.attn(block.ln_1(x))
        h = h + g_mlp * self.mlp_scale * block.mlp(block.ln_2(h))
        return x + g_out * (h - x)


class RaptorSurrogate(nn.Module):
    def __init__(self, config: SurrogateConfig):
        super().__init__()
        self.config = config
        teacher = config.teacher
        self.blocks = nn.ModuleList(
            SurrogateBlock(teacher, config.depth_hidden, config.layerscale_init) for _ in config.phases
        )
        for block in self.blocks:  # a fresh block starts as the teacher's blocks did
            init_gpt2_weights(block.block, teacher.n_layer)
        self.layer_blocks = config.layer_blocks()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def step(self, x: Tensor, layer: int) -> Tensor:
        """Teacher layer `layer` (0-based) as the surrogate computes it: x_{layer} -> x_{layer+1}."""
        return self.blocks[self.layer_blocks[layer]](x, layer + 1)

    def rollout(self, x: Tensor, first: int = 0, last: int | None = None) -> list[Tensor]:
        """States after layers first..last (0-based, inclusive; default: to the top), from the state before
        layer `first`."""
        last = self.config.teacher.n_layer - 1 if last is None else last
        states = []
        for layer in range(first, last + 1):
            x = self.step(x, layer)
            states.append(x)
        return states
