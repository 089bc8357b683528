"""Teacher-forced evaluation with per-token early exits in every looped group (SCIENCE §1.3).

Every token decides its own exit in every group, with the group's `ExitRule`. A token that has exited keeps its
state x^(k_exit) frozen for the rest of the group, and that frozen state still serves as key and value for the
tokens that go on looping (they attend to it at every later step). Criteria that read a next-token distribution
get the logits of the current states from the decode they name:

- "head": the final norm and LM head on the group's current state;
- "rest": the rest of the network after the group, with every later looped group applied once, then the head.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from twoscale.inference.exits import ExitRule, head_decode
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.training.batches import held_out_batches

Tensor = torch.Tensor


@dataclass
class ExitRun:
    logits: Tensor  # (B, T, V)
    loops: Tensor  # (G, B, T): loop steps each token took in each group


def decode_rest(model: LoopedGPT, x: Tensor, after_segment: int) -> Tensor:
    """Logits from state x (B, T, C) taken after segment `after_segment`: later segments run once each."""
    for segment in model.segments[after_segment + 1 :]:
        x = model.apply_segment(segment, x)
    return model.lm_head(model.ln_f(x))


def _decode(model: LoopedGPT, rule: ExitRule, states: Tensor, segment_index: int, rows: Tensor) -> Tensor:
    if rule.criterion.decode == "head":
        return head_decode(model, states.flatten(0, 1)[rows])
    return decode_rest(model, states, segment_index).flatten(0, 1)[rows]


@torch.no_grad()
def run_with_exits(model: LoopedGPT, idx: Tensor, rules: Sequence[ExitRule]) -> ExitRun:
    """Forward pass of idx (B, T) where each token leaves group g when rules[g] says so (at the latest at the
    rule's max_loops)."""
    if len(rules) != model.n_groups or any(rule.max_loops is None for rule in rules):
        raise ValueError(f"need one exit rule with max_loops per group ({model.n_groups} groups)")
    x = model.embed(idx)
    B, T, C = x.shape
    loops = []
    for segment_index, segment in enumerate(model.segments):
        if segment.group is None:
            x = model.apply_segment(segment, x)
            continue
        rule = rules[segment.group]
        flat = x.reshape(B * T, C)
        rule.start(flat)
        group_input = x
        steps = torch.zeros(B * T, dtype=torch.long, device=x.device)
        k = 0
        while rule.running.numel():
            k += 1
            running = rule.running
            advanced = model.apply_group(segment, flat.view(B, T, C), group_input).reshape(B * T, C)
            flat = flat.index_copy(0, running, advanced[running])  # exited tokens stay frozen
            logits = _decode(model, rule, flat.view(B, T, C), segment_index, running) if rule.needs_logits else None
            exit_now = rule.step(flat[running], logits)
            steps[running[exit_now]] = k
        x = flat.view(B, T, C)
        loops.append(steps.view(B, T))
    return ExitRun(model.lm_head(model.ln_f(x)), torch.stack(loops))


def compute_fraction(model: LoopedGPT, mean_loops: Sequence[float], max_loops: int) -> float:
    """Layer applications per token with exits, as a fraction of those with every group at max_loops."""
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
    """Cross-entropy and perplexity on fixed validation windows with exits active; mean loops per group and the
    fraction of the compute of every group at max_loops that was spent."""
    model.eval()
    total_nll, loop_sums, tokens = 0.0, torch.zeros(model.n_groups, dtype=torch.float64), 0
    for x, y in held_out_batches(ids, n_windows, batch_size, model.config.block_size):
        run = run_with_exits(model, x.to(device), rules)
        nll = torch.nn.functional.cross_entropy(run.logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum")
        total_nll += nll.item()
        loop_sums += run.loops.flatten(1).sum(1).double().cpu()
        tokens += y.numel()
    mean_loops = (loop_sums / tokens).tolist()
    cross_entropy = total_nll / tokens
    result = {
        "cross_entropy": cross_entropy,
        "perplexity": math.exp(cross_entropy),
        "compute_fraction": compute_fraction(model, mean_loops, max_loops),
    }
    result.update({f"mean_loops_group{g}": value for g, value in enumerate(mean_loops)})
    return result
