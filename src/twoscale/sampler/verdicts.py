"""The verdicts on the parallel sampler: the paper's C7 and our C7b, pure functions of the sample stage's summary
(`tables.sampling_summary` rows, one per method and setting, with the columns full_loops, quality_tolerance and
distinct_tolerance) and of its speed table (`tables.SPEED_COLUMNS`: tokens/s per round of the methods it timed side
by side after the grid).

"About equal quality" (`tables.of_equal_quality`): the mean paired gap in re-scored cross-entropy to autoregressive
decoding at full recurrence is within ± quality_tolerance, and the distinct-token fraction is at most distinct_tolerance
below full recurrence's. A speed-up is the paired ratio of tokens/s over the rounds with its 95% interval; beside it,
the FLOP ratio: GFLOPs per generated token of the reference over the sampler's (above 1: the sampler does less
arithmetic per token)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from twoscale.report.tables import finite, require
from twoscale.report.verdicts import Ratio, Verdict, at_least, ratio_by_round
from twoscale.sampler.tables import (
    AUTOREGRESSIVE,
    FULL_RECURRENCE,
    MATCHED,
    SAMPLER,
    SPEED_COLUMNS,
    fastest_of_equal_quality,
    matched_decoding,
)
from twoscale.sampler.thresholds import C7_MIN_SPEEDUP, C7B_MIN_SPEEDUP


@dataclass(frozen=True, kw_only=True)
class Speedup(Verdict):
    """A verdict on the sampler's speed-up in tokens/s over a reference (None: nothing of about equal quality to
    compare, or no paired rounds), its FLOP ratio, and the tolerances that decided what is of about equal quality."""

    speedup: Ratio | None
    flop_ratio: float | None
    quality_tolerance: float
    distinct_tolerance: float


def _full_recurrence(summary: pl.DataFrame) -> dict[str, Any]:
    """Autoregressive decoding at full recurrence: the reference of the quality gaps and of C7."""
    full_loops = int(summary["full_loops"][0])
    return summary.filter((pl.col("method") == AUTOREGRESSIVE) & (pl.col("loops") == full_loops)).row(0, named=True)


def _paired(speed: pl.DataFrame | None, numerator: str, denominator: str) -> Ratio | None:
    """Tokens/s of one timed method over another's, paired by round (None without rounds of both)."""
    if speed is None:
        return None
    require(speed, "sample speed", SPEED_COLUMNS, "sampler verdict")
    return ratio_by_round(speed.filter(pl.col("method") == numerator), speed.filter(pl.col("method") == denominator),
                          "tokens_per_s")


def _reason(sampler: dict[str, Any] | None, ratio: Ratio | None, check: bool | None) -> dict[str, str]:
    """Why the check fails without a number, or cannot decide."""
    if sampler is None:
        return {"reason": "no sampler setting of about equal quality"}
    if ratio is None:
        return {"reason": "no paired rounds"}
    return {"reason": "the ratio's interval straddles the threshold"} if check is None else {}


def _against(summary: pl.DataFrame, speed: pl.DataFrame | None, reference_method: str, reference: dict[str, Any],
             minimum: float) -> Speedup:
    """The fastest sampler setting of about equal quality against a reference timed beside it: passes when the whole
    interval of the paired ratio is ≥ `minimum`, fails when it is all below, cannot decide when it straddles.
    Nothing of about equal quality to compare fails: the claim is about such a setting."""
    sampler = fastest_of_equal_quality(summary, SAMPLER)
    ratio = None if sampler is None else _paired(speed, SAMPLER, reference_method)
    check = False if sampler is None else at_least(ratio, minimum)
    flop_ratio = None if sampler is None else finite(reference["gflops_per_token"] / sampler["gflops_per_token"])
    detail = {reference_method: reference, SAMPLER: sampler, "speedup": ratio, "flop_ratio": flop_ratio,
              "passes": check, **_reason(sampler, ratio, check)}
    return Speedup([check], detail, speedup=ratio, flop_ratio=flop_ratio,
                   quality_tolerance=float(summary["quality_tolerance"][0]),
                   distinct_tolerance=float(summary["distinct_tolerance"][0]))


def speedup_over_full_recurrence(summary: pl.DataFrame, speed: pl.DataFrame | None) -> Speedup:
    """C7: the fastest sampler setting of about equal quality against autoregressive decoding at full recurrence, as the
    paper compares."""
    return _against(summary, speed, FULL_RECURRENCE, _full_recurrence(summary), C7_MIN_SPEEDUP)


def speedup_over_matched_decoding(summary: pl.DataFrame, speed: pl.DataFrame | None) -> Speedup:
    """C7b: the same sampler setting against autoregressive decoding at the fewest loops of about equal quality (ours,
    fixed before the numbers; its quality rule revised with C7's after them)."""
    return _against(summary, speed, MATCHED, matched_decoding(summary), C7B_MIN_SPEEDUP)
