"""A run's headline numbers (DVC's metrics) on hand-built tables: the run's own seed and last checkpoint read, the
gain and K* worked out by hand, every value a number, a missing surrogate size named."""

from __future__ import annotations

import polars as pl
import pytest

from twoscale.analysis.headline import looped_headline, teacher_headline

METRICS = {"train_loss": 4.9, "val_loss": 5.0, "machine": "a machine", "precision": "bfloat16", "step": 600}


def losses(seed: int, step: int, by_loops: dict[int, float]) -> list[dict]:
    return [{"recipe": "huginn", "seed": seed, "step": step, "loops": loops, "val_loss": loss}
            for loops, loss in by_loops.items()]


def test_a_looped_run_s_gain_and_k_star_come_from_its_own_seed_at_its_last_checkpoint():
    """Seed 7 at step 600: 5.3 at one loop, lowest 5.0 at 8 loops; 4 loops (5.005) is within ln 1.01 = 0.00995
    of it, 2 loops (5.1) is not: a gain of 0.3 and K* 4. The earlier checkpoint and the other seed would say
    otherwise (gains of 1.0 and 2.0)."""
    table = pl.DataFrame(losses(7, 300, {1: 6.0, 2: 5.0}) + losses(7, 600, {1: 5.3, 2: 5.1, 4: 5.005, 8: 5.0})
                         + losses(42, 600, {1: 7.0, 2: 5.0}))
    assert looped_headline(METRICS, table, "huginn", 7) == {
        "train_loss": 4.9, "val_loss": 5.0, "depth_gain": pytest.approx(0.3), "k_star": 4}


def test_a_teacher_s_recovery_per_surrogate_size_and_nothing_but_numbers_or_null():
    rows = [("plain", 7, 2, 0.97, 1.04), ("plain", 7, 3, 0.98, 1.01), ("plain", 42, 2, 0.5, 0.5),
            ("wide", 7, 2, 0.1, 0.1)]
    recovery = pl.DataFrame([{"teacher": teacher, "seed": seed, "blocks": blocks, "surrogate_recovered": s,
                              "control_recovered": c, "machine": "a machine"} for teacher, seed, blocks, s, c in rows])
    headline = teacher_headline(METRICS, recovery, "plain", 7, [2, 3])
    assert headline == {"train_loss": 4.9, "val_loss": 5.0, "surrogate_recovered_k2": 0.97,
                        "control_recovered_k2": 1.04, "surrogate_recovered_k3": 0.98, "control_recovered_k3": 1.01}
    assert all(isinstance(value, float) for value in headline.values())
    blank = pl.DataFrame({"teacher": ["plain"], "seed": [8], "blocks": [2], "surrogate_recovered": [None],
                          "control_recovered": [None]})
    assert teacher_headline(METRICS, blank, "plain", 8, [2]) == {  # no gain over the unigram model to recover
        "train_loss": 4.9, "val_loss": 5.0, "surrogate_recovered_k2": None, "control_recovered_k2": None}
    with pytest.raises(ValueError, match="no single row of plain at seed 7 with 4 blocks"):
        teacher_headline(METRICS, recovery, "plain", 7, [2, 4])
