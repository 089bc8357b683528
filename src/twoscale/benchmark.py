"""Timings for the benchmark command: the per-step cost of each exit criterion (its decode included) beside the cost
of one loop step of a group, and ms per generated token of each strategy at a given setting.

Everything runs as in cached generation: batch size 1, one new token attending to a real KV cache of a prompt.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from twoscale.exits import head_decode
from twoscale.generation import LayerCache, block_step, decode_rest, new_cache, step_token
from twoscale.model import LoopedGPT
from twoscale.sweep import latency_ms_per_token, never_exit_setting, rules_at

Tensor = torch.Tensor


def median_ms(work: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `work()` in milliseconds, after one untimed call."""
    work()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


@torch.no_grad()
def cached_prompt(model: LoopedGPT, prompt: Sequence[int], max_loops: int) -> list[LayerCache]:
    """The KV cache after running the prompt at full depth (every group `max_loops` times)."""
    caches = new_cache(model, max_loops, len(prompt) + 1)
    full_depth = rules_at({"criterion": "fixed"}, max_loops, model.n_groups, max_loops)
    for position, token in enumerate(prompt):
        step_token(model, token, position, caches, full_depth)
    return caches


def never_exiting(strategy: dict[str, Any], steps: int):
    """A rule of the strategy that keeps running for `steps` steps (threshold 0, or that many loops or hits)."""
    return rules_at(strategy, never_exit_setting(strategy["criterion"], steps), 1, steps)[0]


@torch.no_grad()
def step_costs(
    model: LoopedGPT, prompt: Sequence[int], strategies: dict[str, dict[str, Any]], max_loops: int, repeats: int,
) -> list[dict[str, Any]]:
    """Per strategy: median ms of one exit decision for the next token in the first looped group (the criterion's
    decode included), against the median ms of one application of that group."""
    caches = cached_prompt(model, prompt, max_loops)
    position = len(prompt)
    segment_index, segment = next((i, s) for i, s in enumerate(model.segments) if s.group is not None)
    x = torch.randn(1, model.config.n_embd, device=model.lm_head.weight.device)

    def loop_step() -> Tensor:
        step = model.group_steps[segment.group]
        y = step.enter(x, x)
        for layer in segment.layers:
            y = block_step(model.blocks[layer], y, caches[layer], 1, position, store=False)
        return step.leave(y, x)

    group_ms = median_ms(loop_step, repeats)
    rows = []
    for name, spec in strategies.items():
        rule = never_exiting(spec, repeats + 1)
        rule.start(x)

        def decide() -> Tensor:
            logits = None
            if rule.needs_logits:
                logits = (head_decode(model, x) if rule.criterion.decode == "head"
                          else decode_rest(model, x, segment_index, caches, position))
            return rule.step(x, logits)

        rows.append({"strategy": name, "criterion_ms_per_step": median_ms(decide, repeats),
                     "group_step_ms": group_ms})
    return rows


def strategy_latency(
    model: LoopedGPT, prompts: Sequence[Sequence[int]], new_tokens: int, strategy: dict[str, Any], setting: float,
    max_loops: int, repeats: int,
) -> dict[str, float]:
    """ms per generated token (median over every token of `repeats` passes over the prompts) and mean loops."""
    medians, loops = [], []
    for _ in range(repeats):
        ms, mean_loops = latency_ms_per_token(model, prompts, new_tokens, strategy, setting, max_loops)
        medians.append(ms)
        loops.append(mean_loops)
    return {"ms_per_token": statistics.median(medians), "spread_ms": max(medians) - min(medians),
            "generated_mean_loops": statistics.fmean(loops)}
