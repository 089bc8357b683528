"""Timings for the benchmark command: training throughput against the machine's matmul peak, the per-step cost of
each exit criterion (its decode included) beside the cost of one loop step of a group, ms per generated token
of each strategy at a given setting, and tokens/s of the parallel sampler beside cached autoregressive decoding.

The exit timings run as in cached generation: batch size 1, one new token attending to a real KV cache of a
prompt. Training runs real optimizer steps (`trainer.train_step`) on a fresh model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from twoscale.config.params import TrainParams
from twoscale.decoding.cache import LayerCache, new_cache
from twoscale.decoding.engine import (
    CriterionClock,
    block_step,
    decode_rest,
    step_token,
)
from twoscale.decoding.rules import head_decode
from twoscale.exits.sweep import latency_ms_per_token, never_exit_setting, rules_at
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.sampler.comparison import sampler_throughput
from twoscale.sampler.parallel import SamplerSettings
from twoscale.training.batches import random_batch
from twoscale.training.device import clock, median_ms
from twoscale.training.flops import training_step_flops
from twoscale.training.trainer import build_state, compile_blocks, sample_loop_counts, train_step

Tensor = torch.Tensor


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
        return model.apply_group(segment, x, x, lambda layer, y: block_step(model.blocks[layer], y, caches[layer], 1,
                                                                            position, store=False))

    device = x.device
    group_ms = median_ms(loop_step, repeats, device)
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

        rows.append({"strategy": name, "criterion_ms_per_step": median_ms(decide, repeats, device),
                     "group_step_ms": group_ms})
    return rows


def strategy_latency(
    model: LoopedGPT, prompts: Sequence[Sequence[int]], new_tokens: int, strategy: dict[str, Any], setting: float,
    max_loops: int, repeats: int,
) -> dict[str, float]:
    """ms per generated token (the median over `repeats` passes over the prompts of each pass's median), split into
    criterion work (the exit decisions' decode and arithmetic) and layer work (the rest) by the share of the
    generated tokens' time that went to exit decisions, and mean loops."""
    medians, shares, loops = [], [], []
    for _ in range(repeats):
        timer = CriterionClock()
        ms, mean_loops = latency_ms_per_token(model, prompts, new_tokens, strategy, setting, max_loops, timer)
        medians.append(ms)
        shares.append(timer.criterion_share)
        loops.append(mean_loops)
    ms = statistics.median(medians)
    criterion_ms = ms * statistics.median(shares)
    return {"ms_per_token": ms, "spread_ms": max(medians) - min(medians), "layer_ms": ms - criterion_ms,
            "criterion_ms": criterion_ms, "generated_mean_loops": statistics.fmean(loops)}


# --- the parallel sampler -----------------------------------------------------------------------------------


def sampler_medians(model: LoopedGPT, prompts: Sequence[Sequence[int]], new_tokens: int, full_loops: int,
                    matched_loops: int, settings: SamplerSettings, repeats: int) -> dict[str, dict[str, float]]:
    """The sample stage's paired rounds (`comparison.sampler_throughput`) as the benchmark reports them: per method,
    the median of its rounds' tokens/s and their spread (max − min)."""
    rates = sampler_throughput(model, prompts, new_tokens, full_loops, matched_loops, settings, repeats)
    return {name: {"tokens_per_s": statistics.median(values), "spread": max(values) - min(values)}
            for name, values in rates.items()}


# --- training throughput ------------------------------------------------------------------------------------


def training_throughput(config: ModelConfig, train: TrainParams, ids: np.ndarray, seed: int,
                        device: torch.device, dtype: torch.dtype, steps: int, compiled: bool = False,
                        warmup: int = 1) -> dict[str, float]:
    """Real training steps of a fresh model in `dtype` (its layers compiled if `compiled`): the batches and loop
    counts that `seed` draws (the same for every variant), `warmup` untimed steps first; seconds per step
    (median), tokens/s and achieved model TFLOP/s (totals over the timed steps)."""
    state = build_state(config, train, seed, device)
    if compiled:
        torch.compiler.reset()  # dynamo keeps 8 versions of Block.forward across models: start each variant afresh
        compile_blocks(state.model, device)
    state.model.train()
    generator = torch.Generator().manual_seed(seed)
    times, flops = [], 0.0
    for i in range(warmup + steps):
        x, y = random_batch(ids, train.batch_size, config.block_size, generator)
        loops = sample_loop_counts(train.loops, len(config.groups), generator)
        started = clock(device)
        train_step(state, x.to(device), y.to(device), loops, train, device, dtype)
        if i >= warmup:
            times.append(clock(device) - started)
            flops += training_step_flops(config, loops, train.loops.backprop_depth, train.batch_size)
    return {"s_per_step": statistics.median(times),
            "tokens_per_s": steps * train.batch_size * config.block_size / sum(times),
            "tflops": flops / sum(times) / 1e12}
