"""Selections on the geometry stage's tables that the figures and the verdicts share."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.report.tables import require

GEOMETRY_COLUMNS = ("step", "metric", "group", "k", "mean", "median", "q10", "q90")
DLR_SHOWN_LOOPS = (1, 2, 5, 10, 30)  # the K whose DLR_K the claims and the summaries print (tables hold every K)
# a token's regime in a group (`metrics.regimes`)
REGIMES = ("fixed_point", "slowing_drift", "orbit", "slider", "other")
FLOOR_EPS = 1000  # the precision floor in machine epsilons of the measuring dtype (float64: 2.2e-13)


# the tables the measure stage writes per checkpoint and the geometry stage stacks across training
MEASUREMENT_TABLES = ("geometry", "loss_vs_loops", "depth", "similarity", "trajectory")


def metric_rows(geometry: pl.DataFrame, metrics: str | Sequence[str], user: str) -> pl.DataFrame:
    """The geometry rows of one or more metrics; each must be present."""
    require(geometry, "geometry", GEOMETRY_COLUMNS, user)
    names = [metrics] if isinstance(metrics, str) else list(metrics)
    rows = geometry.filter(pl.col("metric").is_in(names))
    for name in names:
        if rows.filter(pl.col("metric") == name).height == 0:
            raise TwoscaleError(f"{user}: the geometry table has no {name} rows")
    return rows


def dlr_loops(geometry: pl.DataFrame, at_most: int | None = None) -> int:
    """The K at which C4, C5 and Fig. 2 read DLR_K: the loop count measured, every loop step of the group in the
    denominator as the paper's Eq. 2 has it (the fewest any checkpoint measured), or `at_most` if fewer."""
    rows = metric_rows(geometry, "drift_to_loop_ratio", "dlr_loops")
    measured = min(int(k) for k in rows.group_by("step").agg(pl.col("k").max())["k"])
    return measured if at_most is None else min(at_most, measured)
