"""Claims C1-C5 on hand-built geometry tables whose verdict is known by construction, with the numbers in
`detail` checked against hand computation."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from sweeps import latency_rounds

from twoscale.claims.table import claims_table
from twoscale.config.errors import TwoscaleError
from twoscale.exits import claims as exit_claims
from twoscale.exits import tables as exit_tables
from twoscale.geometry import claims as geometry_claims
from twoscale.geometry import thresholds
from twoscale.geometry.tables import REGIMES

K = 30


def inverse(K: int = K) -> list[float]:
    return [1.0 / k for k in range(1, K + 1)]


def constant(K: int = K) -> list[float]:
    return [1.0] * K


def rows_for(step: int, group: int, metric: str, values: list[float], first_k: int | None) -> list[dict]:
    ks = [None] * len(values) if first_k is None else list(range(first_k, first_k + len(values)))
    return [
        {"step": step, "metric": metric, "group": group, "k": k, "n": 100, "mean": v, "median": v,
         "q10": 0.8 * v, "q90": 1.2 * v}
        for k, v in zip(ks, values, strict=True)
    ]


def checkpoint(step: int, sizes: dict[int, list[float]], cosine: dict[int, list[float]] | float = 0.6,
               relative: dict[int, float] | float = 0.1, dlr: dict[int, float] | float = 50.0) -> list[dict]:
    """One checkpoint's geometry rows: per group step sizes for k = 1..K, cosines for k = 2..K (a list, or one
    value for every k), a constant relative step size, no step at the precision floor, and DLR_K (the same for
    every K) at hand-offs g -> g+1 for all but the last group."""
    groups = sorted(sizes)
    out = []
    for g in groups:
        n = len(sizes[g])
        cos = cosine[g] if isinstance(cosine, dict) else [cosine] * (n - 1)
        rel = relative[g] if isinstance(relative, dict) else relative
        out += rows_for(step, g, "step_size", sizes[g], 1)
        out += rows_for(step, g, "relative_step_size", [rel] * n, 1)
        out += rows_for(step, g, "step_cosine", cos, 2)
        out += rows_for(step, g, "turning_angle", [math.degrees(math.acos(c)) for c in cos], 2)
        out += rows_for(step, g, "at_floor", [0.0] * n, 1)
        if g != groups[-1]:  # DLR_K the same at every K = 1..K_g
            out += rows_for(step, g, "drift_to_loop_ratio", [dlr[g] if isinstance(dlr, dict) else dlr] * n, 1)
    return out


def frame(*checkpoints: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([r for c in checkpoints for r in c], schema={
        "step": pl.Int32, "metric": pl.String, "group": pl.Int64, "k": pl.Int64, "n": pl.Int64,
        "mean": pl.Float64, "median": pl.Float64, "q10": pl.Float64, "q90": pl.Float64})


def by_group(items: list[dict]) -> dict[int, dict]:
    return {d["group"]: d for d in items}


# --- C1 -----------------------------------------------------------------------------------------------------


def test_c1_inverse_step_sizes_reproduce_with_hand_numbers():
    row = geometry_claims.C1.row(frame(checkpoint(1000, {0: inverse(), 1: inverse()})))
    assert row["claim"] == "C1" and row["reproduced"] is True and row["verdict"] == "reproduced"
    g = by_group(row["detail"]["groups"])[0]
    assert g["K"] == K and g["s1"] == 1.0
    assert g["s10"] == pytest.approx(0.1) and g["sK"] == pytest.approx(1 / 30)
    assert g["ratio_10_to_1"] == pytest.approx(0.1)
    assert g["drop_before_10"] == pytest.approx(0.9)
    assert g["drop_after_10"] == pytest.approx(0.1 - 1 / 30)


def test_c1_constant_step_sizes_do_not_reproduce():
    row = geometry_claims.C1.row(frame(checkpoint(1000, {0: constant(), 1: constant()})))
    assert row["reproduced"] is False and row["verdict"] == "not reproduced"
    assert by_group(row["detail"]["groups"])[1]["ratio_10_to_1"] == 1.0


def test_c1_needs_the_fall_to_be_over_by_k10():
    # halved at k = 10 exactly, but then falls just as much again by k = 30: not "within 5-10 steps"
    late = [1 - 0.5 * (k - 1) / 9 if k <= 10 else 0.5 - 0.5 * (k - 10) / 20 for k in range(1, K + 1)]
    row = geometry_claims.C1.row(frame(checkpoint(1000, {0: late})))
    g = by_group(row["detail"]["groups"])[0]
    assert g["halved_by_10"] is True and g["flat_after_10"] is False
    assert row["reproduced"] is False


def test_c1_mixed_inconclusive_and_last_checkpoint_only():
    mixed = geometry_claims.C1.row(frame(checkpoint(1000, {0: inverse(), 1: constant()})))
    assert mixed["reproduced"] is None and mixed["verdict"] == "mixed"
    short = geometry_claims.C1.row(frame(checkpoint(1000, {0: inverse(5)})))
    assert short["reproduced"] is None and short["verdict"] == "inconclusive"
    # an early checkpoint with constant steps does not count: C1 reads the last one
    history = geometry_claims.C1.row(frame(checkpoint(10, {0: constant()}), checkpoint(1000, {0: inverse()})))
    assert history["reproduced"] is True and history["detail"]["step"] == 1000


# --- C2 -----------------------------------------------------------------------------------------------------


def test_c2_faster_decay_and_smaller_steps_later_reproduce():
    early = checkpoint(100, {0: [k ** -0.5 for k in range(1, K + 1)]}, relative=0.2)
    late = checkpoint(2000, {0: inverse()}, relative=0.1)
    row = geometry_claims.C2.row(frame(late, early))  # row order must not matter
    assert row["reproduced"] is True
    g = by_group(row["detail"]["groups"])[0]
    assert (g["first_step"], g["last_step"], g["k_ref"]) == (100, 2000, 10)
    assert g["decay_ratio_first"] == pytest.approx(10 ** -0.5)
    assert g["decay_ratio_last"] == pytest.approx(0.1)
    assert g["mean_relative_first"] == pytest.approx(0.2) and g["mean_relative_last"] == pytest.approx(0.1)


def test_c2_reads_the_first_checkpoint_after_warm_up_against_the_last():
    """Inside warm-up (step 25) the loop barely decays (s(10)/s(1) = 0.9); by step 100, the first checkpoint after a
    100-step warm-up, it decays to 0.05, and by the last to 0.1: against step 25 the steps "got smaller", against
    step 100 they did not. The absolute sizes are reported beside."""
    slow = [0.9 + 0.1 * (k == 1) if k <= 10 else 0.9 for k in range(1, K + 1)]
    fast = [1.0 if k == 1 else 0.05 for k in range(1, K + 1)]
    geometry = frame(checkpoint(25, {0: slow}, relative=0.3), checkpoint(100, {0: fast}, relative=0.05),
                     checkpoint(600, {0: [1.0 if k == 1 else 0.1 for k in range(1, K + 1)]}, relative=0.04))
    in_warmup = geometry_claims.C2.row(geometry)  # no schedule given: the first checkpoint is the baseline
    assert in_warmup["detail"]["first_step"] == 25 and in_warmup["reproduced"] is True
    row = geometry_claims.C2.row(geometry, pl.DataFrame({"warmup_steps": [100]}))
    (g,) = row["detail"]["groups"]
    assert (g["first_step"], g["last_step"]) == (100, 600) and row["detail"]["in_warmup"] == [25]
    assert g["decay_ratio_first"] == pytest.approx(0.05) and g["decay_ratio_last"] == pytest.approx(0.1)
    assert g["decays_faster"] is False and g["smaller"] is True and row["verdict"] == "not reproduced"
    assert g["mean_step_first"] == pytest.approx((1 + 29 * 0.05) / 30) and g["first_step_size_last"] == 1.0
    assert "25 inside it, not read" in row["measured"] and "absolute mean step" in row["measured"]
    # a warm-up that reaches the last checkpoint leaves nothing to compare
    late = geometry_claims.C2.row(geometry, pl.DataFrame({"warmup_steps": [400]}))
    assert late["verdict"] == "inconclusive"
    assert "after the warm-up (400 steps)" in late["detail"]["groups"][0]["reason"]


def test_c2_reversed_mixed_and_single_checkpoint():
    early = checkpoint(100, {0: inverse(), 1: inverse()}, relative=0.1)
    # group 0 slows its decay and grows its steps; group 1 decays faster (1/k^2) with smaller steps
    faster = [k ** -2.0 for k in range(1, K + 1)]
    late = checkpoint(2000, {0: constant(), 1: faster}, relative={0: 0.2, 1: 0.05})
    row = geometry_claims.C2.row(frame(early, late))
    assert row["reproduced"] is None and row["verdict"] == "mixed"
    assert [d["passes"] for d in row["detail"]["groups"]] == [False, True]
    reversed_ = geometry_claims.C2.row(frame(checkpoint(100, {0: inverse()}, relative=0.1),
                                                    checkpoint(2000, {0: constant()}, relative=0.3)))
    assert reversed_["reproduced"] is False
    single = geometry_claims.C2.row(frame(checkpoint(100, {0: inverse()})))
    assert single["reproduced"] is None and single["verdict"] == "inconclusive"


# --- C3 -----------------------------------------------------------------------------------------------------


def late_half(value: float, early: float = 0.2) -> list[float]:
    """Cosines for k = 2..K: `early` for k <= K/2, `value` for k > K/2 (the half C3 averages)."""
    return [early if k <= K / 2 else value for k in range(2, K + 1)]


def test_c3_cosine_in_band_reproduces_and_trend_toward_orthogonal():
    first = checkpoint(100, {0: inverse(), 1: inverse()}, cosine={0: late_half(0.9), 1: late_half(0.9)})
    last = checkpoint(900, {0: inverse(), 1: inverse()}, cosine={0: late_half(0.6), 1: late_half(0.6)})
    row = geometry_claims.C3.row(frame(first, last))
    assert row["reproduced"] is True
    assert by_group(row["detail"]["groups"])[0]["late_cosine"] == pytest.approx(0.6)  # early values ignored
    assert row["detail"]["late_cosine_first"] == pytest.approx(0.9)
    assert row["detail"]["trend"].startswith("toward 0")
    assert "settles around" in row["detail"]["supports"]


def test_c3_aligned_steps_do_not_reproduce_and_say_neither():
    first = checkpoint(100, {0: inverse()}, cosine={0: late_half(0.6)})
    last = checkpoint(900, {0: inverse()}, cosine={0: late_half(0.99)})
    row = geometry_claims.C3.row(frame(first, last))
    assert row["reproduced"] is False
    assert row["detail"]["trend"].startswith("toward 1")
    assert row["detail"]["supports"].startswith("neither") and "aligned" in row["measured"]


def test_c3_orthogonal_steps_support_the_other_statement():
    row = geometry_claims.C3.row(frame(checkpoint(900, {0: inverse()}, cosine={0: late_half(0.05)})))
    assert row["reproduced"] is False
    assert row["detail"]["supports"] == "'increasingly orthogonal'"
    assert "one checkpoint" in row["measured"]


# 0.5 is exact in binary; 0.65 is not, and a mean of fifteen of its float copies may round one ulp above it
@pytest.mark.parametrize("late, reproduced", [(0.5, True), (0.5 - 1e-9, False), (0.65 - 1e-9, True),
                                              (0.65 + 1e-9, False)])
def test_c3_band_edges(late, reproduced):
    row = geometry_claims.C3.row(frame(checkpoint(900, {0: inverse()}, cosine={0: late_half(late)})))
    assert row["reproduced"] is reproduced


@pytest.mark.parametrize("first, last, trend", [
    (0.60, 0.61, "flat"),                  # a change of 0.01, within the 0.02 tolerance
    (0.30, -0.60, "toward −1"),            # |cos| grows, but the steps reverse
    (0.90, 0.10, "toward 0"),
    (0.30, 0.90, "toward 1"),
])
def test_c3_trend_across_training(first, last, trend):
    row = geometry_claims.C3.row(frame(checkpoint(100, {0: inverse()}, cosine={0: late_half(first)}),
                               checkpoint(900, {0: inverse()}, cosine={0: late_half(last)})))
    assert row["detail"]["trend"].startswith(trend)


def test_c3_groups_on_both_sides_of_the_band_are_mixed_and_support_neither():
    row = geometry_claims.C3.row(frame(checkpoint(900, {0: inverse(), 1: inverse()},
                                          cosine={0: late_half(0.6), 1: late_half(0.05)})))
    assert row["verdict"] == "mixed" and row["detail"]["supports"] == "neither cleanly (groups differ)"


# --- C4 -----------------------------------------------------------------------------------------------------


def test_c4_dlr_50_reproduces_3_does_not_and_both_is_mixed():
    sizes = {0: inverse(), 1: inverse(), 2: inverse()}
    high = geometry_claims.C4.row(frame(checkpoint(100, sizes, dlr=3.0), checkpoint(900, sizes, dlr=50.0)))
    assert high["reproduced"] is True
    assert [h["median"] for h in high["detail"]["handoffs"]] == [50.0, 50.0]
    assert [h["handoff"] for h in high["detail"]["handoffs"]] == ["0->1", "1->2"]
    assert len(high["detail"]["per_checkpoint"]) == 4  # every checkpoint reported
    assert high["detail"]["handoffs"][0]["q10"] == pytest.approx(40.0)
    low = geometry_claims.C4.row(frame(checkpoint(900, sizes, dlr=3.0)))
    assert low["reproduced"] is False and low["detail"]["all_above_one"] is True
    mixed = geometry_claims.C4.row(frame(checkpoint(900, sizes, dlr={0: 50.0, 1: 3.0})))
    assert mixed["reproduced"] is None and mixed["verdict"] == "mixed"
    assert thresholds.C4_MIN_DLR == 10.0 and "≥ 10" in high["test"]


# --- C5 -----------------------------------------------------------------------------------------------------


def depth_frame(step: int, phase: list[int], layout: list[int]) -> pl.DataFrame:
    n = len(phase)
    return pl.DataFrame({"step": [step] * n, "position": list(range(n)), "layer": [None] + list(range(n - 1)),
                         "group": [None] * n, "loop": [None] * n, "phase": phase, "layout_phase": layout})


def test_c5_shrinking_turning_steps_and_big_jumps_reproduce():
    geometry = frame(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.5, dlr=50.0))
    row = geometry_claims.C5.row(geometry, depth_frame(900, [0, 0, 1, 1], [0, 0, 1, 1]))
    assert row["reproduced"] is True
    harmonic = sum(inverse())
    jump = 50.0 * sum(inverse()) / K  # median DLR_30 x the mean of all 30 step sizes (Eq. 2)
    assert row["detail"]["jumps"][0]["jump_estimate"] == pytest.approx(jump)
    for g in row["detail"]["groups"]:  # group 1 has no jump out: it is judged against the jump into it
        assert g["mean_turning_deg"] == pytest.approx(60.0)
        assert g["path_after_first"] == pytest.approx(harmonic - 1)
        assert g["path_to_jump"] == pytest.approx((harmonic - 1) / jump)
        assert g["bends"] and g["tight"]
    assert row["detail"]["phases_match_layout"] is True


def test_c5_straight_long_paths_and_small_jumps_do_not_reproduce():
    geometry = frame(checkpoint(900, {0: constant(), 1: constant()}, cosine=0.99, dlr=3.0))
    row = geometry_claims.C5.row(geometry, depth_frame(900, [0, 1, 1, 1], [0, 0, 1, 1]))
    assert row["reproduced"] is False
    g = by_group(row["detail"]["groups"])[0]
    assert g["path_to_jump"] == pytest.approx(29 / 3)
    assert g["mean_turning_deg"] == pytest.approx(math.degrees(math.acos(0.99)))
    assert row["detail"]["phases_match_layout"] is False and row["detail"]["positions_off_layout"] == 1
    assert "do not match" in row["measured"]


# --- the table ----------------------------------------------------------------------------------------------


def test_claims_table_rows_are_strict_json_with_hand_checked_headlines():
    geometry = frame(checkpoint(100, {0: inverse(), 1: inverse()}, cosine=0.9, dlr=5.0),
                     checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.6, dlr=50.0))
    rows = claims_table({"geometry": geometry, "depth": depth_frame(900, [0, 1], [0, 1])})
    assert [r["claim"] for r in rows] == ["C1", "C2", "C3", "C4", "C5"]
    for r in rows:
        assert set(r) >= {"claim", "statement", "test", "measured", "reproduced", "verdict", "headline", "detail"}
        assert r["reproduced"] in (True, False, None)
    json.dumps(rows, allow_nan=False)  # rows themselves are JSON-able
    headline = {r["claim"]: r["headline"] for r in rows}
    assert headline["C1"] == {"s(10)/s(1) g0": pytest.approx(0.1), "s(10)/s(1) g1": pytest.approx(0.1)}
    assert headline["C3"] == {"late cosine g0": pytest.approx(0.6), "late cosine g1": pytest.approx(0.6)}
    assert headline["C4"] == {"median DLR_30 0->1": 50.0, "median DLR_10 0->1": 50.0,
                              "K where DLR reaches 10 0->1": 1}  # 50 at every K


def test_nan_becomes_null_in_json():
    geometry = frame(checkpoint(900, {0: [0.0] + inverse()[1:]}))  # s(1) = 0: the ratio is undefined
    row = geometry_claims.C1.row(geometry)
    assert row["detail"]["groups"][0]["ratio_10_to_1"] is None
    json.dumps(row, allow_nan=False)


def test_bad_input_is_a_clear_error():
    with pytest.raises(TwoscaleError, match="geometry table is empty"):
        geometry_claims.C1.row(pl.DataFrame())
    no_dlr = frame(checkpoint(900, {0: inverse()}))
    with pytest.raises(TwoscaleError, match="no drift_to_loop_ratio rows"):
        geometry_claims.C4.row(no_dlr)
    with pytest.raises(TwoscaleError, match="no geometry table"):
        claims_table({})


# --- C6 -----------------------------------------------------------------------------------------------------

FULL_PPL, FULL_MS, MAX_LOOPS = 10.0, 300.0, 30
INF = math.inf
SWEPT = {"fixed": "loops", "argmax": "hits"}
CRITERION = {"kl_head": "kl", "kl_rest": "kl", "step_norm_relative": "step_norm"}


def paper_like() -> dict[str, list[tuple[float, float, float]]]:
    """(setting, perplexity, ms/token) per strategy, built so that every C6 sub-test passes:
    full depth 10.0 ppl / 300 ms; the 1% band is ppl <= 10.1. The rules stop after one loop per group at their
    most eager (mean loops 1 unless given), where the fixed depth is 50% worse: stopping there could hurt."""
    return {
        "fixed": [(1.0, 15.0, 10.0), (10.0, 12.0, 100.0), (30.0, FULL_PPL, FULL_MS)],
        "acceleration": [  # flat over [1e-5, 1e-2]: 10.08 / 10.00 - 1 = 0.8%; best 1e-2 at 190 ms: cut 36.7%
            (0.0, 10.0, 300.0), (1e-5, 10.0, 290.0), (1e-4, 10.02, 260.0), (1e-3, 10.05, 200.0),
            (1e-2, 10.08, 190.0), (1.0, 11.0, 150.0), (INF, 20.0, 100.0)],  # 1.0 is faster but +10%: ignored
        "step_norm_relative": [  # within 1% up to 1e-3, +5% at 1e-2
            (0.0, 10.0, 300.0), (1e-4, 10.01, 280.0), (1e-3, 10.05, 250.0), (1e-2, 10.5, 200.0),
            (INF, 25.0, 100.0)],
        "step_norm": [  # absolute, reported beside: never exits (30 loops) up to 1e-2, as on a large-scale state
            (0.0, 10.0, 300.0, 30.0), (1e-3, 10.0, 300.0, 30.0), (1e-2, 10.0, 300.0, 30.0), (INF, 25.0, 100.0)],
        "kl_head": [(5e-4, 10.03, 240.0), (1e-2, 10.9, 150.0)],  # best 240 ms > 190
        "kl_rest": [(5e-4, 10.02, 400.0)],                      # best 400 ms > 190
        "argmax": [(2.0, 10.2, 120.0)],                         # nothing within 1%
    }


def sweep_frame(points: dict[str, list[tuple[float, ...]]]) -> pl.DataFrame:
    """(setting, perplexity, ms/token[, mean loops per group]) per strategy; mean loops 1 unless given (the rule
    exits)."""
    rows = [
        {"strategy": name, "criterion": CRITERION.get(name, name), "swept": SWEPT.get(name, "threshold"),
         "setting": setting, "cross_entropy": math.log(ppl), "perplexity": ppl, "compute_fraction": 1.0,
         "mean_loops": loops[0] if loops else 1.0, "gflops_per_token": ms / 1000, "ms_per_token": ms,
         "generated_mean_loops": 1.0, "max_loops": MAX_LOOPS}
        for name, pts in points.items() for setting, ppl, ms, *loops in pts
    ]
    return pl.DataFrame(rows, schema={
        "strategy": pl.String, "criterion": pl.String, "swept": pl.String, "setting": pl.Float64,
        "cross_entropy": pl.Float64, "perplexity": pl.Float64, "compute_fraction": pl.Float64,
        "mean_loops": pl.Float64, "gflops_per_token": pl.Float64, "ms_per_token": pl.Float64,
        "generated_mean_loops": pl.Float64, "max_loops": pl.Int64})


def c6_rows(points: dict[str, list[tuple[float, float, float]]], claim=exit_claims.C6.row) -> dict:
    """A C6 claim on hand-built sweep rows, each timed in rounds whose drift cancels (FLOPs proportional to ms)."""
    sweep = sweep_frame(points)
    return claim(sweep, latency_rounds(sweep))


def c6_with(**changes: list[tuple[float, float, float]] | None) -> dict:
    points = paper_like()
    for name, pts in changes.items():
        if pts is None:
            points.pop(name)
        else:
            points[name] = pts
    return c6_rows(points)


def passes(row: dict) -> dict[str, bool | None]:
    return {name: t["passes"] for name, t in row["detail"]["tests"].items()}


def test_best_within_picks_the_cheapest_row_inside_the_band():
    sweep = sweep_frame(paper_like())
    best = exit_tables.best_within(sweep, "acceleration")
    assert best["setting"] == 1e-2 and best["ms_per_token"] == 190.0 and best["perplexity"] == 10.08
    assert best["latency_cut"] == pytest.approx(1 - 190 / 300)
    assert best["perplexity_increase"] == pytest.approx(0.008)
    # a wider band lets in the faster 1.0 row (ppl 11.0 <= 1.2 x 10)
    assert exit_tables.best_within(sweep, "acceleration", tolerance=0.2)["setting"] == 1.0
    assert exit_tables.best_within(sweep, "argmax") is None        # 10.2 > 10.1
    assert exit_tables.best_within(sweep, "no_such_rule") is None
    assert exit_tables.best_within(sweep, "fixed")["setting"] == 30.0  # full depth is its own best point
    # a row without a cost (NaN) cannot be the best, however cheap it would be
    points = paper_like()
    points["acceleration"].append((3e-2, 10.0, math.nan))
    assert exit_tables.best_within(sweep_frame(points), "acceleration")["setting"] == 1e-2


def test_best_within_breaks_ties_by_perplexity():
    best = exit_tables.best_within(sweep_frame({"fixed": [(30.0, 10.0, 300.0)],
                                           "acceleration": [(1e-3, 10.05, 200.0), (1e-2, 10.02, 200.0)]}),
                              "acceleration")
    assert best["setting"] == 1e-2


def test_c6_paper_like_sweep_reproduces_with_hand_numbers():
    row = c6_with()
    assert row["claim"] == "C6" and row["reproduced"] is True and row["verdict"] == "reproduced"
    assert passes(row) == {"latency_cut": True, "flat": True, "first_order": True, "kl_slower": True}
    d = row["detail"]
    assert d["full_depth"] == {"strategy": "fixed", "setting": 30.0, "max_loops": 30, "perplexity": 10.0,
                               "gflops_per_token": 0.3, "ms_per_token": 300.0, "mean_loops": 1.0,
                               "matched_perplexity": 10.0}
    flat = d["tests"]["flat"]
    assert [p["setting"] for p in flat["points"]] == [1e-5, 1e-4, 1e-3, 1e-2]  # 0, 1.0 and inf are outside
    assert flat["spread"] == pytest.approx(0.008)
    fo = d["tests"]["first_order"]
    assert [p["setting"] for p in fo["below"]] == [0.0, 1e-4, 1e-3]
    assert [p["setting"] for p in fo["above"]] == [1e-2]  # inf is not "beyond 1e-3" in the paper's range
    assert fo["worst_above"]["increase"] == pytest.approx(0.05)
    kl = {k["strategy"]: k for k in d["tests"]["kl_slower"]["kl"]}
    assert kl["kl_head"]["best"]["ms_per_token"] == 240.0 and kl["kl_rest"]["best"]["ms_per_token"] == 400.0
    # every strategy reported, not only the four tested
    best = {s["strategy"]: s["best"] for s in d["strategies"]}
    assert set(best) == {"fixed", "acceleration", "step_norm_relative", "step_norm", "kl_head", "kl_rest", "argmax"}
    assert best["argmax"] is None and best["step_norm_relative"]["setting"] == 1e-3
    # the absolute first-order exit beside: it never exits beyond 1e-3, so its (c) is undecided, and not scored
    absolute = d["first_order_absolute"]
    assert absolute["strategy"] == "step_norm" and absolute["passes"] is None
    assert absolute["reason"] == ("'step_norm' never exits at τ ∈ (1e-3, 1e-2]: its fewest mean loops per group "
                                  "there are 30.00 of 30, saving less than 1")
    m = row["measured"]
    assert "full depth (30 loops): 300 MFLOPs and 300 ms per token, ppl 10.000" in m
    assert "acceleration τ 0.01: 190 MFLOPs (0.63× in FLOPs), 190 ms, ppl 10.080" in m
    assert "latency vs full depth 0.63× (0.63–0.63)" in m
    assert "kl_rest slower: latency 2.11× (2.11–2.11), FLOPs 2.11×" in m
    assert "argmax: none within 1%" in m and "fixed loops 30" in m
    assert "spread +0.8%" in m and "+5.0% at τ 0.01" in m
    json.dumps(row, allow_nan=False)


def test_c6_each_sub_test_fails():
    slow = c6_with(acceleration=[(1e-5, 10.0, 295.0), (1e-2, 10.05, 280.0)])  # cut 1 - 280/300 = 6.7%
    assert passes(slow)["latency_cut"] is False
    assert slow["detail"]["tests"]["latency_cut"]["best"]["latency_cut"] == pytest.approx(1 / 15)
    worse = c6_with(acceleration=[(1e-5, 10.2, 100.0), (1e-2, 10.3, 90.0)])  # never within 1%
    assert passes(worse)["latency_cut"] is False and passes(worse)["kl_slower"] is None
    bumpy = c6_with(acceleration=[(1e-5, 10.0, 290.0), (1e-3, 10.05, 200.0), (1e-2, 10.3, 150.0)])
    assert passes(bumpy)["flat"] is False  # 10.3 / 10.0 - 1 = 3%
    assert bumpy["detail"]["tests"]["flat"]["spread"] == pytest.approx(0.03)
    no_knee = c6_with(step_norm_relative=[(1e-4, 10.0, 290.0), (1e-3, 10.05, 250.0), (1e-2, 10.08, 200.0),
                                          (INF, 25.0, 100.0)])  # flat through 1e-2: degrades only at inf
    assert passes(no_knee)["first_order"] is False
    assert no_knee["detail"]["tests"]["first_order"]["degrades_above"] is False
    early_knee = c6_with(step_norm_relative=[(1e-4, 10.5, 290.0), (1e-3, 10.6, 250.0), (1e-2, 11.0, 200.0)])
    assert passes(early_knee)["first_order"] is False
    assert early_knee["detail"]["tests"]["first_order"]["within_below"] is False
    fast_kl = c6_with(kl_rest=[(5e-4, 10.05, 150.0)])  # 150 ms < acceleration's 190
    assert passes(fast_kl)["kl_slower"] is False
    for row in (slow, bumpy, no_knee, early_knee, fast_kl):
        assert row["verdict"] == "mixed" and row["reproduced"] is None


def test_c6_nothing_holds_is_not_reproduced():
    row = c6_with(acceleration=[(1e-5, 10.0, 295.0), (1e-3, 10.05, 290.0), (1e-2, 10.09, 280.0)],  # cut 6.7%
                  step_norm_relative=[(1e-4, 10.0, 280.0), (1e-2, 10.0, 250.0)],                    # no knee
                  kl_head=[(5e-4, 10.0, 200.0)])                                                    # faster
    assert passes(row) == {"latency_cut": False, "flat": True, "first_order": False, "kl_slower": False}
    assert row["verdict"] == "mixed"
    row = c6_with(acceleration=[(1e-5, 10.0, 295.0), (1e-2, 10.5, 280.0)],  # cut 1/60; spread 5%
                  step_norm_relative=[(1e-4, 10.0, 280.0), (1e-2, 10.0, 250.0)],
                  kl_head=[(5e-4, 10.0, 200.0)])
    assert passes(row) == {"latency_cut": False, "flat": False, "first_order": False, "kl_slower": False}
    assert row["reproduced"] is False and row["verdict"] == "not reproduced"


def test_c6_undecided_sub_tests():
    # (a) and (b): no acceleration rows at all; (d) then has no reference point
    none = c6_with(acceleration=None)
    assert passes(none) == {"latency_cut": None, "flat": None, "first_order": True, "kl_slower": None}
    assert none["reproduced"] is None and none["verdict"] == "inconclusive (1 of 4 pass, 3 undecided)"
    # (b): thresholds only outside [1e-5, 1e-2], or a single one inside: nothing to call flat
    outside = c6_with(acceleration=[(0.0, 10.0, 300.0), (1.0, 10.05, 150.0), (INF, 20.0, 100.0)])
    assert passes(outside)["flat"] is None and passes(outside)["latency_cut"] is None
    assert "undecided, 0 swept acceleration threshold(s) in [1e-5, 1e-2]" in outside["measured"]
    # (a) reads the paper's range only: τ = 1 would cut 50%, and is reported beside
    cut = outside["detail"]["tests"]["latency_cut"]
    assert cut["reason"] == "no acceleration threshold swept in [1e-5, 1e-2]"
    assert cut["best_anywhere"]["setting"] == 1.0
    single = c6_with(acceleration=[(1e-3, 10.05, 200.0), (1.0, 10.5, 150.0)])
    assert passes(single)["flat"] is None
    # (c): no threshold in (1e-3, 1e-2] (inf does not count), or none <= 1e-3, or the strategy not swept
    for pts in ([(0.0, 10.0, 300.0), (1e-4, 10.0, 280.0), (INF, 25.0, 100.0)],
                [(1e-2, 10.5, 200.0), (0.1, 12.0, 150.0)], None):
        row = c6_with(step_norm_relative=pts)
        assert passes(row)["first_order"] is None and row["verdict"] == "inconclusive (3 of 4 pass, 1 undecided)"
    # (d): no KL strategy; or one KL strategy without a point within 1%
    assert passes(c6_with(kl_head=None, kl_rest=None))["kl_slower"] is None
    assert passes(c6_with(kl_rest=[(5e-4, 10.5, 400.0)]))["kl_slower"] is None
    # ...but a KL strategy that is faster decides it, whatever the other one does
    assert passes(c6_with(kl_head=[(5e-4, 10.0, 100.0)], kl_rest=[(5e-4, 10.5, 400.0)]))["kl_slower"] is False


def test_c6_a_rule_that_never_exits_at_the_paper_s_thresholds_decides_neither_its_cut_nor_its_flatness():
    """Acceleration at every τ in [1e-5, 1e-2] loops all 30 times (as on a model whose states move a lot): its
    perplexity there is flat by construction and it cuts nothing, so (a) and (b) cannot decide; at τ = ∞ it exits
    and is reported beside. One loop saved on average is enough to decide."""
    idle = [(0.0, 10.0, 300.0, 30.0), (1e-5, 10.0, 300.0, 30.0), (1e-3, 10.0, 300.0, 30.0),
            (1e-2, 10.0, 300.0, 30.0), (INF, 10.05, 100.0, 3.0)]
    row = c6_with(acceleration=idle)
    tests = row["detail"]["tests"]
    assert passes(row)["latency_cut"] is None and passes(row)["flat"] is None
    reason = ("'acceleration' never exits at τ ∈ [1e-5, 1e-2]: its fewest mean loops per group there are 30.00 of "
              "30, saving less than 1")
    assert tests["latency_cut"]["reason"] == tests["flat"]["reason"] == reason
    assert tests["flat"]["spread"] == 0.0  # measured, and shown, but not read as "flat"
    assert tests["latency_cut"]["best_anywhere"]["ms_per_token"] == 100.0  # τ = ∞ (JSON: null)
    assert row["verdict"] == "inconclusive (1 of 4 pass, 3 undecided)" and reason in row["measured"]
    barely = c6_with(acceleration=[*idle[:3], (1e-2, 10.0, 290.0, 29.0), idle[4]])
    assert passes(barely)["latency_cut"] is False  # 290 / 300: a 3% cut
    # ...while (b) asks more: stopping after 29-30 loops, where the only fixed depth is full depth, could not hurt
    assert passes(barely)["flat"] is None
    # C6b reads acceleration at the same thresholds: never exiting there, its cut against K* is undecided
    kstar = c6_rows({**paper_like(), "acceleration": idle}, claim=exit_claims.C6B.row)
    assert kstar["detail"]["acceleration"] is None and kstar["detail"]["acceleration_exits"] is False
    assert kstar["verdict"] == "inconclusive" and "never exits at τ ∈ [1e-5, 1e-2]" in kstar["measured"]


def test_c6_a_first_order_rule_that_never_exits_beyond_the_knee_cannot_degrade_there():
    row = c6_with(step_norm_relative=[(1e-4, 10.0, 300.0, 30.0), (1e-3, 10.0, 300.0, 30.0),
                                      (1e-2, 10.0, 300.0, 29.5), (INF, 25.0, 100.0)])
    first_order = row["detail"]["tests"]["first_order"]
    assert first_order["passes"] is None and first_order["degrades_above"] is False
    assert first_order["reason"].startswith("'step_norm_relative' never exits at τ ∈ (1e-3, 1e-2]")


def test_c6_thresholds_forgive_round_off():
    row = c6_with(step_norm_relative=[(1.0000000000000002e-3, 10.05, 250.0), (9.999999999999998e-3, 10.5, 200.0)])
    fo = row["detail"]["tests"]["first_order"]
    assert len(fo["below"]) == 1 and len(fo["above"]) == 1 and fo["passes"] is True
    assert len(row["detail"]["tests"]["flat"]["points"]) == 4


def test_c6_pre_registered_text_names_every_threshold():
    test = c6_with()["test"]
    for text in ("≤ 1.01 × full-depth perplexity", "≥ 25%", "[1e-5, 1e-2]", "≤ 0.01", "τ ≤ 1e-3",
                 "τ ∈ (1e-3, 1e-2]", "criterion 'kl'"):
        assert text in test


def test_c6_bad_input_is_a_clear_error():
    with pytest.raises(TwoscaleError, match="C6: the sweep table has no full-depth row"):
        c6_rows({"acceleration": [(1e-3, 10.0, 200.0)], "fixed": [(10.0, 12.0, 100.0)]})
    with pytest.raises(TwoscaleError, match="C6: the sweep table lacks column"):
        exit_tables.best_within(sweep_frame(paper_like()).drop("ms_per_token"), "acceleration")
    with pytest.raises(TwoscaleError, match="C6: the sweep table is empty"):
        exit_claims.C6.row(sweep_frame({}), None)


# --- S: loop stability ----------------------------------------------------------------------------------------


def loss_frame(curves: dict[int, dict[int, float]]) -> pl.DataFrame:
    return pl.DataFrame([{"step": step, "loops": k, "val_loss": v}
                         for step, curve in curves.items() for k, v in curve.items()])


@pytest.mark.parametrize(
    ("curve", "rise", "verdict"),
    [
        ({1: 5.0, 4: 4.20, 30: 4.24}, 0.04, "holds"),  # flat within 0.05 nats of the best
        ({1: 5.0, 4: 4.20, 16: 4.30, 30: 4.60}, 0.40, "does not hold"),  # drifts away after 4 loops
        ({1: 5.0, 4: 4.50, 30: 4.10}, 0.0, "holds"),  # still improving at 30
        ({1: 5.0, 4: 4.20, 30: 4.26}, 0.06, "does not hold"),  # just past the tolerance
    ],
)
def test_s_compares_the_most_loops_with_the_best_loop_count(curve, rise, verdict):
    row = geometry_claims.S.row(loss_frame({100: {1: 9.0, 30: 1.0}, 900: curve}))  # last checkpoint only
    assert row["claim"] == "S" and row["verdict"] == verdict
    assert row["reproduced"] == (verdict == "holds")
    assert row["detail"]["rise"] == pytest.approx(rise)
    assert row["detail"]["loss_at_most_loops_by_step"] == {"100": 1.0, "900": curve[30]}  # JSON keys
    assert "+ 0.05 nats" in row["test"]


def test_s_reads_twice_the_loops_of_training_and_reports_the_trained_range_beside():
    """Training drew at most 32 loops: the loss at 64 decides (0.20 nats above the best, at 16: does not hold);
    within the trained range the rise to 30 loops is 0.02, reported beside."""
    curve = {1: 5.0, 16: 4.0, 30: 4.02, 64: 4.2}
    schedule = pl.DataFrame({"warmup_steps": [100], "most_trained_loops": [32]})
    row = geometry_claims.S.row(loss_frame({900: curve}), schedule)
    d = row["detail"]
    assert row["verdict"] == "does not hold" and d["most_loops"] == 64 and d["beyond_training"] is True
    assert d["rise_within_training"] == pytest.approx(0.02)
    assert "Training drew at most 32 loops: 64 is beyond that range; within it the rise" in row["measured"]


def test_claims_table_leads_with_s_given_the_loss_curves():
    geometry = frame(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.6, dlr=50.0))
    rows = claims_table({"geometry": geometry, "loss_vs_loops": loss_frame({900: {1: 5.0, 30: 4.0}})})
    assert [r["claim"] for r in rows] == ["S", "C1", "C2", "C3", "C4", "C5"]
    assert rows[0]["verdict"] == "holds"
    assert rows[0]["headline"]["rise to the most loops"] == pytest.approx(0.0)  # 30 loops is the best


@pytest.mark.parametrize(("one_loop", "used"), [
    (5.0, True),                    # a gain of 1 nat
    (4.0 + 0.0100, True),           # 0.0100 nats: just over ln(1.01) = 0.00995, a 1% perplexity
    (4.0 + 0.0099, False),          # just under
    (4.0 + 0.004, False),           # the GPU model's 5.209 against 5.205
])
def test_geometry_claims_on_a_loop_the_model_does_not_use_are_inconclusive_and_say_their_reading(one_loop, used):
    geometry = frame(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.6, dlr=50.0))
    loss = loss_frame({100: {1: 9.0, 30: 1.0}, 900: {1: one_loop, 8: 4.0, 30: 4.001}})  # the last checkpoint's
    rows = {r["claim"]: r for r in claims_table({"geometry": geometry, "loss_vs_loops": loss})}
    for claim in ("C1", "C2", "C3", "C4", "C5"):
        row = rows[claim]
        gain = row["headline"]["depth gain (nats)"]
        assert gain == pytest.approx(one_loop - 4.0) and row["detail"]["premise"]["met"] is used
        if used:
            assert row["measured"].startswith("Depth used: validation loss")
            assert row["verdict"] == geometry_claims.CLAIMS[int(claim[1])].row_of({"geometry": geometry})["verdict"]
        else:
            assert row["measured"].startswith("Depth unused: validation loss") and row["reproduced"] is None
            assert row["verdict"].startswith("inconclusive (depth unused; the checks read ")
    assert rows["C1"]["verdict"] == ("reproduced" if used else
                                     "inconclusive (depth unused; the checks read reproduced)")
    assert "premise" not in rows["S"]["detail"]  # S is about more loops, not about whether they help


def test_geometry_claims_without_a_one_loop_loss_say_depth_is_not_measured_and_decide_as_before():
    geometry = frame(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.6, dlr=50.0))
    rows = {r["claim"]: r for r in claims_table({"geometry": geometry,
                                                 "loss_vs_loops": loss_frame({900: {2: 5.0, 30: 4.0}})})}
    assert rows["C1"]["verdict"] == "reproduced" and rows["C1"]["detail"]["premise"]["met"] is None
    assert rows["C1"]["measured"].startswith("Depth: no one-loop loss at step 900")
    nan = {r["claim"]: r for r in claims_table({"geometry": geometry, "loss_vs_loops": loss_frame(
        {900: {1: math.nan, 30: 4.0}})})}  # a loss that could not be computed is not a loss
    assert nan["C1"]["detail"]["premise"]["met"] is None and nan["C1"]["verdict"] == "reproduced"


def test_claims_table_adds_c6_only_with_a_sweep():
    geometry = frame(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.6, dlr=50.0))
    without = claims_table({"geometry": geometry})
    assert [r["claim"] for r in without] == ["C1", "C2", "C3", "C4", "C5"]
    sweep = sweep_frame(paper_like())
    rows = claims_table({"geometry": geometry, "sweep": sweep, "latency": latency_rounds(sweep)})
    assert [r["claim"] for r in rows] == ["C1", "C2", "C3", "C4", "C5", "C6", "C6b"]
    json.dumps(rows, allow_nan=False)
    assert rows[-2]["verdict"] == "reproduced"


# --- C6b: against the best fixed depth -----------------------------------------------------------------------

FULL_DEPTH_WORST = {  # K* = 2 (ppl 10.0, 2 ms); full depth K = 30 is the worst point (ppl 14)
    "fixed": [(1.0, 12.0, 1.0), (2.0, 10.0, 2.0), (3.0, 10.5, 3.0), (30.0, 14.0, 30.0)],
}


def c6_prime(acceleration, kl_head, kl_rest=((1e-3, 10.5, 1.0),)) -> dict:
    points = {**FULL_DEPTH_WORST, "acceleration": list(acceleration), "kl_head": list(kl_head),
              "kl_rest": list(kl_rest)}
    return c6_rows(points, exit_claims.C6B.row)


def test_c6_prime_measures_against_the_best_fixed_depth():
    # acceleration 1.4 ms at ppl 10.05 (within 1% of 10.0): cut 1 - 1.4/2 = 30%; kl_head 1.6 ms: slower;
    # kl_rest's only point (ppl 10.5) is not within 1%: it cannot match the quality
    row = c6_prime(acceleration=[(1e-2, 10.05, 1.4), (1.0, 11.0, 0.5)], kl_head=[(1e-3, 10.08, 1.6)])
    assert row["claim"] == "C6b" and row["verdict"] == "reproduced"
    assert row["detail"]["reference"]["loops"] == 2
    assert row["detail"]["acceleration"]["latency_cut"] == pytest.approx(0.3)
    assert next(k for k in row["detail"]["kl"] if k["strategy"] == "kl_rest")["best"] is None
    assert "K* = 2 loops" in row["measured"] and "full depth 30 loops: ppl 14" in row["measured"]


def test_c6_prime_fails_on_a_small_cut_and_a_faster_kl():
    small_cut = c6_prime(acceleration=[(1e-2, 10.05, 1.6)], kl_head=[(1e-3, 10.08, 1.7)])
    assert small_cut["verdict"] == "mixed"  # cut 20% < 25%; KL slower
    kl_faster = c6_prime(acceleration=[(1e-2, 10.05, 1.4)], kl_head=[(1e-3, 10.08, 1.2)])
    assert kl_faster["verdict"] == "mixed"  # cut 30%; KL faster
    neither = c6_prime(acceleration=[(1e-2, 10.2, 1.0)], kl_head=[(1e-3, 10.08, 1.2)])
    assert neither["verdict"] == "inconclusive"  # acceleration never within 1% of K*


# --- precision floor and DLR_K ---------------------------------------------------------------------------------


def test_c4_and_c5_read_dlr_by_eq_2_over_every_loop_step_and_k_10_beside():
    # DLR_K = K / 2 (a converging loop's ratio grows with K): by Eq. 2, over all 30 loop steps, 15 >= 10 passes;
    # the stricter reading at K = 10 gives 5, reported beside and not scored
    rows = [dict(r, median=r["k"] / 2, q10=0.25 * r["k"], q90=float(r["k"])) if r["metric"] == "drift_to_loop_ratio"
            else r for r in checkpoint(900, {0: inverse(), 1: inverse()}, dlr=1.0)]
    c4 = geometry_claims.C4.row(frame(rows))
    (handoff,) = c4["detail"]["handoffs"]
    assert c4["detail"]["loops"] == K and handoff["median"] == 15.0 and handoff["passes"] is True
    assert c4["verdict"] == "reproduced"
    assert c4["detail"]["strict"] == {"loops": 10, "handoffs": [{"handoff": "0->1", "median": 5.0, "passes": False}]}
    assert "Beside it, the stricter reading at K = 10: 0->1 5.00 (< 10.00)" in c4["measured"]
    assert handoff["by_loops"] == {"1": 0.5, "2": 1.0, "5": 2.5, "10": 5.0, str(K): K / 2}  # JSON keys
    assert "K=1 0.50, K=2 1.00, K=5 2.50, K=10 5.00, K=30 15.00" in c4["measured"]
    # K / 2 first reaches 10 at K = 20; lowered by 5.5, at no K up to 30
    assert handoff["first_k_reaching"] == 20 and "first reaches 10 at: 0->1 K = 20" in c4["measured"]
    below = [dict(r, median=r["median"] - 5.5) if r["metric"] == "drift_to_loop_ratio" else r for r in rows]
    lower = geometry_claims.C4.row(frame(below))
    assert lower["reproduced"] is False  # 9.5 over all 30 loop steps
    assert lower["detail"]["handoffs"][0]["first_k_reaching"] is None and "0->1 no K up to 30" in lower["measured"]
    c5 = geometry_claims.C5.row(frame(rows))
    assert c5["detail"]["jumps"][0]["median_dlr"] == 15.0
    short = [r for r in rows if r["k"] is None or r["k"] <= 4]  # 4 loops measured: K = 4, the strict reading too
    short_c4 = geometry_claims.C4.row(frame(short))["detail"]
    assert short_c4["handoffs"][0]["median"] == 2.0 and short_c4["strict"]["loops"] == 4


def test_c2_c3_c5_report_how_many_steps_were_at_the_floor():
    # group 0: a quarter of the tokens at the floor for k >= 21, so the cosines there (k >= 21, and k = 21 reads
    # Δ^(20) too) count 75 of 100 tokens; group 1: none at the floor
    rows = []
    for r in checkpoint(900, {0: inverse(), 1: inverse()}):
        late = r["group"] == 0 and r["k"] is not None and r["k"] >= 21
        if late and r["metric"] == "at_floor":
            r = dict(r, mean=0.25)
        if late and r["metric"] in ("step_cosine", "turning_angle"):
            r = dict(r, n=75)
        rows.append(r)
    geometry = frame(checkpoint(100, {0: inverse(), 1: inverse()}, cosine=0.9), rows)
    c3 = by_group(geometry_claims.C3.row(geometry)["detail"]["groups"])
    assert c3[0]["cosines_above_floor"] == {"kept": 15 * 100 - 10 * 25, "of": 15 * 100}  # k = 16..30
    assert c3[1]["cosines_above_floor"] == {"kept": 1500, "of": 1500}
    c2 = by_group(geometry_claims.C2.row(geometry)["detail"]["groups"])
    assert c2[0]["steps_at_floor_first"] == {"at_floor": 0, "of": K * 100}
    assert c2[0]["steps_at_floor_last"] == {"at_floor": 10 * 25, "of": K * 100}
    c5 = by_group(geometry_claims.C5.row(geometry)["detail"]["groups"])
    assert c5[0]["turns_above_floor"] == {"kept": 29 * 100 - 10 * 25, "of": 29 * 100}  # k = 2..30
    assert "1250/1500 cosines above the floor" in geometry_claims.C3.row(geometry)["measured"]


def test_c3_a_late_cosine_of_steps_mostly_at_the_floor_decides_nothing():
    """Group 0: at k >= 16 three tokens in four step at the floor, so its late cosine (in the band) is the mean of
    a quarter of the tokens: undecided. Group 1 keeps all of them and decides."""
    rows = []
    for r in checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.6):
        late = r["group"] == 0 and r["k"] is not None and r["k"] >= 16
        rows.append(dict(r, n=25) if late and r["metric"] in ("step_cosine", "turning_angle") else r)
    row = geometry_claims.C3.row(frame(rows))
    groups = by_group(row["detail"]["groups"])
    assert groups[0]["in_band"] is True and groups[0]["passes"] is None
    assert groups[0]["reason"].startswith("375 of 1500 late cosines above the precision floor: fewer than 50%")
    assert groups[1]["passes"] is True and row["verdict"] == "inconclusive (1 of 2 pass, 1 undecided)"


def with_regimes(rows: list[dict], shares: dict[str, float], cosine: dict[str, float]) -> list[dict]:
    """A checkpoint's rows with per-token regimes for every group: each regime's share at k = K and its own
    step cosine (and turning angle) at every k; NaN (no token) where its share is 0."""
    step, groups = rows[0]["step"], sorted({r["group"] for r in rows})
    out = list(rows)
    for g in groups:
        for regime in REGIMES:
            share = shares.get(regime, 0.0)
            out += rows_for(step, g, f"regime_{regime}", [share], K)
            cos = cosine.get(regime, math.nan) if share else math.nan
            out += rows_for(step, g, f"step_cosine_{regime}", [cos] * (K - 1), 2)
            angle = math.degrees(math.acos(cos)) if math.isfinite(cos) else math.nan
            out += rows_for(step, g, f"turning_angle_{regime}", [angle] * (K - 1), 2)
    return out


def test_c3_and_c5_report_each_regime_s_share_and_reading_and_which_shows_the_band():
    """Half the tokens at a fixed point (late cosine 0.99), half 'other' (0.6): the mixture's mean is no regime's,
    and the band shows in the 'other' tokens alone. Reported beside the verdict, not scored."""
    rows = with_regimes(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.795),
                        {"fixed_point": 0.5, "other": 0.5}, {"fixed_point": 0.99, "other": 0.6})
    c3 = geometry_claims.C3.row(frame(rows))
    g = by_group(c3["detail"]["groups"])[0]
    assert g["regimes"]["fixed_point"] == {"share": 0.5, "step_cosine": pytest.approx(0.99)}
    assert g["regimes"]["orbit"]["share"] == 0.0 and g["regimes"]["orbit"]["step_cosine"] is None  # no token
    assert g["regimes_in_band"] == ["other"] and c3["verdict"] == "not reproduced"  # the mean, 0.795, decides
    assert ("g0: fixed point 50% (0.990), slowing drift 0%, orbit 0%, slider 0%, other 50% (0.600); in the band: "
            "other") in c3["measured"]
    c5 = geometry_claims.C5.row(frame(rows))
    turning = by_group(c5["detail"]["groups"])[0]["regimes"]
    assert turning["other"]["turning_angle"] == pytest.approx(math.degrees(math.acos(0.6)))
    assert "other 50% (53.13°)" in c5["measured"]
    without = geometry_claims.C3.row(frame(checkpoint(900, {0: inverse(), 1: inverse()})))  # measured before regimes
    assert "regimes" not in without["detail"]["groups"][0] and "Per-token regimes" not in without["measured"]
    # measured under an earlier rule, without the slowing drift: its "fixed points" are not this rule's
    earlier = [r for r in rows if not r["metric"].endswith("slowing_drift")]
    c3 = geometry_claims.C3.row(frame(earlier))
    assert "regimes" not in c3["detail"]["groups"][0] and "Per-token regimes" not in c3["measured"]


def test_s_and_c1_premises_unmet_decide_nothing():
    one_count = geometry_claims.S.row(loss_frame({900: {30: 4.0}}))  # one loop count: its own best
    assert one_count["verdict"] == "inconclusive" and one_count["detail"]["reason"] == "one loop count measured (30)"
    still = geometry_claims.C1.row(frame(checkpoint(900, {0: [0.0] * K})))  # s(1) = s(10) = 0: "halved"
    (group,) = still["detail"]["groups"]
    assert group["passes"] is None and group["reason"] == "the loop does not move at k = 1 (s(1) = 0)"
