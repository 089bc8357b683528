"""The KV cache of cached decoding with loops: per layer, an entry for every loop step of every position (one step for
a layer that runs once), and each row's deepest step per position, so that a later token reads any step of an
earlier position that exited sooner with a plain slice."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from twoscale.models.looped_gpt import LoopedGPT

Tensor = torch.Tensor
Rows = Tensor | None  # indices of the batch rows a step works on; None: all of them


@dataclass
class LayerCache:
    """Keys and values of one layer, (steps, rows, positions, heads, head_dim), and each row's deepest step per
    position. Once a position is done with the layer (`finish`), a row that stopped short of a step serves its
    deepest entry there too, so a later token reads any step with a plain slice."""

    keys: Tensor
    values: Tensor
    depth: Tensor  # (rows, positions) long: deepest loop step each position has an entry for (0: none yet)

    def copy(self) -> LayerCache:
        return LayerCache(self.keys.clone(), self.values.clone(), self.depth.clone())

    def grown(self, positions: int) -> LayerCache:
        """A copy with room for `positions` positions, this cache's entries first."""
        def grow(held: Tensor) -> Tensor:
            out = held.new_zeros((*held.shape[:2], positions, *held.shape[3:]))
            out[:, :, : held.shape[2]] = held
            return out

        depth = self.depth.new_zeros((self.depth.shape[0], positions))
        depth[:, : self.depth.shape[1]] = self.depth
        return LayerCache(grow(self.keys), grow(self.values), depth)

    def row(self, r: int) -> LayerCache:
        """Row r as a one-sequence cache, (steps, positions, heads, head_dim), sharing this cache's memory."""
        return LayerCache(self.keys[:, r], self.values[:, r], self.depth[r])

    def store(self, step: int, position: int, rows: Rows, k: Tensor, v: Tensor) -> None:
        selected = slice(None) if rows is None else rows
        self.keys[step - 1, selected, position] = k
        self.values[step - 1, selected, position] = v
        self.depth[selected, position] = step

    def finish(self, position: int, fewest: int, deepest: int) -> None:
        """`position` is done with this layer; its rows ran between `fewest` and `deepest` steps. A row that ran d
        steps, fewer than the cache holds, gets its step-d entry copied into every deeper step."""
        steps = self.keys.shape[0]
        if fewest >= steps:
            return
        if fewest == deepest:  # every row stopped at the same step (one sequence, a fixed depth): one copy each
            self.keys[fewest:, :, position] = self.keys[fewest - 1 : fewest, :, position]
            self.values[fewest:, :, position] = self.values[fewest - 1 : fewest, :, position]
            return
        deepest = torch.minimum(torch.arange(steps, device=self.depth.device)[:, None],
                                self.depth[:, position][None] - 1)  # (steps, rows), 0-based
        rows = torch.arange(self.depth.shape[0], device=self.depth.device)[None]
        self.keys[:, :, position] = self.keys[deepest, rows, position]
        self.values[:, :, position] = self.values[deepest, rows, position]

    def visible(self, step: int, count: int, rows: Rows) -> tuple[Tensor, Tensor]:
        """The first `count` positions' entries at loop step min(step, their deepest step) (1-based), (R, P, H, D):
        positions done with the layer, and the newest one's entry of this very step."""
        keys, values = self.keys[step - 1, :, :count], self.values[step - 1, :, :count]
        if rows is None:
            return keys, values
        return keys.index_select(0, rows), values.index_select(0, rows)  # several times faster than keys[rows]


def cache_steps(model: LoopedGPT, max_loops: int) -> list[int]:
    """Entries per position of each layer's cache: every loop step of a looped layer, one of a single-pass layer."""
    looped = {layer for seg in model.segments if seg.group is not None for layer in seg.layers}
    return [max_loops if layer in looped else 1 for layer in range(model.config.n_layer)]


def cache_bytes(model: LoopedGPT, max_loops: int, max_positions: int, rows: int = 1) -> int:
    """The memory of `new_cache`'s keys and values."""
    element = model.lm_head.weight.element_size()
    return 2 * sum(cache_steps(model, max_loops)) * rows * max_positions * model.config.n_embd * element


def new_cache(model: LoopedGPT, max_loops: int, max_positions: int, rows: int = 1) -> list[LayerCache]:
    """Empty caches for `rows` sequences: one per layer, with room for every loop step of a looped layer."""
    config = model.config
    head_dim = config.n_embd // config.n_head
    device = model.lm_head.weight.device
    dtype = model.lm_head.weight.dtype

    def cache(steps: int) -> LayerCache:
        shape = (steps, rows, max_positions, config.n_head, head_dim)
        return LayerCache(torch.zeros(shape, device=device, dtype=dtype),
                          torch.zeros(shape, device=device, dtype=dtype),
                          torch.zeros((rows, max_positions), dtype=torch.long, device=device))

    return [cache(steps) for steps in cache_steps(model, max_loops)]
