"""Stage `tradeoff`: gather every strategy's sweep into one table, summarise each strategy's trade-off and draw
Figure 4 and the trade-off figure."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from twoscale import plots, tracking
from twoscale.claims import best_within
from twoscale.errors import TwoscaleError
from twoscale.io import atomic_path, write_parquet
from twoscale.params import params_hash
from twoscale.stages.common import add_params_argument, load

log = logging.getLogger("twoscale.tradeoff")

FIGURES = {
    "fig4_exit_sweep.png": plots.fig4_exit_sweep,
    "exit_tradeoff.png": plots.fig_exit_tradeoff,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--strategies-dir", type=Path, required=True, help="reads <strategy>.parquet for each")
    parser.add_argument("--out-dir", type=Path, required=True, help="writes sweep.parquet and summary.csv")
    parser.add_argument("--figures-dir", type=Path, required=True, help="writes the figures here")


def gather(strategies_dir: Path, names: list[str]) -> pl.DataFrame:
    parts = []
    for name in names:
        path = strategies_dir / f"{name}.parquet"
        try:
            parts.append(pl.read_parquet(path))
        except FileNotFoundError:
            raise TwoscaleError(f"{path}: not found (run the sweep stage for strategy {name})") from None
        except pl.exceptions.PolarsError as exc:
            raise TwoscaleError(f"{path}: not a readable table ({type(exc).__name__})") from None
    return pl.concat(parts, how="diagonal_relaxed")


def summarise(sweep: pl.DataFrame, tolerance: float = 0.01) -> pl.DataFrame:
    """Per strategy: the compute span its settings reached, and its fastest setting whose perplexity is within
    `tolerance` of full depth."""
    rows = []
    for name in sweep["strategy"].unique(maintain_order=True):
        own = sweep.filter(pl.col("strategy") == name)
        best = best_within(sweep, name, tolerance) or {}
        rows.append({
            "strategy": name,
            "settings": own.height,
            "min_compute_fraction": own["compute_fraction"].min(),
            "max_compute_fraction": own["compute_fraction"].max(),
            "best_setting": best.get("setting"),
            "best_ms_per_token": best.get("ms_per_token"),
            "best_perplexity": best.get("perplexity"),
            "best_latency_cut": best.get("latency_cut"),
        })
    return pl.DataFrame(rows, schema_overrides={k: pl.Float64 for k in ("best_setting", "best_ms_per_token",
                                                                        "best_perplexity", "best_latency_cut")})


def run(args: argparse.Namespace) -> None:
    params = load(args)
    sweep = gather(args.strategies_dir, list(params.sweep.strategies))
    summary = summarise(sweep)
    with tracking.stage_run("tradeoff", params_hash(params.sweep)):
        import mlflow

        write_parquet(args.out_dir / "sweep.parquet", sweep)
        with atomic_path(args.out_dir / "summary.csv") as tmp:
            summary.write_csv(tmp)
        mlflow.log_artifact(str(args.out_dir / "summary.csv"))
        for row in summary.iter_rows(named=True):
            mlflow.log_metrics({f"{row['strategy']}_{key}": row[key] for key in ("best_ms_per_token",
                               "best_perplexity", "best_latency_cut") if row[key] is not None})
        for filename, draw in FIGURES.items():
            path = args.figures_dir / filename
            draw(sweep, path)
            mlflow.log_artifact(str(path), artifact_path="figures")
    log.info("trade-off of %d strategies:\n%s", summary.height, summary)
