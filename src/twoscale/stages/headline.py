"""Stage `headline`: one looped run's headline numbers, the file `dvc metrics show` lists for it: its training's final
losses and what looping gains it at the last checkpoint (analysis.headline), all numbers."""

from __future__ import annotations

import argparse
import logging

from twoscale.analysis.headline import looped_headline
from twoscale.config.io import read_json, read_parquet
from twoscale.stages.common import load_run, write_headline

HELP = "write one looped run's headline numbers (DVC's metrics)"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    _, run = load_run(args)
    loss_vs_loops = read_parquet(args.loss_vs_loops, "the geometry stage")
    headline = looped_headline(read_json(args.train_metrics), loss_vs_loops, run.recipe, run.seed)
    write_headline(args.stage, run, headline, args.out)
    log.info("headline numbers of %s, seed %d: %s", run.recipe, run.seed, args.out)
