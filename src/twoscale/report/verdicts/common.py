"""What every claim's verdict shares: how its checks add up to a verdict, and finite numbers.

A claim is checked once per group, hand-off or sub-test; each check passes (True), fails (False) or cannot decide
(None: too few loop steps or checkpoints, or a number that is missing). The claim is
  reproduced = True   ("reproduced")      when every check passes,
  reproduced = False  ("not reproduced")  when none passes,
  reproduced = None   ("mixed")           when some pass and some fail,
  reproduced = None   ("inconclusive")    when any check cannot decide (or there is none).
The string `verdict` tells "mixed" from "inconclusive". The precondition S says "holds" or "does not hold".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

Check = bool | None  # one check of a claim: passes, fails, or cannot decide


class Words(NamedTuple):
    """The verdict of a claim whose every check passes, and of one whose every check fails."""

    passes: str
    fails: str


VERDICT_WORDS = Words("reproduced", "not reproduced")
S_WORDS = Words("holds", "does not hold")


def aggregate(checks: Sequence[Check], words: Words = VERDICT_WORDS) -> tuple[bool | None, str]:
    """(reproduced, verdict) of a claim from its checks."""
    if not checks or any(c is None for c in checks):
        return None, "inconclusive"
    if all(checks):
        return True, words.passes
    if not any(checks):
        return False, words.fails
    return None, "mixed"


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


def finite(x: Any) -> float | None:
    """x as a float, or None where it is missing or not finite."""
    return float(x) if x is not None and math.isfinite(float(x)) else None
