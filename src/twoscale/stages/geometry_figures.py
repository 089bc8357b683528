"""Stage `geometry_figures`: Figures 1-3 and the diagnostic figures from the geometry stage's tables across training,
one row of panels per recipe. Drawn in a stage of their own, so that editing a figure redraws the figures and
reruns nothing else."""

from __future__ import annotations

import argparse
import functools
import logging

from twoscale.config.io import read_parquet
from twoscale.geometry import figures
from twoscale.geometry.tables import MEASUREMENT_TABLES
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import draw_figures, load

HELP = "draw Figures 1-3 and the loop diagnostics from the geometry tables"
log = logging.getLogger(__name__)

FIGURES = {
    "fig1_trajectory_pca.png": (figures.fig1_trajectory, ("trajectory",)),
    "fig2_drift_to_loop_ratio.png": (figures.fig2_drift_to_loop, ("geometry",)),
    "fig3a_step_size.png": (figures.fig3a_step_size, ("geometry",)),
    "fig3b_step_cosine.png": (figures.fig3b_step_cosine, ("geometry",)),
    "depth_similarity_phases.png": (figures.fig_similarity, ("similarity", "depth")),
    "loss_vs_loops.png": (figures.fig_loss_vs_loops, ("loss_vs_loops",)),
    "acceleration.png": (figures.fig_acceleration, ("geometry",)),
    "diagnostics.png": (figures.fig_diagnostics, ("geometry",)),
    "regimes.png": (figures.fig_regimes, ("geometry",)),
}


def run(args: argparse.Namespace) -> None:
    load(args)
    tables = {name: read_parquet(args.geometry_dir / f"{name}.parquet", "the geometry stage")
              for name in MEASUREMENT_TABLES}
    with tracking.stage_run(args.stage, {}):
        draw_figures({filename: functools.partial(draw, *(tables[name] for name in inputs))
                      for filename, (draw, inputs) in FIGURES.items()}, args.figures_dir)
    log.info("geometry figures: %s", ", ".join(sorted(FIGURES)))
