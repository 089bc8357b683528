"""Stage `headline`: one looped run's headline numbers, the file `dvc metrics show` lists for it: its training's final
losses and what looping gains it at the last checkpoint (analysis.headline), all numbers."""

from __future__ import annotations

import argparse
import logging

from twoscale.analysis.headline import looped_headline
from twoscale.config.io import read_json, read_parquet, write_json
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import load_run

HELP = "write one looped run's headline numbers (DVC's metrics)"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    _, run = load_run(args)
    loss_vs_loops = read_parquet(args.loss_vs_loops, "the geometry stage")
    headline = looped_headline(read_json(args.train_metrics), loss_vs_loops, run.recipe, run.seed)
    with tracking.stage_run(args.stage, {"model": run.model, "train": run.train}, run.tags):  # the run it sums up
        write_json(args.out, headline)
        tracking.log_metrics(headline)
    log.info("headline numbers of %s, seed %d: %s", run.recipe, run.seed, args.out)
