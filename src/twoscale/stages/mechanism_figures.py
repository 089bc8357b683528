"""Stage `mechanism_figures`: the loop map's eigenvalues, its predictions against the measured late steps, and the
logit lens across loop steps, from every run's spectrum and lens tables. A stage of its own, so that editing a
figure redraws it and reruns nothing else."""

from __future__ import annotations

import argparse
import logging

from twoscale.geometry import mechanism_figures as figures
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import (
    draw_figures,
    load,
    per_checkpoint_tables,
)

HELP = "draw the loop map's eigenvalues, its predictions against the measured steps, and the logit lens"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params = load(args)
    spectrum = per_checkpoint_tables(params, args.spectrum_dir, "the spectrum stage")
    lens = per_checkpoint_tables(params, args.lens_dir, "the lens stage")
    with tracking.stage_run(args.stage, {}):
        draw_figures({"spectrum.png": lambda path: figures.fig_spectrum(spectrum, path),
                      "spectrum_agreement.png": lambda path: figures.fig_spectrum_agreement(spectrum, path),
                      "lens.png": lambda path: figures.fig_lens(lens, path)}, args.out_dir)
    log.info("mechanism figures in %s", args.out_dir)
