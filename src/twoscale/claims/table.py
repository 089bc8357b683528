"""The paper's findings C1-C6 (Pappone et al., arXiv 2509.23314), after the precondition S that more loops do not
break the model, the parallel sampler's C7 (docs/claims.md#c7) and Raptor's C8 (docs/claims.md#c8, on every plain
GPT under `teachers`), written out as the rows of the claims report.

Every claim is one row: {claim, statement, test, measured, reproduced, verdict, headline, detail}. This module holds
the words: what the paper says, the test in words, what was measured in words, and the labels of the few headline
numbers that a table across seeds and recipes shows. The verdict and the numbers behind it (`detail`) come from the
pure verdicts in each system's `verdicts` module (`geometry`, `exits`, `sampler`, `surrogates`); the tests' thresholds are in `report.thresholds`, fixed
from the paper's wording before looking at any measured number.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from twoscale.pipeline.errors import TwoscaleError
from twoscale.report.thresholds import (
    C1_K_SETTLED,
    C1_MAX_RATIO,
    C2_K_SETTLED,
    C3_BAND,
    C3_ORTHOGONAL_MAX,
    C3_TREND_TOLERANCE,
    C4_DLR_LOOPS,
    C4_MIN_DLR,
    C5_MAX_PATH_TO_JUMP,
    C5_MIN_DLR,
    C5_MIN_TURNING_DEG,
    C6_ACCELERATION,
    C6_FIRST_ORDER,
    C6_FIRST_ORDER_KNEE,
    C6_KL_CRITERION,
    C6_MAX_FLAT_SPREAD,
    C6_MIN_LATENCY_CUT,
    C6_PAPER_RANGE,
    C6_TOLERANCE,
    C7_MIN_SPEEDUP,
    C7B_MIN_SPEEDUP,
    C8_BLOCKS,
    C8_RECOVERY,
    S_TOLERANCE,
)
from twoscale.report.tables import origins
from twoscale.report.verdicts import Ratio, Verdict
from twoscale.exits.verdicts import (
    acceleration_against_best_fixed_depth,
    acceleration_exit,
    full_depth,
    power_of_ten,
)
from twoscale.geometry.verdicts import (
    drift_exceeds_loop,
    loop_stability,
    spirals_and_jumps,
    step_cosine_settles,
    step_sizes_shrink,
    steps_shrink_over_training,
)
from twoscale.sampler.verdicts import (
    Speedup,
    speedup_over_full_recurrence,
    speedup_over_matched_decoding,
)
from twoscale.surrogates.verdicts import two_blocks_beat_scratch, two_blocks_recover

# --- the row and its numbers in words ----------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """Plain Python types only; NaN/inf become None so the rows dump as strict JSON."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a speed ratio with its interval
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    return value


def _row(claim: str, statement: str, test: str, measured: str, verdict: Verdict,
         headline: Mapping[str, float | None]) -> dict[str, Any]:
    """One claim's row. `headline`: the few numbers behind the verdict, by label, that a table across seeds and
    recipes shows with their spread."""
    return _jsonable({
        "claim": claim,
        "statement": statement,
        "test": test,
        "measured": measured,
        "reproduced": verdict.reproduced,
        "verdict": verdict.verdict,
        "headline": dict(headline),
        "detail": verdict.detail,
    })


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.{digits}f}"


def _counted(count: Mapping[str, int] | None, kept: str) -> str:
    """'12/4096' from {kept: 12, of: 4096}; 'n/a' where the table has no such count."""
    return "n/a" if count is None else f"{count[kept]}/{count['of']}"


def _sci(x: float) -> str:
    """1e-05 -> '1e-5', 0.001 -> '0.001', inf -> 'inf'."""
    text = f"{x:.3g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def _setting_text(swept: str | None, setting: float) -> str:
    return f"{'τ' if swept in (None, 'threshold') else swept} {_sci(setting)}"


def _share(x: float | None) -> str:
    return "n/a (the teacher does not beat the unigram baseline)" if x is None else f"{100 * x:.1f}%"


# --- S and C1-C5: the loop geometry ------------------------------------------------------------------------


def s_loop_stability(loss_vs_loops: pl.DataFrame) -> dict[str, Any]:
    """S: the validation loss at the most loops measured against the best loop count, last checkpoint."""
    verdict = loop_stability(loss_vs_loops)
    d = verdict.detail
    curve, best, most, rise = d["loss_vs_loops"], d["best_loops"], d["most_loops"], d["rise"]
    return _row(
        "S",
        "Precondition, not a claim of the paper: more loops do not break the model, so its loop dynamics are "
        "worth measuring.",
        f"Last checkpoint, validation loss with every group looped K times: loss at the largest K measured <= "
        f"the lowest loss over all K + {S_TOLERANCE} nats.",
        f"step {d['step']}: {_fmt(curve.get(1), 3)} at 1 loop, best {_fmt(curve[best], 3)} "
        f"at {best}, {_fmt(curve[most], 3)} at {most} ({rise:+.3f} nats over the best). At {most} loops over "
        "steps " + ", ".join(f"{step}: {_fmt(loss, 2)}" for step, loss in d["loss_at_most_loops_by_step"].items()),
        verdict,
        {"loss at 1 loop": curve.get(1), "best loss": curve[best], "best loop count": best,
         f"loss at {most} loops": curve[most], "rise to the most loops": rise},
    )


def c1_step_sizes_shrink(geometry: pl.DataFrame) -> dict[str, Any]:
    """C1: every group's step sizes at least halved by k = 10 and falling less after it, last checkpoint."""
    verdict = step_sizes_shrink(geometry)
    groups = verdict.detail["groups"]
    parts = [
        f"g{d['group']}: s(10)/s(1) = {_fmt(d['ratio_10_to_1'])}, fall after/before k=10 = "
        f"{_fmt(d['drop_after_10'])}/{_fmt(d['drop_before_10'])}" if d["passes"] is not None
        else f"g{d['group']}: {d['reason']}"
        for d in groups
    ]
    return _row(
        "C1",
        "Step sizes shrink quickly with k, within about 5-10 steps.",
        f"Last checkpoint, per group, mean step size ‖Δ^(k)‖: s({C1_K_SETTLED}) <= {C1_MAX_RATIO} × s(1), "
        f"and the fall after k={C1_K_SETTLED} is smaller than the fall before it "
        f"(s({C1_K_SETTLED}) − s(K) < s(1) − s({C1_K_SETTLED})). Reproduced if every group passes.",
        f"step {verdict.detail['step']}: " + "; ".join(parts),
        verdict,
        {f"s(10)/s(1) g{d['group']}": d.get("ratio_10_to_1") for d in groups},
    )


def c2_steps_shrink_over_training(geometry: pl.DataFrame) -> dict[str, Any]:
    """C2: every group's steps decay faster with k, and are smaller, at the last checkpoint than at the first."""
    verdict = steps_shrink_over_training(geometry)
    first, last, groups = (verdict.detail[key] for key in ("first_step", "last_step", "groups"))
    if first == last:
        measured = f"only one checkpoint (step {last}): nothing to compare"
    else:
        measured = f"step {first} → {last}: " + "; ".join(
            f"g{d['group']}: s({d['k_ref']})/s(1) "
            f"{_fmt(d['decay_ratio_first'])} → {_fmt(d['decay_ratio_last'])}, "
            f"mean relative step {_fmt(d['mean_relative_first'], 3)} → {_fmt(d['mean_relative_last'], 3)}"
            if d["passes"] is not None else f"g{d['group']}: {d['reason']}"
            for d in groups
        ) + "; steps at the precision floor (their sizes count as measured), first → last: " + ", ".join(
            f"g{d['group']} {_counted(d.get('steps_at_floor_first'), 'at_floor')} → "
            f"{_counted(d.get('steps_at_floor_last'), 'at_floor')}" for d in groups if d["passes"] is not None)
    return _row(
        "C2",
        "Across training, loop steps get smaller: the decay with k gets faster in later checkpoints.",
        f"First vs last checkpoint, per group: s(k*)/s(1) with k* = min({C2_K_SETTLED}, K) is lower at the "
        f"last checkpoint, and the mean over k of the relative step size ‖Δ^(k)‖/‖x^(k−1)‖ is lower. "
        f"Reproduced if both hold for every group, mixed if for some. Steps at the precision floor are counted "
        f"and reported; their sizes stay in the means (they are known to be below the floor).",
        measured,
        verdict,
        {label: d.get(key) for d in groups for label, key in (
            (f"s(k*)/s(1) g{d['group']} first", "decay_ratio_first"),
            (f"s(k*)/s(1) g{d['group']} last", "decay_ratio_last"))},
    )


def c3_step_cosine(geometry: pl.DataFrame) -> dict[str, Any]:
    """C3: every group's late-k cosine in the paper's band at the last checkpoint; its trend across training."""
    verdict = step_cosine_settles(geometry)
    d = verdict.detail
    first, last, groups = d["first_step"], d["last_step"], d["groups"]
    lo, hi = C3_BAND
    measured = (
        f"step {last}, mean cos over k > K/2: "
        + ", ".join(f"g{g['group']} {_fmt(g['late_cosine'], 3)} "
                    f"({_counted(g.get('cosines_above_floor'), 'kept')} cosines above the floor)" for g in groups)
        + (f"; step {first} → {last} (mean over groups) {_fmt(d['late_cosine_first'], 3)} → "
           f"{_fmt(d['late_cosine_last'], 3)}, {d['trend']}" if first != last else "; one checkpoint, no trend")
        + f". Supports {d['supports']}."
    )
    return _row(
        "C3",
        f"Consecutive-step cosine rises and settles around {lo}-{hi} late in training "
        "(the text also says steps grow 'increasingly orthogonal').",
        f"Last checkpoint, per group, mean of cos(Δ^(k), Δ^(k−1)) over the last half of the loop steps "
        f"(k > K/2), over the steps above the precision floor: reproduced if in [{lo}, {hi}] for every group. "
        f"Also reported: its trend from the first "
        f"to the last checkpoint (toward 0 = orthogonal, toward 1 = aligned; |change| ≤ {C3_TREND_TOLERANCE} "
        f"= flat) "
        f"and which statement the level supports (|cos| ≤ {C3_ORTHOGONAL_MAX} counts as orthogonal).",
        measured,
        verdict,
        {f"late cosine g{g['group']}": g["late_cosine"] for g in groups},
    )


def c4_drift_to_loop(geometry: pl.DataFrame) -> dict[str, Any]:
    """C4: the median drift-to-loop ratio at every hand-off, last checkpoint; every checkpoint reported."""
    verdict = drift_exceeds_loop(geometry)
    d = verdict.detail
    handoffs, per_checkpoint = d["handoffs"], d["per_checkpoint"]
    steps = list(dict.fromkeys(h["step"] for h in per_checkpoint))
    history = "; ".join(
        f"{h}: " + ", ".join(f"{_fmt(c['median'])}" for c in per_checkpoint if c["handoff"] == h)
        for h in dict.fromkeys(c["handoff"] for c in per_checkpoint)
    )
    K = d["loops"]
    measured = (
        f"step {d['step']}, median DLR_{K}: "
        + ", ".join(f"{h['handoff']} {_fmt(h['median'])} (q10–q90 {_fmt(h['q10'])}–{_fmt(h['q90'])})"
                    for h in handoffs)
        + ("; all > 1" if d["all_above_one"] else "; some ≤ 1")
        + ". By K: " + "; ".join(f"{h['handoff']} " + ", ".join(f"K={k} {_fmt(v)}" for k, v in h["by_loops"].items())
                                 for h in handoffs)
        + (f". DLR_{K} over steps {', '.join(map(str, steps))}: {history}" if len(steps) > 1 else "")
    )
    return _row(
        "C4",
        "The drift-to-loop ratio is much greater than 1 at every hand-off.",
        f"Last checkpoint: median over tokens of DLR_K = ‖x_h^(1) − x_g^(K_g)‖ / mean_(k≤K) ‖Δ_g^(k)‖ at "
        f"K = min({C4_DLR_LOOPS}, loops measured) is ≥ {C4_MIN_DLR:g} at every hand-off ('≫ 1' read as at "
        f"least an order of magnitude; DLR_K grows with K for a converging loop, so K is fixed in advance: "
        f"docs/claims.md#c4). Other K and all checkpoints reported.",
        measured,
        verdict,
        {f"median DLR_{K} {h['handoff']}": h["median"] for h in handoffs},
    )


def _phase_note(detail: Mapping[str, Any]) -> str:
    """Whether the detected depth phases match the layout, where the depth table was given."""
    if "phases_match_layout" not in detail:
        return ""
    if detail["phases_match_layout"]:
        return "; detected depth phases match the layout"
    return (f"; detected depth phases do not match the layout ({detail['positions_off_layout']}/"
            f"{detail['positions']} positions differ)")


def c5_spirals_and_jumps(geometry: pl.DataFrame, depth: pl.DataFrame | None = None,
                         trajectory: pl.DataFrame | None = None) -> dict[str, Any]:
    """C5: large jumps between groups, bending and tight paths within them, last checkpoint."""
    verdict = spirals_and_jumps(geometry, depth, trajectory)
    d = verdict.detail
    jumps, groups = d["jumps"], d["groups"]
    measured = (
        f"step {d['step']}: median DLR_{d['loops']} "
        + ", ".join(f"{j['handoff']} {_fmt(j['median_dlr'])}" for j in jumps)
        + "; mean turning " + ", ".join(f"g{g['group']} {_fmt(g['mean_turning_deg'], 2)}° "
                                        f"({_counted(g.get('turns_above_floor'), 'kept')} above the floor)"
                                        for g in groups)
        + "; path after k=1 / jump " + ", ".join(f"g{g['group']} {_fmt(g['path_to_jump'])}" for g in groups)
        + _phase_note(d)
    )
    return _row(
        "C5",
        "Within groups the trajectory is a tight spiral; between groups it makes large jumps.",
        f"Last checkpoint. Large jumps: median DLR_K ≥ {C5_MIN_DLR:g} at every hand-off (K as in C4). Spiral: "
        f"in every group the mean turning angle arccos(cos(Δ^(k), Δ^(k−1))) over k ≥ 2 (steps above the "
        f"precision floor) is "
        f"≥ {C5_MIN_TURNING_DEG:g}° (a straight walk is 0°). Tight: in every group the path walked after the "
        f"first application, Σ_(k≥2) mean ‖Δ^(k)‖, is < {C5_MAX_PATH_TO_JUMP:g} × the smaller adjacent jump "
        f"(jump out of g ≈ median DLR_K × the mean of g's first K steps). Reproduced if all checks pass, mixed "
        f"if some. "
        f"Whether the max-cut depth phases equal the layout is reported, not scored.",
        measured,
        verdict,
        {**{f"turning g{g['group']} (deg)": g["mean_turning_deg"] for g in groups},
         **{f"path/jump g{g['group']}": g["path_to_jump"] for g in groups}},
    )


# --- C6: the early-exit sweep -------------------------------------------------------------------------------


def _ratio_value(ratio: Ratio | None) -> float | None:
    return None if ratio is None else ratio.ratio


def _speed_text(ratio: Ratio | None) -> str:
    """A paired latency ratio with its 95% interval, e.g. '0.62× (0.60–0.64)'."""
    if ratio is None:
        return "n/a"
    return f"{_fmt(ratio.ratio)}× ({_fmt(ratio.low)}–{_fmt(ratio.high)})"


def _best_point_text(name: str, best: Mapping[str, Any] | None, swept: str | None = "threshold") -> str:
    """A strategy's cheapest setting within 1%: its setting, cost (and ratio to the reference's), median ms/token
    and perplexity."""
    if best is None:
        return f"{name}: none within 1%"
    return (f"{name} {_setting_text(swept, best['setting'])}: {_fmt(best['gflops_per_token'] * 1e3)} MFLOPs "
            f"({_fmt(best['flop_ratio'])}× in FLOPs), {_fmt(best['ms_per_token'])} ms, "
            f"ppl {_fmt(best['perplexity'], 3)}")


def _flat_text(flat: Mapping[str, Any], max_loops: int) -> str:
    lo, hi = C6_PAPER_RANGE
    span = f"{C6_ACCELERATION} ppl over τ ∈ [{power_of_ten(lo)}, {power_of_ten(hi)}]"
    if flat["passes"] is None:
        return f"{span}: undecided, {flat['reason']}"
    return (f"{span} ({len(flat['points'])} thresholds): {_fmt(flat['min'], 3)}–{_fmt(flat['max'], 3)} (spread "
            f"{_pct(flat['spread'])}; mean loops per group {_fmt(flat['loops'][0])}–{_fmt(flat['loops'][1])}, so a "
            f"flat stretch that never exits shows as {max_loops})")


def _first_order_text(first_order: Mapping[str, Any], swept: bool) -> str:
    if not swept:
        return f"{C6_FIRST_ORDER}: not swept"
    knee, hi = power_of_ten(C6_FIRST_ORDER_KNEE), power_of_ten(C6_PAPER_RANGE[1])

    def worst(p: Mapping[str, Any] | None) -> str:
        return "none swept" if p is None else (f"worst ppl {_fmt(p['perplexity'], 3)} ({_pct(p['increase'])} "
                                                f"at τ {_sci(p['setting'])})")

    return (f"{C6_FIRST_ORDER} at τ ≤ {knee}: {worst(first_order['worst_below'])}; "
            f"at τ ∈ ({knee}, {hi}]: {worst(first_order['worst_above'])}")


_SLOWER = {True: "slower", False: "faster", None: "undecided"}


def _kl_text(kl: Sequence[Mapping[str, Any]]) -> str:
    """Each KL strategy's latency and FLOP ratio to acceleration at their best points."""
    return ", ".join(f"{k['strategy']} never within 1%" if k["best"] is None else
                     f"{k['strategy']} {_SLOWER[k['slower']]}: latency {_speed_text(k['ratio'])}, FLOPs "
                     f"{_fmt(k['flop_ratio'])}×" for k in kl) or "no KL strategy"


def c6_acceleration_exit(sweep: pl.DataFrame, latency: pl.DataFrame) -> dict[str, Any]:
    """C6 on the early-exit sweep, against full depth: (a) latency cut, (b) flat perplexity, (c) the first-order
    exit's knee, (d) the KL exits slower."""
    verdict = acceleration_exit(sweep, latency)
    full, strategies, tests = (verdict.detail[key] for key in ("full_depth", "strategies", "tests"))
    lo, hi = C6_PAPER_RANGE
    knee = power_of_ten(C6_FIRST_ORDER_KNEE)
    cut = tests["latency_cut"]
    first_order_swept = any(s["strategy"] == C6_FIRST_ORDER for s in strategies)
    measured = (
        f"full depth ({full['max_loops']} loops): {_fmt(full['gflops_per_token'] * 1e3)} MFLOPs and "
        f"{_fmt(full['ms_per_token'])} ms per token, ppl {_fmt(full['perplexity'], 3)}. Cheapest within 1% of "
        f"full-depth ppl: "
        + "; ".join(_best_point_text(s["strategy"], s["best"], s["swept"]) for s in strategies)
        + f". {C6_ACCELERATION} latency vs full depth: {_speed_text(cut.get('ratio'))}. "
        f"{_flat_text(tests['flat'], full['max_loops'])}. "
        f"{_first_order_text(tests['first_order'], first_order_swept)}. "
        f"KL vs {C6_ACCELERATION} at matched quality: {_kl_text(tests['kl_slower']['kl'])}."
    )
    return _row(
        "C6",
        "Acceleration exit cuts latency by up to ~38% (about 580 → 360 ms/token) while perplexity stays "
        "essentially flat across thresholds; the first-order exit degrades perplexity beyond τ ≈ 1e-3; "
        "the KL exit stays slower.",
        f"Sweep table; full depth = strategy 'fixed' at setting = max_loops; 'within 1%' = perplexity ≤ "
        f"{1 + C6_TOLERANCE:g} × full-depth perplexity; a strategy's best point = its setting with the fewest "
        f"FLOPs per token within 1%; a latency ratio = ms/token of two points paired by timing round, with a 95% "
        f"interval (docs/claims.md#speed-comparisons). (a) The '{C6_ACCELERATION}' strategy's best point cuts "
        f"ms/token by ≥ "
        f"{100 * C6_MIN_LATENCY_CUT:.0f}% vs full depth (paper: up to 38%): its latency ratio's interval lies at or "
        f"below {1 - C6_MIN_LATENCY_CUT:g} (all above: fails; straddling: undecided); no point within 1% fails. "
        f"(b) Flat: over the swept '{C6_ACCELERATION}' thresholds in the paper's range "
        f"[{power_of_ten(lo)}, {power_of_ten(hi)}], max/min perplexity − 1 ≤ {C6_MAX_FLAT_SPREAD:g} (fewer than "
        f"two such thresholds: undecided). "
        f"(c) '{C6_FIRST_ORDER}' is within 1% at every swept τ ≤ {knee} and more than 1% above full depth at "
        f"some swept τ ∈ ({knee}, {power_of_ten(hi)}] (no threshold on one side: undecided). "
        f"(d) Every strategy with criterion '{C6_KL_CRITERION}' is slower at its best point than "
        f"'{C6_ACCELERATION}' at its best point: the latency ratio's interval lies above 1 (all below: fails; "
        f"straddling, no KL strategy or a missing best point: undecided). "
        f"Reproduced if (a)-(d) all pass, not reproduced if none, mixed if some; "
        f"any undecided: inconclusive.",
        measured,
        verdict,
        {"full-depth ppl": full["perplexity"], "full-depth ms/token": full["ms_per_token"],
         f"{C6_ACCELERATION} latency ratio": _ratio_value(cut.get("ratio")),
         f"{C6_ACCELERATION} FLOP ratio": (cut.get("best") or {}).get("flop_ratio"),
         f"{C6_ACCELERATION} ppl spread over the paper's τ": tests["flat"].get("spread")},
    )


def c6_against_best_fixed_depth(sweep: pl.DataFrame, latency: pl.DataFrame) -> dict[str, Any]:
    """C6b: C6 read against the best fixed depth K* instead of full depth (added after the numbers)."""
    verdict = acceleration_against_best_fixed_depth(sweep, latency)
    reference, acceleration, kl = (verdict.detail[key] for key in ("reference", "acceleration", "kl"))

    def point(name: str, best: Mapping[str, Any] | None) -> str:
        text = _best_point_text(name, best)
        return text if best is None else f"{text}, {_fmt(best['mean_loops'])} loops"

    measured = (
        f"K* = {reference['loops']} loops: ppl {_fmt(reference['perplexity'], 3)}, "
        f"{_fmt(reference['gflops_per_token'] * 1e3)} MFLOPs and {_fmt(reference['ms_per_token'])} ms per token "
        f"(full depth {reference['max_loops']} loops: ppl {_fmt(full_depth(sweep)['perplexity'], 3)}). Cheapest "
        f"within 1% of K*: " + "; ".join([point(C6_ACCELERATION, acceleration), *(point(k["strategy"], k["best"])
                                                                                for k in kl)])
        + f". {C6_ACCELERATION} latency vs K*: {_speed_text(verdict.detail['ratio'])}. KL vs {C6_ACCELERATION}: "
        f"{_kl_text(kl)}."
    )
    return _row(
        "C6b",
        "The same claim, read against the best fixed depth (added after seeing the numbers).",
        f"Reference K* = the fixed loop count with the lowest perplexity; 'within 1%' = perplexity ≤ "
        f"{1 + C6_TOLERANCE:g} × K*'s; best points and latency ratios as in C6. (a) '{C6_ACCELERATION}''s best "
        f"point within 1% of K* cuts ms/token by ≥ {100 * C6_MIN_LATENCY_CUT:.0f}% vs K* (the latency ratio's "
        f"interval at or below {1 - C6_MIN_LATENCY_CUT:g}). (d) every '{C6_KL_CRITERION}' strategy is slower "
        f"than '{C6_ACCELERATION}' at its best point within 1% of K*, or never comes within 1%. Not scored "
        f"before the data: this row was added once full depth turned out to be the worst setting.",
        measured,
        verdict,
        {"K*": reference["loops"], "K* ppl": reference["perplexity"],
         f"{C6_ACCELERATION} latency ratio vs K*": _ratio_value(verdict.detail["ratio"]),
         f"{C6_ACCELERATION} FLOP ratio vs K*": (acceleration or {}).get("flop_ratio")},
    )


# --- C7: the parallel sampler -------------------------------------------------------------------------------


def _sampler_setting(row: Mapping[str, Any]) -> str:
    return f"r′ {row['inner_loops']}, ε {row['tolerance']:g}, {row['freeze']}"


_NO_SAMPLER = "No sampler setting of about equal quality."


def _cost_text(row: Mapping[str, Any]) -> str:
    """A setting's cost per generated token: layer applications and MFLOPs."""
    return f"{_fmt(row['layers_per_token'])} layer applications and {_fmt(row['gflops_per_token'] * 1e3)} MFLOPs"


def _speedup_text(verdict: Speedup, reference: str) -> str:
    """The sampler over a reference: paired tokens/s ratio with its 95% interval, and the FLOP ratio."""
    rounds = "" if verdict.speedup is None else f" over {verdict.speedup.repeats} paired rounds"
    return (f"sampler vs {reference}: {_speed_text(verdict.speedup)} in tokens/s{rounds}; "
            f"{_fmt(verdict.flop_ratio)}× in FLOPs per token")


def _equal_quality_text(verdict: Speedup) -> str:
    return (f"the mean over prompts of the sampler's re-scored cross-entropy minus that of ordinary decoding at "
            f"full recurrence is within ± sample.quality_tolerance ({verdict.quality_tolerance:g} nats), and its "
            f"distinct-token fraction (distinct generated tokens over generated tokens, mean over prompts) is at most "
            f"sample.distinct_tolerance ({verdict.distinct_tolerance:g}) below full recurrence's")


def c7_parallel_sampler(summary: pl.DataFrame, speed: pl.DataFrame | None) -> dict[str, Any]:
    """C7: the sampler against ordinary decoding at full recurrence, as the paper compares (docs/claims.md#c7)."""
    verdict = speedup_over_full_recurrence(summary, speed)
    full, sampler = verdict.detail["full_recurrence"], verdict.detail["sampler"]
    measured = (
        f"ordinary decoding at {full['loops']} loops: {_fmt(full['tokens_per_s'])} tokens/s in the grid, "
        f"{_cost_text(full)} per token, re-scored cross-entropy {_fmt(full['cross_entropy'], 3)}, distinct "
        f"fraction {_fmt(full['distinct_fraction'])}. "
        + (_NO_SAMPLER if sampler is None else
           f"Fastest sampler setting of about equal quality ({_sampler_setting(sampler)}): "
           f"{_fmt(sampler['tokens_per_s'])} tokens/s in the grid, gap {sampler['cross_entropy_gap']:+.3f} "
           f"± {_fmt(sampler['cross_entropy_gap_sem'], 3)} nats, distinct fraction "
           f"{_fmt(sampler['distinct_fraction'])} ({sampler['distinct_fraction_gap']:+.3f}), agreement "
           f"{100 * sampler['agreement']:.0f}%, {_fmt(sampler['forward_passes_per_token'])} forward passes, "
           f"{_fmt(sampler['group_iterations_per_token'])} group applications (ordinary: "
           f"{_fmt(full['group_iterations_per_token'])}) and {_cost_text(sampler)} per token; "
           f"{_speedup_text(verdict, 'ordinary')}.")
    )
    return _row(
        "C7",
        "The parallel (diffusion-forcing) sampler gives 4–5× more tokens/s than static autoregressive sampling at "
        "32 recurrences, with about equal accuracy (Geiping et al., arXiv 2510.14961; docs/claims.md#c7).",
        f"Greedy, batch size 1, the same held-out prompts. About equal quality: {_equal_quality_text(verdict)}. "
        f"The fastest such setting of the grid is timed beside ordinary decoding at full recurrence in paired "
        f"rounds (sample.repeats); the speed-up is their ratio of tokens/s with a 95% interval. Reproduced if the "
        f"interval lies at or above {C7_MIN_SPEEDUP:g}×; not reproduced if it lies below (or if no setting is of "
        f"about equal quality); inconclusive if it straddles {C7_MIN_SPEEDUP:g}×.",
        measured,
        verdict,
        {"speed-up vs full recurrence": _ratio_value(verdict.speedup), "FLOP ratio vs full recurrence":
         verdict.flop_ratio, "quality gap (nats)": (sampler or {}).get("cross_entropy_gap"),
         "distinct fraction gap": (sampler or {}).get("distinct_fraction_gap"),
         "agreement": (sampler or {}).get("agreement")},
    )


def c7_against_matched_decoding(summary: pl.DataFrame, speed: pl.DataFrame | None) -> dict[str, Any]:
    """C7b: the sampler against ordinary decoding at the fewest loops of about equal quality (ours, fixed before
    the numbers)."""
    verdict = speedup_over_matched_decoding(summary, speed)
    matched, sampler = verdict.detail["matched"], verdict.detail["sampler"]
    measured = (
        f"ordinary decoding at the fewest loops of about equal quality: {matched['loops']} loops, "
        f"{_fmt(matched['tokens_per_s'])} tokens/s in the grid, gap {matched['cross_entropy_gap']:+.3f} nats, "
        f"{_cost_text(matched)} per token. "
        + (_NO_SAMPLER if sampler is None else
           f"Sampler ({_sampler_setting(sampler)}): {_fmt(sampler['tokens_per_s'])} tokens/s in the grid; "
           f"{_speedup_text(verdict, str(matched['loops']) + ' loops')}.")
    )
    return _row(
        "C7b",
        "The same sampler against ordinary decoding at the fewest loops of about equal quality (ours).",
        f"The fastest sampler setting of about equal quality (as in C7) against ordinary decoding at the fewest "
        f"loops of about equal quality (any loop count of sample.baseline_loops; chosen by loops, not by timing), "
        f"timed beside it in the same paired rounds: reproduced if the 95% interval of the ratio of tokens/s lies "
        f"at or above {C7B_MIN_SPEEDUP:g}×, not reproduced if it lies below (or if no setting is of about equal "
        f"quality), inconclusive if it straddles {C7B_MIN_SPEEDUP:g}×. Fixed with C7, before any number: a loop "
        f"that converges early makes fewer loops the fair baseline.",
        measured,
        verdict,
        {"speed-up vs matched decoding": _ratio_value(verdict.speedup),
         "FLOP ratio vs matched decoding": verdict.flop_ratio, "matched loops": matched["loops"]},
    )


# --- C8: Raptor's surrogates --------------------------------------------------------------------------------

_NO_TWO_BLOCKS = f"k = {C8_BLOCKS} not distilled (distill.blocks)."


def c8_two_blocks_recover(recovery: pl.DataFrame) -> dict[str, Any]:
    """C8 on one teacher run's surrogates (`tables.recovery_table` rows): does the 2-block surrogate recover
    ≥ 90%?"""
    verdict = two_blocks_recover(recovery)
    row = verdict.detail["k2"]
    recovered = None if row is None else row["surrogate_recovered"]
    measured = (_NO_TWO_BLOCKS if row is None else
                f"phases {row['phases']} of {row['teacher_layers']} layers: cross-entropy teacher "
                f"{_fmt(row['teacher_cross_entropy'], 3)}, surrogate {_fmt(row['surrogate_cross_entropy'], 3)}, "
                f"unigram {_fmt(row['unigram_cross_entropy'], 3)} nats: the surrogate recovers {_share(recovered)}"
                f" of the teacher (KL to it {_fmt(row['surrogate_kl_to_teacher'], 3)} nats); "
                f"{row['surrogate_parameters']:,} parameters in its blocks (it reuses the teacher's embeddings "
                f"and head) against the teacher's {row['teacher_parameters']:,} in all.")
    return _row(
        "C8",
        "A trained transformer's L layers can be rewritten as k ≪ L shared blocks applied recurrently: 2 blocks "
        "recover 96% of DINOv2's linear-probe accuracy (Raptor, arXiv 2512.19941; docs/claims.md#c8).",
        f"For a plain GPT: the {C8_BLOCKS}-block surrogate (max-cut phases, two-stage distillation), read through "
        f"the teacher's frozen final norm and LM head, recovers ≥ {100 * C8_RECOVERY:g}% of the teacher's "
        f"improvement in held-out cross-entropy over the unigram baseline, (CE_unigram − CE_surrogate) / "
        f"(CE_unigram − CE_teacher). Per seed; the teacher's verdict is its seeds' common verdict.",
        measured,
        verdict,
        {"recovered (k = 2)": recovered,
         "KL to teacher (nats)": None if row is None else row["surrogate_kl_to_teacher"]},
    )


def c8_against_scratch(recovery: pl.DataFrame) -> dict[str, Any]:
    """C8b: the 2-block surrogate against a plain GPT with as many layers, trained from scratch (ours)."""
    verdict = two_blocks_beat_scratch(recovery)
    row = verdict.detail["k2"]
    surrogate, control = (None, None) if row is None else (row["surrogate_recovered"], row["control_recovered"])
    measured = (_NO_TWO_BLOCKS if row is None else
                f"surrogate {_share(surrogate)} ({_fmt(row['surrogate_cross_entropy'], 3)} nats), "
                f"{C8_BLOCKS}-layer GPT from scratch {_share(control)} "
                f"({_fmt(row['control_cross_entropy'], 3)} nats, {row['control_parameters']:,} parameters).")
    return _row(
        "C8b",
        "Distilling the teacher's depth into 2 shared blocks beats training 2 layers from scratch (ours).",
        f"Reproduced if the {C8_BLOCKS}-block surrogate's recovered fraction exceeds that of a {C8_BLOCKS}-layer "
        f"plain GPT trained from scratch with the teacher's training parameters on the same tokens. Fixed with C8, "
        f"before any number.",
        measured,
        verdict,
        {"control recovered (k = 2)": control},
    )


# --- the tables ---------------------------------------------------------------------------------------------


def surrogate_claims(recovery: pl.DataFrame) -> list[dict[str, Any]]:
    """C8 and C8b of one teacher run."""
    return [c8_two_blocks_recover(recovery), c8_against_scratch(recovery)]


def claims_table(frames: Mapping[str, pl.DataFrame]) -> list[dict[str, Any]]:
    """Rows C1-C5 from the geometry stage's frames (needs 'geometry', uses 'depth'/'trajectory' if given), led
    by the precondition S when 'loss_vs_loops' is given, C6 when the early-exit 'sweep' table is given, and C7 when
    the sampler's 'sample' summary (`tables.sampling_summary`) has rows (its speed verdicts read the paired rounds
    of 'sample_speed'; without them they are inconclusive)."""
    if "geometry" not in frames:
        raise TwoscaleError("claims: no geometry table given")
    geometry = frames["geometry"]
    rows = [s_loop_stability(frames["loss_vs_loops"])] if frames.get("loss_vs_loops") is not None else []
    rows += [
        c1_step_sizes_shrink(geometry),
        c2_steps_shrink_over_training(geometry),
        c3_step_cosine(geometry),
        c4_drift_to_loop(geometry),
        c5_spirals_and_jumps(geometry, frames.get("depth"), frames.get("trajectory")),
    ]
    if frames.get("sweep") is not None:
        latency = frames.get("latency")
        rows += [c6_acceleration_exit(frames["sweep"], latency), c6_against_best_fixed_depth(frames["sweep"], latency)]
    if frames.get("sample") is not None and frames["sample"].height:
        speed = frames.get("sample_speed")
        rows += [c7_parallel_sampler(frames["sample"], speed), c7_against_matched_decoding(frames["sample"], speed)]
    return rows


def computations(tables: dict[str, pl.DataFrame], runs: list[tuple[str, int]]) -> list[dict]:
    """What computed the numbers of every run (`tables.origins`), run by run (`runs`: the looped runs, then the
    teacher runs): the training, the geometry (with its precision floor), the early exit's quality and timings,
    the sampler where it ran, and the teachers' training and distillation ('recovery')."""
    geometry = tables["geometry"]
    floor = ", ".join(geometry["floor"].unique(maintain_order=True)) if "floor" in geometry.columns else "none"
    found = [*origins(geometry, "training", "train_"),
             *origins(geometry, f"loop geometry, loss vs loops (S, C1–C5); precision floor {floor}"),
             *(origins(tables["sweep"], "early-exit quality (C6)") if "sweep" in tables else []),
             *(origins(tables["latency"], "early-exit timings (C6)") if "latency" in tables else [])]
    if "sample_speed" in tables:
        found += origins(tables["sample_speed"], "sampler timings (C7)")
    if "recovery" in tables:
        teachers = tables["recovery"].rename({"teacher": "recipe"})
        found += [*origins(teachers, "teacher training (C8)", "teacher_"),
                  *origins(teachers, "surrogate and control training (C8)")]
    return sorted(found, key=lambda o: runs.index((o["recipe"], o["seed"])))
