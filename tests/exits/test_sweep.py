"""A sweep point's extremes meet the fixed-depth baseline: exit-at-once is depth 1, never-exit is full depth; a
strategy's settings decoded together as rows of one batch give what each gives alone; the latency rounds time every
point once per round, in a rotated order; the depth table holds every token's exit step per group, whose mean is
the sweep's mean loops and which generation's own loop counts confirm token for token."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import torch

from twoscale.decoding.cache import cache_bytes, new_cache
from twoscale.decoding.engine import decode_prompt
from twoscale.exits.sweep import latency_ms_per_token, rules_at, sweep_settings, timed_rounds
from twoscale.training.batches import evaluate_loss

MAX_LOOPS = 4
CPU = torch.device("cpu")
VAL = (np.arange(400) * 11 % 40).astype(np.uint16)
PROMPTS = [[3, 1, 4], [2, 7, 1]]
WINDOW_STARTS = [0, 128, 255, 383]  # 4 windows of 16 tokens (and a target) spread evenly over 400: 0 .. 400 - 17
ACCELERATION = {"criterion": "acceleration", "variant": "vector", "hits": 2}


def point(model, strategy, setting):
    return sweep_settings(model, VAL, strategy, [setting], MAX_LOOPS, n_windows=4, batch_size=2, device=CPU).points[0]


def test_rules_at_sets_threshold_or_loops():
    accel = rules_at({"criterion": "acceleration", "variant": "vector", "hits": 2}, 1e-3, 3, MAX_LOOPS)
    assert len(accel) == 3 and all(r.threshold == 1e-3 and r.hits == 2 and r.max_loops == MAX_LOOPS for r in accel)
    assert [r.max_loops for r in rules_at({"criterion": "fixed"}, 2, 3, MAX_LOOPS)] == [2, 2, 2]


@pytest.mark.parametrize("loops", [1, 3])
def test_fixed_depth_point(tiny_model, loops):
    row = point(tiny_model, {"criterion": "fixed"}, loops)
    assert row["cross_entropy"] == pytest.approx(evaluate_loss(tiny_model, VAL, [loops] * 3, 4, 2, CPU), rel=1e-9)
    assert row["mean_loops_group0"] == row["mean_loops_group2"] == loops
    # layer applications per token: 2 single-pass + 4 looped (1 + 2 + 1) per loop, against 2 + 4 * MAX_LOOPS
    assert row["compute_fraction"] == pytest.approx((2 + 4 * loops) / (2 + 4 * MAX_LOOPS))
    assert row["layers_per_token"] == 2 + 4 * loops


def test_threshold_extremes_meet_the_fixed_baseline(tiny_model):
    strategy = {"criterion": "step_norm", "relative": True}
    at_once, never = point(tiny_model, strategy, 1e9), point(tiny_model, strategy, 0.0)
    depth_one, full = point(tiny_model, {"criterion": "fixed"}, 1), point(tiny_model, {"criterion": "fixed"}, MAX_LOOPS)
    assert at_once["cross_entropy"] == pytest.approx(depth_one["cross_entropy"], rel=1e-9)
    assert never["cross_entropy"] == pytest.approx(full["cross_entropy"], rel=1e-9)
    assert at_once["mean_loops"] == 1 and never["mean_loops"] == MAX_LOOPS
    assert latency_ms_per_token(tiny_model, PROMPTS, 5, strategy, 1e9, MAX_LOOPS)[1] == 1
    assert latency_ms_per_token(tiny_model, PROMPTS, 5, strategy, 0.0, MAX_LOOPS)[1] == MAX_LOOPS


def test_rounds_time_every_point_once_in_a_rotated_order(tiny_model):
    points = [("fixed", {"criterion": "fixed"}, 1), ("fixed", {"criterion": "fixed"}, 3),
              ("step_norm", {"criterion": "step_norm"}, 0.0)]
    rows = timed_rounds(tiny_model, PROMPTS, 3, points, MAX_LOOPS, rounds=[4, 4, 4])
    order = [(row["round"], row["strategy"], row["setting"]) for row in rows]
    assert order[:3] == [(0, "fixed", 1.0), (0, "fixed", 3.0), (0, "step_norm", 0.0)]
    assert order[3:6] == [(1, "fixed", 3.0), (1, "step_norm", 0.0), (1, "fixed", 1.0)]
    assert len(rows) == 12 and all(row["ms_per_token"] > 0 for row in rows)
    assert [row["generated_mean_loops"] for row in rows[:3]] == [1, 3, MAX_LOOPS]


def test_points_timed_in_fewer_rounds_leave_the_later_rounds(tiny_model):
    points = [("fixed", {"criterion": "fixed"}, 1), ("fixed", {"criterion": "fixed"}, 3),
              ("step_norm", {"criterion": "step_norm"}, 0.0)]
    rows = timed_rounds(tiny_model, PROMPTS, 2, points, MAX_LOOPS, rounds=[3, 1, 3])
    order = [(row["round"], row["setting"]) for row in rows]
    # round 0 times all three; rounds 1 and 2 the two compared points, rotated among themselves
    assert order == [(0, 1.0), (0, 3.0), (0, 0.0), (1, 0.0), (1, 1.0), (2, 1.0), (2, 0.0)]
    with pytest.raises(ValueError, match="2 round counts for 3 points"):
        timed_rounds(tiny_model, PROMPTS, 2, points, MAX_LOOPS, rounds=[3, 1])


@pytest.mark.parametrize("strategy, settings", [
    ({"criterion": "fixed"}, [1, 3, 2, 4]),
    ({"criterion": "acceleration", "variant": "vector", "hits": 2}, [0.0, 1e-2, 0.1, 0.3, math.inf]),
    ({"criterion": "step_norm", "relative": True}, [0.0, 0.05, 0.1, 0.3, math.inf]),
    ({"criterion": "kl", "decode": "rest"}, [0.0, 1e-3, 1e-2, math.inf]),
    ({"criterion": "argmax"}, [1, 2, 3]),
], ids=["fixed", "acceleration", "step_norm", "kl_rest", "argmax"])
def test_settings_decoded_together_equal_each_setting_alone(tiny_model, strategy, settings):
    swept = sweep_settings(tiny_model, VAL, strategy, settings, MAX_LOOPS, n_windows=4, batch_size=2, device=CPU)
    together = swept.points
    assert [row["setting"] for row in together] == [float(s) for s in settings]
    assert_same_points(together, [point(tiny_model, strategy, setting) for setting in settings])
    # the settings differ: a test of rows that all exit alike would pass whatever the stacking did
    assert len({row["mean_loops"] for row in together}) > 1
    # a cache budget of two settings' caches decodes them two at a time, to the same numbers
    two = 2.5 * cache_bytes(tiny_model, MAX_LOOPS, tiny_model.config.block_size, rows=2) / 2**20
    by_two = sweep_settings(tiny_model, VAL, strategy, settings, MAX_LOOPS, 4, 2, CPU, cache_mb=two)
    assert_same_points(by_two.points, together)
    assert by_two.depth.equals(swept.depth)


def assert_same_points(rows: list[dict], expected: list[dict]) -> None:
    """Loop counts and costs equal; cross-entropy to float64 rounding (the matrix products see other batches)."""
    for row, single in zip(rows, expected, strict=True):
        assert {key: value for key, value in row.items() if "loops" in key or "per_token" in key} == {
            key: value for key, value in single.items() if "loops" in key or "per_token" in key}
        assert row["cross_entropy"] == pytest.approx(single["cross_entropy"], rel=1e-12)


def test_cache_bytes_is_what_the_cache_holds(tiny_model):
    caches = new_cache(tiny_model, MAX_LOOPS, 7, rows=3)
    assert cache_bytes(tiny_model, MAX_LOOPS, 7, rows=3) == sum(c.keys.nbytes + c.values.nbytes for c in caches)


def test_depth_table_by_hand(tiny_model):
    """Fixed depth K runs K loops on every token; acceleration (two hits, defined from step 2) at τ = ∞ exits every
    token at step 3, the earliest its rule allows; at τ = 0 no token ever exits early."""
    depth = sweep_settings(tiny_model, VAL, {"criterion": "fixed"}, [1, 3], MAX_LOOPS, 4, 2, CPU).depth
    accel = sweep_settings(tiny_model, VAL, ACCELERATION, [math.inf, 0.0], MAX_LOOPS, 4, 2, CPU).depth
    for table, expected in ((depth, {1.0: 1, 3.0: 3}), (accel, {math.inf: 3, 0.0: MAX_LOOPS})):
        assert table.height == len(expected) * 4 * 16 * 3  # settings x windows x positions x groups
        for setting, steps in expected.items():
            assert set(table.filter(pl.col("setting") == setting)["exit_step"]) == {steps}
    first = depth.filter(pl.col("setting") == 1.0)
    assert first["window"].to_list() == [w for w in range(4) for _ in range(16 * 3)]
    assert first["position"].to_list() == [p for _ in range(4) for p in range(16) for _ in range(3)]
    assert first["group"].to_list() == [0, 1, 2] * 4 * 16
    assert first["token"].to_list() == [int(VAL[start + p]) for start in WINDOW_STARTS for p in range(16)
                                        for _ in range(3)]
    assert {column: str(dtype) for column, dtype in depth.schema.items() if column != "setting"} == {
        "window": "Int16", "position": "Int16", "token": "Int32", "group": "Int16", "exit_step": "Int16"}


@pytest.mark.parametrize("strategy, settings", [
    (ACCELERATION, [1e-4, 1e-3, 1e-2]),
    ({"criterion": "kl", "decode": "rest"}, [1e-5, 1e-4, 1e-3]),
], ids=["acceleration", "kl_rest"])
def test_depth_table_means_are_the_sweep_s_mean_loops_and_generation_s_loop_counts(tiny_model, strategy, settings):
    """Per setting and group, the mean exit step over the table's tokens is the sweep row's mean loops of that group;
    the exit steps of each window are those of generation decoding the window as a prompt, one position at a
    time (the all-positions route for acceleration, the position-by-position one for the rest decode)."""
    swept = sweep_settings(tiny_model, VAL, strategy, settings, MAX_LOOPS, n_windows=4, batch_size=2, device=CPU)
    means = swept.depth.group_by("setting", "group").agg(pl.col("exit_step").mean())
    for row in swept.points:
        for g in range(3):
            mean = means.filter((pl.col("setting") == row["setting"]) & (pl.col("group") == g))["exit_step"].item()
            assert mean == pytest.approx(row[f"mean_loops_group{g}"], rel=1e-12)
    assert swept.depth.group_by("setting", "group").agg(pl.col("exit_step").n_unique())["exit_step"].max() > 1
    for setting in settings:
        own = swept.depth.filter(pl.col("setting") == setting)
        for window, start in enumerate(WINDOW_STARTS):
            rules = rules_at(strategy, setting, 3, MAX_LOOPS)
            generated = decode_prompt(tiny_model, VAL[start : start + 17].tolist(), rules).loops
            steps = own.filter(pl.col("window") == window).sort("position", "group")["exit_step"].to_list()
            assert steps == [loops for position in generated for loops in position]
