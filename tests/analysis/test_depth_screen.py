"""The depth screen's reading of a candidate, on hand-built tables: depth gain, K*, the control's recovery and each
model's training cost, and the table and figure of every candidate that has run."""

from __future__ import annotations

import argparse
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from twoscale.analysis import depth_screen
from twoscale.config.errors import TwoscaleError
from twoscale.tools import screen

# huginn at its last checkpoint: 0.16 nats from 1 loop to the lowest, 4.84 at 16 loops; 4 loops (4.85) is 0.0100
# above it, just past ln 1.01 = 0.00995, and 8 loops (4.843) within: K* = 8
HUGINN = {1: 5.0, 2: 4.9, 4: 4.85, 8: 4.843, 16: 4.84}
PAPER = {1: 5.2, 2: 5.1, 4: 5.15, 8: 5.3, 16: 5.4}  # best at 2 loops: a gain of 0.1


def loss_table(step: int, **recipes: dict[int, float]) -> pl.DataFrame:
    return pl.DataFrame([{"recipe": recipe, "step": step, "loops": loops, "val_loss": loss}
                         for recipe, losses in recipes.items() for loops, loss in losses.items()])


def recovery_table(control: float) -> pl.DataFrame:
    return pl.DataFrame([{"teacher": "plain", "seed": 1337, "blocks": blocks, "control_recovered": value}
                         for blocks, value in ((1, 0.5), (2, control))])


def history(tflop: list[float], seconds: list[float], tokens_per_s: list[float] | None = None) -> pl.DataFrame:
    return pl.DataFrame({"model_tflop": tflop, "seconds": seconds,
                         "tokens_per_s": tokens_per_s or [1000.0] * len(seconds)})


def test_depth_gain_and_k_star_by_hand():
    assert depth_screen.depth_gain(HUGINN) == pytest.approx(0.16)
    assert 4.85 - 4.84 > math.log(1.01) > 4.843 - 4.84
    assert depth_screen.k_star(HUGINN) == 8 and depth_screen.k_star(PAPER) == 2


def test_the_last_checkpoint_is_read_and_a_missing_recipe_is_named():
    table = pl.concat([loss_table(300, huginn={1: 9.0, 2: 1.0}), loss_table(600, huginn=HUGINN)])
    assert depth_screen.last_checkpoint_losses(table, "huginn") == HUGINN
    with pytest.raises(ValueError, match="no loss-against-loops rows for paper"):
        depth_screen.last_checkpoint_losses(table, "paper")


def test_training_cost_sums_the_history():
    """Tokens: 1000/s for 60 s, then 500/s for 120 s, 120,000 in all; at 90 CPU seconds, 1,333 a CPU second."""
    assert depth_screen.training_cost(history([0.1, 0.2], [60.0, 120.0], [1000.0, 500.0])) == {
        "tflop": pytest.approx(0.3), "minutes": pytest.approx(3.0), "tokens": pytest.approx(120_000),
        "timed_share": 1.0}
    row = depth_screen.reading("x", loss_table(600, huginn=HUGINN, paper=PAPER), recovery_table(0.85),
                               {"huginn": history([0.1, 0.2], [60.0, 120.0], [1000.0, 500.0])}, 1337, "a machine",
                               {"huginn": 90.0})
    assert row["tokens_per_cpu_s_huginn"] == pytest.approx(120_000 / 90)


def test_a_training_resumed_across_sittings_is_timed_by_its_last_sitting_scaled_to_all_its_steps():
    """Its history holds no time (null) for the steps before its last sitting, and its log that sitting's CPU time
    only: 3 of 4 steps timed, 30 s each at 1000 tokens/s, so 90 s for 3/4 of the work, 2 minutes for all of it; its
    last sitting's 60 CPU seconds, 80 for all; 90,000 tokens over those 60 CPU seconds, 1,500 a CPU second."""
    assert depth_screen.training_cost(history([0.1] * 4, [None, 30.0, 30.0, 30.0])) == {
        "tflop": pytest.approx(0.4), "minutes": pytest.approx(2.0), "tokens": pytest.approx(90_000),
        "timed_share": 0.75}
    row = depth_screen.reading("x", loss_table(600, huginn=HUGINN, paper=PAPER), recovery_table(0.85),
                               {"huginn": history([1.0] * 4, [None, 30.0, 30.0, 30.0]),
                                "paper": history([1.0], [60.0])}, 1337, "a machine", {"huginn": 60.0, "paper": 90.0})
    assert (row["minutes_huginn"], row["cpu_minutes_huginn"], row["tflop_huginn"]) == (
        pytest.approx(2.0), pytest.approx(80 / 60), 4.0)
    assert row["tokens_per_cpu_s_huginn"] == pytest.approx(1500) and row["timed_share_huginn"] == 0.75
    assert (row["minutes_paper"], row["cpu_minutes_paper"], row["timed_share_paper"]) == (1.0, 1.5, 1.0)


def test_a_training_with_no_step_timed_has_no_minutes():
    row = depth_screen.reading("x", loss_table(600, huginn=HUGINN, paper=PAPER), recovery_table(0.85),
                               {"huginn": history([1.0, 1.0], [None, None])}, 1337, "a machine", {"huginn": 60.0})
    assert (row["minutes_huginn"], row["cpu_minutes_huginn"], row["tokens_per_cpu_s_huginn"]) == (None, None, None)


@pytest.mark.parametrize(("control", "c"), [(0.85, True), (1.04, False)])
def test_a_candidate_uses_its_depth_only_where_all_three_hold(control, c):
    row = depth_screen.reading("x", loss_table(600, huginn=HUGINN, paper=PAPER), recovery_table(control),
                               {"huginn": history([1.0], [60.0])}, 1337, "a machine")
    assert (row["gain_paper"], row["gain_huginn"]) == (pytest.approx(0.1), pytest.approx(0.16))
    assert (row["a"], row["b"], row["c"], row["k_star_huginn"]) == (True, True, c, 8)
    assert row["uses_depth"] is c and row["minutes_huginn"] == 1.0 and row["control_recovered"] == control
    shallow = depth_screen.reading("y", loss_table(600, huginn={1: 5.0, 2: 4.99, 4: 4.98}, paper=PAPER),
                                   recovery_table(control), {}, 1337, "a machine")
    assert (shallow["a"], shallow["b"], shallow["uses_depth"]) == (False, False, False)  # 0.02 nats; K* = 1


def write_run(root: Path, control: float) -> None:
    results = root / "results"
    (results / "geometry").mkdir(parents=True)
    loss_table(600, huginn=HUGINN, paper=PAPER).write_parquet(results / "geometry/loss_vs_loops.parquet")
    (results / "surrogates").mkdir()
    recovery_table(control).write_csv(results / "surrogates/recovery.csv")
    for model in ("paper", "huginn", "plain"):
        folder = results / f"train/{model}/seed_1337"
        folder.mkdir(parents=True)
        history([2.0, 3.0], [30.0, 30.0]).write_parquet(folder / "history.parquet")
        (folder / "metrics.json").write_text('{"machine": "a 2-core machine"}')
        log = root / f"logs/train/{model}/seed_1337.log"
        log.parent.mkdir(parents=True)
        log.write_text("... done\nresources used: cpu_s=90.000 max_rss_mb=1.0\n")


def test_the_screen_reads_every_candidate_that_has_run_and_lists_the_others(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("")
    (tmp_path / "configs").mkdir()
    for name in ("width192", "steps2"):
        (tmp_path / f"configs/screen-{name}.yaml").write_text("base: ../params.yaml\n")
    write_run(tmp_path, 1.04)  # the default set
    write_run(tmp_path / "runs/screen-steps2", 0.85)
    args = argparse.Namespace(configs=Path("configs"), out_dir=Path("results/screen"))
    screen.run(args)
    table = pl.read_csv(tmp_path / "results/screen/screen.csv")
    assert table["candidate"].to_list() == ["default", "steps2"]
    assert table["uses_depth"].to_list() == [False, True] and table["tflop_huginn"].to_list() == [5.0, 5.0]
    assert table["minutes_huginn"].to_list() == [1.0, 1.0] and table["cpu_minutes_huginn"].to_list() == [1.5, 1.5]
    assert "Not run yet: width192." in capsys.readouterr().out
    assert (tmp_path / "results/screen/depth_vs_cost.png").stat().st_size > 0


def test_rows_of_runs_made_elsewhere_travel_in_the_table_already_written(tmp_path, monkeypatch):
    """A later screen in another checkout: steps2's run folder stayed on the machine that made it, the default set's
    tables came with the clone but not its logs, and width192 ran here on another machine."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("")
    (tmp_path / "configs").mkdir()
    for name in ("width192", "steps2"):
        (tmp_path / f"configs/screen-{name}.yaml").write_text("base: ../params.yaml\n")
    write_run(tmp_path, 1.04)
    write_run(tmp_path / "runs/screen-steps2", 0.85)
    args = argparse.Namespace(configs=Path("configs"), out_dir=Path("results/screen"))
    screen.run(args)
    shutil.rmtree(tmp_path / "runs/screen-steps2")
    shutil.rmtree(tmp_path / "logs")
    write_run(tmp_path / "runs/screen-width192", 0.95)
    for model in ("paper", "huginn", "plain"):
        (tmp_path / f"runs/screen-width192/results/train/{model}/seed_1337/metrics.json").write_text(
            '{"machine": "another machine"}')
    screen.run(args)
    rows = {row["candidate"]: row for row in pl.read_csv(tmp_path / "results/screen/screen.csv").to_dicts()}
    assert list(rows) == ["default", "steps2", "width192"]
    assert rows["default"]["cpu_minutes_huginn"] == 1.5  # 90 CPU seconds, from the first screen's log
    assert rows["steps2"]["control_recovered"] == 0.85 and rows["steps2"]["uses_depth"] is True
    assert rows["width192"]["machine"] == "another machine" and rows["width192"]["control_recovered"] == 0.95


def test_a_row_read_again_from_other_trainings_replaces_the_kept_one_whole():
    kept = {"x": {"candidate": "x", "machine": "m", "gain_paper": 0.1, "gain_huginn": 0.2, "control_recovered": 0.9,
                  "cpu_minutes_huginn": 5.0}}
    again = {"candidate": "x", "machine": "m", "gain_paper": 0.1, "gain_huginn": 0.2, "control_recovered": 0.9,
             "cpu_minutes_huginn": None}
    other = {**again, "machine": "n"}
    assert screen.merged(["x"], {"x": again}, kept)[0][0]["cpu_minutes_huginn"] == 5.0
    assert screen.merged(["x"], {"x": other}, kept)[0][0]["cpu_minutes_huginn"] is None  # another draw: not its time
    assert screen.merged(["x", "y"], {}, kept) == ([kept["x"]], ["y"])


def test_a_screen_with_nothing_run_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    with pytest.raises(TwoscaleError, match="no candidate has run yet"):
        screen.run(argparse.Namespace(configs=Path("configs"), out_dir=Path("out")))
    assert not (tmp_path / "out").exists()


def test_names_of_close_points_alike_stand_apart_and_inside_the_axes(tmp_path, caplog):
    """Two candidates at near costs with the same K* (as width192 and context256, 205 and 217 TFLOP, K* 2), the
    lowest of the panel: their names neither overlap nor leave the axes (save_figure names any that would)."""
    candidates = [("default", 96.0, 0.07, 4, 1.04), ("width192", 205.0, 0.04, 2, 1.04),
                  ("context256", 217.0, 0.08, 2, 1.02), ("steps4", 383.0, 0.19, 3, 0.96)]
    rows = [{"candidate": name, "tflop_huginn": tflop, "gain_paper": 0.2, "gain_huginn": gain, "k_star_huginn": star,
             "control_recovered": control} for name, tflop, gain, star, control in candidates]
    with caplog.at_level("WARNING"):
        screen.draw(rows, tmp_path / "screen.png")
    assert (tmp_path / "screen.png").is_file()
    assert [record.message for record in caplog.records if "unreadable text" in record.message] == []
