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
import torch.nn.functional as F
from tqdm import tqdm

from twoscale.inference.cost import token_costs
from twoscale.inference.exits import ExitRule
from twoscale.inference.generation import new_cache, step_tokens
from twoscale.models.looped_gpt import LoopedGPT, at_least_float32
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
def evaluate_settings(
    model: LoopedGPT, ids: np.ndarray, settings: Sequence[Sequence[ExitRule]], max_loops: int, n_windows: int,
    batch_size: int, device: torch.device, progress: str | None = None,
) -> list[dict[str, float]]:
    """`evaluate_with_exits` for several rule sets at once (the settings of one strategy: rules that differ in
    threshold, hits or loop count only). Every batch of windows is decoded once, the settings as rows of one batch
    (`ExitRule.stacked`), so the layers run on every setting's tokens together; each row still exits by its own
    setting's rule. One result per rule set, in order; `progress` names a bar over the batches."""
    model.eval()
    n_settings = len(settings)
    total_nll = torch.zeros(n_settings, dtype=torch.float64)
    loop_sums = torch.zeros(n_settings, model.n_groups, dtype=torch.float64)
    layer_sums = torch.zeros(n_settings, dtype=torch.float64)
    flop_sums = torch.zeros(n_settings, dtype=torch.float64)
    tokens = 0
    batches = held_out_batches(ids, n_windows, batch_size, model.config.block_size)
    for x, y in tqdm(batches, desc=progress, unit="batch", disable=progress is None):
        windows, length = x.shape
        rules = [ExitRule.stacked([rule_set[g] for rule_set in settings], windows) for g in range(model.n_groups)]
        run = teacher_forced(model, x.to(device).repeat(n_settings, 1), rules)
        nll = F.cross_entropy(at_least_float32(run.logits.flatten(0, 1)), y.to(device).repeat(n_settings, 1).flatten(),
                              reduction="none")
        total_nll += nll.double().view(n_settings, -1).sum(1).cpu()
        loops = run.loops.flatten(1)  # (G, settings * windows * length), setting-major
        loop_sums += loops.double().view(model.n_groups, n_settings, -1).sum(2).T.cpu()
        positions = torch.arange(length, device=loops.device).repeat(windows * n_settings)
        cost = token_costs(model, loops, positions, rules)
        layer_sums += cost.layers.view(n_settings, -1).sum(1).cpu()
        flop_sums += cost.flops.view(n_settings, -1).sum(1).cpu()
        tokens += y.numel()
    results = []
    for index in range(n_settings):
        mean_loops = (loop_sums[index] / tokens).tolist()
        cross_entropy = total_nll[index].item() / tokens
        result = {
            "cross_entropy": cross_entropy,
            "perplexity": math.exp(cross_entropy),
            "compute_fraction": compute_fraction(model, mean_loops, max_loops),
            "layers_per_token": layer_sums[index].item() / tokens,
            "gflops_per_token": flop_sums[index].item() / tokens / 1e9,
        }
        result.update({f"mean_loops_group{g}": value for g, value in enumerate(mean_loops)})
        results.append(result)
    return results


def evaluate_with_exits(
    model: LoopedGPT, ids: np.ndarray, rules: Sequence[ExitRule], max_loops: int, n_windows: int, batch_size: int,
    device: torch.device,
) -> dict[str, float]:
    """Cross-entropy and perplexity on fixed validation windows with exits active; mean loops per group, the
    fraction of the compute of every group at max_loops that was spent, and the cost per token in layer
    applications and GFLOPs with the exit decodes included (`cost`)."""
    return evaluate_settings(model, ids, [rules], max_loops, n_windows, batch_size, device)[0]
