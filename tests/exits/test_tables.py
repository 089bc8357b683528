"""The sweep table joined with its timing rounds, on hand numbers."""

from __future__ import annotations

import math

import polars as pl

from twoscale.exits.tables import with_latency


def test_each_setting_gets_the_median_fastest_and_slowest_of_its_own_rounds():
    keys = {"recipe": "r", "seed": 1}
    sweep = pl.DataFrame([
        {**keys, "strategy": "fixed", "setting": 30.0, "ppl": 100.0},
        {**keys, "strategy": "acceleration", "setting": math.inf, "ppl": 110.0},
        {**keys, "strategy": "kl_head", "setting": 1e-3, "ppl": 105.0},  # not timed
    ])
    rounds = [("fixed", 30.0, ms, loops) for ms, loops in [(3, 30), (5, 30), (4, 30), (10, 30), (2, 30)]]
    rounds += [("acceleration", math.inf, ms, loops) for ms, loops in [(1.5, 3), (1.0, 4)]]
    latency = pl.DataFrame([{**keys, "strategy": s, "setting": v, "ms_per_token": float(ms),
                             "generated_mean_loops": float(loops)} for s, v, ms, loops in rounds])

    got = with_latency(sweep, latency)

    assert got["strategy"].to_list() == ["fixed", "acceleration", "kl_head"]  # the sweep's order and rows
    assert got["ppl"].to_list() == [100.0, 110.0, 105.0]
    assert got["ms_per_token"].to_list() == [4.0, 1.25, None]
    assert got["ms_low"].to_list() == [2.0, 1.0, None]
    assert got["ms_high"].to_list() == [10.0, 1.5, None]
    assert got["generated_mean_loops"].to_list() == [30.0, 3.5, None]
