"""Selections on the sweep table that the figures, the verdicts, the tradeoff stage and the latency stage share:
full depth, the best fixed depth K*, a strategy's cheapest setting within a perplexity tolerance of either, and so
the points whose latencies the verdicts compare. They follow from quality and FLOPs alone.

A reference point carries `matched_perplexity`, the perplexity its tolerance is read against: full depth's own, and
for K* the lowest perplexity of any fixed depth, so that K* and the exits compared with it meet one bar."""

from __future__ import annotations

from typing import Any

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.report.tables import finite, require

FULL_DEPTH = "fixed"  # the reference strategy: full depth = "fixed" at setting == max_loops (every group that often)
WITHIN = 0.01  # C6's "within 1%" / "matched quality": perplexity <= 1.01 x the reference's
PAPER_RANGE = (1e-5, 1e-2)  # the paper's threshold sweep: C6 reads the acceleration exit here
ROUND_OFF = 1e-9  # relative slack comparing thresholds (1e-3 off a log grid may be 1.0000000000000002e-3)


def full_depth_rows(sweep: pl.DataFrame) -> pl.DataFrame:
    """The sweep's full-depth rows: the fixed-depth baseline with every group looped max_loops times."""
    full = (pl.col("strategy") == FULL_DEPTH) & (pl.col("setting") == pl.col("max_loops").cast(pl.Float64))
    return sweep.filter(full)


def with_latency(sweep: pl.DataFrame, latency: pl.DataFrame) -> pl.DataFrame:
    """The sweep table with each setting's latency over the timing rounds: ms_per_token (median), ms_low and
    ms_high (the fastest and slowest round) and generated_mean_loops (mean loops per group while generating)."""
    keys = ["recipe", "seed", "strategy", "setting"]
    summary = latency.group_by(keys).agg(
        pl.col("ms_per_token").median(), pl.col("ms_per_token").min().alias("ms_low"),
        pl.col("ms_per_token").max().alias("ms_high"), pl.col("generated_mean_loops").mean())
    return sweep.join(summary, on=keys, how="left", maintain_order="left")


SWEEP_COLUMNS = ("strategy", "criterion", "swept", "setting", "perplexity", "gflops_per_token", "ms_per_token",
                 "mean_loops", "max_loops")


def sweep_points(sweep: pl.DataFrame, strategy: str) -> list[dict[str, Any]]:
    """One strategy's rows as dicts sorted by setting; non-finite perplexity/cost/ms/loops become None."""
    rows = sweep.filter(pl.col("strategy") == strategy).sort("setting")
    return [
        {"strategy": strategy, "setting": float(r["setting"]), "perplexity": finite(r["perplexity"]),
         "gflops_per_token": finite(r["gflops_per_token"]), "ms_per_token": finite(r["ms_per_token"]),
         "mean_loops": finite(r["mean_loops"])}
        for r in rows.iter_rows(named=True)
    ]


def full_depth(sweep: pl.DataFrame) -> dict[str, Any]:
    """The full-depth reference: strategy 'fixed' at setting == max_loops (every group looped max_loops
    times)."""
    require(sweep, "sweep", SWEEP_COLUMNS, "C6")
    rows = full_depth_rows(sweep)
    if rows.height == 0:
        raise TwoscaleError(
            "C6: the sweep table has no full-depth row (strategy 'fixed' at setting = max_loops)")
    r = rows.row(0, named=True)
    ppl, gflops = finite(r["perplexity"]), finite(r["gflops_per_token"])
    if ppl is None or gflops is None or ppl <= 0 or gflops <= 0:
        raise TwoscaleError("C6: the full-depth row has no positive finite perplexity and gflops_per_token")
    return {"strategy": FULL_DEPTH, "setting": float(r["setting"]), "max_loops": int(r["max_loops"]),
            "perplexity": ppl, "gflops_per_token": gflops, "ms_per_token": finite(r["ms_per_token"]),
            "mean_loops": finite(r["mean_loops"]), "matched_perplexity": ppl}


def fixed_depths(sweep: pl.DataFrame) -> list[dict[str, Any]]:
    """The fixed-depth points with a perplexity and a cost, by loop count."""
    return [p for p in sweep_points(sweep, FULL_DEPTH) if p["perplexity"] is not None
            and p["gflops_per_token"] is not None]


def best_fixed_depth(sweep: pl.DataFrame, tolerance: float = WITHIN) -> dict[str, Any]:
    """K*, in the form of `full_depth`: the fewest fixed loops whose perplexity is within `tolerance` of the lowest
    fixed-depth perplexity (which is its `matched_perplexity`; `lowest_loops` is where it is reached). Not the argmin
    itself: fixed depths 0.02% apart are a tie decided by noise, and the cheapest of them is the fair baseline."""
    full = full_depth(sweep)
    points = fixed_depths(sweep)
    lowest = min(points, key=lambda p: (p["perplexity"], p["setting"]))
    fewest = min((p for p in points if p["perplexity"] <= (1 + tolerance) * lowest["perplexity"]),
                 key=lambda p: p["setting"])
    return {**fewest, "max_loops": full["max_loops"], "loops": int(fewest["setting"]),
            "matched_perplexity": lowest["perplexity"], "lowest_loops": int(lowest["setting"])}


def best_within(sweep: pl.DataFrame, strategy: str, tolerance: float = WITHIN,
                reference: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The strategy's cheapest setting (fewest GFLOPs per token) whose perplexity is <= (1 + tolerance) x the
    reference's `matched_perplexity` (default: full depth): {strategy, setting, gflops_per_token, ms_per_token,
    perplexity, mean_loops, flop_ratio = gflops / gflops_reference, latency_cut = 1 - ms / ms_reference (medians, None
    without latencies), perplexity_increase = ppl / ppl_reference - 1}; None when no setting qualifies (or the
    strategy is absent). Ties in cost go to the lower perplexity, then the lower setting."""
    full = reference or full_depth(sweep)
    limit = (1 + tolerance) * full["matched_perplexity"]
    qualifying = [p for p in sweep_points(sweep, strategy) if p["perplexity"] is not None
                  and p["gflops_per_token"] is not None and p["perplexity"] <= limit]
    if not qualifying:
        return None
    best = min(qualifying, key=lambda p: (p["gflops_per_token"], p["perplexity"], p["setting"]))
    timed = best["ms_per_token"] is not None and full["ms_per_token"] is not None
    return {**best, "flop_ratio": best["gflops_per_token"] / full["gflops_per_token"],
            "latency_cut": 1 - best["ms_per_token"] / full["ms_per_token"] if timed else None,
            "perplexity_increase": best["perplexity"] / full["perplexity"] - 1}


def in_paper_range(sweep: pl.DataFrame, strategy: str) -> pl.DataFrame:
    """The sweep with `strategy`'s settings cut to the paper's threshold range (the other strategies' rows
    kept)."""
    low, high = PAPER_RANGE
    setting = pl.col("setting")
    return sweep.filter((pl.col("strategy") != strategy)
                        | ((setting >= low * (1 - ROUND_OFF)) & (setting <= high * (1 + ROUND_OFF))))


def compared_points(sweep: pl.DataFrame, tolerance: float = WITHIN) -> set[tuple[str, float]]:
    """The (strategy, setting) points of one run whose latencies the verdicts compare: full depth, the best fixed
    depth K*, and every strategy's best point within `tolerance` of either, over all its settings and over those
    in the paper's range. They follow from quality and FLOPs alone, so the sweep table names them before anything
    is timed."""
    references = [full_depth(sweep), best_fixed_depth(sweep, tolerance)]
    points = {(reference["strategy"], reference["setting"]) for reference in references}
    for name in sweep["strategy"].unique(maintain_order=True).to_list():
        for table in (sweep, in_paper_range(sweep, name)):
            for reference in references:
                best = best_within(table, name, tolerance, reference)
                if best is not None:
                    points.add((name, best["setting"]))
    return points
