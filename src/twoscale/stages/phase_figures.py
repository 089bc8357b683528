"""Stage `phase_figures`: one teacher run's phases figure (the layer-by-layer distance with the phase boundaries
for every k) from the phases stage's outputs. A stage of its own, so that editing the figure reruns neither the
phases nor the distillations that read them."""

from __future__ import annotations

import argparse
import logging

from twoscale.config.io import read_json, read_parquet
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import load_teacher_run
from twoscale.surrogates import figures

HELP = "draw one plain GPT's phases figure from the phases stage's outputs"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    _, run = load_teacher_run(args)
    producer = f"the phases stage for {run.recipe}, seed {run.seed}"
    rows = read_parquet(args.distance, producer).sort("i", "j")
    layers = int(rows["i"].max()) + 1
    distance = rows["distance"].to_numpy().reshape(layers, layers)
    phases = {int(k): [tuple(p) for p in v] for k, v in read_json(args.phases)["phases"].items()}
    with tracking.stage_run(args.stage, {}, run.tags):
        figures.fig_teacher_phases(distance, phases, f"{run.recipe} (seed {run.seed})", args.out)
        tracking.log_artifact(args.out, artifact_path="figures")
    log.info("phases figure of %s, seed %d: %s", run.recipe, run.seed, args.out)
