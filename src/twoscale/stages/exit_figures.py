"""Stage `exit_figures`: Figure 4 (quality against each strategy's setting) and the trade-off of quality against
cost and latency, from the tradeoff stage's sweep table. Drawn in a stage of their own, so that editing a figure
redraws the figures and reruns nothing else."""

from __future__ import annotations

import argparse
import functools
import logging
from pathlib import Path

from twoscale.exits import figures
from twoscale.pipeline import tracking
from twoscale.pipeline.io import read_parquet
from twoscale.pipeline.params import params_hash
from twoscale.stages.common import add_params_argument, draw_figures, load

HELP = "draw Figure 4 and the exit trade-off from the sweep table"
log = logging.getLogger(__name__)

FIGURES = {"fig4_exit_sweep.png": figures.fig4_exit_sweep, "exit_tradeoff.png": figures.fig_exit_tradeoff}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--sweep", type=Path, required=True, help="the sweep table of every run (sweep.parquet)")
    parser.add_argument("--figures-dir", type=Path, required=True, help="writes the figures here")


def run(args: argparse.Namespace) -> None:
    load(args)
    sweep = read_parquet(args.sweep, "the tradeoff stage")
    with tracking.stage_run("exit_figures", params_hash()):
        draw_figures({filename: functools.partial(draw, sweep) for filename, draw in FIGURES.items()},
                     args.figures_dir)
    log.info("exit figures: %s", ", ".join(sorted(FIGURES)))
