"""The claims stage's inputs from the sample stage: every sampled run's summary and paired speed rounds, stacked."""

from __future__ import annotations

import polars as pl
import pytest

from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import run_subdir
from twoscale.stages.claims import SAMPLE_TABLES, read_sample_table


def test_the_speed_rounds_of_every_sampled_run_are_stacked_and_a_missing_table_is_named(tmp_path):
    for seed in (1, 2):
        folder = tmp_path / run_subdir("huginn", seed)
        folder.mkdir(parents=True)
        pl.DataFrame({"recipe": ["huginn"] * 2, "seed": [seed] * 2, "method": ["sampler", "full_recurrence"],
                      "round": [0, 0], "tokens_per_s": [10.0 * seed, 2.0]}).write_csv(folder / "speed.csv")
    speed = read_sample_table(tmp_path, [("huginn", 1), ("huginn", 2)], SAMPLE_TABLES["sample_speed"])
    assert speed.filter(pl.col("method") == "sampler")["tokens_per_s"].to_list() == [10.0, 20.0]
    with pytest.raises(TwoscaleError, match="summary.csv: not found"):
        read_sample_table(tmp_path, [("huginn", 1)], SAMPLE_TABLES["sample"])
