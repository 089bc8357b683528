"""Stage `latency`: real latency of every setting of every timed early-exit strategy on a run's final checkpoint
(one job per recipe and seed, alone on the machine): cached greedy generation at batch size 1 from held-out
prompts, timed in rounds, so that any two settings' timings of a round form a pair. The points the verdicts compare
(named by the run's sweep tables) are timed in `sweep.rounds` rounds, every other setting (drawn by the figure) in
the first `sweep.figure_rounds` for a seed of runtime.explain_seeds, not at all for another seed."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from twoscale.config.io import read_parquet, write_parquet
from twoscale.exits.sweep import latency_ms_per_token, timed_rounds
from twoscale.exits.tables import compared_points
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import origin_columns, run_columns
from twoscale.stages.validation import read_params
from twoscale.training.batches import held_out_prompts
from twoscale.training.device import provenance

HELP = "time every early-exit setting on the final checkpoint, in paired rounds"

log = logging.getLogger(__name__)


def sweep_tables(folder: Path, strategies: list[str]) -> pl.DataFrame:
    """The run's sweep tables of these strategies, stacked, with no latencies yet (`compared_points` reads them)."""
    tables = [read_parquet(folder / f"{name}.parquet", f"the sweep stage for strategy {name}") for name in strategies]
    return pl.concat(tables, how="diagonal_relaxed").with_columns(pl.lit(None, dtype=pl.Float64).alias("ms_per_token"))


def run(args: argparse.Namespace) -> None:
    params = read_params(args.params)  # every strategy's grid builds
    run = params.run(args.recipe, args.seed)
    sweep = params.sweep
    model, meta, val_ids, device = open_checkpoint(args, params, run, sweep.threads)
    source = provenance(device, next(model.parameters()).dtype)
    prompts = held_out_prompts(val_ids, sweep.n_prompts, sweep.prompt_tokens)
    timed = {name: strategy for name, strategy in sweep.strategies.items() if strategy.timed}
    points = [(name, strategy.spec, setting) for name, strategy in timed.items() for setting in strategy.settings]
    compared = compared_points(sweep_tables(args.strategies_dir, list(timed)))
    figure_rounds = sweep.figure_rounds if params.explains(run.seed) else 0  # the figure draws explained seeds
    rounds = [sweep.rounds if (name, float(setting)) in compared else figure_rounds for name, _, setting in points]
    log.info("timing %d settings of %d strategies (%s) on %s, seed %d, step %d: %d compared points in %d rounds "
             "(%s), the others in %d", len(points), len(timed), ", ".join(timed), run.recipe, run.seed, meta["step"],
             len(compared), sweep.rounds, ", ".join(f"{name} {setting:g}" for name, setting in sorted(compared)),
             figure_rounds)
    # the system-metrics sampler (a thread of the MLflow writer) takes a few ms of the machine every 2 s: a token's
    # time at most, which the median over a round's tokens leaves out (docs/running.md#tracking)
    with tracking.stage_run(args.stage, {"sweep": params.sweep}, run.tags, source):
        latency_ms_per_token(model, prompts[:1], 2, {"criterion": "fixed"}, 1, sweep.max_loops)  # warm-up
        rows = timed_rounds(model, prompts, sweep.new_tokens, points, sweep.max_loops, rounds,
                            progress=f"latency {run.recipe} seed {run.seed}")
        table = pl.DataFrame(rows).select(
            *run_columns(run), pl.all(), pl.lit(meta["step"]).cast(pl.Int64).alias("train_step"),
            *origin_columns(source))
        write_parquet(args.out, table)
        medians = table.group_by("strategy", "setting", maintain_order=True).agg(pl.col("ms_per_token").median())
        for index, row in enumerate(medians.iter_rows(named=True)):
            tracking.log_metrics({f"{row['strategy']}_ms_per_token": row["ms_per_token"]}, step=index)
        log.info("median ms per token over each setting's rounds:\n%s", medians)
