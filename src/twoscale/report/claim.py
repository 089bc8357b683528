"""What a claim is: one record (`Claim`) that names it, says what the source claims and how it is tested, and
points to its verdict and to the function that puts the measured numbers in words; the row it makes for the claims
report; and the number formats every system's measured text shares.

A claim's row: {claim, statement, test, measured, reproduced, verdict, headline, detail}, strict JSON. `headline`
holds the few numbers behind the verdict, by label, that the table across seeds and recipes shows with their
spread; `detail` is the verdict's own numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from twoscale.report.verdicts import Ratio, Verdict

CLAIMS_DOC = "docs/claims.md"  # each claim's section, with its test and why it is read so

Headline = Mapping[str, float | None]


@dataclass(frozen=True)
class Premise:
    """What a claim's checks need of the model to be able to fail, as measured on a run: `met` (None where it cannot
    be measured), the reading in words, and the few words a verdict takes where it is not met ("depth unused")."""

    met: bool | None
    text: str
    unmet: str
    headline: Headline = dataclasses.field(default_factory=dict)  # its numbers, beside the claim's own


@dataclass(frozen=True)
class Revision:
    """A reading of a claim chosen or changed after its numbers were seen: what it reads now, what it replaced, why,
    and when (docs/claims.md#readings-chosen-after-the-numbers)."""

    reading: str
    replaced: str
    why: str
    when: str


@dataclass(frozen=True)
class Line:
    """A line a claim's headline numbers are decided against: the labels it applies to (a regular expression the
    whole label matches), the values of the line (a band has two) and whether the numbers are timings, whose
    retiming moves them by up to `report.verdicts.RETIMING_SPREAD` (docs/claims.md#near-the-line)."""

    labels: str
    values: tuple[float, ...]
    timed: bool = False


@dataclass(frozen=True)
class Claim:
    """One claim of the sources (or of ours, said so in its statement), read from a run's tables.

    `title` names it in a few words; `test` says how it is tested (a function of the verdict where the test reads
    parameters). `reads` names the tables the verdict takes, in its argument order; the claim is read where the
    first of them is given (the others may be missing: None). `verdict` is the pure verdict on them; `measured` puts
    the verdict (and the same tables) in words: the measured text and the headline numbers. `premise`, given a run's
    tables by name, says whether the model gives the checks something to decide (a claim on loop geometry needs a
    loop that does something); where it is not met the claim is inconclusive, and its checks' reading is said
    beside. `revisions` are the readings chosen after the numbers were seen (empty: every reading was fixed before
    them). `lines` are the lines its deciding headline numbers are read against, so that a verdict whose numbers lie
    within their own uncertainty of a line says so (`claims.by_recipe.near_the_line`)."""

    id: str
    system: str
    title: str  # a few words, for the README's table of verdicts
    statement: str
    test: str | Callable[[Verdict], str]
    reads: tuple[str, ...]
    verdict: Callable[..., Verdict]
    measured: Callable[..., tuple[str, Headline]]
    premise: Callable[[Mapping[str, pl.DataFrame | None]], Premise | None] | None = None
    revisions: tuple[Revision, ...] = ()
    lines: tuple[Line, ...] = ()

    @property
    def section(self) -> str:
        """The anchor of its section in docs/claims.md: '#c6' for C6 and for its variant C6b."""
        return "#" + self.id.lower().removesuffix("b")

    def applies(self, frames: Mapping[str, pl.DataFrame | None]) -> bool:
        return frames.get(self.reads[0]) is not None

    def row(self, *tables: pl.DataFrame | None, premise: Premise | None = None) -> dict[str, Any]:
        """The claim's row from its tables (in the order of `reads`; trailing ones may be left out) and, where
        measured, its premise: unmet, the verdict is "inconclusive (<why>; the checks read <their verdict>)"."""
        tables = (*tables, *([None] * (len(self.reads) - len(tables))))
        verdict = self.verdict(*tables)
        measured, headline = self.measured(verdict, *tables)
        reproduced, words, detail = verdict.reproduced, verdict.verdict, verdict.detail
        if premise is not None:
            measured = f"{premise.text} {measured}"
            headline = {**premise.headline, **headline}
            detail = {**detail, "premise": {"met": premise.met, "text": premise.text}}
            if premise.met is False:
                reproduced, words = None, f"inconclusive ({premise.unmet}; the checks read {verdict.verdict})"
        return jsonable({
            "claim": self.id,
            "statement": self.statement,
            "test": self.test(verdict) if callable(self.test) else self.test,
            "measured": measured,
            "reproduced": reproduced,
            "verdict": words,
            "headline": dict(headline),
            "detail": detail,
        })

    def row_of(self, frames: Mapping[str, pl.DataFrame | None]) -> dict[str, Any]:
        premise = None if self.premise is None else self.premise(frames)
        return self.row(*(frames.get(name) for name in self.reads), premise=premise)


def jsonable(value: Any) -> Any:
    """Plain Python types only; NaN/inf become None so the rows dump as strict JSON."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a speed ratio with its interval
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if hasattr(value, "item"):  # numpy scalars
        return jsonable(value.item())
    return value


# --- numbers in words ---------------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.{digits}f}"


def times(x: float | None) -> str:
    """A ratio as a multiple ('0.38×'); n/a where there is none."""
    return "n/a" if x is None or not math.isfinite(x) else f"{fmt(x)}×"


def counted(count: Mapping[str, int] | None, kept: str) -> str:
    """'12/4096' from {kept: 12, of: 4096}; 'n/a' where the table has no such count."""
    return "n/a" if count is None else f"{count[kept]}/{count['of']}"


def sci(x: float) -> str:
    """1e-05 -> '1e-5', 0.001 -> '0.001', inf -> 'inf'."""
    text = f"{x:.3g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def ratio_value(ratio: Ratio | None) -> float | None:
    return None if ratio is None else ratio.ratio


def speed_text(ratio: Ratio | None) -> str:
    """A paired speed ratio with its 95% interval, e.g. '0.62× (0.60–0.64)'."""
    if ratio is None:
        return "n/a"
    return f"{times(ratio.ratio)} ({fmt(ratio.low)}–{fmt(ratio.high)})"
