"""One point of an early-exit sweep: a strategy at one threshold (or the fixed-depth baseline at one loop count),
measured for quality, loops and cost by teacher-forced cached decoding, and for latency by cached generation at
batch size 1: the same computation, the next token given or picked (docs/methods.md#early-exit).

A strategy is a plain exit spec without its swept setting, e.g. {"criterion": "acceleration", "variant": "vector",
"hits": 2}; `rules_at` sets the setting (`swept_key`: the threshold; the loop count of "fixed"; the hit count of
"argmax", which has no threshold) and builds one rule per group.

Besides its row per setting, a strategy's sweep keeps every token's exit step per group at every setting (the
depth table): which settings a report reads (full depth, K*, each strategy's best point) follows from every
strategy's table together, which no one strategy's job sees.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from twoscale.config.params import ParamsError, SweepParams
from twoscale.config.progress import progress_bar
from twoscale.decoding.cache import cache_bytes
from twoscale.decoding.engine import CriterionClock, PromptState, decode_prompt, generate
from twoscale.decoding.rules import ExitRule, make_rule
from twoscale.exits.teacher_forced import evaluate_settings
from twoscale.models.looped_gpt import LoopedGPT

SWEPT_KEYS = {"fixed": "loops", "argmax": "hits"}


def swept_key(criterion: str) -> str:
    """The spec key a sweep varies for a criterion."""
    return SWEPT_KEYS.get(criterion, "threshold")


def never_exit_setting(criterion: str, max_loops: int) -> float:
    """The setting at which a strategy never exits early: threshold 0 (no value is below it), or max_loops loops
    or hits."""
    return 0.0 if swept_key(criterion) == "threshold" else float(max_loops)


def rules_at(strategy: dict[str, Any], setting: float, n_groups: int, max_loops: int) -> list[ExitRule]:
    """Fresh rules (one per group) for a strategy at one setting."""
    key = swept_key(strategy["criterion"])
    value = float(setting) if key == "threshold" else int(setting)
    return [make_rule({**strategy, key: value}, max_loops=max_loops) for _ in range(n_groups)]


def check_strategies(sweep: SweepParams) -> None:
    """Every strategy builds its exit rules at every setting; ParamsError naming the strategy otherwise."""
    for name, strategy in sweep.strategies.items():
        key = swept_key(str(strategy.spec.get("criterion")))
        for setting in strategy.settings:
            if key != "threshold" and not (math.isfinite(setting) and setting == int(setting)):
                raise ParamsError(f"sweep.strategies.{name}: {key} must be whole numbers, got {setting}")
            try:
                rules_at(strategy.spec, setting, 1, sweep.max_loops)
            except (ValueError, TypeError) as exc:
                raise ParamsError(f"sweep.strategies.{name}: {exc}") from None


def latency_ms_per_token(
    model: LoopedGPT, prompts: Sequence[Sequence[int]], new_tokens: int, strategy: dict[str, Any], setting: float,
    max_loops: int, timer: CriterionClock | None = None, decoded: Sequence[PromptState] | None = None,
) -> tuple[float, float]:
    """Median ms per generated token over every token of every prompt (batch size 1, KV cache, the criterion's
    own cost included), and the mean loop count per group and token while generating. `timer` adds up the time
    the generated tokens spent on exit decisions; `decoded` holds the prompts already decoded under this setting."""
    rules = rules_at(strategy, setting, model.n_groups, max_loops)
    times, loops = [], []
    for index, prompt in enumerate(prompts):
        out = generate(model, prompt, new_tokens, rules, timer=timer,
                       decoded=None if decoded is None else decoded[index])
        times += out.ms_per_token
        loops += [sum(position) / len(position) for position in out.loops[len(prompt) - 1 :]]
    return statistics.median(times), float(np.mean(loops))


def timed_rounds(
    model: LoopedGPT, prompts: Sequence[Sequence[int]], new_tokens: int, points: Sequence[tuple[str, dict[str, Any],
    float]], max_loops: int, rounds: Sequence[int], progress: str | None = None,
) -> list[dict[str, Any]]:
    """Latency of every (name, strategy, setting) point, point i timed in rounds 0 .. rounds[i] − 1. A round runs
    each of its points once, in an order rotated by one place per round: any two points' timings of one round are
    a pair that saw the same state of the machine. One row per point and round: ms per token (median over the
    round's tokens) and the mean loops per group while generating. A point's prompts are decoded (untimed) once,
    in its first round, and every round generates from them: the same computation as decoding them each time."""
    if len(rounds) != len(points):
        raise ValueError(f"{len(rounds)} round counts for {len(points)} points")
    rows = []
    decoded: dict[int, list[PromptState]] = {}
    bar = progress_bar(total=sum(rounds), desc=progress, unit="setting", disable=progress is None)
    for round_index in range(max(rounds, default=0)):
        these = [index for index, count in enumerate(rounds) if count > round_index]
        shift = round_index % len(these)
        for index in [*these[shift:], *these[:shift]]:
            name, strategy, setting = points[index]
            bar.update()
            if index not in decoded:
                rules = rules_at(strategy, setting, model.n_groups, max_loops)
                decoded[index] = [decode_prompt(model, prompt, rules) for prompt in prompts]
            ms, loops = latency_ms_per_token(model, prompts, new_tokens, strategy, setting, max_loops,
                                             decoded=decoded[index])
            rows.append({"strategy": name, "setting": float(setting), "round": round_index, "ms_per_token": ms,
                         "generated_mean_loops": loops})
            if round_index == rounds[index] - 1:
                del decoded[index]  # its last round: free the caches
    bar.close()
    return rows


@dataclass
class StrategySweep:
    points: list[dict[str, float]]  # per setting: quality, loops and cost
    depth: pl.DataFrame  # `depth_table`: every token's exit step per group at every setting


def depth_table(settings: Sequence[float], tokens: torch.Tensor, exit_steps: torch.Tensor) -> pl.DataFrame:
    """One row per setting, window, position and group (in that order): the setting, the window's index among the
    held-out windows, the position in it, the input token there, the group and the loop steps the token ran in it
    (`exit_step`), from the tokens (windows, T) and exit steps (settings, windows, T, G) of `evaluate_settings`."""
    setting, window, position, group = np.indices(exit_steps.shape).reshape(4, -1)
    return pl.DataFrame({
        "setting": np.asarray(settings, dtype=np.float64)[setting],
        "window": pl.Series(window, dtype=pl.Int16),
        "position": pl.Series(position, dtype=pl.Int16),
        "token": pl.Series(tokens.numpy()[window, position], dtype=pl.Int32),
        "group": pl.Series(group, dtype=pl.Int16),
        "exit_step": pl.Series(exit_steps.flatten().numpy(), dtype=pl.Int16),
    })


def sweep_settings(
    model: LoopedGPT,
    val_ids: np.ndarray,
    strategy: dict[str, Any],
    settings: Sequence[float],
    max_loops: int,
    n_windows: int,
    batch_size: int,
    device: torch.device,
    cache_mb: float = math.inf,
    progress: str | None = None,
) -> StrategySweep:
    """Quality, loops and cost of one strategy at each setting, from the cached decoding whose latency the latency
    stage times (teacher-forced: the next token given), and every token's exit step per group. The settings decode
    together, as rows of one batch, as many at a time as keep its KV cache within `cache_mb` (at least one)."""
    rule_sets = [rules_at(strategy, setting, model.n_groups, max_loops) for setting in settings]
    per_setting = cache_bytes(model, max_loops, model.config.block_size, rows=min(batch_size, n_windows))
    together = max(1, int(min(len(settings), cache_mb * 2**20 / per_setting)))
    parts = [evaluate_settings(model, val_ids, rule_sets[first : first + together], max_loops, n_windows, batch_size,
                               device, progress)
             for first in range(0, len(settings), together)]
    points = [{"setting": float(setting), **quality,
               "mean_loops": float(np.mean([quality[f"mean_loops_group{g}"] for g in range(model.n_groups)]))}
              for setting, quality in zip(settings, [p for part in parts for p in part.points], strict=True)]
    exit_steps = torch.cat([part.exit_steps for part in parts])
    return StrategySweep(points, depth_table(settings, parts[0].tokens, exit_steps))
