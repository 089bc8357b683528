"""The sweep's quality path: teacher-forced evaluation with per-token early exits in every looped group.

A batch of held-out windows advances one position at a time through the cached decoding of `generation` (the same
computation that generation times), the next token given instead of picked. Every token decides its own exit in
every group with the group's `ExitRule`; a later token reads an exited position's deepest cache entry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from twoscale.inference.cost import token_costs
from twoscale.inference.exits import ExitRule
from twoscale.inference.generation import new_cache, step_tokens
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.training.batches import held_out_batches

Tensor = torch.Tensor


@dataclass
class ExitRun:
    logits: Tensor  # (B, T, V)
    loops: Tensor  # (G, B, T): loop steps each token took in each group


@torch.no_grad()
def teacher_forced(model: LoopedGPT, idx: Tensor, rules: Sequence[ExitRule]) -> ExitRun:
    """Logits and loop counts of every position of idx (B, T), each token leaving group g when rules[g] says so
    (at the latest at the rule's max_loops), decoded with the KV cache one position at a time."""
    if len(rules) != model.n_groups or any(rule.max_loops is None for rule in rules):
        raise ValueError(f"need one exit rule with max_loops per group ({model.n_groups} groups)")
    max_loops = max(rule.max_loops for rule in rules)
    B, T = idx.shape
    caches = new_cache(model, max_loops, T, rows=B)
    logits, loops = [], []
    for position in range(T):
        step_logits, step_loops = step_tokens(model, idx[:, position], position, caches, rules)
        logits.append(step_logits)
        loops.append(step_loops)
    return ExitRun(torch.stack(logits, 1), torch.stack(loops, 2))


def compute_fraction(model: LoopedGPT, mean_loops: Sequence[float], max_loops: int) -> float:
    """Layer applications per token of the looped path with exits (decodes aside), as a fraction of those with every
    group at max_loops."""
    used = full = 0.0
    for segment in model.segments:
        layers = len(segment.layers)
        used += layers * (1 if segment.group is None else mean_loops[segment.group])
        full += layers * (1 if segment.group is None else max_loops)
    return used / full


@torch.no_grad()
def evaluate_with_exits(
    model: LoopedGPT, ids: np.ndarray, rules: Sequence[ExitRule], max_loops: int, n_windows: int, batch_size: int,
    device: torch.device,
) -> dict[str, float]:
    """Cross-entropy and perplexity on fixed validation windows with exits active; mean loops per group, the
    fraction of the compute of every group at max_loops that was spent, and the cost per token in layer
    applications and GFLOPs with the exit decodes included (`cost`)."""
    model.eval()
    total_nll, tokens = 0.0, 0
    loop_sums = torch.zeros(model.n_groups, dtype=torch.float64)
    layer_sum = flop_sum = 0.0
    for x, y in held_out_batches(ids, n_windows, batch_size, model.config.block_size):
        run = teacher_forced(model, x.to(device), rules)
        nll = torch.nn.functional.cross_entropy(run.logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum")
        total_nll += nll.item()
        loops = run.loops.flatten(1)
        loop_sums += loops.sum(1).double().cpu()
        positions = torch.arange(x.shape[1], device=loops.device).repeat(x.shape[0])
        cost = token_costs(model, loops, positions, rules)
        layer_sum += cost.layers.sum().item()
        flop_sum += cost.flops.sum().item()
        tokens += y.numel()
    mean_loops = (loop_sums / tokens).tolist()
    cross_entropy = total_nll / tokens
    result = {
        "cross_entropy": cross_entropy,
        "perplexity": math.exp(cross_entropy),
        "compute_fraction": compute_fraction(model, mean_loops, max_loops),
        "layers_per_token": layer_sum / tokens,
        "gflops_per_token": flop_sum / tokens / 1e9,
    }
    result.update({f"mean_loops_group{g}": value for g, value in enumerate(mean_loops)})
    return result
