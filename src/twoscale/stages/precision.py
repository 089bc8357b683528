"""Stage `precision`: one checkpoint's loop geometry with the model run in each arithmetic of measure.precisions
(float64, float32, bfloat16), read as a measurement in that precision would read it, with no floor: the precision
question of docs/methods.md#in-which-precision. The `measure` stage's float64 tables, above their floor, stay what
the claims read."""

from __future__ import annotations

import argparse
import logging

import polars as pl
import torch

from twoscale.config.io import write_parquet
from twoscale.geometry.measurement import PRECISIONS, geometry_in
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import load_run, log_geometry_curves, run_columns

HELP = "measure one checkpoint's loop geometry in float64, float32 and bfloat16 (the precision question)"

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    measure = params.measure
    model, meta, val_ids, device = open_checkpoint(args, params, run, measure.threads)
    step = meta["step"]
    with tracking.stage_run(args.stage, {"measure": measure}, {**run.tags, "checkpoint": f"step_{step}"}):
        frames = []
        for name in measure.precisions:
            log.info("%s, seed %d, step %d in %s: %d windows, every group looped %d times", run.recipe, run.seed,
                     step, name, measure.precision_sequences, measure.max_loops)
            dtype = PRECISIONS[name]
            rows = geometry_in(model, val_ids, measure, measure.precision_sequences, device, dtype)
            log_geometry_curves(rows, prefix=f"{name}/")
            frames.append(pl.DataFrame(rows, schema_overrides={"k": pl.Int64}).select(
                pl.lit(name).alias("precision"), pl.lit(torch.finfo(dtype).eps).alias("eps"), pl.all()))
        table = pl.concat(frames).select(*run_columns(run, step), pl.all())
        write_parquet(args.out, table)
