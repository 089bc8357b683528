"""A GPT-2 style decoder whose middle layers loop: the recurrent-depth model of the paper
(docs/methods.md#the-looped-model-and-its-recipes).

Layers are pre-LayerNorm blocks with learned positions, as in nanoGPT. Some contiguous layer ranges form *looped
groups*: applying group g once runs its layers in order once, and at inference each group may be applied any number
of times. All other layers run once. With the default layout (6 layers, groups {1}, {2,3}, {4}) depth unrolls as

    layer 0 -> (layer 1) x K0 -> (layers 2,3) x K1 -> (layer 4) x K2 -> layer 5 -> LM head

`forward(..., record_trajectories=True)` also returns every group's trajectory x_g^(0..K) (x_g^(0) is the group's
input and x_g^(k) the residual stream after k applications) and the state after every layer run of the unrolled
depth. Without it nothing extra is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# "pre": GPT-2's pre-LayerNorm; "sandwich": a norm after each residual sum too; "group": a LayerNorm after each group
# step; "rescale": each group step's output rescaled per token to the norm of the group's input
Norm = Literal["pre", "sandwich", "group", "rescale"]
# how a group step reads the group's input x^(0): "none"; "add": state + W x^(0); "adapter" (Huginn's):
# W concat(state, x^(0))
Injection = Literal["none", "add", "adapter"]


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    dropout: float
    bias: bool
    groups: tuple[tuple[int, int], ...]  # inclusive (first, last) layer ranges, sorted, disjoint; none: a plain GPT
    norm: Norm = "pre"
    injection: Injection = "none"
    scale_embedding: bool = False  # token embeddings times sqrt(n_embd), as in Huginn

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        return cls(**{**raw, "groups": tuple(tuple(g) for g in raw["groups"])})

    def to_dict(self) -> dict:
        return {**asdict(self), "groups": [list(g) for g in self.groups]}


@dataclass(frozen=True)
class Segment:
    """A run of consecutive layers that is either applied once or looped as one group."""

    layers: tuple[int, ...]
    group: int | None  # index of the looped group, None for single-pass layers


def segments(config: ModelConfig) -> list[Segment]:
    """Split depth into single-pass runs and looped groups, in order."""
    out: list[Segment] = []
    layer = 0
    for g, (first, last) in enumerate(config.groups):
        if layer < first:
            out.append(Segment(tuple(range(layer, first)), None))
        out.append(Segment(tuple(range(first, last + 1)), g))
        layer = last + 1
    if layer < config.n_layer:
        out.append(Segment(tuple(range(layer, config.n_layer)), None))
    return out


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape  # batch, sequence length, embedding width (n_embd)
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        dropout = self.dropout if self.training else 0.0
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # PyTorch's CPU flash-attention backward is about 3x slower in bf16 than these batched matmuls
            y = matmul_attention(q, k, v, dropout)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)  # (B, nh, T, hs)
        return self.resid_dropout(self.proj(y.transpose(1, 2).contiguous().view(B, T, C)))  # heads side by side

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of states x (N, C), split into heads: (N, H, D) each."""
        N, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (N, C) each
        return tuple(t.view(N, self.n_head, C // self.n_head) for t in (q, k, v))  # (N, nh, hs)

    def attend(self, q: torch.Tensor, kept: SharedKeys | KeysPerQuery | WholeSequences) -> torch.Tensor:
        """The attention output (N, C) of queries q (N, H, D) reading the keys and values `kept`."""
        return self.proj(kept.read(q).reshape(len(q), -1))


class SharedKeys(NamedTuple):
    """Keys and values (S, H, D) that every query reads; `visible` (N, S), or (1, S) alike for all, the ones each
    query may read (all if None)."""
    keys: torch.Tensor
    values: torch.Tensor
    visible: torch.Tensor | None = None

    def read(self, q: torch.Tensor) -> torch.Tensor:
        """Queries (N, H, D) -> their attention outputs (N, H, D)."""
        y = F.scaled_dot_product_attention(q.transpose(0, 1), self.keys.transpose(0, 1), self.values.transpose(0, 1),
                                           attn_mask=self.visible)
        return y.transpose(0, 1)


class KeysPerQuery(NamedTuple):
    """Keys and values that each query has for itself, (N, S, H, D); `visible` (N, S) the ones it may read (all if
    None)."""
    keys: torch.Tensor
    values: torch.Tensor
    visible: torch.Tensor | None = None

    def read(self, q: torch.Tensor) -> torch.Tensor:
        mask = None if self.visible is None else self.visible[:, None, None]
        y = F.scaled_dot_product_attention(q[:, :, None], self.keys.transpose(1, 2), self.values.transpose(1, 2),
                                           attn_mask=mask)
        return y[:, :, 0]


class WholeSequences(NamedTuple):
    """Keys and values of whole sequences, (B, T, H, D), and the queries' positions (N,) in them as flat indices
    b * T + t: each query reads its own sequence causally."""
    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor

    def read(self, q: torch.Tensor) -> torch.Tensor:
        B, T, H, D = self.keys.shape
        queries = q.new_zeros(B * T, H, D).index_copy(0, self.positions, q).view(B, T, H, D)
        y = F.scaled_dot_product_attention(queries.transpose(1, 2), self.keys.transpose(1, 2),
                                           self.values.transpose(1, 2), is_causal=True)
        return y.transpose(1, 2).reshape(B * T, H, D)[self.positions]


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """x upcast to float32 if it is in a half precision; float32 and float64 stay as they are."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
    """Causal softmax attention of q, k, v (B, H, T, D) as explicit matmuls: what scaled_dot_product_attention
    computes with is_causal=True."""
    T = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    # the softmax in float32: CPU autocast would run it in bf16
    weights = F.dropout(scores.masked_fill(~causal, float("-inf")).float().softmax(-1), dropout)
    return weights.to(v.dtype) @ v


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))  # (..., C) -> (..., 4C) -> (..., C)


# (own keys, own values) -> the keys and values that the positions attend with
Context = Callable[[torch.Tensor, torch.Tensor], SharedKeys | KeysPerQuery | WholeSequences]


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + Attn(LN(x)), then + MLP(LN(x)).

    With norm "sandwich" each residual sum is normalised too (Geiping et al.): x = LN(x + Attn(LN(x))), then
    x = LN(x + MLP(LN(x))), which bounds the state however often the block is looped."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        sandwich = config.norm == "sandwich"
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_attn_out = nn.LayerNorm(config.n_embd, bias=config.bias) if sandwich else nn.Identity()
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)
        self.ln_mlp_out = nn.LayerNorm(config.n_embd, bias=config.bias) if sandwich else nn.Identity()

    def add_attention(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The attention half's residual sum, given the attention output on ln_1(x)."""
        return self.ln_attn_out(x + attended)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP half of the block."""
        return self.ln_mlp_out(x + self.mlp(self.ln_2(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.feed_forward(self.add_attention(x, self.attn(self.ln_1(x))))

    def cached(self, x: torch.Tensor, context: Context) -> torch.Tensor:
        """The block on states x (N, C) of positions whose attention reads keys and values kept elsewhere (a KV
        cache): `context` takes their own keys and values (N, H, D), stores what it keeps, and returns the keys
        and values the positions attend with, laid out as one of SharedKeys, KeysPerQuery, WholeSequences."""
        q, k, v = self.attn.heads(self.ln_1(x))
        return self.feed_forward(self.add_attention(x, self.attn.attend(q, context(k, v))))


def _init_linear_and_embedding(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def init_gpt2_weights(module: nn.Module, n_layer: int) -> None:
    """GPT-2's initialisation (nanoGPT): weights N(0, 0.02), zero biases, residual projections scaled down by
    sqrt(2 n_layer)."""
    module.apply(_init_linear_and_embedding)
    for name, p in module.named_parameters():
        if name.endswith("proj.weight"):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))


LayerRunner = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, its input state) -> its output state


def rescale_to(x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """x rescaled per token to the norm of a reference state: x ‖ref‖ / ‖x‖."""
    return x * (reference.norm(dim=-1, keepdim=True) / x.norm(dim=-1, keepdim=True).clamp_min(1e-12))


class GroupStep(nn.Module):
    """What one application of a looped group adds around its layers: how it reads the group input x^(0)
    (`injection`) and how it normalises its output: norm "group" applies a LayerNorm, norm "rescale" gives every
    token's state the norm of its group input, so the state stays on a sphere however often the group loops.

      none:    the layers start from the state x^(k-1)
      add:     from x^(k-1) + W x^(0), W initialised to zero
      adapter: from W concat(x^(k-1), x^(0)) (Geiping et al.), W initialised to [I 0]
    Both injections therefore start as the plain looped model."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        C = config.n_embd
        self.injection = config.injection
        if config.injection == "add":
            self.inject = nn.Linear(C, C, bias=False)
        elif config.injection == "adapter":
            self.inject = nn.Linear(2 * C, C, bias=config.bias)
        self.norm = config.norm
        self.out_norm = nn.LayerNorm(C, bias=config.bias) if config.norm == "group" else nn.Identity()

    def initialise(self) -> None:
        if self.injection == "none":
            return
        with torch.no_grad():
            self.inject.weight.zero_()
            if self.injection == "adapter":
                self.inject.weight[:, : self.inject.out_features].copy_(torch.eye(self.inject.out_features))

    def enter(self, x: torch.Tensor, group_input: torch.Tensor) -> torch.Tensor:
        if self.injection == "add":
            return x + self.inject(group_input)
        if self.injection == "adapter":  # the state keeps its dtype (float32 under bf16 autocast)
            return self.inject(torch.cat([x, group_input], dim=-1)).to(x.dtype)
        return x

    def leave(self, x: torch.Tensor, group_input: torch.Tensor) -> torch.Tensor:
        if self.norm == "rescale":
            return rescale_to(x, group_input)
        return self.out_norm(x)


@dataclass(frozen=True)
class DepthPosition:
    """One position of the unrolled depth: the state after `layer` ran (None: the embedding), inside looped
    `group` (None: a single-pass layer) on its `loop`-th application (None outside groups)."""

    layer: int | None
    group: int | None = None
    loop: int | None = None


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, T, vocab)
    loss: torch.Tensor | None = None  # mean next-token cross-entropy, when targets are given
    trajectories: list[torch.Tensor] = field(default_factory=list)  # per group: (K_g + 1, B, T, C)
    depth_states: list[torch.Tensor] = field(default_factory=list)  # after the embedding and every layer run
    depth_positions: list[DepthPosition] = field(default_factory=list)  # what each depth state is


class LoopedGPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.segments = segments(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as in GPT-2
        self.group_steps = nn.ModuleList(GroupStep(config) for _ in config.groups)
        init_gpt2_weights(self, config.n_layer)
        for group_step in self.group_steps:
            group_step.initialise()

    @property
    def n_groups(self) -> int:
        return len(self.config.groups)

    def segment_index(self, group: int) -> int:
        """The index in `segments` of the segment that loops group `group`."""
        return next(index for index, segment in enumerate(self.segments) if segment.group == group)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token plus position embeddings of idx (B, T), the first token at position `start`."""
        T = idx.shape[1]
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than block_size {self.config.block_size}")
        return self.embed_at(idx, torch.arange(start, start + T, device=idx.device))

    def embed_at(self, idx: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token plus position embeddings of idx (..., T) at `positions` (T), a tensor: a captured CUDA graph reads
        the position from a buffer, unchecked."""
        tokens = self.wte(idx)  # (..., T, C)
        if self.config.scale_embedding:  # tied to the LM head, whose scale stays small
            tokens = tokens * math.sqrt(self.config.n_embd)
        return self.drop(tokens + self.wpe(positions))  # position embeddings (T, C) broadcast over the batch

    def apply_segment(self, segment: Segment, x: torch.Tensor) -> torch.Tensor:
        """Run the segment's layers in order once (one application of a looped group)."""
        for layer in segment.layers:
            x = self.blocks[layer](x)
        return x

    def apply_group(self, segment: Segment, x: torch.Tensor, group_input: torch.Tensor,
                    run_layer: LayerRunner | None = None) -> torch.Tensor:
        """One loop step of a looped group, x^(k-1) -> x^(k): the group input injected, the segment's layers in
        order, each through `run_layer(layer, h)` (the plain block by default; a cached, recorded or windowed one
        where the caller keeps keys and values or states), the group's norm. Every state is (..., C): a batch of
        sequences (B, T, C) or a set of positions (N, C); this is the only place a loop step is written."""
        step = self.group_steps[segment.group]
        h = step.enter(x, group_input)
        for layer in segment.layers:
            h = self.blocks[layer](h) if run_layer is None else run_layer(layer, h)
        return step.leave(h, group_input)

    def loop_group(
        self,
        segment: Segment,
        x: torch.Tensor,
        loops: int,
        backprop_depth: int | None = None,
        straight_through: bool = False,
    ) -> torch.Tensor:
        """Apply a group `loops` times. With `backprop_depth`, only the last that-many steps keep gradients
        (the injected group input keeps its gradient throughout). The steps before them cut the gradient to the
        group input, unless `straight_through` passes it across them unchanged, as if they were the identity
        (the Jacobian-free backprop of deep equilibrium models)."""
        group_input = x
        no_grad_steps = max(0, loops - backprop_depth) if backprop_depth is not None else 0
        if no_grad_steps:
            with torch.no_grad():
                for _ in range(no_grad_steps):
                    x = self.apply_group(segment, x, group_input)
            x = group_input + (x - group_input).detach() if straight_through else x.detach()
        for _ in range(loops - no_grad_steps):
            x = self.apply_group(segment, x, group_input)
        return x

    def forward(
        self,
        idx: torch.Tensor,
        loops: Sequence[int],
        targets: torch.Tensor | None = None,
        record_trajectories: bool = False,
        backprop_depth: int | None = None,
        straight_through: bool = False,
    ) -> ModelOutput:
        """Logits for `idx` (B, T) with group g applied `loops[g]` times (each >= 1)."""
        self.check_loops(loops)
        x = self.embed(idx)  # (B, T, C)
        out = ModelOutput(logits=x)
        if record_trajectories:
            x = self._run_recorded(x, loops, out)
        else:
            x = self.run_segments(x, loops, 0, backprop_depth, straight_through)
        out.logits = self.logits_of(x)  # (B, T, vocab)
        if targets is not None:
            out.loss = F.cross_entropy(at_least_float32(out.logits.flatten(0, 1)), targets.flatten())
        return out

    def check_loops(self, loops: Sequence[int]) -> None:
        if len(loops) != self.n_groups or any(count < 1 for count in loops):
            raise ValueError(f"need one loop count >= 1 per group ({self.n_groups} groups), got {list(loops)}")

    def depth_states(self, idx: torch.Tensor, loops: Sequence[int]) -> list[torch.Tensor]:
        """The state after the embedding and after every layer run, as `forward(..., record_trajectories=True)`
        records them, without the final norm and LM head (distillation's targets need no logits)."""
        self.check_loops(loops)
        out = ModelOutput(logits=torch.empty(0))
        self._run_recorded(self.embed(idx), loops, out)
        return out.depth_states

    def run_segments(self, x: torch.Tensor, loops: Sequence[int], first: int = 0, backprop_depth: int | None = None,
                     straight_through: bool = False) -> torch.Tensor:
        """The segments from index `first` on, on their input states x, group g looped loops[g] times."""
        for segment in self.segments[first:]:
            if segment.group is None:
                x = self.apply_segment(segment, x)
            else:
                x = self.loop_group(segment, x, loops[segment.group], backprop_depth, straight_through)
        return x

    def logits_of(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm and LM head on the last states x."""
        with torch.autocast(x.device.type, enabled=False):  # logits in float32 (bf16 rounds them to ~0.05)
            return self.lm_head(self.ln_f(x.to(self.lm_head.weight.dtype)))  # (..., C) -> (..., vocab)

    def _run_recorded(self, x: torch.Tensor, loops: Sequence[int], out: ModelOutput) -> torch.Tensor:
        """The same computation, keeping every group's trajectory and the state after every layer run (in a
        looped group, its last layer's state is the step's output, after the group's norm)."""
        out.depth_states, out.depth_positions = [x], [DepthPosition(None)]

        def record(layer: int, state: torch.Tensor, group: int | None, k: int | None) -> torch.Tensor:
            out.depth_states.append(state)
            out.depth_positions.append(DepthPosition(layer, group, k))
            return state

        for segment in self.segments:
            if segment.group is None:
                for layer in segment.layers:
                    x = record(layer, self.blocks[layer](x), None, None)
                continue
            trajectory = [x]
            group_input = x
            *inner, last = segment.layers
            for k in range(1, loops[segment.group] + 1):
                x = self.apply_group(segment, x, group_input, lambda layer, h, k=k, group=segment.group, inner=inner: (
                    record(layer, self.blocks[layer](h), group, k) if layer in inner else self.blocks[layer](h)))
                trajectory.append(record(last, x, segment.group, k))
            out.trajectories.append(torch.stack(trajectory))  # (loops + 1, B, T, C)
        return x
