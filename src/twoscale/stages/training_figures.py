"""Stage `training_figures`: one training run's loss curves (training and validation, beside the unigram model) from
the train stage's history and metrics, for the report. A stage of its own, so that editing the figure retrains
nothing."""

from __future__ import annotations

import argparse
import logging

from twoscale.config.io import read_json, read_parquet
from twoscale.pipeline.observers import tracking
from twoscale.report.training import fig_loss_curves
from twoscale.stages.common import load_run

HELP = "draw one training run's loss curves from its history"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    _, run = load_run(args)
    history = read_parquet(args.history, f"train for {run.recipe}, seed {run.seed}")
    unigram = read_json(args.metrics)["unigram_val_loss"]
    with tracking.stage_run(args.stage, {}, run.tags):
        fig_loss_curves(history, unigram, f"{run.recipe}, seed {run.seed}", args.out)
        tracking.log_artifact(args.out, artifact_path="figures")
    log.info("loss curves of %s, seed %d: %s", run.recipe, run.seed, args.out)
