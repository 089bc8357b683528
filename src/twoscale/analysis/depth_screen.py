"""The depth screen's reading of one candidate (docs/results.md#the-depth-screen-pre-registered-2026-11-29-before-any-
candidate-trained): whether a setting uses its depth, from the tables its run leaves, fixed before any candidate
trained. (a) both looped recipes gain at least MIN_DEPTH_GAIN nats from looping (the held-out loss at one loop
minus the lowest over the loop counts measured, at the last checkpoint); (b) `huginn`'s K*, the fewest loops whose
loss is within ln 1.01 of that lowest, is at least MIN_K_STAR; (c) the teacher's 2-layer control recovers less
than MAX_CONTROL_RECOVERY of the teacher's gain over the unigram model. Beside them, what each model cost: its
training's model FLOPs and wall minutes (one core each, on the machine named), from its training history."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl

MIN_DEPTH_GAIN = 0.05       # nats, (a)
MIN_K_STAR = 6              # loops, (b)
MAX_CONTROL_RECOVERY = 0.9  # (c): C8's bar, read on the control
WITHIN = math.log(1.01)     # a 1% perplexity: the tolerance of K*, as C6b's
LOOPED = ("paper", "huginn")
TEACHER = "plain"
CONTROL_BLOCKS = 2


def last_checkpoint_losses(loss_vs_loops: pl.DataFrame, recipe: str) -> dict[int, float]:
    """The held-out loss at each loop count measured, at the recipe's last checkpoint."""
    own = loss_vs_loops.filter(pl.col("recipe") == recipe)
    if own.height == 0:
        raise ValueError(f"no loss-against-loops rows for {recipe}")
    last = own.filter(pl.col("step") == own["step"].max())
    return {int(row["loops"]): float(row["val_loss"]) for row in last.iter_rows(named=True)}


def depth_gain(losses: Mapping[int, float]) -> float:
    """The loss at one loop minus the lowest over the loop counts measured."""
    return losses[1] - min(losses.values())


def k_star(losses: Mapping[int, float]) -> int:
    """The fewest loops whose loss is within WITHIN of the lowest."""
    lowest = min(losses.values())
    return min(loops for loops, loss in losses.items() if loss <= lowest + WITHIN)


def training_cost(history: pl.DataFrame) -> dict[str, float | None]:
    """A training's model TFLOPs, its timed steps' tokens (a step's: its tokens/s times its seconds), the share of
    its steps timed, and its wall minutes. A training resumed across sittings keeps no time (null) for the steps
    before its last sitting, nor its log their CPU time: its minutes are then an estimate, the timed steps' scaled to
    all of its steps (each step does the same work), and none where no step was timed."""
    timed = history.filter(pl.col("seconds").is_not_null())
    share = timed.height / history.height
    return {"tflop": float(history["model_tflop"].sum()),
            "minutes": float(timed["seconds"].sum()) / 60 / share if share else None,
            "tokens": float((timed["tokens_per_s"] * timed["seconds"]).sum()), "timed_share": share}


def recovery_row(recovery: pl.DataFrame, teacher: str, seed: int, blocks: int) -> dict[str, Any]:
    """The recovery table's one row of a teacher run and surrogate size (its shared blocks)."""
    rows = recovery.filter((pl.col("teacher") == teacher) & (pl.col("seed") == seed) & (pl.col("blocks") == blocks))
    if rows.height != 1:
        raise ValueError(f"no single row of {teacher} at seed {seed} with {blocks} blocks in the recovery table")
    return rows.row(0, named=True)


def control_recovery(recovery: pl.DataFrame, seed: int) -> float:
    """The 2-layer control's recovery of the teacher's gain over the unigram model, at the seed."""
    return float(recovery_row(recovery, TEACHER, seed, CONTROL_BLOCKS)["control_recovered"])


def reading(name: str, loss_vs_loops: pl.DataFrame, recovery: pl.DataFrame,
            histories: Mapping[str, pl.DataFrame], seed: int, machine: str,
            cpu_seconds: Mapping[str, float | None] | None = None) -> dict[str, Any]:
    """One candidate's row: each criterion's number and whether it is met, each model's cost (its training's CPU
    minutes too, where its job recorded them: on a machine shared with other work the wall minutes grow, the CPU
    minutes much less; its tokens per CPU second, one core's rate; and the share of its steps timed, below 1 where
    its minutes are estimated from its last sitting), and whether the candidate uses its depth (all three met)."""
    losses = {recipe: last_checkpoint_losses(loss_vs_loops, recipe) for recipe in LOOPED}
    gains = {recipe: depth_gain(own) for recipe, own in losses.items()}
    star = k_star(losses["huginn"])
    control = control_recovery(recovery, seed)
    row: dict[str, Any] = {"candidate": name, "seed": seed, "machine": machine,
                           **{f"gain_{recipe}": gain for recipe, gain in gains.items()},
                           "k_star_huginn": star, "control_recovered": control,
                           "a": all(gain >= MIN_DEPTH_GAIN for gain in gains.values()),
                           "b": star >= MIN_K_STAR, "c": control < MAX_CONTROL_RECOVERY}
    for model, history in histories.items():
        cost = training_cost(history)
        # a resumed job's log has its last sitting's CPU time, the sitting of its timed steps
        cpu = (cpu_seconds or {}).get(model) if cost["minutes"] is not None else None
        row |= {f"tflop_{model}": cost["tflop"], f"minutes_{model}": cost["minutes"],
                f"cpu_minutes_{model}": None if cpu is None else cpu / 60 / cost["timed_share"],
                f"tokens_per_cpu_s_{model}": None if cpu is None else cost["tokens"] / cpu,
                f"timed_share_{model}": cost["timed_share"]}
    row["uses_depth"] = row["a"] and row["b"] and row["c"]
    return row
