"""Stage `spectrum`: one checkpoint's loop-map spectrum (docs/methods.md#the-loop-maps-spectrum). For every token
of a fixed sample (the first spectrum.positions positions of the first spectrum.n_windows held-out windows) and
every looped group, the leading eigenvalues of the Jacobian of one loop step with respect to the token's own state
at its last iterate, every group looped measure.max_loops times, in float64: exact up to spectrum.exact_max_width,
by Arnoldi above it. Beside them, what the token's trajectory measured over the late loop steps and the Ritz
values of those steps, so that C1 and C3 can hold the predictions against the measurements."""

from __future__ import annotations

import argparse
import copy
import logging

import numpy as np
import polars as pl

from twoscale.config.io import write_parquet
from twoscale.geometry.measurement import MEASURE_DTYPE
from twoscale.geometry.spectrum import token_spectra
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import load_run, origin_columns, run_columns
from twoscale.training.batches import held_out_batches
from twoscale.training.device import provenance

HELP = "compute the loop map's leading eigenvalues per token at one checkpoint, beside the measured late steps"

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    spectrum, loops = params.spectrum, params.measure.max_loops
    model, meta, val_ids, device = open_checkpoint(args, params, run, spectrum.threads)
    step, width = meta["step"], model.config.n_embd
    arnoldi = width > spectrum.exact_max_width
    (idx, _), = held_out_batches(val_ids, spectrum.n_windows, spectrum.n_windows, model.config.block_size)
    idx = idx[:, : spectrum.positions].to(device)  # causal: later positions do not reach the sampled ones
    with tracking.stage_run(args.stage, {"spectrum": spectrum, "measure": params.measure},
                            {**run.tags, "checkpoint": f"step_{step}"}):
        log.info("%s, seed %d, step %d: %d tokens per group, %s Jacobian of width %d, every group looped %d times",
                 run.recipe, run.seed, step, idx.numel(), "Arnoldi on the" if arnoldi else "the exact", width, loops)
        rows = token_spectra(copy.deepcopy(model).to(MEASURE_DTYPE).eval(), idx, loops, list(range(idx.shape[1])),
                             spectrum.n_eigenvalues, arnoldi, progress=f"spectrum {run.recipe} step {step}",
                             workers=spectrum.threads)
        for row in rows:
            values = np.asarray(row.pop("eigenvalues"))
            row["eigenvalues_real"], row["eigenvalues_imag"] = values.real.tolist(), values.imag.tolist()
        source = provenance(device, MEASURE_DTYPE)
        table = pl.DataFrame(rows).select(
            *run_columns(run, step), pl.lit(loops).alias("loops"),
            pl.lit("arnoldi" if arnoldi else "exact").alias("method"), pl.all(), *origin_columns(source))
        write_parquet(args.out, table)
        tracking.log_metrics({f"{column}_median_group{group}": value for group, column, value in table.group_by(
            "group").agg(pl.col("spectral_radius", "dominant_angle_deg").median()).unpivot(
            index="group", variable_name="column").iter_rows()})
