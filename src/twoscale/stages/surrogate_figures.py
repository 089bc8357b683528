"""Stage `surrogate_figures`: what the surrogates recover of their teachers (per k, and each surrogate's R² by
layer), and the dynamics of depth of teachers, surrogates and looped models, from the surrogates stage's tables.
A stage of its own, so that editing a figure redraws the figures and reruns nothing else."""

from __future__ import annotations

import argparse
import logging

from twoscale.config.io import read_csv, read_parquet
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import draw_figures, load
from twoscale.surrogates import figures
from twoscale.surrogates.tables import read_recovery

HELP = "draw the surrogates' recovery and the dynamics of depth from the surrogates tables"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    load(args)
    producer = "the surrogates stage"
    recovery = read_recovery(args.surrogates_dir / "recovery.csv")
    layer_r2 = read_csv(args.surrogates_dir / "layer_r2.csv", producer)
    dynamics = read_parquet(args.surrogates_dir / "dynamics.parquet", producer)
    drawn = {"surrogate_recovery.png": lambda path: figures.fig_surrogate_recovery(recovery, layer_r2, path),
             "depth_dynamics.png": lambda path: figures.fig_depth_dynamics(dynamics, path)}
    with tracking.stage_run(args.stage, {}):
        draw_figures(drawn, args.figures_dir)
    log.info("surrogate figures: %s", ", ".join(sorted(drawn)))
