"""The claims stage's inputs from the per-run stages: every sampled run's summary and paired speed rounds, and every
run's geometry beyond the trained range, stacked; and the tables it commits beside its report, from which every
committed report recomputes."""

from __future__ import annotations

import polars as pl
import pytest
import yaml
from workspace import ROOT

from twoscale.__main__ import main
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import run_subdir
from twoscale.pipeline.declaration.dependencies import DECLARATION
from twoscale.stages.claims import (
    BUNDLE,
    RUNS_SCHEMA,
    SAMPLE_TABLES,
    explained_elsewhere,
    read_run_tables,
    write_report,
)
from twoscale.surrogates.tables import read_recovery


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


COMMITTED_BUNDLES = sorted(path.parent for path in ROOT.glob("results/**/claims_tables/runs.parquet"))


def test_a_committed_run_s_tables_are_in_the_repository():
    assert {ROOT / "results/gpu/run-e/claims_tables", ROOT / "results/gpu/run-f/claims_tables",
            ROOT / "results/study/claims_tables"} <= set(COMMITTED_BUNDLES)


@pytest.mark.parametrize("bundle", COMMITTED_BUNDLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_report_recomputes_from_the_tables_committed_beside_it(bundle, tmp_path):
    """What a reader of the repository checks without running the pipeline: the claims recomputed from the
    committed tables are the committed claims, byte for byte."""
    assert main(["claims", "--from-tables", str(bundle), "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "claims.json").read_bytes() == (bundle.parent / "claims.json").read_bytes()
    assert set(BUNDLE) == {path.stem for path in bundle.glob("*.parquet")}


def test_the_stage_without_its_inputs_or_a_bundle_says_which_are_missing(tmp_path, capsys):
    assert main(["claims", "--geometry-dir", str(tmp_path), "--out-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "twoscale claims: error: claims: give --from-tables, or every input: missing --sample-dir, --beyond-dir, "
        "--spectrum-dir, --recovery")
    assert not (tmp_path / "out").exists()
    assert main(["claims", "--from-tables", str(tmp_path / "none"), "--out-dir", str(tmp_path / "out")]) == 2
    assert "the claims stage" in capsys.readouterr().err and not (tmp_path / "out" / "claims.json").exists()


def test_the_declared_outputs_of_the_stage_are_its_bundle():
    declared = yaml.safe_load(DECLARATION.read_text())["claims"]["outs"]
    names = [next(iter(out)) if isinstance(out, dict) else out for out in declared]
    assert [name for name in names if name.startswith("results/claims_tables/")] == [
        f"results/claims_tables/{name}.parquet" for name in BUNDLE]


def test_a_bundle_of_teachers_alone_gives_their_claims(tmp_path):
    """No looped run: every table but the surrogates' recovery is empty, and the report holds C8 and C8b alone."""
    recovery = read_recovery(ROOT / "results/surrogates/recovery.csv")
    runs = pl.DataFrame({"recipe": ["plain"], "seed": [1337], "teacher": [True], "explained": [True],
                         "warmup_steps": [None], "most_trained_loops": [None], "parameters": [None]},
                        schema=RUNS_SCHEMA)
    empty = pl.DataFrame(schema={"recipe": pl.String, "seed": pl.Int64})
    tables = {name: empty for name in BUNDLE} | {"recovery": recovery, "runs": runs}
    summary = write_report(tables, tmp_path)
    assert [(row["claim"], row["recipes"]["plain"]["verdict"]) for row in summary] == [
        ("C8", "inconclusive"), ("C8b", "not reproduced")]  # the control recovers 104%: nothing to compress


def test_from_tables_reads_nothing_else(tmp_path, capsys):
    assert main(["claims", "--from-tables", str(tmp_path), "--sweep", "x.parquet", "--out-dir",
                 str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("--from-tables reads nothing else: drop --sweep")


def test_a_seed_outside_explain_seeds_says_which_seeds_its_claims_explaining_readings_come_from():
    """C1 and C3 read the spectrum and S the geometry past training, which run on runtime.explain_seeds alone: a
    seed without them says so and names the seeds that have them; a claim reading neither is left as it is."""
    def row(claim: str) -> dict:
        return {"claim": claim, "measured": "step 600: numbers.", "verdict": "reproduced"}

    assert explained_elsewhere(row("C1"), [1337])["measured"] == (
        "step 600: numbers. Not measured on this seed: the loop map's spectrum (run on seed 1337 alone, "
        "runtime.explain_seeds).")
    assert explained_elsewhere(row("S"), [1, 2])["measured"].endswith(
        "Not measured on this seed: the geometry looped past the trained range (run on seeds 1, 2 alone, "
        "runtime.explain_seeds).")
    assert explained_elsewhere(row("C4"), [1337]) == row("C4")
