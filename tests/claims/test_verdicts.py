"""The pure verdicts (each system's `verdicts` module) on small hand-built tables, each number computed by hand;
the thresholds are read at their edges, where a claim passes or fails by the width of the comparison."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from sweeps import latency_rounds

from twoscale.exits import tables as exit_tables
from twoscale.exits import verdicts as exits
from twoscale.geometry import verdicts as geometry
from twoscale.geometry.thresholds import C1_K_SETTLED, C4_MIN_DLR, S_TOLERANCE
from twoscale.report.verdicts import (
    S_WORDS,
    Ratio,
    Verdict,
    aggregate,
    at_least,
    at_most,
    paired_ratio,
    ratio_by_round,
)
from twoscale.sampler import verdicts as sampler
from twoscale.sampler.thresholds import C7_MIN_SPEEDUP
from twoscale.surrogates import verdicts as surrogates
from twoscale.surrogates.thresholds import C8_RECOVERY

# --- common: how checks add up ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("checks", "expected"), [
    ([True, True], (True, "reproduced")),
    ([False, False], (False, "not reproduced")),
    ([True, False], (None, "mixed")),
    # an undecided check beside passes leaves the claim undecided: it could still fail
    ([True, None], (None, "inconclusive (1 of 2 pass, 1 undecided)")),
    ([True, True, None, None], (None, "inconclusive (2 of 4 pass, 2 undecided)")),
    # beside failures it does not: every decided check failing is a failure, and it says how many did not decide
    ([False, None], (False, "not reproduced (1 check undecided)")),
    ([False, False, None, None], (False, "not reproduced (2 checks undecided)")),
    ([True, False, None], (None, "mixed (1 check undecided)")),
    ([None, None], (None, "inconclusive")),
    ([], (None, "inconclusive")),
])
def test_checks_add_up_to_a_verdict(checks, expected):
    assert aggregate(checks) == expected
    verdict = Verdict(checks, {})
    assert (verdict.reproduced, verdict.verdict) == expected


def test_the_precondition_has_words_of_its_own():
    assert aggregate([True], S_WORDS) == (True, "holds")
    assert aggregate([False], S_WORDS) == (False, "does not hold")
    assert aggregate([True, False], S_WORDS) == (None, "mixed")


# --- geometry: S, C1, C4 ----------------------------------------------------------------------------------------


def geometry_frame(step_sizes: dict[int, dict[int, float]], dlr: dict[int, float] | None = None,
                   step: int = 500) -> pl.DataFrame:
    """One checkpoint: each group's mean step size by k, and the median DLR_K (the same at every K the group
    has) at the hand-off out of each group in `dlr` (q10/q90 at 0.5x and 2x)."""
    rows = [{"step": step, "metric": "step_size", "group": g, "k": k, "mean": s, "median": s, "q10": s, "q90": s}
            for g, sizes in step_sizes.items() for k, s in sizes.items()]
    rows += [{"step": step, "metric": "drift_to_loop_ratio", "group": g, "k": K, "mean": r, "median": r,
              "q10": 0.5 * r, "q90": 2 * r} for g, r in (dlr or {}).items() for K in step_sizes[g]]
    return pl.DataFrame(rows, schema={"step": pl.Int64, "metric": pl.String, "group": pl.Int64, "k": pl.Int64,
                                      "mean": pl.Float64, "median": pl.Float64, "q10": pl.Float64,
                                      "q90": pl.Float64})


def test_c1_passes_when_steps_halve_by_k10_and_then_fall_less():
    # s(1) = 1, s(10) = 0.5 (halved, just), s(12) = 0.4: falls 0.5 before k = 10 and 0.1 after
    sizes = {1: 1.0, 2: 0.9, 10: 0.5, 12: 0.4}
    verdict = geometry.step_sizes_shrink(geometry_frame({0: sizes}))
    (group,) = verdict.detail["groups"]
    assert group["ratio_10_to_1"] == 0.5 and group["halved_by_10"] is True
    assert group["drop_before_10"] == 0.5 and group["drop_after_10"] == pytest.approx(0.1)
    assert verdict.checks == [True] and verdict.verdict == "reproduced"


def test_c1_fails_a_group_whose_steps_are_not_halved_by_k10():
    # group 1: s(10) = 0.51 > 0.5 x s(1); group 0 as above: one group passes, one fails
    verdict = geometry.step_sizes_shrink(geometry_frame({0: {1: 1.0, 10: 0.5, 12: 0.4},
                                                         1: {1: 1.0, 10: 0.51, 12: 0.5}}))
    assert [g["halved_by_10"] for g in verdict.detail["groups"]] == [True, False]
    assert verdict.checks == [True, False] and verdict.verdict == "mixed"
    alone = geometry.step_sizes_shrink(geometry_frame({1: {1: 1.0, 10: 0.51, 12: 0.5}}))
    assert alone.reproduced is False and alone.verdict == "not reproduced"


def test_c1_cannot_decide_without_k10():
    verdict = geometry.step_sizes_shrink(geometry_frame({0: {k: 1 / k for k in range(1, 9)}}))
    (group,) = verdict.detail["groups"]
    assert group == {"group": 0, "K": 8, "passes": None,
                     "reason": f"needs k = 1 and k = {C1_K_SETTLED}; has k = 1..8"}
    assert verdict.verdict == "inconclusive"


def test_c4_reads_a_median_dlr_of_exactly_the_threshold_as_a_pass():
    sizes = {g: {1: 1.0} for g in range(3)}
    verdict = geometry.drift_exceeds_loop(geometry_frame(sizes, dlr={0: C4_MIN_DLR, 1: 9.99}))
    assert [(h["handoff"], h["median"], h["passes"]) for h in verdict.detail["handoffs"]] == [
        ("0->1", 10.0, True), ("1->2", 9.99, False)]
    assert verdict.verdict == "mixed" and verdict.detail["all_above_one"] is True


@pytest.mark.parametrize(("loss_at_16", "holds"), [(4.0, True), (3.9, True), (4.0 + S_TOLERANCE + 0.01, False)])
def test_s_compares_the_most_loops_with_the_best(loss_at_16, holds):
    losses = pl.DataFrame({"step": [500] * 3, "loops": [1, 8, 16], "val_loss": [5.0, 4.0, loss_at_16]})
    verdict = geometry.loop_stability(losses)
    assert verdict.detail["most_loops"] == 16
    assert verdict.detail["rise"] == pytest.approx(max(0.0, loss_at_16 - 4.0))
    assert verdict.verdict == ("holds" if holds else "does not hold")


def test_s_reports_the_geometry_beyond_training_at_the_most_trained_and_the_most_measured_loops():
    # group 0 converges past k = 4 (steps halve, cosine 1); group 1 drifts (steps stay 2, norm grows by 2 a step)
    losses = pl.DataFrame({"step": [500] * 3, "loops": [1, 4, 8], "val_loss": [5.0, 4.0, 4.0]})
    schedule = pl.DataFrame({"warmup_steps": [10], "most_trained_loops": [4]})
    rows = [{"step": 500, "metric": "step_size", "group": 0, "k": k, "mean": 2.0 ** -k} for k in range(1, 9)]
    rows += [{"step": 500, "metric": "step_size", "group": 1, "k": k, "mean": 2.0} for k in range(1, 9)]
    rows += [{"step": 500, "metric": "state_norm", "group": g, "k": k, "mean": 10.0 + g * 2.0 * k}
             for g in (0, 1) for k in range(9)]
    rows += [{"step": 500, "metric": "step_cosine", "group": g, "k": k, "mean": 1.0 if g == 0 else 0.5 + k / 100}
             for g in (0, 1) for k in range(2, 9)]
    beyond = pl.DataFrame([{**r, "median": r["mean"], "q10": r["mean"], "q90": r["mean"], "n": 1} for r in rows])
    detail = geometry.loop_stability(losses, schedule, beyond).detail
    assert detail["beyond_geometry"] == [
        {"group": 0, "step": 500, "loops": 8, "step_size_at_trained": 1 / 16, "step_size_at_most": 1 / 256,
         "state_norm_at_trained": 10.0, "state_norm_at_most": 10.0, "cosine_beyond": 1.0},
        {"group": 1, "step": 500, "loops": 8, "step_size_at_trained": 2.0, "step_size_at_most": 2.0,
         "state_norm_at_trained": 18.0, "state_norm_at_most": 26.0,
         "cosine_beyond": pytest.approx((0.55 + 0.56 + 0.57 + 0.58) / 4)}]
    assert "beyond_geometry" not in geometry.loop_stability(losses, schedule).detail


def test_the_spectrum_reading_puts_predictions_beside_measurements_per_group():
    # group 0: two real dominant eigenvalues (0° and 0.5°); group 1: a pair at 55° (cos 0.574, in the band) and a
    # negative real one at 179.5° (within 1° of the axis: real); a row of another checkpoint is not read
    def token(group, radius, prefix, ratio, angle, measured_cosine, step=500):
        return {"step": step, "group": group, "spectral_radius": radius, "prefix_radius": prefix,
                "measured_step_ratio": ratio, "dominant_angle_deg": angle,
                "predicted_cosine": math.cos(math.radians(angle)), "measured_step_cosine": measured_cosine}

    spectrum = pl.DataFrame([token(0, 0.6, 0.7, 0.62, 0.0, 0.99), token(0, 0.8, 0.8, 0.78, 0.5, 0.97),
                             token(1, 0.9, 0.9, 0.85, 55.0, 0.60), token(1, 0.5, 0.9, 0.45, 179.5, -0.9),
                             token(1, 5.0, 5.0, 5.0, 90.0, 0.0, step=100)])
    g0, g1 = geometry.spectrum_reading(spectrum, 500)
    assert (g0["tokens"], g0["median_radius"], g0["median_prefix_radius"]) == (2, pytest.approx(0.7),
                                                                               pytest.approx(0.75))
    assert g0["median_measured_ratio"] == pytest.approx(0.70)
    assert g0["radius_vs_ratio"]["median_abs_error"] == pytest.approx(0.02)  # |0.6 - 0.62|, |0.8 - 0.78|
    assert g0["prefix_vs_ratio"]["max_abs_error"] == pytest.approx(0.08)  # |0.7 - 0.62|
    assert (g0["real_share"], g0["band_share"]) == (1.0, 0.0)
    assert (g1["real_share"], g1["band_share"]) == (0.5, 0.5)
    assert (g0["largest_angle_deg"], g1["largest_angle_deg"]) == (0.5, 55.0)  # 179.5° is 0.5° from the axis
    expected = (math.cos(math.radians(55)) - math.cos(math.radians(0.5))) / 2
    assert g1["median_predicted_cosine"] == pytest.approx(expected)
    assert g1["median_measured_cosine"] == pytest.approx((0.60 - 0.9) / 2)
    assert geometry.spectrum_reading(None, 500) == []
    assert geometry.spectrum_reading(spectrum, 600) == []


# --- exits: C6b against the best fixed depth --------------------------------------------------------------------


def sweep_frame(points: dict[str, list[tuple[float, float, float]]], max_loops: int = 4) -> pl.DataFrame:
    """(setting, perplexity, ms/token) per strategy, FLOPs proportional to ms; criterion 'kl' for kl_*, else the
    strategy's name."""
    rows = [{"strategy": name, "criterion": "kl" if name.startswith("kl_") else name,
             "swept": "loops" if name == "fixed" else "threshold", "setting": setting, "perplexity": ppl,
             "gflops_per_token": ms / 1000, "ms_per_token": ms, "mean_loops": 2.0, "max_loops": max_loops}
            for name, pts in points.items() for setting, ppl, ms in pts]
    return pl.DataFrame(rows)


# fixed depth: K* = 2 loops (ppl 10, 20 ms); full depth 4 loops is worse (ppl 11, 40 ms)
FIXED = [(1.0, 12.0, 10.0), (2.0, 10.0, 20.0), (4.0, 11.0, 40.0)]


def test_the_reference_points_of_the_sweep():
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, 15.0), (1e-2, 10.5, 12.0)]})
    assert exit_tables.full_depth(sweep) == {"strategy": "fixed", "setting": 4.0, "max_loops": 4, "perplexity": 11.0,
                                       "gflops_per_token": 0.04, "ms_per_token": 40.0, "mean_loops": 2.0,
                                       "matched_perplexity": 11.0}
    kstar = exit_tables.best_fixed_depth(sweep)
    assert (kstar["loops"], kstar["perplexity"], kstar["ms_per_token"]) == (2, 10.0, 20.0)
    assert (kstar["matched_perplexity"], kstar["lowest_loops"]) == (10.0, 2)
    # within 1% of full depth (ppl <= 11.11) both settings qualify: the cheaper one, 12 ms, cuts 1 - 12/40 = 70%
    best = exit_tables.best_within(sweep, "acceleration")
    assert (best["setting"], best["latency_cut"], best["flop_ratio"]) == (1e-2, pytest.approx(0.7), pytest.approx(0.3))
    # within 1% of K* (ppl <= 10.1) only 1e-3 does: 15 ms against 20, a cut of 25%
    best = exit_tables.best_within(sweep, "acceleration", reference=kstar)
    assert (best["setting"], best["latency_cut"], best["perplexity_increase"]) == (
        1e-3, 0.25, pytest.approx(0.005))


def test_the_points_the_verdicts_compare_are_named_before_timing():
    # FLOPs follow ms here, but the points must come from quality and FLOPs alone: no latency in the table
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, 15.0), (1e-2, 10.5, 12.0), (1.0, 13.0, 5.0),
                                                          (10.0, 10.0, 4.0)],
                         "kl_head": [(1e-4, 10.0, 30.0), (1e-2, 12.0, 6.0)]})
    untimed = sweep.with_columns(pl.lit(None, dtype=pl.Float64).alias("ms_per_token"))
    # full depth 4 and K* 2; acceleration 10 is the cheapest within 1% of either at any threshold, and in the
    # paper's range [1e-5, 1e-2] 1e-2 within 1% of full depth (ppl <= 11.11) and 1e-3 within 1% of K* (<= 10.1);
    # kl_head 1e-4 for both; fixed 2 for both (cheaper than 4 and within 1% of full depth)
    assert exit_tables.compared_points(untimed) == {("fixed", 4.0), ("fixed", 2.0), ("acceleration", 10.0),
                                                    ("acceleration", 1e-2), ("acceleration", 1e-3),
                                                    ("kl_head", 1e-4)}


@pytest.mark.parametrize(("acceleration_ms", "kl_ms", "checks"), [
    (14.9, 18.0, [True, True]),     # a cut of 25.5%; the KL exit is slower
    (15.2, 18.0, [False, True]),    # a cut of 24%
    (14.9, 14.0, [True, False]),    # the KL exit is faster at matched quality
])
def test_c6b_latency_cut_and_kl_against_the_best_fixed_depth(acceleration_ms, kl_ms, checks):
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, acceleration_ms)],
                         "kl_head": [(1e-3, 10.02, kl_ms)], "kl_rest": [(1e-3, 10.5, 1.0)]})  # kl_rest never within
    verdict = exits.acceleration_against_best_fixed_depth(sweep, latency_rounds(sweep))
    assert verdict.checks == checks
    assert verdict.detail["acceleration"]["latency_cut"] == pytest.approx(1 - acceleration_ms / 20)
    # the machine's drift cancels in the pairs: the ratio is exact and its interval has no width
    ratio = verdict.detail["ratio"]
    assert (ratio.ratio, ratio.low, ratio.high) == pytest.approx((acceleration_ms / 20,) * 3)
    rest = next(k for k in verdict.detail["kl"] if k["strategy"] == "kl_rest")
    assert rest["best"] is None and rest["slower"] is True


def test_an_infinite_setting_is_paired_with_itself_alone():
    """τ = ∞ (exit as soon as the rule can) is one setting among others, not a tolerance that matches them all."""
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, 15.0), (math.inf, 10.06, 5.0)]})
    ratio = exits.speed_ratio(latency_rounds(sweep), {"strategy": "acceleration", "setting": math.inf},
                              {"strategy": "fixed", "setting": 4.0})
    assert (ratio.ratio, ratio.repeats) == (pytest.approx(5.0 / 40.0), 5)


def test_c6b_is_undecided_when_the_latency_interval_straddles_the_line():
    """Acceleration at 14 ms against K*'s 20 (a 30% cut), but its own rounds scatter by ±20%: the interval of the
    ratio reaches past 0.75, so the cut check cannot decide, and neither can the KL check (18 vs 14 ms)."""
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, 14.0)], "kl_head": [(1e-3, 10.02, 15.0)]})
    noisy = {("acceleration", 1e-3): (0.8, 1.2, 0.8, 1.2, 1.0)}
    verdict = exits.acceleration_against_best_fixed_depth(sweep, latency_rounds(sweep, jitter=noisy))
    ratio = verdict.detail["ratio"]
    assert ratio.low < 0.75 < ratio.high
    assert verdict.checks == [None, None] and verdict.verdict == "inconclusive"


# fixed depth where stopping early hurts: 2 loops (where the rules stop, 2.0 mean loops) is 4.5% worse than 4
HURTING = [(1.0, 12.0, 10.0), (2.0, 11.5, 20.0), (4.0, 11.0, 40.0)]


def test_c6_flat_and_first_order_sub_tests_on_hand_numbers():
    # full depth ppl 11 (limit 11.11); acceleration over [1e-5, 1e-2]: 10.9 .. 11.0, spread 11/10.9 - 1 = 0.92%;
    # step_norm_relative within at 1e-3 (11.05), 11.2 at 1e-2: degrades beyond the knee
    sweep = sweep_frame({"fixed": HURTING, "acceleration": [(1e-5, 11.0, 39.0), (1e-2, 10.9, 25.0)],
                         "step_norm_relative": [(1e-3, 11.05, 30.0), (1e-2, 11.2, 20.0)],
                         "kl_head": [(1e-3, 11.0, 30.0)]})
    verdict = exits.acceleration_exit(sweep, latency_rounds(sweep))
    tests = verdict.detail["tests"]
    assert tests["flat"]["spread"] == pytest.approx(11.0 / 10.9 - 1) and tests["flat"]["passes"] is True
    assert tests["first_order"]["within_below"] is True and tests["first_order"]["degrades_above"] is True
    assert tests["latency_cut"]["best"]["latency_cut"] == pytest.approx(1 - 25 / 40)
    assert tests["kl_slower"]["passes"] is True
    assert verdict.checks == [True, True, True, True] and verdict.verdict == "reproduced"


def sweep_with_loops(points: dict[str, list[tuple[float, float, float, float]]], max_loops: int = 30
                     ) -> pl.DataFrame:
    """(setting, perplexity, ms/token, mean loops per group) per strategy, FLOPs proportional to ms."""
    return pl.DataFrame([{"strategy": name, "criterion": "kl" if name.startswith("kl_") else name,
                          "swept": "loops" if name == "fixed" else "threshold", "setting": setting,
                          "perplexity": ppl, "gflops_per_token": ms / 1000, "ms_per_token": ms, "mean_loops": loops,
                          "max_loops": max_loops}
                         for name, pts in points.items() for setting, ppl, ms, loops in pts])


# in the paper's range acceleration stops after 11-26 loops per group (at τ = ∞ after 3); at the thresholds (c)
# reads, τ <= 1e-2, the relative first-order exit stops after 6-26 (at τ = ∞ after 1, which (c) does not read)
def rules(first_order_at_1e_2: float) -> dict[str, list[tuple[float, float, float, float]]]:
    return {"acceleration": [(1e-5, 100.0, 26.0, 26.0), (1e-2, 100.1, 11.0, 11.0), (math.inf, 100.2, 3.0, 3.0)],
            "step_norm_relative": [(1e-4, 100.0, 26.0, 26.0), (1e-3, 100.05, 20.0, 20.0),
                                   (1e-2, first_order_at_1e_2, 6.0, 6.0), (math.inf, 120.0, 1.0, 1.0)]}


RULES = rules(103.0)


def fixed_at(ppl_by_loops: dict[int, float]) -> list[tuple[float, float, float, float]]:
    return [(float(k), ppl, float(k), float(k)) for k, ppl in ppl_by_loops.items()]


@pytest.mark.parametrize(("fixed", "first_order_at_1e_2", "flat", "first_order"), [
    # depth flat from 6 loops on, 1-3 loops worse (as `huginn`'s), and both rules stay within 1%: where they stop at
    # the thresholds read no fixed depth is worse, so flatness would pass and the knee fail by construction
    ({1: 120.0, 2: 101.5, 3: 101.3, 6: 100.4, 8: 100.0, 16: 100.0, 30: 100.0}, 100.6, None, None),
    # every fixed depth within 0.34% (the GPU model): neither decides
    ({1: 100.34, 2: 100.2, 8: 100.0, 16: 100.0, 30: 100.0}, 100.2, None, None),
    # depth flat where the rules stop, but the first-order exit is 3% worse at 1e-2: it has shown it can degrade,
    # and it does beyond the knee: (c) passes; acceleration stays flat where it could not hurt: (b) undecided
    ({1: 120.0, 2: 101.5, 3: 101.3, 6: 100.4, 8: 100.0, 16: 100.0, 30: 100.0}, 103.0, None, True),
    # 12 loops 2% worse: stopping where both rules stop could hurt; acceleration stays flat, (b) passes; the
    # first-order exit stays within 1% at 1e-2, (c) fails
    ({1: 120.0, 6: 100.5, 12: 102.0, 30: 100.0}, 100.6, True, False),
])
def test_c6_flat_and_degrading_count_only_where_stopping_could_have_hurt(fixed, first_order_at_1e_2, flat,
                                                                          first_order):
    sweep = sweep_with_loops({"fixed": fixed_at(fixed), **rules(first_order_at_1e_2)})
    tests = exits.acceleration_exit(sweep, latency_rounds(sweep)).detail["tests"]
    assert tests["flat"]["passes"] is flat and tests["first_order"]["passes"] is first_order
    premise = tests["flat"]["premise"]
    assert (premise["fewest"], premise["most"]) == (11.0, 26.0)
    assert [d["loops"] for d in premise["depths"]] == [k for k in fixed if 11 <= k <= 26]
    if flat is None:
        assert tests["flat"]["reason"].startswith("stopping where the rule stops could not hurt: 'acceleration' "
                                                  "stops after 11.00–26.00 mean loops per group at τ ∈ [1e-5, 1e-2]")
    first = tests["first_order"]["premise"]
    assert (first["fewest"], first["most"]) == (6.0, 26.0)
    assert [d["loops"] for d in first["depths"]] == [k for k in fixed if 6 <= k <= 26]


def test_c6_flat_is_decided_where_the_rule_s_own_perplexity_spreads_though_depth_is_flat():
    """Fixed depths within 1% where acceleration stops, but its own perplexity spreads by 1.5% over the paper's
    thresholds: flatness, the prediction of the fixed depths, failed, and that is a finding, not a construction."""
    fixed = {1: 120.0, 12: 100.2, 30: 100.0}
    spreading = {"acceleration": [(1e-5, 100.0, 26.0, 26.0), (1e-2, 101.5, 11.0, 11.0)]}
    sweep = sweep_with_loops({"fixed": fixed_at(fixed), **spreading})
    flat = exits.acceleration_exit(sweep, latency_rounds(sweep)).detail["tests"]["flat"]
    assert flat["premise"]["met"] is False and flat["spread"] == pytest.approx(0.015) and flat["passes"] is False


def test_c6c_on_a_huginn_like_table_is_undecided_where_its_old_premise_decided_it():
    """As `huginn` at seed 1337: fixed 1 loop 5.4% worse than full depth, 2 and 3 loops 1.4% and 1.1%, 4 on
    within 1%; the relative rule stops after 7.1 loops at 1e-2 (0.13% worse), 3.3 at 0.1 (1.1%), 1 at τ = ∞.
    Over τ <= 1e-2 it never stops where a fixed depth is worse: undecided. Read from τ = ∞, the premise held (1 loop
    counts) and (c) failed, as it did at every seed before 2026-11-29."""
    fixed = {1: 153.18, 2: 147.43, 3: 146.92, 4: 146.36, 6: 145.78, 8: 145.50, 12: 145.24, 16: 145.19, 24: 145.28,
             30: 145.35}
    relative = [(0.0, 145.35, 30.0, 30.0), (1e-5, 145.35, 25.8, 25.8), (1e-4, 145.35, 20.1, 20.1),
                (1e-3, 145.30, 13.1, 13.1), (1e-2, 145.53, 7.1, 7.1), (0.1, 146.96, 3.3, 3.3),
                (1.0, 153.18, 1.0, 1.0), (math.inf, 153.18, 1.0, 1.0)]
    sweep = sweep_with_loops({"fixed": fixed_at(fixed), "step_norm_relative": relative,
                              "acceleration": RULES["acceleration"]})
    c = exits.first_order_knee(sweep, exits.full_depth(sweep))
    assert c["within_below"] is True and c["degrades_above"] is False  # the old reading: fails
    assert c["passes"] is None and (c["premise"]["fewest"], c["premise"]["most"]) == (7.1, 30.0)
    assert [d["loops"] for d in c["premise"]["depths"]] == [8, 12, 16, 24, 30]
    assert c["reason"].startswith("stopping where the rule stops could not hurt: 'step_norm_relative' stops after "
                                  "7.10–30.00 mean loops per group at τ ≤ 1e-2, and every fixed depth swept in that "
                                  "span (8–30 loops) is within 1% of full depth (the worst +0.10% at 8 loops)")


def test_c6c_is_decided_where_the_rule_stops_early_in_the_range_at_a_harmful_depth():
    """The relative rule stops after 2 loops at 1e-2, where fixed 2 loops is 3% worse: the premise is met, and the
    rule, 3% worse there and within 1% at τ <= 1e-3, degrades beyond the knee: (c) passes. Within 1% at 1e-2 it
    fails."""
    fixed = {1: 120.0, 2: 103.0, 4: 100.5, 30: 100.0}
    for ppl, passes in ((103.0, True), (100.5, False)):
        relative = [(1e-4, 100.0, 30.0, 30.0), (1e-3, 100.2, 12.0, 12.0), (1e-2, ppl, 2.0, 2.0)]
        sweep = sweep_with_loops({"fixed": fixed_at(fixed), "step_norm_relative": relative})
        c = exits.first_order_knee(sweep, exits.full_depth(sweep))
        assert c["premise"]["met"] is True and [d["loops"] for d in c["premise"]["depths"]] == [2, 4, 30]
        assert c["passes"] is passes


def test_c6c_on_a_paper_like_table_is_decided_by_the_rule_s_own_degradation():
    """As `paper` at seed 42: fixed depths from 3 to 24 loops are within 1% of full depth or better, and the relative
    rule, stopping after 20.1 mean loops at 1e-2, is 2.0% worse than full depth: no fixed depth in its span predicts
    it, but the rule has degraded beyond the knee, and stayed within 1% at 1e-3: (c) passes."""
    fixed = {1: 207.8, 2: 186.1, 3: 179.9, 4: 177.6, 6: 176.0, 8: 175.6, 12: 175.6, 16: 176.1, 24: 177.7, 30: 179.2}
    relative = [(1e-4, 179.2, 30.0, 30.0), (1e-3, 179.2, 30.0, 30.0), (1e-2, 182.8, 20.1, 20.1),
                (0.1, 185.6, 2.9, 2.9), (math.inf, 208.4, 1.0, 1.0)]
    sweep = sweep_with_loops({"fixed": fixed_at(fixed), "step_norm_relative": relative})
    c = exits.first_order_knee(sweep, exits.full_depth(sweep))
    assert c["premise"]["met"] is False and [d["loops"] for d in c["premise"]["depths"]] == [24, 30]
    assert c["within_below"] is True and c["degrades_above"] is True and c["passes"] is True


def test_c6_with_no_fixed_depth_where_the_rule_stops_cannot_tell_whether_it_could_hurt():
    sweep = sweep_with_loops({"fixed": fixed_at({1: 120.0, 30: 100.0}), **RULES})
    flat = exits.acceleration_exit(sweep, latency_rounds(sweep)).detail["tests"]["flat"]
    assert flat["passes"] is None and flat["premise"]["depths"] == []
    assert flat["reason"] == ("'acceleration' stops after 11.00–26.00 mean loops per group at τ ∈ [1e-5, 1e-2], "
                              "and no fixed depth swept lies in that span: whether stopping there could hurt is "
                              "unknown")


def test_c6b_counts_a_kl_exit_never_within_1_percent_as_slower_only_where_it_was_swept_in_the_range():
    fixed = fixed_at({1: 105.0, 8: 100.0, 30: 100.0})  # K* = 8
    acceleration = [(1e-2, 100.5, 5.0, 5.0)]
    swept = sweep_with_loops({"fixed": fixed, "acceleration": acceleration, "kl_head": [(1e-3, 103.0, 2.0, 2.0)]})
    (kl,) = exits.acceleration_against_best_fixed_depth(swept, latency_rounds(swept)).detail["kl"]
    assert kl["best"] is None and kl["settings"] == 1 and kl["slower"] is True
    unswept = sweep_with_loops({"fixed": fixed, "acceleration": acceleration, "kl_head": [(1.0, 100.0, 2.0, 2.0)]})
    verdict = exits.acceleration_against_best_fixed_depth(unswept, latency_rounds(unswept))
    (kl,) = verdict.detail["kl"]
    assert kl["best"] is None and kl["settings"] == 0 and kl["slower"] is None and verdict.checks[1] is None


def test_k_star_is_the_fewest_loops_within_1_percent_of_the_lowest_not_the_argmin_of_near_ties():
    # 8 loops lowest by 0.02%, as `huginn`'s 146.861 against 146.889; 2 loops 0.5% above it: K* = 2
    sweep = sweep_with_loops({"fixed": fixed_at({1: 105.0, 2: 100.5, 8: 100.0, 30: 100.02})})
    kstar = exit_tables.best_fixed_depth(sweep)
    assert (kstar["loops"], kstar["perplexity"], kstar["matched_perplexity"], kstar["lowest_loops"]) == (
        2, 100.5, 100.0, 8)
    # exits compared with it meet the bar it meets, 1% above the lowest (101.0), not 1% above its own (101.505)
    points = {"fixed": fixed_at({1: 105.0, 2: 100.5, 8: 100.0, 30: 100.02}),
              "acceleration": [(1e-2, 101.2, 1.5, 1.5), (1e-3, 100.9, 1.8, 1.8)]}
    best = exit_tables.best_within(sweep_with_loops(points), "acceleration", reference=kstar)
    assert best["setting"] == 1e-3


def test_c6_kl_reads_its_own_range_against_acceleration_s_and_both_at_any_threshold_beside():
    # KL at τ = ∞ stops after one loop (1 ms) where acceleration's range stops it at 11 (11 ms): read there, KL
    # would be "faster"; in the paper's range its best point takes 20 ms, slower than acceleration's 11
    points = {"fixed": fixed_at({1: 100.5, 30: 100.0}), **RULES,
              "kl_head": [(1e-4, 100.0, 20.0, 20.0), (math.inf, 100.5, 1.0, 1.0)]}
    sweep = sweep_with_loops(points)
    verdict = exits.acceleration_exit(sweep, latency_rounds(sweep))
    (kl,) = verdict.detail["tests"]["kl_slower"]["kl"]
    assert kl["best"]["setting"] == 1e-4 and kl["slower"] is True
    assert verdict.detail["tests"]["kl_slower"]["passes"] is True
    # beside: KL at any threshold (τ = ∞, 1 ms) against acceleration at any threshold (τ = ∞, 3 ms): faster
    (anywhere,) = verdict.detail["kl_anywhere"]
    assert anywhere["best"]["setting"] == math.inf and anywhere["slower"] is False
    assert anywhere["ratio"].ratio == pytest.approx(1 / 3)


# --- sampler: C7 and C7b ----------------------------------------------------------------------------------------


def sampling_summary(sampler_gap: float = 0.02, sampler_distinct_gap: float = -0.02) -> pl.DataFrame:
    """Autoregressive decoding at 8 loops (the reference, 8 GFLOPs per token), at 4 loops (gap 0) and at 2 loops (gap
    0.01, 2 GFLOPs); the sampler at one setting (20 GFLOPs per token) and a faster one too poor to count (gap 0.2 >
    the tolerance 0.05). Tolerances: 0.05 nats and 0.05 of the distinct-token fraction."""
    rows = [("autoregressive", 8, 10.0, 0.0, 0.0, 8.0), ("autoregressive", 4, 30.0, 0.0, 0.0, 4.0),
            ("autoregressive", 2, 25.0, 0.01, 0.0, 2.0),
            ("sampler", 8, 45.0, sampler_gap, sampler_distinct_gap, 20.0), ("sampler", 8, 100.0, 0.2, 0.0, 5.0)]
    return pl.DataFrame([{"method": m, "loops": loops, "tokens_per_s": tps, "cross_entropy_gap": gap,
                          "distinct_fraction_gap": distinct, "gflops_per_token": gflops, "full_loops": 8,
                          "quality_tolerance": 0.05, "distinct_tolerance": 0.05}
                         for m, loops, tps, gap, distinct, gflops in rows])


def speed(sampler_rounds: list[float], full_rounds: list[float], matched_rounds: list[float] | None = None
          ) -> pl.DataFrame:
    """The paired rounds of the sample stage, listed out of round order (they pair by round, not by row)."""
    rounds = {"sampler": sampler_rounds, "full_recurrence": full_rounds, "matched": matched_rounds or full_rounds}
    rows = [{"method": method, "round": i, "tokens_per_s": value}
            for method, values in rounds.items() for i, value in enumerate(values)]
    return pl.DataFrame(rows[::-1])


@pytest.mark.parametrize(("sampler_rounds", "full_rounds", "verdict"), [
    ([50.0, 60.0, 40.0], [10.0, 12.0, 8.0], "reproduced"),  # 5x in every round: the interval is [5, 5]
    ([50.0, 50.5, 49.5], [10.0, 10.0, 10.0], "reproduced"),  # 5x, 95% interval 4.88-5.13: wholly above 4
    ([30.0, 30.3, 29.7], [10.0, 10.0, 10.0], "not reproduced"),  # 3x, interval 2.93-3.08: wholly below 4
    ([30.0, 40.0, 55.0], [10.0, 10.0, 10.0], "inconclusive"),  # 3, 4, 5.5x: interval 1.90-8.58 straddles 4
])
def test_c7_reads_the_paired_ratio_s_interval_against_the_threshold(sampler_rounds, full_rounds, verdict):
    result = sampler.speedup_over_full_recurrence(sampling_summary(), speed(sampler_rounds, full_rounds))
    ratios = [a / b for a, b in zip(sampler_rounds, full_rounds, strict=True)]
    assert result.speedup.ratio == pytest.approx(math.prod(ratios) ** (1 / 3))  # the geometric mean
    assert result.speedup.repeats == 3 and result.verdict == verdict
    assert (result.speedup.low >= C7_MIN_SPEEDUP) is (verdict == "reproduced")
    assert result.detail["sampler"]["tokens_per_s"] == 45.0  # the fastest of equal quality, not the poorer one
    assert result.flop_ratio == pytest.approx(8.0 / 20.0)  # GFLOPs per token of the reference over the sampler's
    straddles = result.detail.get("reason") == "the ratio's interval straddles the threshold"
    assert straddles is (verdict == "inconclusive")


@pytest.mark.parametrize(("gap", "equal"), [(0.05, True), (-0.05, True), (0.051, False), (-0.051, False)])
def test_c7_equal_quality_is_a_gap_within_the_tolerance_on_either_side(gap, equal):
    """A sampler setting far below the reference's cross-entropy is not of equal quality either (a degenerate
    output that the model re-scores as likely)."""
    result = sampler.speedup_over_full_recurrence(sampling_summary(sampler_gap=gap), speed([50.0] * 3, [10.0] * 3))
    assert (result.detail["sampler"] is not None) is equal
    assert result.verdict == ("reproduced" if equal else "not reproduced")
    if not equal:
        assert result.speedup is None and result.detail["reason"] == "no sampler setting of about equal quality"


@pytest.mark.parametrize(("distinct_gap", "equal"), [(-0.04, True), (-0.2, False)])
def test_c7_a_repetitive_output_is_not_of_equal_quality(distinct_gap, equal):
    """A lower cross-entropy (gap −0.03, within the tolerance) does not save a setting whose distinct-token
    fraction is 0.2 below full recurrence's (δ = 0.05)."""
    summary = sampling_summary(sampler_gap=-0.03, sampler_distinct_gap=distinct_gap)
    result = sampler.speedup_over_full_recurrence(summary, speed([50.0] * 3, [10.0] * 3))
    assert result.verdict == ("reproduced" if equal else "not reproduced")
    assert (result.flop_ratio is None) is not equal


def test_c7_without_paired_rounds_is_inconclusive():
    result = sampler.speedup_over_full_recurrence(sampling_summary(), None)
    assert result.verdict == "inconclusive" and result.detail["reason"] == "no paired rounds"
    assert result.quality_tolerance == 0.05 and result.distinct_tolerance == 0.05


@pytest.mark.parametrize(("sampler_rounds", "reproduced"), [([55.0, 55.0, 55.0], True), ([45.0, 45.0, 45.0], False)])
def test_c7b_against_autoregressive_decoding_at_the_fewest_loops_of_equal_quality(sampler_rounds, reproduced):
    """Autoregressive decoding at 2 loops is of equal quality (gap 0.01): it is the match, although 4 loops ran faster
    in the grid. Timed at 25 tokens/s in every round, the sampler needs 50."""
    result = sampler.speedup_over_matched_decoding(
        sampling_summary(), speed(sampler_rounds, [10.0] * 3, matched_rounds=[25.0] * 3))
    assert result.detail["matched"]["loops"] == 2
    assert result.speedup.ratio == pytest.approx(sampler_rounds[0] / 25)  # 2x is the threshold
    assert result.flop_ratio == pytest.approx(2.0 / 20.0)
    assert result.reproduced is reproduced


# --- surrogates: C8 and C8b -------------------------------------------------------------------------------------


def recovery(surrogate: float, control: float) -> pl.DataFrame:
    return pl.DataFrame({"blocks": [1, 2], "surrogate_recovered": [0.5, surrogate],
                         "control_recovered": [0.4, control]})


@pytest.mark.parametrize(("recovered", "verdict"), [(C8_RECOVERY, "reproduced"), (0.8999, "not reproduced"),
                                                    (math.nan, "inconclusive")])
def test_c8_recovery_at_the_threshold(recovered, verdict):
    result = surrogates.two_blocks_recover(recovery(recovered, 0.5))
    assert result.verdict == verdict
    assert result.detail["k2"]["surrogate_recovered"] == (None if math.isnan(recovered) else recovered)


@pytest.mark.parametrize(("surrogate", "control", "verdict"), [(0.9, 0.8, "reproduced"), (0.9, 0.9, "not reproduced"),
                                                               (0.9, math.nan, "inconclusive")])
def test_c8b_the_surrogate_must_recover_more_than_the_control(surrogate, control, verdict):
    assert surrogates.two_blocks_beat_scratch(recovery(surrogate, control)).verdict == verdict


def test_c8_without_two_blocks_is_inconclusive():
    one_block = pl.DataFrame({"blocks": [1], "surrogate_recovered": [0.95], "control_recovered": [0.5]})
    result = surrogates.two_blocks_recover(one_block)
    assert result.detail == {"k2": None, "depth_matters": None} and result.verdict == "inconclusive"


@pytest.mark.parametrize(("control", "verdict", "matters"), [
    (0.5, "reproduced", True), (0.8999, "reproduced", True),
    # 2 layers from scratch recover the bar or more (the default teacher's 104%): nothing to compress
    (C8_RECOVERY, "inconclusive", False), (1.041, "inconclusive", False),
    (math.nan, "inconclusive", None),  # no control: not known
])
def test_c8_counts_only_where_the_teacher_s_depth_matters(control, verdict, matters):
    result = surrogates.two_blocks_recover(recovery(0.98, control))
    assert result.verdict == verdict and result.detail["depth_matters"] is matters
    if verdict == "inconclusive":
        assert result.detail["reason"].startswith("the teacher's depth has nothing to compress" if matters is False
                                                  else "no control trained from scratch")
    # a surrogate below the bar fails only where the premise is met
    assert surrogates.two_blocks_recover(recovery(0.5, control)).verdict == (
        "not reproduced" if matters else "inconclusive")


# --- speed ratios from paired repeats -----------------------------------------------------------------------------


def test_a_paired_ratio_by_hand():
    """Two pairs whose ratios are e^0.1 and e^0.3: mean log 0.2, standard deviation 0.1414, t(0.975, 1) = 12.706,
    so the interval is exp(0.2 ± 12.706 × 0.1414 / √2) = exp(0.2 ± 1.2706)."""
    ratio = paired_ratio([math.exp(0.1) * 3.0, math.exp(0.3) * 5.0], [3.0, 5.0])
    assert ratio.ratio == pytest.approx(math.exp(0.2))
    assert (ratio.low, ratio.high) == pytest.approx((math.exp(0.2 - 1.27062), math.exp(0.2 + 1.27062)), rel=1e-4)
    assert ratio.repeats == 2


def test_a_drift_shared_by_both_members_of_every_pair_cancels():
    ratio = paired_ratio([2.0, 4.0, 3.0], [1.0, 2.0, 1.5])
    assert (ratio.ratio, ratio.low, ratio.high) == pytest.approx((2.0, 2.0, 2.0))


def test_rounds_pair_by_their_number_and_only_where_both_ran():
    """Rows out of order pair by round; round 2, timed for one side only, is left out; nothing shared, no ratio."""
    a = pl.DataFrame({"round": [1, 0, 2], "ms": [4.0, 2.0, 9.0]})
    b = pl.DataFrame({"round": [0, 1], "ms": [1.0, 2.0]})
    ratio = ratio_by_round(a, b, "ms")
    assert (ratio.ratio, ratio.low, ratio.high, ratio.repeats) == (pytest.approx(2.0), pytest.approx(2.0),
                                                                   pytest.approx(2.0), 2)
    assert ratio_by_round(a, b.with_columns(pl.col("round") + 5), "ms") is None


def test_one_repeat_cannot_bound_a_ratio_and_unpaired_lists_are_refused():
    assert paired_ratio([2.0], [1.0]) == Ratio(2.0, 0.0, math.inf, 1)
    with pytest.raises(ValueError, match="paired"):
        paired_ratio([1.0, 2.0], [1.0])


@pytest.mark.parametrize(("low", "high", "least", "most"), [
    (4.1, 4.5, True, False),   # wholly above 4
    (3.6, 3.9, False, True),   # wholly below 4
    (3.9, 4.2, None, None),    # straddles 4: undecided either way
    (4.0, 4.0, True, True),    # on the line counts as on either side
])
def test_a_check_decides_only_when_the_interval_is_on_one_side(low, high, least, most):
    ratio = Ratio((low + high) / 2, low, high, 5)
    assert at_least(ratio, 4.0) is least and at_most(ratio, 4.0) is most
    assert at_least(None, 4.0) is None and at_most(None, 4.0) is None


def test_agreement_counts_only_finite_pairs():
    found = geometry.agreement(np.array([0.5, 0.6, 0.7, math.nan]), np.array([0.5, 0.62, 0.69, 0.1]))
    assert found["n"] == 3
    assert found["median_abs_error"] == pytest.approx(0.01)
    assert found["max_abs_error"] == pytest.approx(0.02)
    assert found["correlation"] == pytest.approx(np.corrcoef([0.5, 0.6, 0.7], [0.5, 0.62, 0.69])[0, 1])
    assert math.isnan(geometry.agreement(np.ones(3), np.array([1.0, 2.0, 3.0]))["correlation"])  # nothing varies: no r
