"""Stage `geometry`: gather every checkpoint's measurements into tables across training, draw Figures 1-3 and
the depth-similarity and loss-vs-loops figures, and log the per-checkpoint summaries to MLflow by training step."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from twoscale import plots, tracking
from twoscale.io import atomic_path, read_json, read_parquet, write_parquet
from twoscale.params import params_hash
from twoscale.stages.common import add_params_argument, load
from twoscale.tables import MEASUREMENT_TABLES

log = logging.getLogger("twoscale.geometry")

FIGURES = {
    "fig1_trajectory_pca.png": (plots.fig1_trajectory, ("trajectory",)),
    "fig2_drift_to_loop_ratio.png": (plots.fig2_drift_to_loop, ("geometry",)),
    "fig3a_step_size.png": (plots.fig3a_step_size, ("geometry",)),
    "fig3b_step_cosine.png": (plots.fig3b_step_cosine, ("geometry",)),
    "depth_similarity_phases.png": (plots.fig_similarity, ("similarity", "depth")),
    "loss_vs_loops.png": (plots.fig_loss_vs_loops, ("loss_vs_loops",)),
    "acceleration.png": (plots.fig_acceleration, ("geometry",)),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--measure-dir", type=Path, required=True, help="reads step_N/ for every checkpoint step")
    parser.add_argument("--out-dir", type=Path, required=True, help="writes the tables across training here")
    parser.add_argument("--figures-dir", type=Path, required=True, help="writes the figures here")


def gather(measure_dir: Path, steps: list[int]) -> dict[str, pl.DataFrame]:
    """Each table of every checkpoint, stacked in training order."""
    frames: dict[str, list[pl.DataFrame]] = {name: [] for name in MEASUREMENT_TABLES}
    for step in steps:
        for name in MEASUREMENT_TABLES:
            path = measure_dir / f"step_{step}" / f"{name}.parquet"
            frames[name].append(read_parquet(path, f"the measure stage for step {step}"))
    return {name: pl.concat(parts, how="vertical_relaxed") for name, parts in frames.items()}


def run(args: argparse.Namespace) -> None:
    params = load(args)
    steps = params.train.checkpoint_steps
    tables = gather(args.measure_dir, steps)
    summaries = [read_json(args.measure_dir / f"step_{step}" / "summary.json") for step in steps]
    summary = pl.DataFrame(summaries).select("step", pl.all().exclude("step"))
    with tracking.stage_run("geometry", params_hash(params.train)):
        import mlflow

        for row in summaries:
            mlflow.log_metrics({k: v for k, v in row.items() if k != "step" and v == v}, step=int(row["step"]))
        for name, frame in tables.items():
            write_parquet(args.out_dir / f"{name}.parquet", frame)
        with atomic_path(args.out_dir / "summary.csv") as tmp:
            summary.write_csv(tmp)
        for filename, (draw, inputs) in FIGURES.items():
            path = args.figures_dir / filename
            draw(*(tables[name] for name in inputs), path)
            mlflow.log_artifact(str(path), artifact_path="figures")
        mlflow.log_artifact(str(args.out_dir / "summary.csv"))
    log.info("geometry of %d checkpoints: %s", len(steps), ", ".join(sorted(FIGURES)))
