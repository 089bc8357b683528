"""Stage `precision_figures`: the late consecutive-step cosine against the step size in units of the measuring
precision's epsilon, from every run's `precision` tables (the precision question). A stage of its own, so that
editing the figure redraws it and reruns nothing else."""

from __future__ import annotations

import argparse
import logging

from twoscale.geometry import figures
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import (
    draw_figures,
    load,
    per_checkpoint_tables,
)

HELP = "draw the late step cosine against step size in each measuring precision"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params = load(args)
    table = per_checkpoint_tables(params, args.precision_dir, "the precision stage")
    with tracking.stage_run(args.stage, {}):
        draw_figures({args.out.name: lambda path: figures.fig_precision(table, path)}, args.out.parent)
    log.info("precision figure: %s", args.out)
