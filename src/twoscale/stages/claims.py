"""Stage `claims`: the paper's findings (and the sampler's and Raptor's) beside our numbers for every training run,
read per recipe (and per teacher) with the spread over seeds, with a verdict for each (Markdown and JSON)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import polars as pl

from twoscale.claims.by_recipe import summarise, to_json, to_markdown
from twoscale.claims.table import claims_table, computations, surrogate_claims
from twoscale.geometry.tables import MEASUREMENT_TABLES
from twoscale.pipeline import tracking
from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import read_csv, read_parquet, run_subdir, write_text
from twoscale.pipeline.params import TrainParams, params_hash
from twoscale.report.claim import CLAIMS_DOC
from twoscale.report.tables import of_run
from twoscale.stages.common import add_params_argument, load, per_checkpoint_tables
from twoscale.surrogates.tables import read_recovery

HELP = "put the paper's findings beside our numbers, with verdicts"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--geometry-dir", type=Path, required=True, help="reads the tables across training")
    parser.add_argument("--sweep", type=Path,
                        help="the early-exit sweep table of every run; left out (with --latency), the exit claims "
                        "(C6) are not measured: for a run whose sweeps did not run")
    parser.add_argument("--latency", type=Path,
                        help="the paired latency rounds of every run (latency.parquet of the tradeoff stage)")
    parser.add_argument("--sample-dir", type=Path, required=True,
                        help="reads <recipe>/seed_<seed>/summary.csv and speed.csv of the sample stage (the recipes "
                        "it ran on)")
    parser.add_argument("--beyond-dir", type=Path, required=True,
                        help="reads <recipe>/seed_<seed>/geometry.parquet of the beyond stage (S: the geometry "
                        "looped past the trained range)")
    parser.add_argument("--spectrum-dir", type=Path, required=True,
                        help="reads <recipe>/seed_<seed>/step_<step>.parquet of the spectrum stage (beside C1, C3)")
    parser.add_argument("--recovery", type=Path, required=True,
                        help="recovery.csv of the surrogates stage (every teacher, seed and k)")
    parser.add_argument("--out-dir", type=Path, required=True, help="writes claims.md and claims.json")


def read_tables(directory: Path, sweep: Path | None, latency: Path | None) -> dict[str, pl.DataFrame]:
    """The geometry stage's tables, and the sweep table and its latency rounds unless both are left out."""
    if (sweep is None) != (latency is None):
        raise TwoscaleError("--sweep and --latency go together: give both, or neither (C6 not measured)")
    tables = {name: read_parquet(directory / f"{name}.parquet", "the geometry stage")
              for name in MEASUREMENT_TABLES}
    if sweep is None:
        return tables
    return tables | {"sweep": read_parquet(sweep, "the tradeoff stage"),
                     "latency": read_parquet(latency, "the tradeoff stage")}


# the claims' tables from the sample stage, by file: the summary per setting and the paired speed rounds
SAMPLE_TABLES = {"sample": "summary.csv", "sample_speed": "speed.csv"}


def read_run_tables(directory: Path, runs: list[tuple[str, int]], name: str, stage: str) -> pl.DataFrame:
    """One table (a CSV or Parquet file `name`) that a per-run stage writes under <recipe>/seed_<seed>/, of these
    runs, stacked."""
    read = read_parquet if name.endswith(".parquet") else read_csv
    frames = [read(directory / run_subdir(recipe, seed) / name, stage) for recipe, seed in runs]
    return pl.concat(frames, how="diagonal_relaxed")


def schedule(train: TrainParams) -> pl.DataFrame:
    """The run's training schedule as the claims read it: C2 compares checkpoints after the warm-up, S reads loops
    beyond the most training drew."""
    return pl.DataFrame({"warmup_steps": [train.warmup_steps], "most_trained_loops": [train.loops.max]})


def run(args: argparse.Namespace) -> None:
    params = load(args)
    tables = read_tables(args.geometry_dir, args.sweep, args.latency)
    tables["beyond"] = read_run_tables(args.beyond_dir, params.runs(), "geometry.parquet", "the beyond stage")
    tables["spectrum"] = per_checkpoint_tables(params, args.spectrum_dir, "the spectrum stage")
    sample_runs = params.sample_runs()
    if sample_runs:
        tables |= {key: read_run_tables(args.sample_dir, sample_runs, name, "the sample stage")
                   for key, name in SAMPLE_TABLES.items()}
    runs = {(recipe, seed): claims_table({**{name: of_run(frame, recipe, seed) for name, frame in tables.items()},
                                          "schedule": schedule(params.run(recipe, seed).train)})
            for recipe, seed in params.runs()}
    if params.teachers:
        recovery = tables["recovery"] = read_recovery(args.recovery)
        runs |= {(teacher, seed): surrogate_claims(recovery.filter((pl.col("teacher") == teacher)
                                                                   & (pl.col("seed") == seed)))
                 for teacher, seed in params.teacher_runs()}
    summary = summarise(runs)
    with tracking.stage_run("claims", params_hash(params.measure, params.sweep, params.sample, params.distill)):
        origin = computations(tables, [*params.runs(), *params.teacher_runs()])
        docs = Path(os.path.relpath(CLAIMS_DOC, args.out_dir)).as_posix()
        write_text(args.out_dir / "claims.md", to_markdown(summary, runs, origin, docs))
        write_text(args.out_dir / "claims.json", to_json(summary, runs, origin))
        tracking.log_artifact(args.out_dir / "claims.md")
        tracking.log_artifact(args.out_dir / "claims.json")
        tracking.set_tags({f"verdict_{recipe}_{row['claim']}": entry["verdict"]
                         for row in summary for recipe, entry in row["recipes"].items()})
    for row in summary:
        log.info("%s: %s", row["claim"], "; ".join(f"{recipe} {entry['verdict']}"
                                                   for recipe, entry in row["recipes"].items()))
