"""A run's headline numbers: the few, all of them numbers, that `dvc metrics show` lists for the run (one file per
run, one row each). Its training's final losses and, for a looped recipe, what looping gains it at the last
checkpoint (the depth screen's gain and K*, from the loss-against-loops table), or, for a plain teacher, how much of
its gain over the unigram model each distilled surrogate and its from-scratch control recover (the recovery
table). Where the text that says how a number was computed (machine, precision, torch) lives: in the stages' own
outputs, beside their numbers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from twoscale.analysis.depth_screen import depth_gain, k_star, last_checkpoint_losses, recovery_row

TRAINING = ("train_loss", "val_loss")  # the train stage's final training and held-out losses (its metrics.json)


def training_headline(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {key: float(metrics[key]) for key in TRAINING}


def looped_headline(metrics: Mapping[str, Any], loss_vs_loops: pl.DataFrame, recipe: str,
                    seed: int) -> dict[str, float]:
    """The training's losses, then the held-out loss at one loop minus the lowest over the loop counts measured
    (depth_gain) and the fewest loops within ln 1.01 of that lowest (k_star), at the run's last checkpoint."""
    losses = last_checkpoint_losses(loss_vs_loops.filter(pl.col("seed") == seed), recipe)
    return training_headline(metrics) | {"depth_gain": depth_gain(losses), "k_star": k_star(losses)}


def teacher_headline(metrics: Mapping[str, Any], recovery: pl.DataFrame, teacher: str, seed: int,
                     blocks: Iterable[int]) -> dict[str, float | None]:
    """The training's losses, then for each surrogate size k (its shared blocks) the share of the teacher's gain
    over the unigram model that the surrogate and the control of k layers recover (<model>_recovered_k<k>; null
    where the table has none: a teacher no better than the unigram model has no gain to recover)."""
    headline: dict[str, float | None] = {**training_headline(metrics)}
    for k in blocks:
        row = recovery_row(recovery, teacher, seed, k)
        headline |= {f"{model}_recovered_k{k}": row[f"{model}_recovered"] for model in ("surrogate", "control")}
    return headline
