"""Stage `exit_figures`: Figure 4 (quality against each strategy's setting) and the trade-off of quality against
cost and latency, from the tradeoff stage's sweep table, and the per-token depth map from the sweep stage's depth
tables. Drawn in a stage of their own, so that editing a figure redraws the figures and reruns nothing else."""

from __future__ import annotations

import argparse
import functools
import logging
from pathlib import Path

import polars as pl

from twoscale.config.io import read_parquet, run_subdir
from twoscale.exits import figures
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import draw_figures, load

HELP = "draw Figure 4, the exit trade-off and the per-token depth map from the sweep's tables"
log = logging.getLogger(__name__)

FIGURES = {"fig4_exit_sweep.png": figures.fig4_exit_sweep, "exit_tradeoff.png": figures.fig_exit_tradeoff}
DEPTH_FIGURE = "exit_depth.png"


def read_depth(strategies_dir: Path, sweep: pl.DataFrame) -> pl.DataFrame:
    """The window the depth map draws, from the depth tables of the runs and strategies it draws."""
    tables = sorted({(p["recipe"], p["seed"], p["strategy"]) for p in figures.depth_map_points(sweep)})
    return pl.concat([read_parquet(strategies_dir / run_subdir(recipe, seed) / f"{strategy}.depth.parquet",
                                   f"the sweep stage for {recipe}, seed {seed}, strategy {strategy}")
                      .filter(pl.col("window") == figures.DEPTH_WINDOW) for recipe, seed, strategy in tables]
                     or [pl.DataFrame()])


def run(args: argparse.Namespace) -> None:
    load(args)
    sweep = read_parquet(args.sweep, "the tradeoff stage")
    depth = read_depth(args.strategies_dir, sweep)
    drawings = {filename: functools.partial(draw, sweep) for filename, draw in FIGURES.items()}
    drawings[DEPTH_FIGURE] = functools.partial(figures.fig_exit_depth, sweep, depth)
    with tracking.stage_run(args.stage, {}):
        draw_figures(drawings, args.figures_dir)
    log.info("exit figures: %s", ", ".join(sorted(drawings)))
