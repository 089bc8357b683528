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

from twoscale.exits.tables import (
    PAPER_RANGE,
    ROUND_OFF,
    WITHIN,
    best_fixed_depth,
    best_within,
    fixed_depths,
    full_depth,
    in_paper_range,
    sweep_points,
)
from twoscale.exits.thresholds import (
    C6_ACCELERATION,
    C6_FIRST_ORDER,
    C6_FIRST_ORDER_ABSOLUTE,
    C6_FIRST_ORDER_KNEE,
    C6_KL_CRITERION,
    C6_MAX_FLAT_SPREAD,
    C6_MIN_LATENCY_CUT,
    C6_MIN_SAVED_LOOPS,
)
from twoscale.report.tables import require
from twoscale.report.verdicts import Ratio, Verdict, at_most, ratio_by_round

LATENCY_COLUMNS = ("strategy", "setting", "round", "ms_per_token")


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
        same = ((pl.col("setting") - setting).abs() <= ROUND_OFF * abs(setting) if math.isfinite(setting)
                else pl.col("setting") == setting)
        return latency.filter((pl.col("strategy") == p["strategy"]) & same)

    return ratio_by_round(rounds(point), rounds(reference), "ms_per_token")


def _kl_strategies(sweep: pl.DataFrame) -> list[str]:
    return sorted(sweep.filter(pl.col("criterion") == C6_KL_CRITERION)["strategy"].unique().to_list())


def _span(low: float, high: float, open_low: bool = False) -> str:
    return f"{'(' if open_low else '['}{power_of_ten(low)}, {power_of_ten(high)}]"


PAPER_SPAN = _span(*PAPER_RANGE)


def _mean_loops(points: list[dict[str, Any]]) -> list[float]:
    return [p["mean_loops"] for p in points if p["mean_loops"] is not None]


def exits_early(points: list[dict[str, Any]], max_loops: int) -> bool:
    """Whether a rule exits at some of these settings: at one of them it saves at least C6_MIN_SAVED_LOOPS loops
    per group on average against full depth."""
    loops = _mean_loops(points)
    return bool(loops) and max_loops - min(loops) >= C6_MIN_SAVED_LOOPS


def _never_exits(name: str, points: list[dict[str, Any]], max_loops: int, span: str) -> str:
    """Why a check that reads a rule over a range of thresholds cannot decide: the rule never exits there."""
    loops = _mean_loops(points)
    fewest = f"{min(loops):.2f}" if loops else "n/a"
    return (f"'{name}' never exits at τ ∈ {span}: its fewest mean loops per group there are {fewest} of "
            f"{max_loops}, saving less than {C6_MIN_SAVED_LOOPS:g}")


def could_hurt(sweep: pl.DataFrame, full: dict[str, Any], ranged: list[dict[str, Any]]) -> dict[str, Any]:
    """The premise of a check that reads how a rule's quality holds as it exits earlier: stopping where the rule
    stops could have hurt. Over the thresholds the check reads (`ranged`), the rule stops after between `fewest`
    and `most` mean loops per group. Met when some fixed depth k in that span is more than 1% worse than full depth.
    Where none is, the fixed depths predict a flat perplexity and no degradation, so a check decides only what goes
    against that prediction: a spread or a degradation seen in the rule's own perplexity. (Until 2026-11-29 the
    span started at the rule's fewest loops over every setting swept, where τ = ∞ stops after one loop: on nearly
    every model the premise then held however little the thresholds read made the rule exit.)"""
    loops = _mean_loops(ranged)
    fewest, most = min(loops), max(loops)
    depths = [{"loops": int(p["setting"]), "increase": p["perplexity"] / full["perplexity"] - 1}
              for p in fixed_depths(sweep) if fewest * (1 - ROUND_OFF) <= p["setting"] <= most * (1 + ROUND_OFF)]
    return {"fewest": fewest, "most": most, "depths": depths,
            "met": any(d["increase"] > WITHIN for d in depths)}


def _could_not_hurt(name: str, premise: dict[str, Any], thresholds: str) -> str:
    """Why a check on a rule's quality over a range of `thresholds` (as 'τ ∈ [1e-5, 1e-2]') cannot decide:
    stopping there could not hurt."""
    depths = premise["depths"]
    where = (f"'{name}' stops after {premise['fewest']:.2f}–{premise['most']:.2f} mean loops per group at "
             f"{thresholds}")
    if not depths:
        return f"{where}, and no fixed depth swept lies in that span: whether stopping there could hurt is unknown"
    worst = max(depths, key=lambda d: d["increase"])
    return (f"stopping where the rule stops could not hurt: {where}, and every fixed depth swept in that span "
            f"({depths[0]['loops']}–{depths[-1]['loops']} loops) is within 1% of full depth (the worst "
            f"{100 * worst['increase']:+.2f}% at {worst['loops']} loops)")


def _latency_cut(sweep: pl.DataFrame, latency: pl.DataFrame, full: dict[str, Any]) -> dict[str, Any]:
    """(a) acceleration's best point within 1% among the paper's thresholds cuts ms/token by >= 25%: its paired
    latency ratio to the reference is at most 0.75, the whole interval. Undecided where the rule never exits at
    those thresholds; its best point at any threshold is reported beside."""
    ranged = in_paper_range(sweep, C6_ACCELERATION)
    points = sweep_points(ranged, C6_ACCELERATION)
    info: dict[str, Any] = {"best_anywhere": best_within(sweep, C6_ACCELERATION, reference=full)}
    if not points:
        return {**info, "passes": None, "reason": f"no {C6_ACCELERATION} threshold swept in {PAPER_SPAN}"}
    if not exits_early(points, full["max_loops"]):
        return {**info, "passes": None, "reason": _never_exits(C6_ACCELERATION, points, full["max_loops"], PAPER_SPAN)}
    best = best_within(ranged, C6_ACCELERATION, reference=full)
    if best is None:
        return {**info, "passes": False, "best": None, "reason": f"no threshold in {PAPER_SPAN} keeps perplexity "
                "within 1%"}
    ratio = speed_ratio(latency, best, full)
    passes = at_most(ratio, 1 - C6_MIN_LATENCY_CUT)
    info.update(passes=passes, best=best, ratio=ratio)
    if ratio is None:
        return {**info, "reason": "no paired latency rounds"}
    return info if passes is not None else {**info, "reason": "the ratio's interval straddles the line"}


def _flat(sweep: pl.DataFrame, full: dict[str, Any]) -> dict[str, Any]:
    """(b) over the swept acceleration thresholds in the paper's range, max/min perplexity - 1 <= 1%; undecided
    where the rule never exits there, or where stopping where it stops could not hurt (`could_hurt`) and it stayed
    flat: flat by construction (a spread above 1% fails whatever the fixed depths say)."""
    points = [p for p in sweep_points(in_paper_range(sweep, C6_ACCELERATION), C6_ACCELERATION)
              if p["perplexity"] is not None]
    info: dict[str, Any] = {"points": points}
    if len(points) < 2:
        return {**info, "passes": None, "reason": f"{len(points)} swept {C6_ACCELERATION} threshold(s) in "
                f"{PAPER_SPAN}"}
    ppl = [p["perplexity"] for p in points]
    loops = _mean_loops(points) or [math.nan]
    spread = max(ppl) / min(ppl) - 1
    info.update(min=min(ppl), max=max(ppl), spread=spread, loops=(min(loops), max(loops)))
    if not exits_early(points, full["max_loops"]):
        return {**info, "passes": None, "reason": _never_exits(C6_ACCELERATION, points, full["max_loops"],
                                                                PAPER_SPAN)}
    info["premise"] = premise = could_hurt(sweep, full, points)
    flat = spread <= C6_MAX_FLAT_SPREAD
    if not premise["met"] and flat:
        return {**info, "passes": None, "reason": _could_not_hurt(C6_ACCELERATION, premise, f"τ ∈ {PAPER_SPAN}")}
    return {**info, "passes": flat}


def first_order_knee(sweep: pl.DataFrame, full: dict[str, Any], strategy: str = C6_FIRST_ORDER) -> dict[str, Any]:
    """(c) a first-order strategy is within 1% at every swept tau <= 1e-3 and more than 1% above full depth at
    some tau in (1e-3, 1e-2]; undecided where it never exits in (1e-3, 1e-2], or where stopping where it stops
    at the thresholds (c) reads (every swept tau <= 1e-2) could not hurt (`could_hurt`) and the rule stayed within
    1% at all of them: a failure by construction (a rule seen more than 1% worse has shown it can degrade)."""
    limit = (1 + WITHIN) * full["perplexity"]
    knee, high = C6_FIRST_ORDER_KNEE, PAPER_RANGE[1]
    points = [{**p, "increase": p["perplexity"] / full["perplexity"] - 1}
              for p in sweep_points(sweep, strategy) if p["perplexity"] is not None]
    below = [p for p in points if p["setting"] <= knee * (1 + ROUND_OFF)]
    above = [p for p in points if knee * (1 + ROUND_OFF) < p["setting"] <= high * (1 + ROUND_OFF)]
    info: dict[str, Any] = {
        "strategy": strategy, "below": below, "above": above,
        "worst_below": max(below, key=lambda p: p["perplexity"]) if below else None,
        "worst_above": max(above, key=lambda p: p["perplexity"]) if above else None,
    }
    above_span = _span(knee, high, open_low=True)
    if not below or not above:
        sides = ((f"≤ {power_of_ten(knee)}", below), (f"in {above_span}", above))
        missing = " or ".join(side for side, ps in sides if not ps)
        return {**info, "passes": None, "reason": f"no swept {strategy} threshold {missing}"}
    info["within_below"] = all(p["perplexity"] <= limit for p in below)
    info["degrades_above"] = any(p["perplexity"] > limit for p in above)
    if not exits_early(above, full["max_loops"]):
        return {**info, "passes": None, "reason": _never_exits(strategy, above, full["max_loops"], above_span)}
    info["premise"] = premise = could_hurt(sweep, full, below + above)
    if not premise["met"] and info["within_below"] and not info["degrades_above"]:
        return {**info, "passes": None, "reason": _could_not_hurt(strategy, premise, f"τ ≤ {power_of_ten(high)}")}
    return {**info, "passes": info["within_below"] and info["degrades_above"]}


def _kl_slower(sweep: pl.DataFrame, latency: pl.DataFrame, full: dict[str, Any],
               acceleration: dict[str, Any] | None) -> dict[str, Any]:
    """(d) at each one's best point within 1%, each in the paper's range, every KL strategy is slower than
    acceleration: the paired latency ratio KL / acceleration is above 1, the whole interval."""
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
                acceleration: dict[str, Any] | None, ranged: bool = True) -> list[dict[str, Any]]:
    """Each KL strategy's best point within 1% of `reference` among its thresholds in the paper's range (`ranged`,
    the range its sources state too: Geiping et al.'s 5e-4 lies inside; else at any threshold), its latency and FLOP
    ratios to `acceleration`'s best point, and whether it is slower (None: undecided, or no best point). Each side
    is read in its own range: KL at any threshold (τ = ∞ stops after one loop) against acceleration held to the
    paper's range compares unequal ranges."""
    kl = []
    for name in _kl_strategies(sweep):
        table = in_paper_range(sweep, name) if ranged else sweep
        best = best_within(table, name, reference=reference)
        ratio = speed_ratio(latency, best, acceleration)
        kl.append({"strategy": name, "best": best, "ratio": ratio, "slower": _slower(ratio),
                   "flop_ratio": _flop_ratio(best, acceleration),
                   "settings": table.filter(pl.col("strategy") == name).height})
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
    """C6 against full depth: (a) acceleration, at the paper's thresholds, cuts ms/token by >= 25% within 1% of
    full-depth perplexity, (b) its perplexity is flat (<= 1%) over those thresholds, (c) the relative first-order
    exit is within 1% up to tau = 1e-3 and degrades beyond, (d) every KL strategy is slower than acceleration at
    matched quality, both at the paper's thresholds. (a) and (b) are undecided where acceleration never exits at
    the paper's thresholds, (c) where the first-order exit never exits beyond 1e-3, and (b) and (c) where stopping
    where the rule stops could not hurt (`could_hurt`). Every strategy's best point within 1% is reported, and
    beside the verdict the absolute first-order exit's (c) and (d) with both sides at any threshold."""
    full = full_depth(sweep)
    strategies = []
    for name in sweep["strategy"].unique(maintain_order=True).to_list():
        rows = sweep.filter(pl.col("strategy") == name)
        strategies.append({"strategy": name, "criterion": rows["criterion"][0], "swept": rows["swept"][0],
                           "settings": rows.height, "best": best_within(sweep, name, reference=full)})
    latency_cut = _latency_cut(sweep, latency, full)
    tests = {"latency_cut": latency_cut, "flat": _flat(sweep, full),
             "first_order": first_order_knee(sweep, full),
             "kl_slower": _kl_slower(sweep, latency, full, latency_cut.get("best"))}
    # reported, not scored: the absolute first-order exit's (c), and (d) with both sides at any threshold
    absolute = first_order_knee(sweep, full, C6_FIRST_ORDER_ABSOLUTE)
    anywhere = _kl_against(sweep, latency, full, latency_cut["best_anywhere"], ranged=False)
    return Verdict([t["passes"] for t in tests.values()],
                   {"tolerance": WITHIN, "full_depth": full, "strategies": strategies, "tests": tests,
                    "first_order_absolute": absolute, "kl_anywhere": anywhere})


def acceleration_against_best_fixed_depth(sweep: pl.DataFrame, latency: pl.DataFrame) -> Verdict:
    """C6b: C6's (a) and (d) read against the best fixed depth K* (`best_fixed_depth`) instead of full depth, within
    1% of the lowest fixed-depth perplexity, acceleration and the KL exits at the paper's thresholds (both
    undecided where acceleration never exits there); (d) with both at any threshold beside. Added after the numbers
    showed that on our model full depth is the worst setting, which makes "within 1% of full depth" admit any
    early exit."""
    reference = best_fixed_depth(sweep)
    ranged = in_paper_range(sweep, C6_ACCELERATION)
    fires = exits_early(sweep_points(ranged, C6_ACCELERATION), reference["max_loops"])
    acceleration = best_within(ranged, C6_ACCELERATION, reference=reference) if fires else None
    ratio = speed_ratio(latency, acceleration, reference)
    cut = None if acceleration is None else at_most(ratio, 1 - C6_MIN_LATENCY_CUT)
    anywhere = best_within(sweep, C6_ACCELERATION, reference=reference)
    kl = _losing_unmatched(_kl_against(sweep, latency, reference, acceleration))
    slower = [k["slower"] for k in kl]
    if acceleration is None or not kl:
        kl_slower = None
    else:
        kl_slower = False if False in slower else (None if None in slower else True)
    return Verdict([cut, kl_slower], {"reference": reference, "acceleration": acceleration, "ratio": ratio,
                                      "kl": kl, "acceleration_exits": fires, "acceleration_anywhere": anywhere,
                                      "kl_anywhere": _losing_unmatched(
                                          _kl_against(sweep, latency, reference, anywhere, ranged=False))})


def _losing_unmatched(kl: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A KL exit that never comes within 1% of K* at its settings read cannot match acceleration's quality: it counts
    as slower (one with no setting in the range read stays undecided)."""
    return [{**k, "slower": True if k["best"] is None and k["settings"] else k["slower"]} for k in kl]
