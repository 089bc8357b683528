"""Stage `tradeoff`: gather every run's sweep of every strategy and its latency rounds into one table, summarise each
strategy's trade-off per run; the `exit_figures` stage draws Figure 4 and the trade-off from the table."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from twoscale.config.io import atomic_path, read_parquet, run_subdir, write_parquet
from twoscale.exits.tables import WITHIN, best_fixed_depth, best_within, full_depth, with_latency
from twoscale.pipeline.observers import tracking
from twoscale.report.tables import of_run, runs_in
from twoscale.stages.common import load

HELP = "gather the sweeps and summarise each strategy's trade-off"

log = logging.getLogger(__name__)


def gather(strategies_dir: Path, runs: list[tuple[str, int]], names: list[str]) -> pl.DataFrame:
    parts = [read_parquet(strategies_dir / run_subdir(recipe, seed) / f"{name}.parquet",
                          f"the sweep stage for {recipe}, seed {seed}, strategy {name}")
             for recipe, seed in runs for name in names]
    return pl.concat(parts, how="diagonal_relaxed")


def gather_latency(latency_dir: Path, runs: list[tuple[str, int]]) -> pl.DataFrame:
    return pl.concat([read_parquet(latency_dir / f"{run_subdir(recipe, seed)}.parquet",
                                   f"the latency stage for {recipe}, seed {seed}") for recipe, seed in runs])


BEST_POINT = ("setting", "gflops_per_token", "flop_ratio", "ms_per_token", "perplexity", "latency_cut")


def summarise(sweep: pl.DataFrame, tolerance: float = WITHIN) -> pl.DataFrame:
    """Per run and strategy: the compute span its settings reached, and its cheapest setting (FLOPs per token) whose
    perplexity is within `tolerance` of the run's full depth (best_*, the paper's reference) and of its best fixed
    depth K* (kstar_*; the same when looping longer never hurts), with its median latency."""
    rows = []
    for recipe, seed in runs_in(sweep):
        own_run = of_run(sweep, recipe, seed)
        references = {"best": full_depth(own_run), "kstar": best_fixed_depth(own_run, tolerance)}
        for name in own_run["strategy"].unique(maintain_order=True):
            own = own_run.filter(pl.col("strategy") == name)
            row = {"recipe": recipe, "seed": seed, "strategy": name, "settings": own.height,
                   "min_compute_fraction": own["compute_fraction"].min(),
                   "max_compute_fraction": own["compute_fraction"].max()}
            for prefix, reference in references.items():
                point = best_within(own_run, name, tolerance, reference) or {}
                row.update({f"{prefix}_{key}": point.get(key) for key in BEST_POINT})
            rows.append(row)
    return pl.DataFrame(rows, schema_overrides={f"{prefix}_{key}": pl.Float64 for prefix in references
                                                for key in BEST_POINT})


def run(args: argparse.Namespace) -> None:
    params = load(args)
    latency = gather_latency(args.latency_dir, params.runs())
    sweep = with_latency(gather(args.strategies_dir, params.runs(), list(params.sweep.strategies)), latency)
    summary = summarise(sweep)
    with tracking.stage_run(args.stage, {"sweep": params.sweep}):
        write_parquet(args.out_dir / "sweep.parquet", sweep)
        write_parquet(args.out_dir / "latency.parquet", latency)
        with atomic_path(args.out_dir / "summary.csv") as tmp:
            summary.write_csv(tmp)
        tracking.log_artifact(args.out_dir / "summary.csv")
        for row in summary.iter_rows(named=True):
            prefix = f"{row['recipe']}/seed_{row['seed']}/{row['strategy']}_"
            tracking.log_metrics({prefix + key: value for key, value in row.items()
                                  if key.startswith(("best_", "kstar_"))})
    log.info("trade-off of %d strategies in %d runs:\n%s", len(params.sweep.strategies), len(params.runs()),
             summary)
