"""Claims C8/C8b on hand-built recovery rows, the recovery table from evaluations, and the three figures."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from twoscale.claims.table import computations, surrogate_claims
from twoscale.config.errors import TwoscaleError
from twoscale.surrogates import figures as surrogate_figures
from twoscale.surrogates.claims import C8, C8B
from twoscale.surrogates.tables import recovery_table


def evaluation(k: int, surrogate_ce: float, control_ce: float, teacher_ce: float = 4.0, unigram: float = 6.0,
               seed: int = 1) -> dict:
    def scores(ce: float) -> dict:
        return {"cross_entropy": ce, "kl_to_teacher": (ce - teacher_ce) / 2,
                "recovered": (unigram - ce) / (unigram - teacher_ce) if unigram > teacher_ce else float("nan")}
    return {"teacher_name": "plain", "seed": seed, "blocks": k, "phases": [[0, 3], [4, 7]][:k] if k < 3 else
            [[0, 1], [2, 4], [5, 7]], "teacher_layers": 8, "unigram_cross_entropy": unigram,
            "teacher": scores(teacher_ce), "surrogate": scores(surrogate_ce), "control": scores(control_ce),
            "teacher_parameters": 1000, "surrogate_parameters": 250 * k, "control_parameters": 300 * k,
            "layer_r2": [0.9 + 0.01 * i for i in range(8)]}


def recovery(*evaluations) -> pl.DataFrame:
    return recovery_table(list(evaluations))[0]


def test_recovery_table_has_a_row_per_k_and_a_row_per_layer_of_r2():
    table, r2 = recovery_table([evaluation(1, 5.0, 5.2), evaluation(2, 4.1, 4.6)])
    assert table["blocks"].to_list() == [1, 2] and table["phases"].to_list() == ["0-3", "0-3 4-7"]
    assert table["surrogate_recovered"].to_list() == pytest.approx([0.5, 0.95])
    assert table["control_recovered"].to_list() == pytest.approx([0.4, 0.7])
    assert r2.height == 16 and r2.filter(pl.col("blocks") == 2)["layer"].to_list() == list(range(1, 9))


def test_recovery_rows_say_what_trained_the_teacher_and_the_surrogate():
    recorded = {**evaluation(2, 4.1, 4.6), "teacher_precision": "bfloat16", "teacher_machine": "CPU X, 2 CPUs",
                "teacher_torch": "2.13.0", "precision": "float32", "machine": "GPU Y", "torch": "2.13.0"}
    table = recovery(recorded, evaluation(1, 5.0, 5.2))  # the second, from before provenance was recorded
    assert [table[c][0] for c in ("teacher_precision", "teacher_machine", "precision", "machine")] == [
        "bfloat16", "CPU X, 2 CPUs", "float32", "GPU Y"]
    assert {table[c][1] for c in ("teacher_precision", "machine", "torch")} == {"not recorded"}
    looped = pl.DataFrame({"recipe": ["paper"], "seed": [1], "precision": ["float64"], "machine": ["CPU X, 2 CPUs"],
                           "torch": ["2.13.0"], "train_precision": ["bfloat16"], "train_machine": ["CPU X, 2 CPUs"],
                           "train_torch": ["2.13.0"]})
    found = computations({"geometry": looped, "sweep": looped, "latency": looped, "recovery": table},
                         [("paper", 1), ("plain", 1)])
    assert [o["recipe"] for o in found] == ["paper"] * 4 + ["plain"] * 2  # the looped runs first, then the teachers
    assert [(o["computation"], o["precision"], o["machine"]) for o in found if o["recipe"] == "plain"] == [
        ("teacher training (C8)", "bfloat16 / not recorded", "CPU X, 2 CPUs / not recorded"),
        ("surrogate and control training (C8)", "float32 / not recorded", "GPU Y / not recorded")]


@pytest.mark.parametrize(("surrogate_ce", "verdict"), [(4.1, "reproduced"), (4.19, "reproduced"),
                                                       (4.3, "not reproduced")])
def test_c8_reads_the_two_block_surrogates_recovered_fraction_against_90_percent(surrogate_ce, verdict):
    row = C8.row(recovery(evaluation(1, 5.5, 5.5), evaluation(2, surrogate_ce, 4.6)))
    assert row["verdict"] == verdict
    assert row["headline"]["recovered (k = 2)"] == pytest.approx((6.0 - surrogate_ce) / 2.0)


def test_c8_is_inconclusive_without_k_2_or_when_the_teacher_does_not_beat_unigram():
    assert C8.row(recovery(evaluation(1, 4.1, 4.6)))["verdict"] == "inconclusive"
    worse_than_unigram = recovery(evaluation(2, 5.0, 5.1, teacher_ce=6.5))
    rows = surrogate_claims(worse_than_unigram)
    assert [r["claim"] for r in rows] == ["C8", "C8b"]
    assert [r["verdict"] for r in rows] == ["inconclusive", "inconclusive"]
    assert "does not beat the unigram baseline" in rows[0]["measured"]


@pytest.mark.parametrize(("surrogate_ce", "control_ce", "verdict"), [(4.2, 4.6, "reproduced"),
                                                                     (4.6, 4.2, "not reproduced")])
def test_c8b_compares_the_surrogate_with_the_two_layer_gpt_from_scratch(surrogate_ce, control_ce, verdict):
    row = C8B.row(recovery(evaluation(2, surrogate_ce, control_ce)))
    assert row["verdict"] == verdict
    assert row["headline"]["control recovered (k = 2)"] == pytest.approx((6.0 - control_ce) / 2.0)


def test_the_three_figures_are_drawn(tmp_path):
    evaluations = [evaluation(k, 4.0 + 0.5 / k, 4.0 + 1.0 / k, seed=seed) for seed in (1, 2) for k in (1, 2, 3)]
    table, r2 = recovery_table(evaluations)
    surrogate_figures.fig_surrogate_recovery(table, r2, tmp_path / "recovery.png")
    distance = np.abs(np.subtract.outer(np.arange(8.0), np.arange(8.0))) / 10
    surrogate_figures.fig_teacher_phases(distance, {1: [(0, 7)], 2: [(0, 3), (4, 7)]}, "plain (seed 1)",
                                       tmp_path / "phases.png")
    rows = [{"model": model, "name": name, "seed": 1, "blocks": k, "position": i, "relative_depth": i / 8,
             "convergence": i / 8, "angular_speed": 0.1, "stable_rank": 2.0}
            for model, name, k in (("teacher", "plain", None), ("surrogate", "plain", 2), ("looped", "paper", None))
            for i in range(9)]
    surrogate_figures.fig_depth_dynamics(pl.DataFrame(rows), tmp_path / "dynamics.png")
    for name in ("recovery.png", "phases.png", "dynamics.png"):
        assert (tmp_path / name).stat().st_size > 10_000


def test_a_parameter_set_without_teachers_gets_a_recovery_figure_saying_so(tmp_path):
    table, r2 = recovery_table([])
    surrogate_figures.fig_surrogate_recovery(table, r2, tmp_path / "recovery.png")
    assert (tmp_path / "recovery.png").stat().st_size > 1_000


def test_figures_refuse_empty_tables(tmp_path):
    with pytest.raises(TwoscaleError, match="recovery table is empty"):
        surrogate_figures.fig_surrogate_recovery(pl.DataFrame(), pl.DataFrame(), tmp_path / "x.png")
    with pytest.raises(TwoscaleError, match="dynamics table is empty"):
        surrogate_figures.fig_depth_dynamics(pl.DataFrame(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
