"""The verdicts on the loop geometry: the precondition S (more loops do not break the model) on the validation
loss over loop counts, and the paper's findings C1-C5 on the geometry stage's frames, concatenated over
checkpoints.

Statistics used: step sizes, relative step sizes, cosines and turning angles are the per-k *mean over tokens*
(column `mean`); the drift-to-loop ratio is the *median over tokens* (column `median`), with q10/q90 reported,
read by the paper's Eq. 2, at K = the loop count measured (`dlr_loops`, its row k = K). "First" and "last"
checkpoint mean the smallest and largest training `step` in the frame. Cosines and turning angles exist only for
steps above the precision floor (the measurement leaves the others out); C2, C3 and C5 report how many there were
(`_above_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from twoscale.geometry.tables import DLR_SHOWN_LOOPS, REGIMES, dlr_loops, metric_rows
from twoscale.geometry.thresholds import (
    C1_K_SETTLED,
    C1_MAX_RATIO,
    C2_K_SETTLED,
    C3_BAND,
    C3_MIN_ABOVE_FLOOR,
    C3_ORTHOGONAL_MAX,
    C3_TREND_TOLERANCE,
    C4_MIN_DLR,
    C4_STRICT_LOOPS,
    C5_MAX_PATH_TO_JUMP,
    C5_MIN_DLR,
    C5_MIN_TURNING_DEG,
    DEPTH_MIN_GAIN,
    S_TOLERANCE,
    SPECTRUM_REAL_MAX_DEG,
)
from twoscale.report.tables import finite, require, training_steps
from twoscale.report.verdicts import S_WORDS, Check, Verdict


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


def _handoffs(geometry: pl.DataFrame, step: int, loops: int) -> list[dict[str, Any]]:
    """Every hand-off's DLR_K at K = loops (median, q10, q90 over tokens), under "by_loops" its median at every K
    of DLR_SHOWN_LOOPS measured and at the most loops measured, and the fewest K at which its median reaches
    C4_MIN_DLR (None: at no K measured)."""
    rows = metric_rows(geometry, "drift_to_loop_ratio", "claims").filter(pl.col("step") == step)
    most = int(rows["k"].max())
    shown = sorted({k for k in DLR_SHOWN_LOOPS if k <= most} | {loops, most})
    out = []
    for g in sorted(int(g) for g in rows["group"].unique()):
        own = {int(k): (med, q10, q90) for k, med, q10, q90 in
               rows.filter(pl.col("group") == g).select("k", "median", "q10", "q90").iter_rows()}
        med, q10, q90 = own.get(loops, (None, None, None))
        reaching = [k for k in sorted(own) if own[k][0] is not None and own[k][0] >= C4_MIN_DLR]
        out.append({"step": step, "handoff": f"{g}->{g + 1}", "group": g, "loops": loops, "median": med,
                    "q10": q10, "q90": q90, "by_loops": {k: own[k][0] for k in shown if k in own},
                    "first_k_reaching": reaching[0] if reaching else None})
    return out


def _above_floor(geometry: pl.DataFrame, metric: str, step: int, first_k: Mapping[int, int]
                 ) -> dict[int, dict[str, int]]:
    """Per group g of `first_k`, how many (token, k) values of `metric` at k >= first_k[g] exist (`kept`: the steps
    they read are above the precision floor) out of all there are (`of`: tokens × loop steps)."""
    rows = metric_rows(geometry, ("step_size", metric), "claims").filter((pl.col("step") == step)
                                                                         & pl.col("k").is_not_null())
    out = {}
    for g, first in first_k.items():
        own = rows.filter(pl.col("group") == g)
        tokens = int(own.filter((pl.col("metric") == "step_size") & (pl.col("k") == 1))["n"].sum())
        values = own.filter((pl.col("metric") == metric) & (pl.col("k") >= first))
        out[g] = {"kept": int(values["n"].sum()), "of": tokens * values.height}
    return out


def _floored_steps(geometry: pl.DataFrame, step: int) -> dict[int, dict[str, int]]:
    """Per group, how many (token, k) steps are at the precision floor (`at_floor`) out of all (`of`); no group
    where the table has no at_floor rows (a measurement that marked no floor)."""
    rows = geometry.filter((pl.col("metric") == "at_floor") & (pl.col("step") == step))
    return {int(g): {"at_floor": int(round(float((part["mean"] * part["n"]).sum()))), "of": int(part["n"].sum())}
            for (g,), part in rows.group_by("group", maintain_order=True)}


def regime_readings(geometry: pl.DataFrame, step: int, metric: str, reduce: Callable[[dict[int, float], int], float]
              ) -> dict[int, dict[str, dict[str, float]]]:
    """Per group, each per-token regime's share of the tokens and `reduce(curve, K)` of the regime's per-k curve
    of `metric` (the metric over that regime's tokens alone); {} for a table measured without regimes, or under an
    earlier rule whose regimes are not these (a GPU run of 2026-11-27 has no slowing drift): its shares would be
    read as this rule's."""
    if not {f"regime_{regime}" for regime in REGIMES} <= set(geometry["metric"].unique()):
        return {}
    shares = {regime: _curves(geometry, f"regime_{regime}", step) for regime in REGIMES}
    curves = {regime: _curves(geometry, f"{metric}_{regime}", step) for regime in REGIMES}
    return {g: {regime: {"share": next(iter(shares[regime].get(g, {}).values()), math.nan),
                         metric: reduce(curves[regime].get(g, {}), K)}
                for regime in REGIMES}
            for g, K in ((g, max(own)) for g, own in shares[REGIMES[0]].items())}


def _ratio(num: float, den: float) -> float:
    return num / den if den != 0 else math.nan


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _last_loss_curve(loss_vs_loops: pl.DataFrame) -> tuple[int, dict[int, float]]:
    """The last checkpoint and its validation loss by loop count."""
    require(loss_vs_loops, "loss_vs_loops", ("step", "loops", "val_loss"), "claims")
    last = training_steps(loss_vs_loops)[-1]
    return last, dict(loss_vs_loops.filter(pl.col("step") == last).sort("loops").select("loops", "val_loss")
                      .iter_rows())


def depth_gain(loss_vs_loops: pl.DataFrame) -> dict[str, Any]:
    """What looping gains at the last checkpoint: the validation loss at one loop minus the lowest over the loop
    counts measured (None without a one-loop loss); `used` when that is at least DEPTH_MIN_GAIN nats."""
    step, curve = _last_loss_curve(loss_vs_loops)
    curve = {loops: loss for loops, loss in curve.items() if finite(loss) is not None}
    best = min(curve, key=curve.get)
    gain = curve[1] - curve[best] if 1 in curve else None
    return {"step": step, "loss_at_one_loop": curve.get(1), "best_loss": curve[best], "best_loops": best,
            "gain": gain, "used": None if gain is None else gain >= DEPTH_MIN_GAIN}


def loop_stability(loss_vs_loops: pl.DataFrame, schedule: pl.DataFrame | None = None,
                   beyond: pl.DataFrame | None = None) -> Verdict:
    """S on the last checkpoint: validation loss at the most loops measured is within S_TOLERANCE nats of the
    lowest loss over all measured loop counts (flat or improving, not drifting away). Given the run's `schedule`,
    the most loops training ever drew (`most_trained_loops`) is reported, and the same reading within it beside;
    given also the `beyond` stage's geometry, what the loop does past that range (`beyond_training`)."""
    last, curve = _last_loss_curve(loss_vs_loops)
    most = max(curve)
    best = min(curve, key=curve.get)
    rise = curve[most] - curve[best]
    at_most = {int(step): loss for step, loss in
               loss_vs_loops.filter(pl.col("loops") == most).sort("step").select("step", "val_loss").iter_rows()}
    detail = {"step": last, "loss_vs_loops": curve, "best_loops": best, "most_loops": most, "rise": rise,
              "loss_at_most_loops_by_step": at_most}
    if schedule is not None and "most_trained_loops" in schedule.columns:
        trained = int(schedule["most_trained_loops"][0])
        within = {loops: loss for loops, loss in curve.items() if loops <= trained}
        detail |= {"most_trained_loops": trained, "beyond_training": most > trained,
                   "rise_within_training": (within[max(within)] - min(within.values())) if within else math.nan}
        if beyond is not None and beyond.height:
            detail["beyond_geometry"] = beyond_training(beyond, trained)
    if len(curve) < 2:  # one loop count is its own best: nothing was compared
        return Verdict([None], {**detail, "reason": f"one loop count measured ({most})"}, S_WORDS)
    return Verdict([rise <= S_TOLERANCE], detail, S_WORDS)


def beyond_training(beyond: pl.DataFrame, trained: int) -> list[dict[str, Any]]:
    """Per group, the geometry of a checkpoint looped past the `trained` loops training drew at most (the beyond
    stage's table): the mean step size and state norm at k = trained and at the most loops measured, and the mean
    step cosine over the loop steps after `trained`. Steps that keep shrinking with cosine near 1 are a loop still
    converging; steps that stop shrinking while the norm moves are a drift."""
    step = training_steps(metric_rows(beyond, "step_size", "claims"))[-1]
    sizes, norms = _curves(beyond, "step_size", step), _curves(beyond, "state_norm", step)
    cosines = _curves(beyond, "step_cosine", step)
    out = []
    for g, own in sizes.items():
        most = max(own)
        late = [c for k, c in cosines.get(g, {}).items() if k > trained]
        out.append({"group": g, "step": step, "loops": most, "step_size_at_trained": own.get(trained, math.nan),
                    "step_size_at_most": own[most], "state_norm_at_trained": norms.get(g, {}).get(trained, math.nan),
                    "state_norm_at_most": norms.get(g, {}).get(most, math.nan), "cosine_beyond": _mean(late)})
    return out


def agreement(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """How well per-token predictions match measurements: Pearson correlation (NaN where either is constant),
    median and largest absolute error, over the tokens where both are finite."""
    predicted, measured = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    both = np.isfinite(predicted) & np.isfinite(measured)
    p, m = predicted[both], measured[both]
    if p.size == 0:
        return {"n": 0, "correlation": float("nan"), "median_abs_error": float("nan"), "max_abs_error": float("nan")}
    error = np.abs(p - m)
    varies = p.size > 1 and p.std() > 0 and m.std() > 0
    return {"n": int(p.size), "correlation": float(np.corrcoef(p, m)[0, 1]) if varies else float("nan"),
            "median_abs_error": float(np.median(error)), "max_abs_error": float(error.max())}


def spectrum_reading(spectrum: pl.DataFrame | None, step: int) -> list[dict[str, Any]]:
    """Per group, what the loop map's spectrum at checkpoint `step` (the spectrum stage's rows, one per token) says
    of the late loop steps: the median spectral radius of the token's own block and of its prefix against the
    median measured late step ratio, with their per-token `agreement`; the share of tokens whose dominant
    eigenvalue is real (within SPECTRUM_REAL_MAX_DEG of the real axis) and whose cos(arg λ) lies in the paper's
    band, the largest angle of a dominant eigenvalue from the real axis, and the predicted late cosine against the
    measured one. Empty without the table or that checkpoint."""
    if spectrum is None:
        return []
    at = spectrum.filter(pl.col("step") == step)
    lo, hi = C3_BAND
    out = []
    for (group,), tokens in sorted(at.group_by("group"), key=lambda item: item[0]):
        angle = tokens["dominant_angle_deg"].to_numpy()
        predicted = tokens["predicted_cosine"].to_numpy()
        out.append({
            "group": int(group), "step": step, "tokens": tokens.height,
            "median_radius": float(np.median(tokens["spectral_radius"])),
            "median_prefix_radius": float(np.median(tokens["prefix_radius"])),
            "median_measured_ratio": float(np.nanmedian(tokens["measured_step_ratio"])),
            "radius_vs_ratio": agreement(tokens["spectral_radius"], tokens["measured_step_ratio"]),
            "prefix_vs_ratio": agreement(tokens["prefix_radius"], tokens["measured_step_ratio"]),
            "real_share": float(np.mean(np.minimum(angle, 180 - angle) <= SPECTRUM_REAL_MAX_DEG)),
            "band_share": float(np.mean((predicted >= lo) & (predicted <= hi))),
            "largest_angle_deg": float(np.max(np.minimum(angle, 180 - angle))),
            "median_predicted_cosine": float(np.median(predicted)),
            "median_measured_cosine": float(np.nanmedian(tokens["measured_step_cosine"])),
            "cosine_vs_measured": agreement(predicted, tokens["measured_step_cosine"]),
        })
    return out


def _settles_by_k10(group: int, sizes: dict[int, float]) -> dict[str, Any]:
    """C1's check of one group: s(10) <= 0.5 s(1) and s(10) - s(K) < s(1) - s(10)."""
    K = max(sizes)
    info: dict[str, Any] = {"group": group, "K": K}
    if 1 not in sizes or C1_K_SETTLED not in sizes:
        return {**info, "passes": None, "reason": f"needs k = 1 and k = {C1_K_SETTLED}; has k = {min(sizes)}..{K}"}
    s1, s10, sK = sizes[1], sizes[C1_K_SETTLED], sizes[K]
    if not s1 > 0:  # a loop that does not move at k = 1 has nothing to shrink: s(10) <= 0.5 s(1) would be vacuous
        return {**info, "s1": s1, "ratio_10_to_1": math.nan, "passes": None,
                "reason": "the loop does not move at k = 1 (s(1) = 0)"}
    info.update(
        s1=s1, s10=s10, sK=sK, ratio_10_to_1=_ratio(s10, s1),
        drop_before_10=s1 - s10, drop_after_10=s10 - sK,
        halved_by_10=s10 <= C1_MAX_RATIO * s1, flat_after_10=(s10 - sK) < (s1 - s10),
    )
    return {**info, "passes": bool(info["halved_by_10"] and info["flat_after_10"])}


def step_sizes_shrink(geometry: pl.DataFrame, spectrum: pl.DataFrame | None = None) -> Verdict:
    """C1 on the last checkpoint: every group's step sizes settle by k = 10 (`_settles_by_k10`); beside it, not
    scored, what the loop map's spectrum says of the late decay (`spectrum_reading`)."""
    last = training_steps(metric_rows(geometry, "step_size", "claims"))[-1]
    groups = [_settles_by_k10(g, sizes) for g, sizes in _curves(geometry, "step_size", last).items()]
    return Verdict([g["passes"] for g in groups],
                   {"step": last, "groups": groups, "spectrum": spectrum_reading(spectrum, last)})


def _warmup_steps(schedule: pl.DataFrame | None) -> int:
    """The run's learning-rate warm-up in training steps (the `schedule` table's one row; 0 without one)."""
    if schedule is None:
        return 0
    require(schedule, "schedule", ("warmup_steps",), "C2")
    return int(schedule["warmup_steps"][0])


def steps_shrink_over_training(geometry: pl.DataFrame, schedule: pl.DataFrame | None = None) -> Verdict:
    """C2: the first checkpoint after the learning-rate warm-up (`schedule`) against the last, per group:
    s(k*)/s(1) lower and mean relative step size lower; the mean absolute step size and s(1) reported beside.
    Undecided without a checkpoint after warm-up before the last (a baseline inside warm-up, where the model has
    barely trained, would make "smaller later" close to certain)."""
    steps = training_steps(metric_rows(geometry, "step_size", "claims"))
    warmup = _warmup_steps(schedule)
    per_checkpoint: list[dict[str, Any]] = []
    for step in steps:
        sizes = _curves(geometry, "step_size", step)
        relative = _curves(geometry, "relative_step_size", step)
        for g, s in sizes.items():
            k_ref = min(C2_K_SETTLED, max(s))
            per_checkpoint.append({
                "step": step, "group": g, "k_ref": k_ref, "first_step_size": s.get(1, math.nan),
                "decay_ratio": _ratio(s[k_ref], s[1]) if 1 in s and k_ref in s else math.nan,
                "mean_step": _mean(list(s.values())),
                "mean_relative_step": _mean(list(relative.get(g, {}).values())),
            })
    after = [step for step in steps if step >= warmup]
    first, last = (after[0] if after else steps[-1]), steps[-1]
    floored = {step: _floored_steps(geometry, step) for step in (first, last)}
    by = {(d["step"], d["group"]): d for d in per_checkpoint}
    groups = []
    for g in sorted({d["group"] for d in per_checkpoint if d["step"] == last}):
        a, b = by.get((first, g)), by.get((last, g))
        info: dict[str, Any] = {"group": g, "first_step": first, "last_step": last}
        if first == last or a is None or b is None:
            info.update(passes=None, reason=f"needs the group in a checkpoint after the warm-up ({warmup} steps) "
                        "before the last")
        elif not all(math.isfinite(x) for x in (a["decay_ratio"], b["decay_ratio"],
                                                 a["mean_relative_step"], b["mean_relative_step"])):
            info.update(passes=None, reason="step size at k=1 or relative step size missing")
        else:
            info.update(
                steps_at_floor_first=floored[first].get(g), steps_at_floor_last=floored[last].get(g),
                k_ref=b["k_ref"],
                decay_ratio_first=a["decay_ratio"], decay_ratio_last=b["decay_ratio"],
                mean_relative_first=a["mean_relative_step"], mean_relative_last=b["mean_relative_step"],
                mean_step_first=a["mean_step"], mean_step_last=b["mean_step"],
                first_step_size_first=a["first_step_size"], first_step_size_last=b["first_step_size"],
                decays_faster=b["decay_ratio"] < a["decay_ratio"],
                smaller=b["mean_relative_step"] < a["mean_relative_step"],
            )
            info["passes"] = bool(info["decays_faster"] and info["smaller"])
        groups.append(info)
    return Verdict([g["passes"] for g in groups],
                   {"first_step": first, "last_step": last, "warmup_steps": warmup,
                    "in_warmup": [step for step in steps if step < warmup], "groups": groups,
                    "per_checkpoint": per_checkpoint})


def _first_late_k(loops: int) -> int:
    """The first of the late loop steps, k > loops/2, that C3 reads."""
    return loops // 2 + 1


def _late_cosine(curve: dict[int, float], loops: int) -> float:
    """The mean over the late k of a group's per-k mean cosine (a k whose steps are all at the floor has none)."""
    return _mean([v for k, v in curve.items() if k >= _first_late_k(loops)])


def _cosine_trend(first: float, last: float, checkpoints: int) -> str:
    """Where the late-k cosine moves from the first checkpoint to the last."""
    if checkpoints < 2 or not (math.isfinite(first) and math.isfinite(last)):
        return "unknown (one checkpoint)"
    if last - first > C3_TREND_TOLERANCE and abs(last) > abs(first):
        return "toward 1 (steps align)"
    if abs(last) < abs(first) - C3_TREND_TOLERANCE:
        return "toward 0 (steps turn orthogonal)"
    if abs(last - first) <= C3_TREND_TOLERANCE:
        return "flat"
    return "toward −1 (steps reverse)"


def _supported_statement(cosines: Sequence[float]) -> str:
    """Which of the paper's two statements the groups' late-k cosines support."""
    lo, hi = C3_BAND
    if cosines and all(lo <= c <= hi for c in cosines):
        return f"'settles around {lo}-{hi}'"
    if cosines and all(abs(c) <= C3_ORTHOGONAL_MAX for c in cosines):
        return "'increasingly orthogonal'"
    if cosines and all(c > hi for c in cosines):
        return f"neither: late steps stay aligned (cos > {hi})"
    return "neither cleanly (groups differ)"


def step_cosine_settles(geometry: pl.DataFrame, spectrum: pl.DataFrame | None = None) -> Verdict:
    """C3: late-k mean cosine in [0.5, 0.65] for every group at the last checkpoint; trend across training; beside
    it, not scored, what the loop map's spectrum says of the late cosine (`spectrum_reading`)."""
    steps = training_steps(metric_rows(geometry, "step_cosine", "claims"))
    loops = {step: {g: max(s) for g, s in _curves(geometry, "step_size", step).items()} for step in steps}
    per_checkpoint = [
        {"step": step, "group": g, "late_cosine": _late_cosine(curve, loops[step][g])}
        for step in steps
        for g, curve in _curves(geometry, "step_cosine", step).items()
    ]
    first, last = steps[0], steps[-1]
    lo, hi = C3_BAND
    counted = _above_floor(geometry, "step_cosine", last, {g: _first_late_k(K) for g, K in loops[last].items()})
    regimes = regime_readings(geometry, last, "step_cosine", _late_cosine)
    groups = []
    for d in (d for d in per_checkpoint if d["step"] == last):
        c, above = d["late_cosine"], counted.get(d["group"])
        ok = None if not math.isfinite(c) else lo <= c <= hi
        group = {"group": d["group"], "late_cosine": c, "in_band": ok, "passes": ok, "cosines_above_floor": above}
        if d["group"] in regimes:  # reported, not scored: whether the tokens of some regime show the band
            group["regimes"] = regimes[d["group"]]
            group["regimes_in_band"] = [regime for regime, r in regimes[d["group"]].items() if r["share"] > 0
                                        and math.isfinite(r["step_cosine"]) and lo <= r["step_cosine"] <= hi]
        if above and above["of"] and above["kept"] < C3_MIN_ABOVE_FLOOR * above["of"]:
            group.update(passes=None, reason=f"{above['kept']} of {above['of']} late cosines above the precision "
                         f"floor: fewer than {C3_MIN_ABOVE_FLOOR:.0%}, so their mean speaks for few tokens")
        groups.append(group)

    def overall(step: int) -> float:
        return _mean([d["late_cosine"] for d in per_checkpoint if d["step"] == step])

    c_first, c_last = overall(first), overall(last)
    return Verdict(
        [g["passes"] for g in groups],
        {"first_step": first, "last_step": last, "groups": groups,
         "trend": _cosine_trend(c_first, c_last, len(steps)),
         "supports": _supported_statement([g["late_cosine"] for g in groups]),
         "late_cosine_first": c_first, "late_cosine_last": c_last, "per_checkpoint": per_checkpoint,
         "spectrum": spectrum_reading(spectrum, last)},
    )


def _at_least(value: float | None, threshold: float) -> Check:
    return None if value is None or not math.isfinite(value) else value >= threshold


def drift_exceeds_loop(geometry: pl.DataFrame) -> Verdict:
    """C4: median DLR >= 10 at every hand-off of the last checkpoint, read by the paper's Eq. 2 (K = the loop count
    measured, `dlr_loops`); all checkpoints and the medians at other K reported, and beside the verdict the
    stricter reading at K = 10 (`strict`), which a converging loop's late tiny steps do not inflate."""
    steps = training_steps(metric_rows(geometry, "drift_to_loop_ratio", "claims"))
    loops, strict = dlr_loops(geometry), dlr_loops(geometry, C4_STRICT_LOOPS)
    per_checkpoint = [h for step in steps for h in _handoffs(geometry, step, loops)]
    last = steps[-1]
    handoffs = [dict(h) for h in per_checkpoint if h["step"] == last]
    for h in handoffs:
        h["passes"] = _at_least(h["median"], C4_MIN_DLR)
    strict_handoffs = [{"handoff": h["handoff"], "median": h["median"], "passes": _at_least(h["median"], C4_MIN_DLR)}
                       for h in _handoffs(geometry, last, strict)]
    return Verdict(
        [h["passes"] for h in handoffs],
        {"step": last, "threshold": C4_MIN_DLR, "loops": loops, "handoffs": handoffs,
         "all_above_one": all(h["median"] is not None and h["median"] > 1 for h in handoffs),
         "strict": {"loops": strict, "handoffs": strict_handoffs}, "per_checkpoint": per_checkpoint},
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


def spirals_and_jumps(geometry: pl.DataFrame, depth: pl.DataFrame | None = None,
                      trajectory: pl.DataFrame | None = None) -> Verdict:
    """C5 on the last checkpoint: large jumps (median DLR >= 10), bending paths (mean turning >= 30 degrees),
    and tight paths (the length walked after the first application is shorter than the adjacent jump).
    Reported, not scored: whether the max-cut depth phases equal the layout (given `depth`), and the one-token
    PCA picture's jumps and spreads (given `trajectory`)."""
    last = training_steps(metric_rows(geometry, "step_size", "claims"))[-1]
    sizes = _curves(geometry, "step_size", last)
    turning = _curves(geometry, "turning_angle", last)
    turns_counted = _above_floor(geometry, "turning_angle", last, {g: 2 for g in sizes})
    loops = dlr_loops(geometry)
    handoffs = _handoffs(geometry, last, loops)
    checks: list[Check] = []

    # estimated mean jump out of g: median DLR_K x the mean of g's first K step sizes (DLR_K's own denominator)
    mean_step = {g: _mean([v for k, v in s.items() if k <= loops]) for g, s in sizes.items()}
    path_after_first = {g: sum(v for k, v in s.items() if k >= 2) for g, s in sizes.items()}
    jumps = []
    for h in handoffs:
        g = h["group"]
        dlr = h["median"] if h["median"] is not None else math.nan
        jump = dlr * mean_step.get(g, math.nan)
        ok = None if not math.isfinite(dlr) else dlr >= C5_MIN_DLR
        jumps.append({"handoff": h["handoff"], "median_dlr": dlr, "jump_estimate": jump, "large": ok})
        checks.append(ok)
    jump_out = {int(j["handoff"].split("->")[0]): j["jump_estimate"] for j in jumps}
    jump_in = {int(j["handoff"].split("->")[1]): j["jump_estimate"] for j in jumps}

    regimes = regime_readings(geometry, last, "turning_angle", lambda curve, _: _mean(list(curve.values())))
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
                       "turns_above_floor": turns_counted.get(g),
                       "path_after_first": path_after_first[g], "adjacent_jump": jump,
                       "path_to_jump": path_to_jump, "tight": tight,
                       **({"regimes": regimes[g]} if g in regimes else {})})
        checks += [bends, tight]

    detail: dict[str, Any] = {"step": last, "loops": loops, "jumps": jumps, "groups": groups,
                              "thresholds": {"min_dlr": C5_MIN_DLR, "min_turning_deg": C5_MIN_TURNING_DEG,
                                             "max_path_to_jump": C5_MAX_PATH_TO_JUMP}}
    if depth is not None and depth.height:
        require(depth, "depth", ("step", "position", "phase", "layout_phase"), "claims")
        d = depth.filter(pl.col("step") == depth["step"].max())
        mismatched = int((d["phase"] != d["layout_phase"]).sum())
        detail["phases_match_layout"] = mismatched == 0
        detail["positions_off_layout"] = mismatched
        detail["positions"] = d.height
    if trajectory is not None and trajectory.height:
        require(trajectory, "trajectory", ("step", "group", "k", "pc1", "pc2"), "claims")
        detail["token_pca"] = _token_pca_summary(trajectory, int(trajectory["step"].max()))
    return Verdict(checks, detail)
