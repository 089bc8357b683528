"""The claims stage's inputs from the per-run stages: every sampled run's summary and paired speed rounds, and every
run's geometry beyond the trained range, stacked."""

from __future__ import annotations

import polars as pl
import pytest

from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import run_subdir
from twoscale.stages.claims import SAMPLE_TABLES, read_run_tables


def test_the_speed_rounds_of_every_sampled_run_are_stacked_and_a_missing_table_is_named(tmp_path):
    for seed in (1, 2):
        folder = tmp_path / run_subdir("huginn", seed)
        folder.mkdir(parents=True)
        pl.DataFrame({"recipe": ["huginn"] * 2, "seed": [seed] * 2, "method": ["sampler", "full_recurrence"],
                      "round": [0, 0], "tokens_per_s": [10.0 * seed, 2.0]}).write_csv(folder / "speed.csv")
    speed = read_run_tables(tmp_path, [("huginn", 1), ("huginn", 2)], SAMPLE_TABLES["sample_speed"],
                            "the sample stage")
    assert speed.filter(pl.col("method") == "sampler")["tokens_per_s"].to_list() == [10.0, 20.0]
    with pytest.raises(TwoscaleError, match="summary.csv: not found"):
        read_run_tables(tmp_path, [("huginn", 1)], SAMPLE_TABLES["sample"], "the sample stage")


def test_the_beyond_tables_are_read_as_parquet_for_every_run(tmp_path):
    for recipe in ("paper", "huginn"):
        folder = tmp_path / run_subdir(recipe, 7)
        folder.mkdir(parents=True)
        pl.DataFrame({"recipe": [recipe], "seed": [7], "k": [64]}).write_parquet(folder / "geometry.parquet")
    beyond = read_run_tables(tmp_path, [("paper", 7), ("huginn", 7)], "geometry.parquet", "the beyond stage")
    assert beyond["recipe"].to_list() == ["paper", "huginn"]
    with pytest.raises(TwoscaleError, match="the beyond stage"):
        read_run_tables(tmp_path, [("sandwich", 7)], "geometry.parquet", "the beyond stage")
