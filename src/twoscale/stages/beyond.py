"""Stage `beyond`: the final checkpoint's loop geometry with every group looped past the most loops training drew,
to the largest of measure.beyond_loops (64 by default, twice train.loops.max), in float64 with the measure stage's
precision floor. S reads it beside its loss at those loop counts: does the loop keep converging, or drift, once it
runs longer than it was trained to?"""

from __future__ import annotations

import argparse
import logging

import polars as pl

from twoscale.config.io import write_parquet
from twoscale.geometry.measurement import MEASURE_DTYPE, geometry_in
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import (
    load_run,
    log_geometry_curves,
    origin_columns,
    run_columns,
)
from twoscale.training.device import provenance

HELP = "measure the final checkpoint's loop geometry looped beyond the trained range"

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    measure = params.measure
    model, meta, val_ids, device = open_checkpoint(args, params, run, measure.threads)
    loops, step = max(measure.beyond_loops), meta["step"]
    with tracking.stage_run(args.stage, {"measure": measure}, run.tags):
        log.info("%s, seed %d, step %d: %d windows, every group looped %d times", run.recipe, run.seed, step,
                 measure.n_sequences, loops)
        rows = geometry_in(model, val_ids, measure, measure.n_sequences, device, MEASURE_DTYPE, loops=loops,
                           floor=None)
        log_geometry_curves(rows)
        source = provenance(device, MEASURE_DTYPE)
        table = pl.DataFrame(rows, schema_overrides={"k": pl.Int64}).select(
            *run_columns(run, step), pl.all(), *origin_columns(source))
        write_parquet(args.out, table)
