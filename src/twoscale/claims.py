"""The paper's findings C1-C5 (SCIENCE §1.5) as pre-registered tests on the geometry tables.

Every test is a pure function of the concatenated-over-checkpoints frames written by the `geometry` stage and
returns one row: {claim, statement, test, measured, reproduced, verdict, detail}. The tests and their
thresholds (the module constants below) were fixed from the paper's wording before looking at any measured
number.

Verdicts. A claim is checked once per group (or per hand-off); the row is
  reproduced = True   ("reproduced")      when every group passes,
  reproduced = False  ("not reproduced")  when none passes,
  reproduced = None   ("mixed")           when some pass and some fail,
  reproduced = None   ("inconclusive")    when the data cannot decide (too few loop steps or checkpoints).
The string field `verdict` tells "mixed" from "inconclusive".

Statistics used: step sizes, relative step sizes, cosines and turning angles are the per-k *mean over tokens*
(column `mean`); the drift-to-loop ratio is the *median over tokens* (column `median`), with q10/q90 reported.
"First" and "last" checkpoint mean the smallest and largest training `step` in the frame.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from twoscale.errors import TwoscaleError
from twoscale.tables import metric_rows, require, training_steps

# --- C1: step sizes shrink quickly with k, within about 5-10 steps -----------------------------------------
C1_K_SETTLED = 10        # "within about 5-10 steps": read at the upper end, k = 10
C1_MAX_RATIO = 0.5       # s(10) <= 0.5 * s(1): at least halved by k = 10
# ...and the fall after k = 10 is smaller than the fall before it: s(10) - s(K) < s(1) - s(10)

# --- C2: across training, loop steps get smaller (decay with k faster in later checkpoints) ----------------
C2_K_SETTLED = 10        # decay measured as s(k)/s(1) at k = min(10, K)
# ...and the mean over k of the relative step size ‖Δ^(k)‖ / ‖x^(k-1)‖ is lower at the last checkpoint

# --- C3: consecutive-step cosine settles around 0.5-0.65 late in training ----------------------------------
C3_BAND = (0.5, 0.65)    # the paper's range, inclusive
C3_ORTHOGONAL_MAX = 0.2  # |cos| <= 0.2 (angle >= ~78 degrees) counts as "orthogonal"
C3_TREND_TOLERANCE = 0.02  # a change of the late-k cosine smaller than this across training is "flat"

# --- C4: DLR >> 1 at every hand-off -------------------------------------------------------------------------
C4_MIN_DLR = 10.0        # ">> 1" read as at least one order of magnitude

# --- C5: tight spirals within groups, large jumps between --------------------------------------------------
C5_MIN_DLR = C4_MIN_DLR  # large jumps: the same order-of-magnitude reading as C4
C5_MIN_TURNING_DEG = 30.0  # a spiral bends: mean turning angle over k >= 2 at least 30 degrees (straight = 0)
C5_MAX_PATH_TO_JUMP = 1.0  # tight: the path walked after the first application is shorter than the jump

VERDICT_WORDS = {True: "reproduced", False: "not reproduced"}


# --- small helpers ------------------------------------------------------------------------------------------








def _curves(geometry: pl.DataFrame, metric: str, step: int,
            column: str = "mean") -> dict[int, dict[int, float]]:
    """{group: {k: value}} for one checkpoint; NaN/null values are left out."""
    rows = (
        metric_rows(geometry, metric, "claims")
        .filter((pl.col("step") == step) & pl.col("k").is_not_null())
        .with_columns(pl.col(column).cast(pl.Float64).fill_nan(None))
        .drop_nulls(column)
        .sort("group", "k")
    )
    out: dict[int, dict[int, float]] = {}
    for g, k, v in rows.select("group", "k", column).iter_rows():
        out.setdefault(int(g), {})[int(k)] = float(v)
    return out


def _handoffs(geometry: pl.DataFrame, step: int) -> list[dict[str, Any]]:
    rows = metric_rows(geometry, "drift_to_loop_ratio", "claims").filter(pl.col("step") == step).sort("group")
    return [
        {"step": step, "handoff": f"{g}->{g + 1}", "group": int(g), "median": med, "q10": q10, "q90": q90}
        for g, med, q10, q90 in rows.select("group", "median", "q10", "q90").iter_rows()
    ]


def _ratio(num: float, den: float) -> float:
    return num / den if den != 0 else math.nan


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _verdict(passes: Sequence[bool | None]) -> tuple[bool | None, str]:
    if not passes or any(p is None for p in passes):
        return None, "inconclusive"
    if all(passes):
        return True, VERDICT_WORDS[True]
    if not any(passes):
        return False, VERDICT_WORDS[False]
    return None, "mixed"


def _jsonable(value: Any) -> Any:
    """Plain Python types only; NaN/inf become None so the rows dump as strict JSON."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
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


def _row(claim: str, statement: str, test: str, measured: str, passes: Sequence[bool | None],
         detail: dict[str, Any]) -> dict[str, Any]:
    reproduced, verdict = _verdict(passes)
    return _jsonable({
        "claim": claim,
        "statement": statement,
        "test": test,
        "measured": measured,
        "reproduced": reproduced,
        "verdict": verdict,
        "detail": detail,
    })


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.{digits}f}"


# --- the claims ---------------------------------------------------------------------------------------------


def c1_step_sizes_shrink(geometry: pl.DataFrame) -> dict[str, Any]:
    """C1 on the last checkpoint: per group, s(10) <= 0.5 s(1) and s(10) - s(K) < s(1) - s(10)."""
    last = training_steps(metric_rows(geometry, "step_size", "claims"))[-1]
    curves = _curves(geometry, "step_size", last)
    groups, passes = [], []
    for g, s in curves.items():
        K = max(s)
        info: dict[str, Any] = {"group": g, "K": K}
        if 1 not in s or C1_K_SETTLED not in s:
            info.update(passes=None, reason=f"needs k = 1 and k = {C1_K_SETTLED}; has k = {min(s)}..{K}")
        else:
            s1, s10, sK = s[1], s[C1_K_SETTLED], s[K]
            info.update(
                s1=s1, s10=s10, sK=sK, ratio_10_to_1=_ratio(s10, s1),
                drop_before_10=s1 - s10, drop_after_10=s10 - sK,
                halved_by_10=s10 <= C1_MAX_RATIO * s1, flat_after_10=(s10 - sK) < (s1 - s10),
            )
            info["passes"] = bool(info["halved_by_10"] and info["flat_after_10"])
        groups.append(info)
        passes.append(info["passes"])
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
        f"step {last}: " + "; ".join(parts),
        passes,
        {"step": last, "groups": groups},
    )


def c2_steps_shrink_over_training(geometry: pl.DataFrame) -> dict[str, Any]:
    """C2: first vs last checkpoint, per group: s(k*)/s(1) lower and mean relative step size lower."""
    steps = training_steps(metric_rows(geometry, "step_size", "claims"))
    per_checkpoint: list[dict[str, Any]] = []
    for step in steps:
        sizes = _curves(geometry, "step_size", step)
        relative = _curves(geometry, "relative_step_size", step)
        for g, s in sizes.items():
            k_ref = min(C2_K_SETTLED, max(s))
            per_checkpoint.append({
                "step": step, "group": g, "k_ref": k_ref,
                "decay_ratio": _ratio(s[k_ref], s[1]) if 1 in s and k_ref in s else math.nan,
                "mean_relative_step": _mean(list(relative.get(g, {}).values())),
            })
    first, last = steps[0], steps[-1]
    by = {(d["step"], d["group"]): d for d in per_checkpoint}
    groups, passes = [], []
    for g in sorted({d["group"] for d in per_checkpoint if d["step"] == last}):
        a, b = by.get((first, g)), by.get((last, g))
        info: dict[str, Any] = {"group": g, "first_step": first, "last_step": last}
        if len(steps) < 2 or a is None or b is None:
            info.update(passes=None, reason="needs the group in two checkpoints")
        elif not all(math.isfinite(x) for x in (a["decay_ratio"], b["decay_ratio"],
                                                 a["mean_relative_step"], b["mean_relative_step"])):
            info.update(passes=None, reason="step size at k=1 or relative step size missing")
        else:
            info.update(
                k_ref=b["k_ref"],
                decay_ratio_first=a["decay_ratio"], decay_ratio_last=b["decay_ratio"],
                mean_relative_first=a["mean_relative_step"], mean_relative_last=b["mean_relative_step"],
                decays_faster=b["decay_ratio"] < a["decay_ratio"],
                smaller=b["mean_relative_step"] < a["mean_relative_step"],
            )
            info["passes"] = bool(info["decays_faster"] and info["smaller"])
        groups.append(info)
        passes.append(info["passes"])
    if len(steps) < 2:
        measured = f"only one checkpoint (step {last}): nothing to compare"
    else:
        measured = f"step {first} → {last}: " + "; ".join(
            f"g{d['group']}: s({d['k_ref']})/s(1) "
            f"{_fmt(d['decay_ratio_first'])} → {_fmt(d['decay_ratio_last'])}, "
            f"mean relative step {_fmt(d['mean_relative_first'], 3)} → {_fmt(d['mean_relative_last'], 3)}"
            if d["passes"] is not None else f"g{d['group']}: {d['reason']}"
            for d in groups
        )
    return _row(
        "C2",
        "Across training, loop steps get smaller: the decay with k gets faster in later checkpoints.",
        f"First vs last checkpoint, per group: s(k*)/s(1) with k* = min({C2_K_SETTLED}, K) is lower at the "
        f"last checkpoint, and the mean over k of the relative step size ‖Δ^(k)‖/‖x^(k−1)‖ is lower. "
        f"Reproduced if both hold for every group, mixed if for some.",
        measured,
        passes,
        {"first_step": first, "last_step": last, "groups": groups, "per_checkpoint": per_checkpoint},
    )


def _late_cosine(curve: dict[int, float]) -> float:
    K = max(curve)
    return _mean([v for k, v in curve.items() if k > K / 2])


def c3_step_cosine(geometry: pl.DataFrame) -> dict[str, Any]:
    """C3: late-k mean cosine in [0.5, 0.65] for every group at the last checkpoint; trend across training."""
    steps = training_steps(metric_rows(geometry, "step_cosine", "claims"))
    per_checkpoint = [
        {"step": step, "group": g, "late_cosine": _late_cosine(curve)}
        for step in steps
        for g, curve in _curves(geometry, "step_cosine", step).items()
    ]
    first, last = steps[0], steps[-1]
    lo, hi = C3_BAND
    groups, passes = [], []
    for d in (d for d in per_checkpoint if d["step"] == last):
        c = d["late_cosine"]
        ok = None if not math.isfinite(c) else lo <= c <= hi
        groups.append({"group": d["group"], "late_cosine": c, "in_band": ok, "passes": ok})
        passes.append(ok)

    def overall(step: int) -> float:
        return _mean([d["late_cosine"] for d in per_checkpoint if d["step"] == step])

    c_first, c_last = overall(first), overall(last)
    if len(steps) < 2 or not (math.isfinite(c_first) and math.isfinite(c_last)):
        trend = "unknown (one checkpoint)"
    elif c_last - c_first > C3_TREND_TOLERANCE and abs(c_last) > abs(c_first):
        trend = "toward 1 (steps align)"
    elif abs(c_last) < abs(c_first) - C3_TREND_TOLERANCE:
        trend = "toward 0 (steps turn orthogonal)"
    elif abs(c_last - c_first) <= C3_TREND_TOLERANCE:
        trend = "flat"
    else:
        trend = "toward −1 (steps reverse)"
    cosines = [g["late_cosine"] for g in groups]
    if cosines and all(lo <= c <= hi for c in cosines):
        supports = f"'settles around {lo}-{hi}'"
    elif cosines and all(abs(c) <= C3_ORTHOGONAL_MAX for c in cosines):
        supports = "'increasingly orthogonal'"
    elif cosines and all(c > hi for c in cosines):
        supports = f"neither: late steps stay aligned (cos > {hi})"
    else:
        supports = "neither cleanly (groups differ)"
    measured = (
        f"step {last}, mean cos over k > K/2: "
        + ", ".join(f"g{g['group']} {_fmt(g['late_cosine'], 3)}" for g in groups)
        + (f"; step {first} → {last} (mean over groups) {_fmt(c_first, 3)} → {_fmt(c_last, 3)}, {trend}"
           if len(steps) >= 2 else "; one checkpoint, no trend")
        + f". Supports {supports}."
    )
    return _row(
        "C3",
        f"Consecutive-step cosine rises and settles around {lo}-{hi} late in training "
        "(the text also says steps grow 'increasingly orthogonal').",
        f"Last checkpoint, per group, mean of cos(Δ^(k), Δ^(k−1)) over the last half of the loop steps "
        f"(k > K/2): reproduced if in [{lo}, {hi}] for every group. Also reported: its trend from the first "
        f"to the last checkpoint (toward 0 = orthogonal, toward 1 = aligned; |change| ≤ {C3_TREND_TOLERANCE} "
        f"= flat) "
        f"and which statement the level supports (|cos| ≤ {C3_ORTHOGONAL_MAX} counts as orthogonal).",
        measured,
        passes,
        {"first_step": first, "last_step": last, "groups": groups, "trend": trend, "supports": supports,
         "late_cosine_first": c_first, "late_cosine_last": c_last, "per_checkpoint": per_checkpoint},
    )


def c4_drift_to_loop(geometry: pl.DataFrame) -> dict[str, Any]:
    """C4: median DLR >= 10 at every hand-off of the last checkpoint; all checkpoints reported."""
    steps = training_steps(metric_rows(geometry, "drift_to_loop_ratio", "claims"))
    per_checkpoint = [h for step in steps for h in _handoffs(geometry, step)]
    last = steps[-1]
    handoffs = [dict(h) for h in per_checkpoint if h["step"] == last]
    passes = []
    for h in handoffs:
        ok = None if h["median"] is None or not math.isfinite(h["median"]) else h["median"] >= C4_MIN_DLR
        h["passes"] = ok
        passes.append(ok)
    above_one = all(h["median"] is not None and h["median"] > 1 for h in handoffs)
    history = "; ".join(
        f"{h}: " + ", ".join(f"{_fmt(d['median'])}" for d in per_checkpoint if d["handoff"] == h)
        for h in dict.fromkeys(d["handoff"] for d in per_checkpoint)
    )
    measured = (
        f"step {last}, median DLR: "
        + ", ".join(f"{h['handoff']} {_fmt(h['median'])} (q10–q90 {_fmt(h['q10'])}–{_fmt(h['q90'])})"
                    for h in handoffs)
        + ("; all > 1" if above_one else "; some ≤ 1")
        + (f". Over steps {', '.join(map(str, steps))}: {history}" if len(steps) > 1 else "")
    )
    return _row(
        "C4",
        "The drift-to-loop ratio is much greater than 1 at every hand-off.",
        f"Last checkpoint: median over tokens of DLR = ‖x_h^(1) − x_g^(K)‖ / mean_k ‖Δ_g^(k)‖ is "
        f"≥ {C4_MIN_DLR:g} at every hand-off ('≫ 1' read as at least an order of magnitude). "
        f"All checkpoints reported.",
        measured,
        passes,
        {"step": last, "threshold": C4_MIN_DLR, "handoffs": handoffs, "all_above_one": above_one,
         "per_checkpoint": per_checkpoint},
    )


def _token_pca_summary(trajectory: pl.DataFrame, step: int) -> list[dict[str, Any]]:
    """Illustration only (one token, 2-D projection): per hand-off, the PCA jump vs the groups' spreads."""
    rows = trajectory.filter(pl.col("step") == step).sort("point")
    spread: dict[int, float] = {}
    ends: dict[int, tuple[float, float]] = {}
    firsts: dict[int, tuple[float, float]] = {}
    for g in sorted(int(x) for x in rows["group"].unique()):
        pts = rows.filter(pl.col("group") == g).sort("k")
        after = pts.filter(pl.col("k") >= 1)
        cx, cy = after["pc1"].mean(), after["pc2"].mean()
        spread[g] = float(max(math.hypot(x - cx, y - cy) for x, y in after.select("pc1", "pc2").iter_rows()))
        ends[g] = tuple(pts.select("pc1", "pc2").row(-1))
        firsts[g] = tuple(after.select("pc1", "pc2").row(0))
    out = []
    for g in sorted(spread):
        if g + 1 in spread:
            jump = math.hypot(firsts[g + 1][0] - ends[g][0], firsts[g + 1][1] - ends[g][1])
            widest = max(spread[g], spread[g + 1])
            out.append({"handoff": f"{g}->{g + 1}", "pca_jump": jump, "spread_from": spread[g],
                        "spread_to": spread[g + 1], "jump_to_spread": _ratio(jump, widest)})
    return out


def c5_spirals_and_jumps(geometry: pl.DataFrame, depth: pl.DataFrame | None = None,
                         trajectory: pl.DataFrame | None = None) -> dict[str, Any]:
    """C5 on the last checkpoint: large jumps (median DLR >= 10), bending paths (mean turning >= 30 degrees),
    and tight paths (the length walked after the first application is shorter than the adjacent jump)."""
    last = training_steps(metric_rows(geometry, "step_size", "claims"))[-1]
    sizes = _curves(geometry, "step_size", last)
    turning = _curves(geometry, "turning_angle", last)
    handoffs = _handoffs(geometry, last)
    passes: list[bool | None] = []

    # estimated mean jump out of g: median DLR x g's mean step size (DLR's own denominator)
    mean_step = {g: _mean(list(s.values())) for g, s in sizes.items()}
    path_after_first = {g: sum(v for k, v in s.items() if k >= 2) for g, s in sizes.items()}
    jumps = []
    for h in handoffs:
        g = h["group"]
        dlr = h["median"] if h["median"] is not None else math.nan
        jump = dlr * mean_step.get(g, math.nan)
        ok = None if not math.isfinite(dlr) else dlr >= C5_MIN_DLR
        jumps.append({"handoff": h["handoff"], "median_dlr": dlr, "jump_estimate": jump, "large": ok})
        passes.append(ok)
    jump_out = {int(j["handoff"].split("->")[0]): j["jump_estimate"] for j in jumps}
    jump_in = {int(j["handoff"].split("->")[1]): j["jump_estimate"] for j in jumps}

    groups = []
    for g in sorted(sizes):
        angles = list(turning.get(g, {}).values())
        mean_turn = _mean(angles)
        bends = None if not math.isfinite(mean_turn) else mean_turn >= C5_MIN_TURNING_DEG
        adjacent = [j for j in (jump_out.get(g), jump_in.get(g)) if j is not None and math.isfinite(j)]
        jump = min(adjacent) if adjacent else math.nan
        path_to_jump = _ratio(path_after_first[g], jump) if math.isfinite(jump) else math.nan
        tight = None if not math.isfinite(path_to_jump) else path_to_jump < C5_MAX_PATH_TO_JUMP
        groups.append({"group": g, "mean_turning_deg": mean_turn, "bends": bends,
                       "path_after_first": path_after_first[g], "adjacent_jump": jump,
                       "path_to_jump": path_to_jump, "tight": tight})
        passes += [bends, tight]

    detail: dict[str, Any] = {"step": last, "jumps": jumps, "groups": groups,
                              "thresholds": {"min_dlr": C5_MIN_DLR, "min_turning_deg": C5_MIN_TURNING_DEG,
                                             "max_path_to_jump": C5_MAX_PATH_TO_JUMP}}
    phase_note = ""
    if depth is not None and depth.height:
        require(depth, "depth", ("step", "position", "phase", "layout_phase"), "claims")
        d = depth.filter(pl.col("step") == depth["step"].max())
        mismatched = int((d["phase"] != d["layout_phase"]).sum())
        detail["phases_match_layout"] = mismatched == 0
        detail["positions_off_layout"] = mismatched
        detail["positions"] = d.height
        phase_note = (f"; detected depth phases {'match' if mismatched == 0 else 'do not match'} the layout"
                      + ("" if mismatched == 0 else f" ({mismatched}/{d.height} positions differ)"))
    if trajectory is not None and trajectory.height:
        require(trajectory, "trajectory", ("step", "group", "k", "pc1", "pc2"), "claims")
        detail["token_pca"] = _token_pca_summary(trajectory, int(trajectory["step"].max()))

    measured = (
        f"step {last}: median DLR " + ", ".join(f"{j['handoff']} {_fmt(j['median_dlr'])}" for j in jumps)
        + "; mean turning " + ", ".join(f"g{g['group']} {_fmt(g['mean_turning_deg'], 2)}°" for g in groups)
        + "; path after k=1 / jump " + ", ".join(f"g{g['group']} {_fmt(g['path_to_jump'])}" for g in groups)
        + phase_note
    )
    return _row(
        "C5",
        "Within groups the trajectory is a tight spiral; between groups it makes large jumps.",
        f"Last checkpoint. Large jumps: median DLR ≥ {C5_MIN_DLR:g} at every hand-off. Spiral: in every "
        f"group the mean turning angle arccos(cos(Δ^(k), Δ^(k−1))) over k ≥ 2 is "
        f"≥ {C5_MIN_TURNING_DEG:g}° (a straight walk is 0°). Tight: in every group the path walked after the "
        f"first application, Σ_(k≥2) mean ‖Δ^(k)‖, is < {C5_MAX_PATH_TO_JUMP:g} × the smaller adjacent jump "
        f"(jump out of g ≈ median DLR × g's mean step). Reproduced if all checks pass, mixed if some. "
        f"Whether the max-cut depth phases equal the layout is reported, not scored.",
        measured,
        passes,
        detail,
    )


# --- the table ----------------------------------------------------------------------------------------------


def claims_table(frames: Mapping[str, pl.DataFrame]) -> list[dict[str, Any]]:
    """Rows C1-C5 from the geometry stage's frames: needs 'geometry', uses 'depth'/'trajectory' if given."""
    if "geometry" not in frames:
        raise TwoscaleError("claims: no geometry table given")
    geometry = frames["geometry"]
    return [
        c1_step_sizes_shrink(geometry),
        c2_steps_shrink_over_training(geometry),
        c3_step_cosine(geometry),
        c4_drift_to_loop(geometry),
        c5_spirals_and_jumps(geometry, frames.get("depth"), frames.get("trajectory")),
    ]


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table: claim | paper says | our test | measured | verdict."""
    lines = ["| claim | paper says | our test | measured | verdict |", "|---|---|---|---|---|"]
    for r in rows:
        verdict = r.get("verdict") or VERDICT_WORDS.get(r["reproduced"], "mixed / inconclusive")
        cells = (r["claim"], r["statement"], r["test"], r["measured"], f"**{verdict}**")
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def to_json(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as strict JSON (NaN already turned into null)."""
    return json.dumps(_jsonable(list(rows)), indent=2, allow_nan=False) + "\n"
