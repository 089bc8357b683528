"""What every claim's verdict shares: how its checks add up to a verdict, and finite numbers.

A claim is checked once per group, hand-off or sub-test; each check passes (True), fails (False) or cannot decide
(None: too few loop steps or checkpoints, a number that is missing, or a premise the model does not meet). The
verdict says what the decided checks decided, and how many could not decide (docs/claims.md#how-checks-add-up):
  reproduced = True   "reproduced"                              every check passes;
  reproduced = False  "not reproduced" [+ " (n undecided)"]      every decided check fails;
  reproduced = None   "mixed" [+ " (n undecided)"]               some decided checks pass and some fail;
  reproduced = None   "inconclusive (p of q pass, n undecided)"  the decided checks pass but some cannot decide;
  reproduced = None   "inconclusive"                             no check decides (or there is none).
A decided failure is a failure of the claim (all its checks must pass) whichever way an undecided check would go, so
it is said, with the count of undecided checks (were they to pass, "not reproduced" would read "mixed"); a pass is
not, since an undecided check could still fail. The precondition S says "holds" or "does not hold".

A speed check reads a ratio with its 95% interval from paired repeats: it passes or fails only when the whole
interval is on one side of the threshold, and cannot decide when the interval straddles it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import polars as pl

Check = bool | None  # one check of a claim: passes, fails, or cannot decide
# How far timing the same models again moved a paired speed ratio, beyond its own interval: on a 2-core Zen 5 the
# default run timed twice (2026-11-28, the same checkpoints bit for bit; docs/results.md) read `huginn`'s C6b ratio
# 3.95× then 3.77× (-4.6%) and C7b's 0.20× then 0.19× (-5%), and one KL exit's ratio to acceleration crossed 1. A
# timed number within this of its line is "near the line" (docs/claims.md#near-the-line)
RETIMING_SPREAD = 0.05


class Words(NamedTuple):
    """The verdict of a claim whose every check passes, and of one whose every check fails."""

    passes: str
    fails: str


VERDICT_WORDS = Words("reproduced", "not reproduced")
S_WORDS = Words("holds", "does not hold")


def _undecided(n: int) -> str:
    return f"{n} check{'s' if n > 1 else ''} undecided"


def aggregate(checks: Sequence[Check], words: Words = VERDICT_WORDS) -> tuple[bool | None, str]:
    """(reproduced, verdict) of a claim from its checks, by the rule of the module's docstring."""
    decided = [c for c in checks if c is not None]
    undecided = len(checks) - len(decided)
    aside = f" ({_undecided(undecided)})" if undecided else ""
    if not decided:
        return None, "inconclusive"
    if all(decided):
        if undecided:
            return None, f"inconclusive ({len(decided)} of {len(checks)} pass, {undecided} undecided)"
        return True, words.passes
    if not any(decided):
        return False, words.fails + aside
    return None, "mixed" + aside


@dataclass(frozen=True)
class Verdict:
    """A claim's checks and the measured numbers behind them (`detail`: per group, hand-off or sub-test, with
    whether it passes and, where a check cannot decide, why)."""

    checks: Sequence[Check]
    detail: dict[str, Any]
    words: Words = VERDICT_WORDS

    @property
    def reproduced(self) -> bool | None:
        return aggregate(self.checks, self.words)[0]

    @property
    def verdict(self) -> str:
        return aggregate(self.checks, self.words)[1]


CONFIDENCE = 0.95  # of every speed ratio's interval


@dataclass(frozen=True)
class Ratio:
    """A speed ratio from paired repeats: the geometric mean of the per-repeat ratios and its 95% interval."""

    ratio: float
    low: float
    high: float
    repeats: int


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
    """The ratio of two timings measured in pairs (repeat i of both ran side by side): a t-interval on the mean
    log ratio, so that slow drifts of the machine that hit both members of a pair cancel. One repeat gives an
    unbounded interval."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(f"need paired repeats, got {len(numerator)} and {len(denominator)}")
    logs = [math.log(a / b) for a, b in zip(numerator, denominator, strict=True)]
    n = len(logs)
    mean = statistics.fmean(logs)
    if n == 1:
        return Ratio(math.exp(mean), 0.0, math.inf, 1)
    from scipy.stats import t as student_t  # imported here: 1.5 s, and only the speed verdicts need it

    half = float(student_t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * statistics.stdev(logs) / math.sqrt(n)
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)


def ratio_by_round(numerator: pl.DataFrame, denominator: pl.DataFrame, value: str) -> Ratio | None:
    """`paired_ratio` of the `value` of two timed things, each given as rows with a `round` column, paired by round;
    None when they share no round."""
    pairs = numerator.select("round", value).join(denominator.select("round", value), on="round",
                                                   suffix="_reference")
    if pairs.height == 0:
        return None
    return paired_ratio(pairs[value].to_list(), pairs[f"{value}_reference"].to_list())


def at_least(ratio: Ratio | None, minimum: float) -> Check:
    """Passes when the whole interval is at or above `minimum`, fails when it is all below, else undecided."""
    if ratio is None:
        return None
    if ratio.low >= minimum:
        return True
    return False if ratio.high < minimum else None


def at_most(ratio: Ratio | None, maximum: float) -> Check:
    """Passes when the whole interval is at or below `maximum`, fails when it is all above, else undecided."""
    if ratio is None:
        return None
    if ratio.high <= maximum:
        return True
    return False if ratio.low > maximum else None
