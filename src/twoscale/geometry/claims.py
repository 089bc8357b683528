"""The loop geometry's claims in words: the precondition S and the paper's C1-C5 (Pappone et al., arXiv 2509.23314),
each a `Claim` record of what the paper says, the test, its verdict (`geometry.verdicts`) and its measured text."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl

from twoscale.geometry.thresholds import (
    C1_K_SETTLED,
    C1_MAX_RATIO,
    C2_K_SETTLED,
    C3_BAND,
    C3_ORTHOGONAL_MAX,
    C3_TREND_TOLERANCE,
    C4_MIN_DLR,
    C4_STRICT_LOOPS,
    C5_MAX_PATH_TO_JUMP,
    C5_MIN_DLR,
    C5_MIN_TURNING_DEG,
    DEPTH_MIN_GAIN,
    S_TOLERANCE,
)
from twoscale.geometry.verdicts import (
    depth_gain,
    drift_exceeds_loop,
    loop_stability,
    spirals_and_jumps,
    step_cosine_settles,
    step_sizes_shrink,
    steps_shrink_over_training,
)
from twoscale.report.claim import Claim, Headline, Line, Premise, Revision, counted, fmt
from twoscale.report.verdicts import Verdict


def _beyond_words(groups: list[dict], trained: int) -> str:
    """What the loop does past the `trained` range, per group, in one sentence."""
    if not groups:
        return ""
    parts = [f"group {g['group']} steps {fmt(g['step_size_at_trained'], 2)} at k = {trained}, "
             f"{fmt(g['step_size_at_most'], 2)} at k = {g['loops']} (mean cosine {fmt(g['cosine_beyond'], 2)} "
             f"between), state norm {fmt(g['state_norm_at_trained'], 3)} → {fmt(g['state_norm_at_most'], 3)}"
             for g in groups]
    return f" Its geometry looped to {groups[0]['loops']} (float64): " + "; ".join(parts) + "."


def _s_measured(verdict: Verdict, loss_vs_loops: pl.DataFrame, schedule: pl.DataFrame | None = None,
                beyond: pl.DataFrame | None = None) -> tuple[str, Headline]:
    d = verdict.detail
    curve, best, most, rise = d["loss_vs_loops"], d["best_loops"], d["most_loops"], d["rise"]
    trained = d.get("most_trained_loops")
    beside = ("" if trained is None else
              f" Training drew at most {trained} loops: {most} is {'beyond' if d['beyond_training'] else 'within'} "
              f"that range; within it the rise to the most loops is {fmt(d['rise_within_training'], 3)} nats.")
    measured = (
        f"step {d['step']}: {fmt(curve.get(1), 3)} at 1 loop, best {fmt(curve[best], 3)} "
        f"at {best}, {fmt(curve[most], 3)} at {most} ({rise:+.3f} nats over the best). At {most} loops over "
        "steps " + ", ".join(f"{step}: {fmt(loss, 2)}" for step, loss in d["loss_at_most_loops_by_step"].items())
        + "." + beside + _beyond_words(d.get("beyond_geometry", []), trained))
    return measured, {"loss at 1 loop": curve.get(1), "best loss": curve[best], "best loop count": best,
                      f"loss at {most} loops": curve[most], "rise to the most loops": rise}


S = Claim(
    id="S",
    system="geometry",
    title="more loops do not break the model",
    statement="Precondition, not a claim of the paper: more loops do not break the model, so its loop dynamics are "
    "worth measuring.",
    test=f"Last checkpoint, validation loss with every group looped K times: loss at the largest K measured <= "
    f"the lowest loss over all K + {S_TOLERANCE} nats. The largest K measured is twice the most loops training drew "
    f"(64 by default: do more loops than trained degrade the model?); the same reading within training's range is "
    f"reported beside, and the geometry of the loop run that far (step sizes, cosine, state norm).",
    reads=("loss_vs_loops", "schedule", "beyond"),
    verdict=loop_stability,
    measured=_s_measured,
    revisions=(Revision(
        reading="the loss at twice the most loops training drew (64) within 0.05 nats of the best; within training's "
        "range beside",
        replaced="the loss at the geometry's loop count (30), inside training's range",
        why="whether more loops than trained degrade the model is what a user of a looped model asks; it made the "
        "check stricter",
        when="November 2026"),),
    lines=(Line("rise to the most loops", (S_TOLERANCE,)),),
)


def depth_premise(frames: Mapping[str, pl.DataFrame | None]) -> Premise | None:
    """The premise of C1-C5: at the last checkpoint, looping lowers the validation loss below one loop's by at least
    DEPTH_MIN_GAIN nats (`depth_gain`); not measured without the loss-vs-loops table."""
    loss = frames.get("loss_vs_loops")
    if loss is None:
        return None
    d = depth_gain(loss)
    if d["used"] is None:
        return Premise(None, f"Depth: no one-loop loss at step {d['step']}, so whether the model uses its loop is "
                       "not known.", "depth not measured")
    return Premise(d["used"], f"Depth {'used' if d['used'] else 'unused'}: validation loss "
                   f"{fmt(d['loss_at_one_loop'], 3)} at 1 loop, {fmt(d['best_loss'], 3)} at its best "
                   f"({d['best_loops']} loops), a gain of {d['gain']:.4f} nats (used from {DEPTH_MIN_GAIN:g}, a 1% "
                   f"perplexity).", "depth unused", {"depth gain (nats)": d["gain"]})


K_OF_EQ_2 = Revision(
    reading="DLR_K at K = the loop count measured (30 by default), the paper's Eq. 2; K = 10 and the K at which the "
    "ratio first reaches 10 beside",
    replaced="DLR_K at K = 10, the k by which C1 says the steps have settled",
    why="the paper's definition decides; for a converging loop DLR_K grows about linearly with K, so the reading "
    "at K = 30 is partly a statement about K, said beside the verdict (it turned `huginn` from not reproduced to "
    "reproduced)",
    when="November 2026")

DEPTH_PREMISE = Revision(
    reading=f"inconclusive where looping gains less than {DEPTH_MIN_GAIN:g} nats (a 1% perplexity) over one loop at "
    "the last checkpoint ('depth unused'; the checks' own reading said beside)",
    replaced="read on any model",
    why="the GPU model's loss was 5.209 at one loop and 5.205 at its best: the geometry claims read 'reproduced' on "
    "the steps of a loop that does nothing",
    when="2026-11-28")

DEPTH_LINE = Line(r"depth gain \(nats\)", (DEPTH_MIN_GAIN,))  # the premise of C1-C5

REGIME_RULE = Revision(
    reading="the per-token regimes reported beside (not scored): a fixed point's last step is at most 1e-3 of its "
    "state, or its fitted tail reaches that within as many more loops as were measured; a token whose steps shrink "
    "but stay large is a slowing drift (docs/methods.md#per-token-regimes)",
    replaced="a fixed point was any token whose steps shrink (by the tail's fit) or whose last step is at most 1% "
    "of the tail's largest (until 2026-11-28, de8ed87: of all K steps', with a slider's last step at least half "
    "the tail's first)",
    why="`paper`'s tokens, steps of ~100 against states of ~6,000 that shrink by about 1% a loop, were 77-100% "
    "'fixed points' (before de8ed87 a referee's hand-built slow convergers were sliders)",
    when="added 2026-11-26 (b9dc31b) after C3's and C5's numbers; revised 2026-11-28 (de8ed87) and 2026-11-29, "
    "after the numbers")


def _agreement_words(a: Mapping[str, Any]) -> str:
    return f"median |error| {fmt(a['median_abs_error'], 2)}, r = {fmt(a['correlation'], 2)}"


def _per_group_sentence(groups: Sequence[Mapping[str, Any]], opening: str,
                        part: Callable[[Mapping[str, Any]], str]) -> str:
    """One sentence of the spectrum's per-group readings: `opening` ({tokens}: the tokens per group), then `part` of
    each group (empty without a spectrum)."""
    if not groups:
        return ""
    return " " + opening.format(tokens=groups[0]["tokens"]) + "; ".join(map(part, groups)) + "."


def _spectrum_decay_words(groups: Sequence[Mapping[str, Any]]) -> str:
    """What the loop map's spectrum says of the late decay, per group."""
    return _per_group_sentence(groups, "The loop map's spectrum ({tokens} tokens per group, medians): ", lambda g: (
        f"g{g['group']} radius {fmt(g['median_radius'], 3)} (prefix {fmt(g['median_prefix_radius'], 3)}) "
        f"against a measured late step ratio of {fmt(g['median_measured_ratio'], 3)} (own block: "
        f"{_agreement_words(g['radius_vs_ratio'])}; prefix: {_agreement_words(g['prefix_vs_ratio'])})"))


def _c1_measured(verdict: Verdict, geometry: pl.DataFrame, spectrum: pl.DataFrame | None = None
                 ) -> tuple[str, Headline]:
    groups = verdict.detail["groups"]
    parts = [
        f"g{d['group']}: s(10)/s(1) = {fmt(d['ratio_10_to_1'])}, fall after/before k=10 = "
        f"{fmt(d['drop_after_10'])}/{fmt(d['drop_before_10'])}" if d["passes"] is not None
        else f"g{d['group']}: {d['reason']}"
        for d in groups
    ]
    return (f"step {verdict.detail['step']}: " + "; ".join(parts)
            + _spectrum_decay_words(verdict.detail.get("spectrum", [])),
            {f"s(10)/s(1) g{d['group']}": d.get("ratio_10_to_1") for d in groups})


C1 = Claim(
    id="C1",
    system="geometry",
    title="steps shrink within 5–10 loops",
    statement="Step sizes shrink quickly with k, within about 5-10 steps.",
    test=f"Last checkpoint, per group, mean step size ‖Δ^(k)‖: s({C1_K_SETTLED}) <= {C1_MAX_RATIO} × s(1), "
    f"and the fall after k={C1_K_SETTLED} is smaller than the fall before it "
    f"(s({C1_K_SETTLED}) − s(K) < s(1) − s({C1_K_SETTLED})). Reproduced if every group passes. Beside it, not "
    f"scored: the spectral radius of one loop step's Jacobian per token against the token's measured late step "
    f"ratio (docs/methods.md#the-loop-maps-spectrum).",
    reads=("geometry", "spectrum"),
    verdict=step_sizes_shrink,
    measured=_c1_measured,
    premise=depth_premise,
    revisions=(DEPTH_PREMISE,),
    lines=(DEPTH_LINE, Line(r"s\(10\)/s\(1\) g\d+", (C1_MAX_RATIO,))),
)


def _c2_measured(verdict: Verdict, geometry: pl.DataFrame, schedule: pl.DataFrame | None = None
                 ) -> tuple[str, Headline]:
    first, last, groups = (verdict.detail[key] for key in ("first_step", "last_step", "groups"))
    skipped = verdict.detail["in_warmup"]
    warmup = (f" (the first checkpoint after the {verdict.detail['warmup_steps']}-step warm-up; "
              f"{', '.join(map(str, skipped))} inside it, not read)" if skipped else "")
    if first == last:
        measured = f"no checkpoint after the warm-up before the last (step {last}){warmup}: nothing to compare"
    else:
        measured = f"step {first} → {last}{warmup}: " + "; ".join(
            f"g{d['group']}: s({d['k_ref']})/s(1) "
            f"{fmt(d['decay_ratio_first'])} → {fmt(d['decay_ratio_last'])}, "
            f"mean relative step {fmt(d['mean_relative_first'], 3)} → {fmt(d['mean_relative_last'], 3)}, "
            f"beside them the absolute mean step {fmt(d['mean_step_first'], 3)} → {fmt(d['mean_step_last'], 3)} "
            f"and s(1) {fmt(d['first_step_size_first'], 3)} → {fmt(d['first_step_size_last'], 3)}"
            if d["passes"] is not None else f"g{d['group']}: {d['reason']}"
            for d in groups
        ) + "; steps at the precision floor (their sizes count as measured), first → last: " + ", ".join(
            f"g{d['group']} {counted(d.get('steps_at_floor_first'), 'at_floor')} → "
            f"{counted(d.get('steps_at_floor_last'), 'at_floor')}" for d in groups if d["passes"] is not None)
    return measured, {label: d.get(key) for d in groups for label, key in (
        (f"s(k*)/s(1) g{d['group']} first", "decay_ratio_first"),
        (f"s(k*)/s(1) g{d['group']} last", "decay_ratio_last"))}


C2 = Claim(
    id="C2",
    system="geometry",
    title="steps shrink across training",
    statement="Across training, loop steps get smaller: the decay with k gets faster in later checkpoints.",
    test=f"The first checkpoint after the learning-rate warm-up vs the last, per group: s(k*)/s(1) with "
    f"k* = min({C2_K_SETTLED}, K) is lower at the last checkpoint, and the mean over k of the relative step size "
    f"‖Δ^(k)‖/‖x^(k−1)‖ is lower (the states' norms grow with training, so absolute sizes are reported beside, "
    f"not scored). Reproduced if both hold for every group, mixed if for some; no checkpoint after warm-up "
    f"before the last: undecided. Steps at the precision floor are counted and reported; their sizes stay in "
    f"the means (they are known to be below the floor).",
    reads=("geometry", "schedule"),
    verdict=steps_shrink_over_training,
    measured=_c2_measured,
    premise=depth_premise,
    revisions=(Revision(
        reading="the first checkpoint after the learning-rate warm-up against the last",
        replaced="the first checkpoint (step 25, inside the 100-step warm-up) against the last",
        why="against a model that has barely trained, 'smaller later' is close to certain; it made the check stricter",
        when="November 2026"), DEPTH_PREMISE),
    lines=(DEPTH_LINE,),
)


def regimes_text(groups: Sequence[Mapping[str, Any]], metric: str, digits: int = 3, unit: str = "") -> str:
    """Each group's per-token regimes: share of the tokens and the regime's own reading of `metric`."""
    def one(g: Mapping[str, Any]) -> str:
        parts = ", ".join(f"{regime.replace('_', ' ')} {100 * r['share']:.0f}%"
                          + (f" ({fmt(r[metric], digits)}{unit})" if r["share"] > 0 else "")
                          for regime, r in g["regimes"].items())
        band = g.get("regimes_in_band")
        return f"g{g['group']}: {parts}" + ("" if band is None else f"; in the band: {', '.join(band) or 'none'}")

    shown = [g for g in groups if "regimes" in g]
    return f" Per-token regimes (share, and its own reading): {'; '.join(map(one, shown))}." if shown else ""


def _spectrum_cosine_words(groups: Sequence[Mapping[str, Any]]) -> str:
    """What the loop map's dominant eigenvalues say of the late cosine, per group."""
    band = f"{math.degrees(math.acos(C3_BAND[1])):.1f}–{math.degrees(math.acos(C3_BAND[0])):.0f}°"
    return _per_group_sentence(
        groups, "The loop map's dominant eigenvalue ({tokens} tokens per group; a real one predicts cosine ±1, and "
        f"only an angle of {band} predicts the band): ", lambda g: (
            f"g{g['group']} real for {100 * g['real_share']:.0f}% of tokens (the largest angle from the real axis "
            f"{fmt(g['largest_angle_deg'], 2)}°), in the band for {100 * g['band_share']:.0f}%; predicted late "
            f"cosine {fmt(g['median_predicted_cosine'], 3)} against {fmt(g['median_measured_cosine'], 3)} measured "
            f"({_agreement_words(g['cosine_vs_measured'])})"))


def _c3_measured(verdict: Verdict, geometry: pl.DataFrame, spectrum: pl.DataFrame | None = None
                 ) -> tuple[str, Headline]:
    d = verdict.detail
    first, last, groups = d["first_step"], d["last_step"], d["groups"]
    measured = (
        f"step {last}, mean cos over k > K/2: "
        + ", ".join(f"g{g['group']} {fmt(g['late_cosine'], 3)} "
                    f"({counted(g.get('cosines_above_floor'), 'kept')} cosines above the floor)" for g in groups)
        + (f"; step {first} → {last} (mean over groups) {fmt(d['late_cosine_first'], 3)} → "
           f"{fmt(d['late_cosine_last'], 3)}, {d['trend']}" if first != last else "; one checkpoint, no trend")
        + f". Supports {d['supports']}."
        + regimes_text(groups, "step_cosine")
        + _spectrum_cosine_words(d.get("spectrum", []))
    )
    return measured, {f"late cosine g{g['group']}": g["late_cosine"] for g in groups}


C3 = Claim(
    id="C3",
    system="geometry",
    title="late consecutive-step cosine 0.5–0.65",
    statement=f"Consecutive-step cosine rises and settles around {C3_BAND[0]}-{C3_BAND[1]} late in training "
    "(the text also says steps grow 'increasingly orthogonal').",
    test=f"Last checkpoint, per group, mean of cos(Δ^(k), Δ^(k−1)) over the last half of the loop steps "
    f"(k > K/2), over the steps above the precision floor: reproduced if in [{C3_BAND[0]}, {C3_BAND[1]}] for every "
    f"group. Also reported: its trend from the first "
    f"to the last checkpoint (toward 0 = orthogonal, toward 1 = aligned; |change| ≤ {C3_TREND_TOLERANCE} "
    f"= flat) "
    f"and which statement the level supports (|cos| ≤ {C3_ORTHOGONAL_MAX} counts as orthogonal). Beside it, not "
    f"scored: the cosine that each token's dominant eigenvalue of one loop step's Jacobian predicts, cos(arg λ), "
    f"against the measured one (docs/methods.md#the-loop-maps-spectrum).",
    reads=("geometry", "spectrum"),
    verdict=step_cosine_settles,
    measured=_c3_measured,
    premise=depth_premise,
    revisions=(DEPTH_PREMISE, REGIME_RULE),
    lines=(DEPTH_LINE, Line(r"late cosine g\d+", C3_BAND)),
)


def _c4_measured(verdict: Verdict, geometry: pl.DataFrame) -> tuple[str, Headline]:
    d = verdict.detail
    handoffs, per_checkpoint = d["handoffs"], d["per_checkpoint"]
    steps = list(dict.fromkeys(h["step"] for h in per_checkpoint))
    history = "; ".join(
        f"{h}: " + ", ".join(f"{fmt(c['median'])}" for c in per_checkpoint if c["handoff"] == h)
        for h in dict.fromkeys(c["handoff"] for c in per_checkpoint)
    )
    K, strict = d["loops"], d["strict"]
    strict_words = {True: "≥", False: "<", None: "n/a vs"}
    measured = (
        f"step {d['step']}, median DLR_{K} (Eq. 2, all {K} loop steps): "
        + ", ".join(f"{h['handoff']} {fmt(h['median'])} (q10–q90 {fmt(h['q10'])}–{fmt(h['q90'])})"
                    for h in handoffs)
        + ("; all > 1" if d["all_above_one"] else "; some ≤ 1")
        + (f". Beside it, the stricter reading at K = {strict['loops']}: "
           + ", ".join(f"{h['handoff']} {fmt(h['median'])} ({strict_words[h['passes']]} {fmt(d['threshold'])})"
                       for h in strict["handoffs"])
           + " (DLR_K grows with K for a converging loop: its late steps are tiny, so the mean step in the "
           "denominator shrinks as K grows)" if strict["loops"] != K else
           f". The stricter reading at K = {C4_STRICT_LOOPS} is this one: {K} loops were measured")
        + ". By K: " + "; ".join(f"{h['handoff']} " + ", ".join(f"K={k} {fmt(v)}" for k, v in h["by_loops"].items())
                                 for h in handoffs)
        + f". The median first reaches {fmt(d['threshold'], 0)} at: " + ", ".join(
            f"{h['handoff']} " + (f"K = {h['first_k_reaching']}" if h["first_k_reaching"] is not None
                                  else f"no K up to {max(h['by_loops'])}") for h in handoffs)
        + (f". DLR_{K} over steps {', '.join(map(str, steps))}: {history}" if len(steps) > 1 else "")
    )
    return measured, {**{f"median DLR_{K} {h['handoff']}": h["median"] for h in handoffs},
                      **{f"median DLR_{strict['loops']} {h['handoff']}": h["median"] for h in strict["handoffs"]},
                      **{f"K where DLR reaches {fmt(d['threshold'], 0)} {h['handoff']}": h["first_k_reaching"]
                         for h in handoffs}}


C4 = Claim(
    id="C4",
    system="geometry",
    title="drift-to-loop ratio ≫ 1 at every hand-off",
    statement="The drift-to-loop ratio is much greater than 1 at every hand-off.",
    test=f"Last checkpoint: median over tokens of DLR_K = ‖x_h^(1) − x_g^(K_g)‖ / mean_(k≤K) ‖Δ_g^(k)‖ by the "
    f"paper's Eq. 2, K = the group's loop count measured (all its loop steps), is ≥ {C4_MIN_DLR:g} at every "
    f"hand-off ('≫ 1' read as at least an order of magnitude). DLR_K grows with K for a converging loop, so the "
    f"stricter reading at K = {C4_STRICT_LOOPS} is reported beside it, not scored (docs/claims.md#c4); other K "
    f"and all checkpoints reported.",
    reads=("geometry",),
    verdict=drift_exceeds_loop,
    measured=_c4_measured,
    premise=depth_premise,
    revisions=(K_OF_EQ_2, DEPTH_PREMISE),
    lines=(DEPTH_LINE, Line(rf"median DLR_(?!{C4_STRICT_LOOPS} )\d+ .+", (C4_MIN_DLR,))),
)


def _phase_note(detail: Mapping[str, Any]) -> str:
    """Whether the detected depth phases match the layout, where the depth table was given."""
    if "phases_match_layout" not in detail:
        return ""
    if detail["phases_match_layout"]:
        return "; detected depth phases match the layout"
    return (f"; detected depth phases do not match the layout ({detail['positions_off_layout']}/"
            f"{detail['positions']} positions differ)")


def _c5_measured(verdict: Verdict, *tables: pl.DataFrame | None) -> tuple[str, Headline]:
    d = verdict.detail
    jumps, groups = d["jumps"], d["groups"]
    measured = (
        f"step {d['step']}: median DLR_{d['loops']} "
        + ", ".join(f"{j['handoff']} {fmt(j['median_dlr'])}" for j in jumps)
        + "; mean turning " + ", ".join(f"g{g['group']} {fmt(g['mean_turning_deg'], 2)}° "
                                        f"({counted(g.get('turns_above_floor'), 'kept')} above the floor)"
                                        for g in groups)
        + "; path after k=1 / jump " + ", ".join(f"g{g['group']} {fmt(g['path_to_jump'])}" for g in groups)
        + _phase_note(d) + "."
        + regimes_text(groups, "turning_angle", 2, "°")
    )
    return measured, {**{f"turning g{g['group']} (deg)": g["mean_turning_deg"] for g in groups},
                      **{f"path/jump g{g['group']}": g["path_to_jump"] for g in groups}}


C5 = Claim(
    id="C5",
    system="geometry",
    title="tight spirals within groups, big jumps between",
    statement="Within groups the trajectory is a tight spiral; between groups it makes large jumps.",
    test=f"Last checkpoint. Large jumps: median DLR_K ≥ {C5_MIN_DLR:g} at every hand-off (K as in C4: Eq. 2, all "
    f"loop steps). Spiral: "
    f"in every group the mean turning angle arccos(cos(Δ^(k), Δ^(k−1))) over k ≥ 2 (steps above the "
    f"precision floor) is "
    f"≥ {C5_MIN_TURNING_DEG:g}° (a straight walk is 0°). Tight: in every group the path walked after the "
    f"first application, Σ_(k≥2) mean ‖Δ^(k)‖, is < {C5_MAX_PATH_TO_JUMP:g} × the smaller adjacent jump "
    f"(jump out of g ≈ median DLR_K × the mean of g's first K steps). Reproduced if all checks pass, mixed "
    f"if some. "
    f"Whether the max-cut depth phases equal the layout is reported, not scored.",
    reads=("geometry", "depth", "trajectory"),
    verdict=spirals_and_jumps,
    measured=_c5_measured,
    premise=depth_premise,
    revisions=(K_OF_EQ_2, DEPTH_PREMISE, REGIME_RULE),
    lines=(DEPTH_LINE, Line(r"turning g\d+ \(deg\)", (C5_MIN_TURNING_DEG,)),
           Line(r"path/jump g\d+", (C5_MAX_PATH_TO_JUMP,))),
)

CLAIMS = (S, C1, C2, C3, C4, C5)
