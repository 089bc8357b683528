"""Stage `lens`: a logit lens across loop steps at one checkpoint (docs/methods.md#a-logit-lens-across-loop-steps).
Every group looped measure.max_loops times on the first lens.n_windows held-out windows; each iterate of each group
decoded as the early-exit rules decode it (the head alone, or the rest of the model once), against the full-depth
prediction: top-1 agreement and KL per decode, group and loop step."""

from __future__ import annotations

import argparse
import logging

import polars as pl

from twoscale.config.io import write_parquet
from twoscale.geometry.lens import lens_means
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import load_run, origin_columns, run_columns
from twoscale.training.batches import held_out_batches
from twoscale.training.device import provenance

HELP = "decode every loop step of one checkpoint (logit lens): top-1 agreement and KL to the full-depth prediction"

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    lens, loops = params.lens, params.measure.max_loops
    model, meta, val_ids, device = open_checkpoint(args, params, run, lens.threads)
    step = meta["step"]
    model.eval()
    batches = [x.to(device) for x, _ in held_out_batches(val_ids, lens.n_windows, lens.batch_size,
                                                           model.config.block_size)]
    tags = {**run.tags, "checkpoint": f"step_{step}"}
    with tracking.stage_run(args.stage, {"lens": lens, "measure": params.measure}, tags):
        log.info("%s, seed %d, step %d: %d windows, every group looped %d times, each step decoded", run.recipe,
                 run.seed, step, lens.n_windows, loops)
        source = provenance(device, next(model.parameters()).dtype)
        table = pl.DataFrame(lens_means(model, batches, loops)).select(
            *run_columns(run, step), pl.all(), *origin_columns(source))
        write_parquet(args.out, table)
        tracking.log_curves([{"k": row["k"], **{f"{column}_{row['decode']}_group{row['group']}": row[column]
                                                for column in ("top1_agreement", "mean_kl")}}
                             for row in table.iter_rows(named=True)], step_key="k")
