"""dvc.yaml's top-level plots: the training and validation loss of every run of params.yaml on one chart, as DVC
reads it from the committed run."""

from __future__ import annotations

import json
import os
import re

import polars as pl
import pytest
import yaml
from workspace import ROOT, attempt

from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration import dvc_file
from twoscale.pipeline.declaration.dependencies import declaration

LOSS = "Loss (nats per token)"


def test_the_loss_chart_lists_every_training_of_the_parameter_set_by_hand():
    config = read_raw(ROOT / "params.yaml")
    config["runtime"]["seeds"] = [7, 8]
    expected = {f"results/train/{recipe}/seed_{seed}/history.csv": ["train_loss", "val_loss"]
                for recipe in [*config["recipes"], *config["teachers"]] for seed in (7, 8)}
    [plot] = dvc_file.top_level_plots(config)
    assert plot == {LOSS: {"x": "step", "y_label": "nats per token", "template": "loss_curves", "y": expected}}
    assert len(expected) == 2 * (len(config["recipes"]) + len(config["teachers"])) > 4  # the premise: both kinds


def test_a_history_drawn_with_every_run_is_an_output_of_its_stage_not_a_plot_of_its_own():
    written = yaml.safe_load(dvc_file.dvc_yaml(read_raw(ROOT / "params.yaml")))
    history = "results/train/${item.recipe}/seed_${item.seed}/history.csv"
    for stage in ("train", "train_teacher"):
        assert dvc_file.drawn_together(next(plot for plot in declaration()[stage]["plots"] if history in plot))
        assert {history: {"cache": False, "persist": True}} in written["stages"][stage]["outs"]
        assert history not in json.dumps(written["stages"][stage].get("plots", []))
    assert (ROOT / ".dvc/plots/loss_curves.json").is_file()


def test_dvc_draws_both_losses_of_every_committed_run_and_the_template_drops_the_steps_not_evaluated():
    result = attempt(["dvc", "plots", "show", "--json"], ROOT)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert not shown.get("errors")
    [chart] = shown["data"][LOSS]
    rows = chart["content"]["data"]["values"]
    histories = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"][0][LOSS]["y"]
    shared = os.path.commonpath(list(histories)) + "/"  # DVC names each file without the folders all share
    assert {row["filename"] for row in rows} == {path.removeprefix(shared) for path in histories}
    for path in histories:
        table = pl.read_csv(ROOT / path)
        for field in ("train_loss", "val_loss"):
            drawn = [float(row["dvc_inferred_y_value"]) for row in rows
                     if row["filename"] == path.removeprefix(shared) and row["field"] == field
                     and row["dvc_inferred_y_value"] != ""]
            assert drawn == table[field].drop_nulls().to_list(), (path, field)
    blank = [row for row in rows if row["dvc_inferred_y_value"] == ""]
    assert blank and {row["field"] for row in blank} == {"val_loss"}  # the premise of the template's filter
    filters = [step["filter"] for step in chart["content"]["transform"] if "filter" in step]
    assert filters == ["datum.dvc_inferred_y_value !== '' && isValid(datum.dvc_inferred_y_value)"]


def test_dvc_s_metrics_are_a_row_of_a_few_numbers_per_committed_run_each_its_run_s_own():
    """`dvc metrics show` lists the headline file of every run of params.yaml and nothing else, each a handful of
    numbers; the training's losses are its metrics.json's and a teacher's recovery the recovery table's row."""
    result = attempt(["dvc", "metrics", "show", "--json"], ROOT)
    assert result.returncode == 0, result.stderr
    [workspace] = json.loads(result.stdout).values()
    shown = {path: entry["data"] for path, entry in workspace["data"].items()}
    config = read_raw(ROOT / "params.yaml")
    runs = {(recipe, seed) for recipe in [*config["recipes"], *config["teachers"]]
            for seed in config["runtime"]["seeds"]}
    assert set(shown) == {f"results/headline/{recipe}/seed_{seed}.json" for recipe, seed in runs}
    columns = {key for values in shown.values() for key in values}
    assert len(columns) <= 8 and all(isinstance(value, (int, float)) for values in shown.values()
                                     for value in values.values())
    recovery = pl.read_csv(ROOT / "results/surrogates/recovery.csv")
    loss_vs_loops = pl.read_parquet(ROOT / "results/geometry/loss_vs_loops.parquet")
    for recipe, seed in runs:
        values, trained = shown[f"results/headline/{recipe}/seed_{seed}.json"], json.loads(
            (ROOT / f"results/train/{recipe}/seed_{seed}/metrics.json").read_text())
        assert (values["train_loss"], values["val_loss"]) == (trained["train_loss"], trained["val_loss"])
        if recipe in config["recipes"]:  # the gain from looping, worked out here: one loop's loss minus the lowest
            own = loss_vs_loops.filter((pl.col("recipe") == recipe) & (pl.col("seed") == seed))
            last = own.filter(pl.col("step") == config["train"]["steps"])
            assert values["depth_gain"] == pytest.approx(
                last.filter(pl.col("loops") == 1)["val_loss"].item() - last["val_loss"].min(), abs=1e-12)
        for k in config["distill"]["blocks"] if recipe in config["teachers"] else ():
            [row] = recovery.filter((pl.col("teacher") == recipe) & (pl.col("seed") == seed)
                                    & (pl.col("blocks") == k)).iter_rows(named=True)
            assert values[f"control_recovered_k{k}"] == row["control_recovered"]


@pytest.mark.parametrize("change, refusal", [
    (lambda plot: plot.pop("title"), "needs a title and one file per job"),
    (lambda plot: plot.update(template="linear"), "drawn on 'Loss (nats per token)' other than its other files"),
])
def test_a_chart_of_several_columns_declared_so_that_it_cannot_be_drawn_is_refused_by_name(monkeypatch, change,
                                                                                            refusal):
    declared = declaration()
    [plot] = [next(iter(entry.values())) for entry in declared["train_teacher"]["plots"]]
    change(plot)
    monkeypatch.setattr(dvc_file, "declaration", lambda: declared)
    with pytest.raises(ValueError, match=f"train_teacher: results/train/.*/history.csv: .*{re.escape(refusal)}"):
        dvc_file.top_level_plots(read_raw(ROOT / "params.yaml"))
