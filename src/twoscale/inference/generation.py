"""Autoregressive generation at batch size 1 with a KV cache and per-token exits in every looped group.

Each layer keeps one cache entry per position for every time it ran: single-pass layers once, layers of a
looped group once per loop step. A token that left group g after k_exit steps has no entries for deeper steps;
a later token attending at loop step k reads, for every earlier position p, the entry of step min(k, k_exit(p)):
the deepest one p has (Geiping et al.'s convention). With every token running the same loop counts this is
exactly the full forward pass (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from twoscale.inference.exits import ExitRule, head_decode
from twoscale.models.looped_gpt import Block, LoopedGPT
from twoscale.training.device import clock

Tensor = torch.Tensor


@dataclass
class LayerCache:
    """Keys and values of one layer: (steps, positions, heads, head_dim), and each position's deepest step."""

    keys: Tensor
    values: Tensor
    depth: Tensor  # (positions,) long: deepest loop step each position has an entry for (0: none yet)

    def copy(self) -> LayerCache:
        return LayerCache(self.keys.clone(), self.values.clone(), self.depth.clone())

    def visible(self, step: int, count: int) -> tuple[Tensor, Tensor]:
        """The first `count` positions' entries at loop step min(step, their deepest step) (1-based): (P, H, D)."""
        index = self.depth[:count].clamp(max=step) - 1
        positions = torch.arange(count, device=self.keys.device)
        return self.keys[index, positions], self.values[index, positions]


def new_cache(model: LoopedGPT, max_loops: int, max_positions: int) -> list[LayerCache]:
    """Empty caches: one per layer, with room for every loop step of a looped layer."""
    config = model.config
    head_dim = config.n_embd // config.n_head
    device = model.lm_head.weight.device
    dtype = model.lm_head.weight.dtype
    looped = {layer for seg in model.segments if seg.group is not None for layer in seg.layers}
    shape = (max_positions, config.n_head, head_dim)
    return [
        LayerCache(torch.zeros((max_loops if layer in looped else 1, *shape), device=device, dtype=dtype),
                   torch.zeros((max_loops if layer in looped else 1, *shape), device=device, dtype=dtype),
                   torch.zeros(max_positions, dtype=torch.long, device=device))
        for layer in range(config.n_layer)
    ]


def block_step(block: Block, x: Tensor, cache: LayerCache, step: int, position: int, store: bool = True) -> Tensor:
    """One block on the newest position x (1, C) at loop `step`, attending to the earlier positions' cache.

    With `store` its own key and value become the cache entry of (step, position); without, the cache is only
    read (a look-ahead decode)."""
    def context(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, None]:
        if store:
            cache.keys[step - 1, position] = k[0]
            cache.values[step - 1, position] = v[0]
        past_k, past_v = cache.visible(step, position)
        return torch.cat([past_k, k]), torch.cat([past_v, v]), None

    return block.cached(x, context)


def decode_rest(model: LoopedGPT, x: Tensor, after_segment: int, caches: list[LayerCache], position: int) -> Tensor:
    """The "rest" decode of the newest position: later segments once each (reading, not writing, the cache)."""
    for segment in model.segments[after_segment + 1 :]:
        for layer in segment.layers:
            x = block_step(model.blocks[layer], x, caches[layer], 1, position, store=False)
    return model.lm_head(model.ln_f(x))


def _decode(model: LoopedGPT, rule: ExitRule, x: Tensor, segment_index: int, caches, position: int) -> Tensor:
    if rule.criterion.decode == "head":
        return head_decode(model, x)
    return decode_rest(model, x, segment_index, caches, position)


@torch.no_grad()
def step_token(
    model: LoopedGPT, token: int, position: int, caches: list[LayerCache], rules: Sequence[ExitRule]
) -> tuple[Tensor, list[int]]:
    """Run one new token through the network with the cache: its logits (V,) and its loop count per group."""
    device = model.lm_head.weight.device
    x = model.embed(torch.tensor([[token]], device=device), start=position)[0]
    loops = []
    for segment_index, segment in enumerate(model.segments):
        if segment.group is None:
            for layer in segment.layers:
                caches[layer].depth[position] = 1
                x = block_step(model.blocks[layer], x, caches[layer], 1, position)
            continue
        rule = rules[segment.group]
        rule.start(x)
        group_input, group_step = x, model.group_steps[segment.group]
        k = 0
        while rule.running.numel():
            k += 1
            x = group_step.enter(x, group_input)
            for layer in segment.layers:
                caches[layer].depth[position] = k
                x = block_step(model.blocks[layer], x, caches[layer], k, position)
            x = group_step.leave(x, group_input)
            logits = _decode(model, rule, x, segment_index, caches, position) if rule.needs_logits else None
            rule.step(x, logits)
        loops.append(k)
    return model.lm_head(model.ln_f(x))[0], loops


@dataclass
class Generation:
    tokens: list[int]
    logits: list[Tensor]  # per generated position (prompt included), (V,) each
    loops: list[list[int]]  # per position, loop count of each group
    ms_per_token: list[float]  # wall time of each generated (not prompt) token


@torch.no_grad()
def generate(
    model: LoopedGPT,
    prompt: Sequence[int],
    new_tokens: int,
    rules: Sequence[ExitRule],
    max_loops: int,
    pick: Callable[[Tensor], int] = lambda logits: int(logits.argmax()),
) -> Generation:
    """Greedy (or `pick`) generation at batch size 1 with per-token exits, timing every generated token."""
    model.eval()
    if any(rule.max_loops is None or rule.max_loops > max_loops for rule in rules):
        raise ValueError(f"every exit rule needs max_loops <= {max_loops}")
    total = len(prompt) + new_tokens
    if total > model.config.block_size:
        raise ValueError(f"prompt + new tokens = {total} exceeds block_size {model.config.block_size}")
    caches = new_cache(model, max_loops, total)
    out = Generation(list(prompt), [], [], [])
    device = model.lm_head.weight.device
    for position in range(total - 1):
        started = clock(device)
        logits, loops = step_token(model, out.tokens[position], position, caches, rules)
        out.logits.append(logits)
        out.loops.append(loops)
        if position >= len(prompt) - 1:
            out.tokens.append(pick(logits))
            out.ms_per_token.append(1000 * (clock(device) - started))
    return out
