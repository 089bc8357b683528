"""The verdicts on the early-exit sweep: the paper's C6 and our C6b, pure functions of the sweep table gathered by
the `tradeoff` stage (one row per strategy and setting: quality, loops, cost per token and the median latency) and
of its latency rounds (one row per strategy, setting and round). The sweep's reference points (full depth, the
best fixed depth K*, a strategy's cheapest setting within a perplexity tolerance of either) are in `exits.tables`,
which the `tradeoff` and `latency` stages read too.

A strategy's best point within a tolerance is its setting with the fewest FLOPs per token (a count, the same on
every run), and every speed comparison between two points is the ratio of their latencies paired by round, with a
95% interval: a check passes or fails only when the whole interval is on one side of its threshold."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from twoscale.exits.tables import WITHIN, best_fixed_depth, best_within, full_depth, sweep_points
from twoscale.exits.thresholds import (
    C6_ACCELERATION,
    C6_FIRST_ORDER,
    C6_FIRST_ORDER_KNEE,
    C6_KL_CRITERION,
    C6_MAX_FLAT_SPREAD,
    C6_MIN_LATENCY_CUT,
    C6_PAPER_RANGE,
)
from twoscale.report.tables import require
from twoscale.report.verdicts import Ratio, Verdict, at_most, ratio_by_round

LATENCY_COLUMNS = ("strategy", "setting", "round", "ms_per_token")
_ROUND_OFF = 1e-9  # relative slack comparing thresholds (1e-3 off a log grid may be 1.0000000000000002e-3)


def power_of_ten(x: float) -> str:
    """A power-of-ten threshold as '1e-3', as the reasons below and the claims' text name them."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def speed_ratio(latency: pl.DataFrame, point: dict[str, Any] | None, reference: dict[str, Any] | None
                ) -> Ratio | None:
    """The latency of `point` over that of `reference` (each a strategy and setting), paired by round; None when
    either is missing or the two share no round."""
    if point is None or reference is None:
        return None
    require(latency, "latency", LATENCY_COLUMNS, "C6")

    def rounds(p: dict[str, Any]) -> pl.DataFrame:
        setting = p["setting"]
        same = ((pl.col("setting") - setting).abs() <= _ROUND_OFF * abs(setting) if math.isfinite(setting)
                else pl.col("setting") == setting)
        return latency.filter((pl.col("strategy") == p["strategy"]) & same)

    return ratio_by_round(rounds(point), rounds(reference), "ms_per_token")


def _kl_strategies(sweep: pl.DataFrame) -> list[str]:
    return sorted(sweep.filter(pl.col("criterion") == C6_KL_CRITERION)["strategy"].unique().to_list())


def _in_range(x: float, lo: float, hi: float) -> bool:
    return lo * (1 - _ROUND_OFF) <= x <= hi * (1 + _ROUND_OFF)


def _latency_cut(sweep: pl.DataFrame, latency: pl.DataFrame, full: dict[str, Any]) -> dict[str, Any]:
    """(a) acceleration's best point within 1% cuts ms/token by >= 25%: its paired latency ratio to the reference
    is at most 0.75, the whole interval."""
    if not sweep_points(sweep, C6_ACCELERATION):
        return {"passes": None, "reason": f"no {C6_ACCELERATION} rows"}
    best = best_within(sweep, C6_ACCELERATION, reference=full)
    if best is None:
        return {"passes": False, "best": None, "reason": "no threshold keeps perplexity within 1%"}
    ratio = speed_ratio(latency, best, full)
    passes = at_most(ratio, 1 - C6_MIN_LATENCY_CUT)
    info = {"passes": passes, "best": best, "ratio": ratio}
    if ratio is None:
        return {**info, "reason": "no paired latency rounds"}
    return info if passes is not None else {**info, "reason": "the ratio's interval straddles the line"}


def _flat(sweep: pl.DataFrame) -> dict[str, Any]:
    """(b) over the swept acceleration thresholds in the paper's range, max/min perplexity - 1 <= 1%."""
    points = [p for p in sweep_points(sweep, C6_ACCELERATION)
              if p["perplexity"] is not None and _in_range(p["setting"], *C6_PAPER_RANGE)]
    info: dict[str, Any] = {"points": points}
    if len(points) < 2:
        return {**info, "passes": None, "reason": f"{len(points)} swept {C6_ACCELERATION} threshold(s) in "
                f"[{power_of_ten(C6_PAPER_RANGE[0])}, {power_of_ten(C6_PAPER_RANGE[1])}]"}
    ppl = [p["perplexity"] for p in points]
    loops = [p["mean_loops"] for p in points if p["mean_loops"] is not None] or [math.nan]
    spread = max(ppl) / min(ppl) - 1
    return {**info, "min": min(ppl), "max": max(ppl), "spread": spread, "loops": (min(loops), max(loops)),
            "passes": spread <= C6_MAX_FLAT_SPREAD}


def _first_order_knee(sweep: pl.DataFrame, full: dict[str, Any]) -> dict[str, Any]:
    """(c) step_norm within 1% at every swept tau <= 1e-3, more than 1% above full depth at some tau in
    (1e-3, 1e-2]."""
    limit = (1 + WITHIN) * full["perplexity"]
    knee, hi = C6_FIRST_ORDER_KNEE * (1 + _ROUND_OFF), C6_PAPER_RANGE[1] * (1 + _ROUND_OFF)
    points = [{**p, "increase": p["perplexity"] / full["perplexity"] - 1}
              for p in sweep_points(sweep, C6_FIRST_ORDER) if p["perplexity"] is not None]
    below = [p for p in points if p["setting"] <= knee]
    above = [p for p in points if knee < p["setting"] <= hi]
    info: dict[str, Any] = {
        "below": below, "above": above,
        "worst_below": max(below, key=lambda p: p["perplexity"]) if below else None,
        "worst_above": max(above, key=lambda p: p["perplexity"]) if above else None,
    }
    if not below or not above:
        sides = ((f"≤ {power_of_ten(C6_FIRST_ORDER_KNEE)}", below),
                 (f"in ({power_of_ten(C6_FIRST_ORDER_KNEE)}, {power_of_ten(C6_PAPER_RANGE[1])}]", above))
        missing = " or ".join(side for side, ps in sides if not ps)
        return {**info, "passes": None, "reason": f"no swept {C6_FIRST_ORDER} threshold {missing}"}
    info["within_below"] = all(p["perplexity"] <= limit for p in below)
    info["degrades_above"] = any(p["perplexity"] > limit for p in above)
    return {**info, "passes": info["within_below"] and info["degrades_above"]}


def _kl_slower(sweep: pl.DataFrame, latency: pl.DataFrame, full: dict[str, Any],
               acceleration: dict[str, Any] | None) -> dict[str, Any]:
    """(d) at each one's best point within 1%, every KL strategy is slower than acceleration: the paired latency
    ratio KL / acceleration is above 1, the whole interval."""
    kl = _kl_against(sweep, latency, full, acceleration)
    info: dict[str, Any] = {"kl": kl}
    if not kl:
        return {**info, "passes": None, "reason": f"no strategy with criterion '{C6_KL_CRITERION}'"}
    if acceleration is None:
        return {**info, "passes": None, "reason": f"{C6_ACCELERATION} has no point within 1%"}
    verdicts = [k["slower"] for k in kl]
    if any(v is False for v in verdicts):
        return {**info, "passes": False}
    if any(k["best"] is None for k in kl):
        return {**info, "passes": None, "reason": "a KL strategy has no point within 1%"}
    if any(v is None for v in verdicts):
        return {**info, "passes": None, "reason": "a latency ratio's interval straddles 1"}
    return {**info, "passes": True}


def _kl_against(sweep: pl.DataFrame, latency: pl.DataFrame, reference: dict[str, Any],
                acceleration: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each KL strategy's best point within 1% of `reference`, its latency and FLOP ratios to acceleration's best
    point, and whether it is slower (None: undecided, or no best point)."""
    kl = []
    for name in _kl_strategies(sweep):
        best = best_within(sweep, name, reference=reference)
        ratio = speed_ratio(latency, best, acceleration)
        kl.append({"strategy": name, "best": best, "ratio": ratio, "slower": _slower(ratio),
                   "flop_ratio": _flop_ratio(best, acceleration)})
    return kl


def _slower(ratio: Ratio | None) -> bool | None:
    """Slower: the whole interval of the latency ratio is above 1 (faster: all below; else undecided)."""
    if ratio is None:
        return None
    return True if ratio.low > 1 else (False if ratio.high < 1 else None)


def _flop_ratio(point: dict[str, Any] | None, reference: dict[str, Any] | None) -> float | None:
    if point is None or reference is None:
        return None
    return point["gflops_per_token"] / reference["gflops_per_token"]


def acceleration_exit(sweep: pl.DataFrame, latency: pl.DataFrame) -> Verdict:
    """C6 against full depth: (a) acceleration cuts ms/token by >= 25% within 1% of full-depth perplexity, (b) its
    perplexity is flat (<= 1%) over the paper's thresholds, (c) step_norm is within 1% up to tau = 1e-3 and
    degrades beyond, (d) every KL strategy is slower than acceleration at matched quality. Every strategy's best
    point within 1% is reported."""
    full = full_depth(sweep)
    strategies = []
    for name in sweep["strategy"].unique(maintain_order=True).to_list():
        rows = sweep.filter(pl.col("strategy") == name)
        strategies.append({"strategy": name, "criterion": rows["criterion"][0], "swept": rows["swept"][0],
                           "settings": rows.height, "best": best_within(sweep, name, reference=full)})
    latency_cut = _latency_cut(sweep, latency, full)
    tests = {"latency_cut": latency_cut, "flat": _flat(sweep), "first_order": _first_order_knee(sweep, full),
             "kl_slower": _kl_slower(sweep, latency, full, latency_cut.get("best"))}
    return Verdict([t["passes"] for t in tests.values()],
                   {"tolerance": WITHIN, "full_depth": full, "strategies": strategies, "tests": tests})


def acceleration_against_best_fixed_depth(sweep: pl.DataFrame, latency: pl.DataFrame) -> Verdict:
    """C6b: C6's (a) and (d) read against the best fixed depth K* instead of full depth. Added after the numbers
    showed that on our model full depth is the worst setting, which makes "within 1% of full depth" admit any
    early exit."""
    reference = best_fixed_depth(sweep)
    acceleration = best_within(sweep, C6_ACCELERATION, reference=reference)
    ratio = speed_ratio(latency, acceleration, reference)
    cut = None if acceleration is None else at_most(ratio, 1 - C6_MIN_LATENCY_CUT)
    # a KL exit that never comes within 1% of K* cannot match acceleration's quality: it loses
    kl = [{**k, "slower": True if k["best"] is None else k["slower"]}
          for k in _kl_against(sweep, latency, reference, acceleration)]
    slower = [k["slower"] for k in kl]
    if acceleration is None or not kl:
        kl_slower = None
    else:
        kl_slower = False if False in slower else (None if None in slower else True)
    return Verdict([cut, kl_slower], {"reference": reference, "acceleration": acceleration, "ratio": ratio,
                                      "kl": kl})
