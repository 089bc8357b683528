"""The verdicts on the parallel sampler: the paper's C7 and our C7b, pure functions of the sample stage's summary
(`tables.sampling_summary` rows, one per method and setting, with the columns full_loops and quality_tolerance).
"About equal quality": the mean paired gap in re-scored cross-entropy to ordinary decoding at full recurrence is at
most the summary's quality_tolerance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from twoscale.report.tables import fastest_of_equal_quality
from twoscale.report.thresholds import C7_MIN_SPEEDUP, C7B_MIN_SPEEDUP
from twoscale.report.verdicts.common import Verdict


@dataclass(frozen=True, kw_only=True)
class Speedup(Verdict):
    """A verdict on the sampler's speed-up in tokens/s (None: nothing of about equal quality to compare), with
    the quality tolerance that decided what is of about equal quality."""

    speedup: float | None
    quality_tolerance: float


def _quality_tolerance(summary: pl.DataFrame) -> float:
    return float(summary["quality_tolerance"][0])


def _full_recurrence(summary: pl.DataFrame) -> dict[str, Any]:
    """Ordinary decoding at full recurrence: the reference of the quality gaps and of C7."""
    full_loops = int(summary["full_loops"][0])
    return summary.filter((pl.col("method") == "autoregressive") & (pl.col("loops") == full_loops)).row(0, named=True)


def _speedup(sampler: dict[str, Any] | None, reference: dict[str, Any] | None) -> float | None:
    return None if sampler is None or reference is None else sampler["tokens_per_s"] / reference["tokens_per_s"]


def _at_least(speedup: float | None, minimum: float) -> bool:
    """Nothing of about equal quality to compare counts as a failure: the claim is about such a setting."""
    return False if speedup is None else speedup >= minimum


def speedup_over_full_recurrence(summary: pl.DataFrame) -> Speedup:
    """C7: the fastest sampler setting of about equal quality against ordinary decoding at full recurrence, as
    the paper compares."""
    full, sampler = _full_recurrence(summary), fastest_of_equal_quality(summary, "sampler")
    speedup = _speedup(sampler, full)
    return Speedup([_at_least(speedup, C7_MIN_SPEEDUP)], {"full_recurrence": full, "sampler": sampler},
                   speedup=speedup, quality_tolerance=_quality_tolerance(summary))


def speedup_over_matched_decoding(summary: pl.DataFrame) -> Speedup:
    """C7b: the same sampler setting against the fastest ordinary decoding of about equal quality (ours, fixed
    before the numbers)."""
    sampler = fastest_of_equal_quality(summary, "sampler")
    matched = fastest_of_equal_quality(summary, "autoregressive")
    speedup = _speedup(sampler, matched)
    return Speedup([_at_least(speedup, C7B_MIN_SPEEDUP)], {"matched": matched, "sampler": sampler},
                   speedup=speedup, quality_tolerance=_quality_tolerance(summary))
