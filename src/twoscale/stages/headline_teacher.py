"""Stage `headline_teacher`: one plain teacher run's headline numbers, the file `dvc metrics show` lists for it: its
training's final losses and the share of its gain that each distilled surrogate and its control recover
(analysis.headline), all numbers."""

from __future__ import annotations

import argparse
import logging

from twoscale.analysis.headline import teacher_headline
from twoscale.config.io import read_csv, read_json
from twoscale.stages.common import load_teacher_run, write_headline

HELP = "write one plain teacher run's headline numbers (DVC's metrics)"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_teacher_run(args)
    recovery = read_csv(args.recovery, "the surrogates stage")
    headline = teacher_headline(read_json(args.train_metrics), recovery, run.recipe, run.seed, params.distill.blocks)
    write_headline(args.stage, run, headline, args.out)
    log.info("headline numbers of %s, seed %d: %s", run.recipe, run.seed, args.out)
