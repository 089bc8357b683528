"""The pure verdicts (`report.verdicts`) on small hand-built tables, each number computed by hand; the thresholds
are read at their edges, where a claim passes or fails by the width of the comparison."""

from __future__ import annotations

import math

import polars as pl
import pytest

from twoscale.report.thresholds import C1_K_SETTLED, C4_MIN_DLR, C7_MIN_SPEEDUP, C8_RECOVERY, S_TOLERANCE
from twoscale.report.verdicts import exits, geometry, sampler, surrogates
from twoscale.report.verdicts.common import S_WORDS, Verdict, aggregate

# --- common: how checks add up ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("checks", "expected"), [
    ([True, True], (True, "reproduced")),
    ([False, False], (False, "not reproduced")),
    ([True, False], (None, "mixed")),
    ([True, None], (None, "inconclusive")),  # one undecided check makes the claim undecided, even beside a pass
    ([False, None], (None, "inconclusive")),
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
    """One checkpoint: each group's mean step size by k, and the median DLR at the hand-off out of each group in
    `dlr` (q10/q90 at 0.5x and 2x)."""
    rows = [{"step": step, "metric": "step_size", "group": g, "k": k, "mean": s, "median": s, "q10": s, "q90": s}
            for g, sizes in step_sizes.items() for k, s in sizes.items()]
    rows += [{"step": step, "metric": "drift_to_loop_ratio", "group": g, "k": None, "mean": r, "median": r,
              "q10": 0.5 * r, "q90": 2 * r} for g, r in (dlr or {}).items()]
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


# --- exits: C6b against the best fixed depth --------------------------------------------------------------------


def sweep_frame(points: dict[str, list[tuple[float, float, float]]], max_loops: int = 4) -> pl.DataFrame:
    """(setting, perplexity, ms/token) per strategy; criterion 'kl' for kl_*, else the strategy's name."""
    rows = [{"strategy": name, "criterion": "kl" if name.startswith("kl_") else name,
             "swept": "loops" if name == "fixed" else "threshold", "setting": setting, "perplexity": ppl,
             "ms_per_token": ms, "mean_loops": 2.0, "max_loops": max_loops}
            for name, pts in points.items() for setting, ppl, ms in pts]
    return pl.DataFrame(rows)


# fixed depth: K* = 2 loops (ppl 10, 20 ms); full depth 4 loops is worse (ppl 11, 40 ms)
FIXED = [(1.0, 12.0, 10.0), (2.0, 10.0, 20.0), (4.0, 11.0, 40.0)]


def test_the_reference_points_of_the_sweep():
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, 15.0), (1e-2, 10.5, 12.0)]})
    assert exits.full_depth(sweep) == {"max_loops": 4, "perplexity": 11.0, "ms_per_token": 40.0, "mean_loops": 2.0}
    kstar = exits.best_fixed_depth(sweep)
    assert (kstar["loops"], kstar["perplexity"], kstar["ms_per_token"]) == (2, 10.0, 20.0)
    # within 1% of full depth (ppl <= 11.11) both settings qualify: the faster one, 12 ms, cuts 1 - 12/40 = 70%
    best = exits.best_within(sweep, "acceleration")
    assert (best["setting"], best["latency_cut"]) == (1e-2, pytest.approx(0.7))
    # within 1% of K* (ppl <= 10.1) only 1e-3 does: 15 ms against 20, a cut of 25%
    best = exits.best_within(sweep, "acceleration", reference=kstar)
    assert (best["setting"], best["latency_cut"], best["perplexity_increase"]) == (
        1e-3, 0.25, pytest.approx(0.005))


@pytest.mark.parametrize(("acceleration_ms", "kl_ms", "checks"), [
    (15.0, 18.0, [True, True]),     # a cut of exactly 25% passes; the KL exit is slower
    (15.2, 18.0, [False, True]),    # a cut of 24%
    (15.0, 14.0, [True, False]),    # the KL exit is faster at matched quality
])
def test_c6b_latency_cut_and_kl_against_the_best_fixed_depth(acceleration_ms, kl_ms, checks):
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-3, 10.05, acceleration_ms)],
                         "kl_head": [(1e-3, 10.02, kl_ms)], "kl_rest": [(1e-3, 10.5, 1.0)]})  # kl_rest never within
    verdict = exits.acceleration_against_best_fixed_depth(sweep)
    assert verdict.checks == checks
    assert verdict.detail["acceleration"]["latency_cut"] == pytest.approx(1 - acceleration_ms / 20)
    assert verdict.detail["kl"]["kl_rest"] is None


def test_c6_flat_and_first_order_sub_tests_on_hand_numbers():
    # full depth ppl 11 (limit 11.11); acceleration over [1e-5, 1e-2]: 10.9 .. 11.0, spread 11/10.9 - 1 = 0.92%;
    # step_norm within at 1e-3 (11.05), 11.2 at 1e-2: degrades beyond the knee
    sweep = sweep_frame({"fixed": FIXED, "acceleration": [(1e-5, 11.0, 39.0), (1e-2, 10.9, 25.0)],
                         "step_norm": [(1e-3, 11.05, 30.0), (1e-2, 11.2, 20.0)], "kl_head": [(1e-3, 11.0, 30.0)]})
    verdict = exits.acceleration_exit(sweep)
    tests = verdict.detail["tests"]
    assert tests["flat"]["spread"] == pytest.approx(11.0 / 10.9 - 1) and tests["flat"]["passes"] is True
    assert tests["first_order"]["within_below"] is True and tests["first_order"]["degrades_above"] is True
    assert tests["latency_cut"]["best"]["latency_cut"] == pytest.approx(1 - 25 / 40)
    assert tests["kl_slower"]["passes"] is True
    assert verdict.checks == [True, True, True, True] and verdict.verdict == "reproduced"


# --- sampler: C7 and C7b ----------------------------------------------------------------------------------------


def sampling_summary(sampler_tokens_per_s: float, sampler_gap: float = 0.02) -> pl.DataFrame:
    """Ordinary decoding at 8 loops (10 tokens/s, the reference) and 2 loops (25 tokens/s, gap 0.01); the
    sampler at one setting, and a faster one too poor to count (gap 0.2 > the tolerance 0.05)."""
    rows = [("autoregressive", 8, 10.0, 0.0), ("autoregressive", 2, 25.0, 0.01),
            ("sampler", 8, sampler_tokens_per_s, sampler_gap), ("sampler", 8, 100.0, 0.2)]
    return pl.DataFrame([{"method": m, "loops": loops, "tokens_per_s": tps, "cross_entropy_gap": gap,
                          "full_loops": 8, "quality_tolerance": 0.05} for m, loops, tps, gap in rows])


@pytest.mark.parametrize(("tokens_per_s", "reproduced"), [(40.0, True), (39.9, False)])
def test_c7_speedup_just_at_and_just_below_the_threshold(tokens_per_s, reproduced):
    verdict = sampler.speedup_over_full_recurrence(sampling_summary(tokens_per_s))
    assert verdict.speedup == pytest.approx(tokens_per_s / 10) and verdict.quality_tolerance == 0.05
    assert (verdict.speedup >= C7_MIN_SPEEDUP) is reproduced
    assert verdict.reproduced is reproduced
    assert verdict.detail["sampler"]["tokens_per_s"] == tokens_per_s  # not the faster, poorer setting


def test_c7_counts_a_gap_of_exactly_the_tolerance_as_equal_quality():
    assert sampler.speedup_over_full_recurrence(sampling_summary(50.0, sampler_gap=0.05)).speedup == 5.0
    poorer = sampler.speedup_over_full_recurrence(sampling_summary(50.0, sampler_gap=0.051))
    assert poorer.speedup is None and poorer.verdict == "not reproduced"


@pytest.mark.parametrize(("tokens_per_s", "reproduced"), [(50.0, True), (49.0, False)])
def test_c7b_against_the_fastest_ordinary_decoding_of_equal_quality(tokens_per_s, reproduced):
    verdict = sampler.speedup_over_matched_decoding(sampling_summary(tokens_per_s))
    assert verdict.detail["matched"]["loops"] == 2  # 25 tokens/s at gap 0.01
    assert verdict.speedup == pytest.approx(tokens_per_s / 25)  # 2x is the threshold
    assert verdict.reproduced is reproduced


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
    assert result.detail == {"k2": None} and result.verdict == "inconclusive"
