"""Stage `headline_teacher`: one plain teacher run's headline numbers, the file `dvc metrics show` lists for it: its
training's final losses and the share of its gain that each distilled surrogate and its control recover
(analysis.headline), all numbers."""

from __future__ import annotations

import argparse
import logging

from twoscale.analysis.headline import teacher_headline
from twoscale.config.io import read_csv, read_json, write_json
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import load_teacher_run

HELP = "write one plain teacher run's headline numbers (DVC's metrics)"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_teacher_run(args)
    recovery = read_csv(args.recovery, "the surrogates stage")
    headline = teacher_headline(read_json(args.train_metrics), recovery, run.recipe, run.seed, params.distill.blocks)
    with tracking.stage_run(args.stage, {"model": run.model, "train": run.train}, run.tags):  # the run it sums up
        write_json(args.out, headline)
        tracking.log_metrics(headline)
    log.info("headline numbers of %s, seed %d: %s", run.recipe, run.seed, args.out)
