"""Stage `sweep`: one early-exit strategy over its settings on the final checkpoint (one job per strategy): quality,
loop counts and cost per token of teacher-forced cached decoding, and every token's exit step per group (the depth
table). The `latency` stage times the same settings."""

from __future__ import annotations

import argparse
import logging

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import write_parquet
from twoscale.config.params import Params
from twoscale.exits.sweep import sweep_settings, swept_key
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import origin_columns, run_columns
from twoscale.stages.validation import read_params
from twoscale.training.device import provenance

HELP = "sweep one early-exit strategy over its settings on the final checkpoint"

log = logging.getLogger(__name__)


def strategy_of(params: Params, name: str):
    try:
        return params.sweep.strategies[name]
    except KeyError:
        known = ", ".join(params.sweep.strategies)
        raise TwoscaleError(f"--strategy {name!r} is not under sweep.strategies (known: {known})") from None


def run(args: argparse.Namespace) -> None:
    params = read_params(args.params)  # every strategy's grid builds
    run = params.run(args.recipe, args.seed)
    sweep = params.sweep
    strategy = strategy_of(params, args.strategy)
    model, meta, val_ids, device = open_checkpoint(args, params, run, sweep.threads)
    criterion = str(strategy.spec["criterion"])
    log.info("sweeping %s (%s) over %d settings on %s, seed %d, step %d", args.strategy, strategy.spec,
             len(strategy.settings), run.recipe, run.seed, meta["step"])
    source = provenance(device, next(model.parameters()).dtype)
    with tracking.stage_run(args.stage, {"sweep": params.sweep}, {**run.tags, "strategy": args.strategy}, source):
        swept = sweep_settings(model, val_ids, strategy.spec, strategy.settings, sweep.max_loops, sweep.n_windows,
                               sweep.batch_size, device, sweep.cache_mb, progress=f"sweep {run.recipe} {args.strategy}")
        for index, row in enumerate(swept.points):
            tracking.log_metrics(row, step=index)
            log.info("%s = %g: cross-entropy %.4f, mean loops %.2f, %.3f GFLOPs/token", swept_key(criterion),
                     row["setting"], row["cross_entropy"], row["mean_loops"], row["gflops_per_token"])
        keys = (*run_columns(run), pl.lit(args.strategy).alias("strategy"))
        table = pl.DataFrame(swept.points).select(
            *keys,
            pl.lit(criterion).alias("criterion"),
            pl.lit(swept_key(criterion)).alias("swept"),
            pl.all(),
            pl.lit(sweep.max_loops).cast(pl.Int64).alias("max_loops"),
            pl.lit(meta["step"]).cast(pl.Int64).alias("train_step"),
            *origin_columns(source),
        )
        write_parquet(args.out, table)
        write_parquet(args.depth_out, swept.depth.select(*keys, pl.all()))
