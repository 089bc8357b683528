"""Stage `geometry`: gather every run's checkpoint measurements into tables across training (a recipe and a seed
column tell the runs apart), and log the per-checkpoint summaries to MLflow by training step; the
`geometry_figures` stage draws from these tables."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from twoscale.config.io import atomic_path, read_json, read_parquet, run_subdir, write_parquet
from twoscale.geometry.tables import MEASUREMENT_TABLES
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import load

HELP = "gather the measurements across training into tables"

log = logging.getLogger(__name__)


def checkpoint_dirs(measure_dir: Path, runs: list[tuple[str, int]], steps: list[int]
                    ) -> list[tuple[str, int, int, Path]]:
    """(recipe, seed, step, folder) of every measured checkpoint: runs in file order, then training steps."""
    return [(recipe, seed, step, measure_dir / run_subdir(recipe, seed) / f"step_{step}")
            for recipe, seed in runs for step in steps]


def gather(checkpoints: list[tuple[str, int, int, Path]]) -> dict[str, pl.DataFrame]:
    """Each table of every checkpoint, stacked by run and training step."""
    frames: dict[str, list[pl.DataFrame]] = {name: [] for name in MEASUREMENT_TABLES}
    for recipe, seed, step, folder in checkpoints:
        for name in MEASUREMENT_TABLES:
            producer = f"the measure stage for {recipe}, seed {seed}, step {step}"
            frames[name].append(read_parquet(folder / f"{name}.parquet", producer))
    return {name: pl.concat(parts, how="vertical_relaxed") for name, parts in frames.items()}


def run(args: argparse.Namespace) -> None:
    params = load(args)
    checkpoints = checkpoint_dirs(args.measure_dir, params.runs(), params.train.checkpoint_steps)
    tables = gather(checkpoints)
    summaries = [{"recipe": recipe, "seed": seed, **read_json(folder / "summary.json")}
                 for recipe, seed, _, folder in checkpoints]
    summary = pl.DataFrame(summaries).select("recipe", "seed", "step", pl.all().exclude("recipe", "seed", "step"))
    with tracking.stage_run(args.stage, {"train": params.train}):
        for row in summaries:
            prefix = f"{row['recipe']}/seed_{row['seed']}/"
            tracking.log_metrics({prefix + k: v for k, v in row.items() if k not in ("recipe", "seed", "step")},
                                 step=int(row["step"]))
        for name, frame in tables.items():
            write_parquet(args.out_dir / f"{name}.parquet", frame)
        with atomic_path(args.out_dir / "summary.csv") as tmp:
            summary.write_csv(tmp)
        tracking.log_artifact(args.out_dir / "summary.csv")
    log.info("geometry of %d checkpoints of %d runs", len(checkpoints), len(params.runs()))
