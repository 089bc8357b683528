"""Stage `sampler_figures`: one run's sampler figure (its settings' quality, repetition and agreement against speed
and cost, beside autoregressive decoding) from the sample stage's summary. A stage of its own, so that editing the
figure does not rerun the timed sampler."""

from __future__ import annotations

import argparse
import logging

from twoscale.config.io import read_csv
from twoscale.pipeline.observers import tracking
from twoscale.sampler import figures
from twoscale.stages.common import load_run

HELP = "draw one run's sampler figure from the sample stage's summary"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    _, run = load_run(args)
    summary = read_csv(args.summary, f"the sample stage for {run.recipe}, seed {run.seed}")
    with tracking.stage_run(args.stage, {}, run.tags):
        figures.fig_sampler_tradeoff(summary, args.out)
        tracking.log_artifact(args.out, artifact_path="figures")
    log.info("sampler figure of %s, seed %d: %s", run.recipe, run.seed, args.out)
