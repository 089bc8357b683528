"""The sweep's quality path: teacher-forced evaluation with per-token early exits in every looped group.

The computation is the cached decoding of `decoding.engine` (the one generation times), the next token given instead of
picked: every token decides its own exit in every group with the group's `ExitRule`, and a later token reads an
exited position's deepest cache entry. Two routes compute it:

- all positions at once, loop step by loop step (`all_positions`): a group's step k runs on every position of the
  windows together, causally; a position that has exited keeps its state and serves, in each of the group's layers,
  the key and value of its last step. Position t at step k then reads, for every earlier position p, the entry of
  step min(k, k_exit(p)): the cache convention. It is exact whenever a token's exit decision reads nothing but its
  own states (the rules on states, and the "head" decode), and it runs a group step as one batch of sequences
  instead of one position at a time.
- position by position (`step_tokens`, as generation runs): needed by a "rest" decode, whose later layers read the
  earlier positions' entries of later groups, which the first route has not computed yet when it decides an exit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from twoscale.config.progress import progress_bar
from twoscale.decoding.cache import new_cache
from twoscale.decoding.cost import token_costs
from twoscale.decoding.engine import step_tokens
from twoscale.decoding.rules import ExitRule, head_decode
from twoscale.models.looped_gpt import Context, LoopedGPT, Segment, WholeSequences, at_least_float32
from twoscale.training.batches import held_out_batches

Tensor = torch.Tensor


@dataclass
class ExitRun:
    logits: Tensor  # (B, T, V)
    loops: Tensor  # (G, B, T): loop steps each token took in each group


def reads_later_positions(rule: ExitRule) -> bool:
    """Whether a token's exit decision reads other positions' entries of later layers (a "rest" decode)."""
    return rule.needs_logits and rule.criterion.decode == "rest"


@torch.no_grad()
def teacher_forced(model: LoopedGPT, idx: Tensor, rules: Sequence[ExitRule]) -> ExitRun:
    """Logits and loop counts of every position of idx (B, T), each token leaving group g when rules[g] says so
    (at the latest at the rule's max_loops), by cached decoding's convention; per-row settings of a rule are per
    sequence. All positions at once where the rules allow it, else position by position."""
    if len(rules) != model.n_groups or any(rule.max_loops is None for rule in rules):
        raise ValueError(f"need one exit rule with max_loops per group ({model.n_groups} groups)")
    if any(reads_later_positions(rule) for rule in rules):
        return position_by_position(model, idx, rules)
    return all_positions(model, idx, rules)


def position_by_position(model: LoopedGPT, idx: Tensor, rules: Sequence[ExitRule]) -> ExitRun:
    """`teacher_forced` with the KV cache, one position at a time, as generation decodes."""
    max_loops = max(rule.max_loops for rule in rules)
    B, T = idx.shape
    caches = new_cache(model, max_loops, T, rows=B)
    logits, loops = [], []
    for position in range(T):
        step_logits, step_loops = step_tokens(model, idx[:, position], position, caches, rules)
        logits.append(step_logits)
        loops.append(step_loops)
    return ExitRun(torch.stack(logits, 1), torch.stack(loops, 2))


def all_positions(model: LoopedGPT, idx: Tensor, rules: Sequence[ExitRule]) -> ExitRun:
    """`teacher_forced` on every position together, loop step by loop step (rules that decide on a token's own
    states only)."""
    B, T = idx.shape
    x = model.embed(idx)
    loops = []
    for segment in model.segments:
        if segment.group is None:
            x = model.apply_segment(segment, x)
            continue
        x, steps = loop_all_positions(model, segment, x, rules[segment.group].spread(T))
        loops.append(steps.view(B, T))
    return ExitRun(head_decode(model, x), torch.stack(loops))


def loop_all_positions(model: LoopedGPT, segment: Segment, x: Tensor, rule: ExitRule) -> tuple[Tensor, Tensor]:
    """A looped group on every position of x (B, T, C) until the rule (one row per position, b-major) lets each
    exit: the final states and each position's loop count (B * T,). A step computes the positions still running;
    an exited one keeps its state, and its last keys and values in each of the group's layers."""
    B, T, C = x.shape
    group_input = states = x.flatten(0, 1)
    rule.start(states)
    loops = torch.zeros(B * T, dtype=torch.long, device=x.device)
    kept: dict[int, tuple[Tensor, Tensor]] = {}  # per layer: the keys and values each position serves, (B*T, H, D)

    def context(layer: int, running: Tensor) -> Context:
        def keep(k: Tensor, v: Tensor) -> WholeSequences:
            if layer in kept:
                k, v = (old.index_copy(0, running, new) for old, new in zip(kept[layer], (k, v), strict=True))
            kept[layer] = (k, v)  # the first step runs every position, in order
            return WholeSequences(k.view(B, T, *k.shape[1:]), v.view(B, T, *v.shape[1:]), running)
        return keep

    loop_step = 0
    while rule.running.numel():
        loop_step += 1
        running = rule.running
        current = model.apply_group(segment, states[running], group_input[running],
                                    lambda layer, h, running=running: model.blocks[layer].cached(
                                        h, context(layer, running)))
        exiting = rule.step(current, head_decode(model, current) if rule.needs_logits else None)
        states = states.index_copy(0, running, current)
        loops[running[exiting]] = loop_step
    return states.view(B, T, C), loops


def compute_fraction(model: LoopedGPT, mean_loops: Sequence[float], max_loops: int) -> float:
    """Layer applications per token of the looped path with exits (decodes aside), as a fraction of those with every
    group at max_loops."""
    used = full = 0.0
    for segment in model.segments:
        layers = len(segment.layers)
        used += layers * (1 if segment.group is None else mean_loops[segment.group])
        full += layers * (1 if segment.group is None else max_loops)
    return used / full


@dataclass
class SettingsEvaluation:
    points: list[dict[str, float]]  # per rule set, in order: quality, loops and cost (`evaluate_with_exits`)
    tokens: Tensor  # (windows, T): the input token at each position of the held-out windows
    exit_steps: Tensor  # (rule sets, windows, T, G): loop steps each token took in each group


@torch.no_grad()
def evaluate_settings(
    model: LoopedGPT, ids: np.ndarray, settings: Sequence[Sequence[ExitRule]], max_loops: int, n_windows: int,
    batch_size: int, device: torch.device, progress: str | None = None,
) -> SettingsEvaluation:
    """`evaluate_with_exits` for several rule sets at once (the settings of one strategy: rules that differ in
    threshold, hits or loop count only), with every token's loop count per group kept. Every batch of windows is
    decoded once, the settings as rows of one batch (`ExitRule.stacked`), so the layers run on every setting's
    tokens together; each row still exits by its own setting's rule. `progress` names a bar over the batches."""
    model.eval()
    n_settings = len(settings)
    total_nll = torch.zeros(n_settings, dtype=torch.float64)
    loop_sums = torch.zeros(n_settings, model.n_groups, dtype=torch.float64)
    layer_sums = torch.zeros(n_settings, dtype=torch.float64)
    flop_sums = torch.zeros(n_settings, dtype=torch.float64)
    tokens = 0
    windows_seen, exit_steps = [], []
    batches = held_out_batches(ids, n_windows, batch_size, model.config.block_size)
    for x, y in progress_bar(batches, desc=progress, unit="batch", disable=progress is None):
        windows, length = x.shape
        rules = [ExitRule.stacked([rule_set[g] for rule_set in settings], windows) for g in range(model.n_groups)]
        run = teacher_forced(model, x.to(device).repeat(n_settings, 1), rules)
        nll = F.cross_entropy(at_least_float32(run.logits.flatten(0, 1)), y.to(device).repeat(n_settings, 1).flatten(),
                              reduction="none")
        total_nll += nll.double().view(n_settings, -1).sum(1).cpu()
        loops = run.loops.flatten(1)  # (G, settings * windows * length), setting-major
        loop_sums += loops.double().view(model.n_groups, n_settings, -1).sum(2).T.cpu()
        windows_seen.append(x)
        exit_steps.append(run.loops.view(model.n_groups, n_settings, windows, length).permute(1, 2, 3, 0).cpu())
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
    return SettingsEvaluation(results, torch.cat(windows_seen), torch.cat(exit_steps, 1))


def evaluate_with_exits(
    model: LoopedGPT, ids: np.ndarray, rules: Sequence[ExitRule], max_loops: int, n_windows: int, batch_size: int,
    device: torch.device,
) -> dict[str, float]:
    """Cross-entropy and perplexity on fixed validation windows with exits active; mean loops per group, the
    fraction of the compute of every group at max_loops that was spent, and the cost per token in layer
    applications and GFLOPs with the exit decodes included (`cost`)."""
    return evaluate_settings(model, ids, [rules], max_loops, n_windows, batch_size, device).points[0]
