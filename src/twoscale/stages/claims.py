"""Stage `claims`: the paper's findings beside our numbers, with a verdict for each (Markdown and JSON)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from twoscale import tracking
from twoscale.claims import claims_table, to_json, to_markdown
from twoscale.io import read_parquet, write_text
from twoscale.params import params_hash
from twoscale.stages.common import add_params_argument, load
from twoscale.tables import MEASUREMENT_TABLES

log = logging.getLogger("twoscale.claims")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--geometry-dir", type=Path, required=True, help="reads the tables across training")
    parser.add_argument("--sweep", type=Path, required=True, help="the early-exit sweep table of every strategy")
    parser.add_argument("--out-dir", type=Path, required=True, help="writes claims.md and claims.json")


def read_tables(directory: Path, sweep: Path) -> dict[str, pl.DataFrame]:
    tables = {name: read_parquet(directory / f"{name}.parquet", "the geometry stage")
              for name in MEASUREMENT_TABLES}
    return tables | {"sweep": read_parquet(sweep, "the tradeoff stage")}


def run(args: argparse.Namespace) -> None:
    params = load(args)
    rows = claims_table(read_tables(args.geometry_dir, args.sweep))
    with tracking.stage_run("claims", params_hash(params.measure, params.sweep)):
        import mlflow

        write_text(args.out_dir / "claims.md", to_markdown(rows))
        write_text(args.out_dir / "claims.json", to_json(rows))
        mlflow.log_artifact(str(args.out_dir / "claims.md"))
        mlflow.log_artifact(str(args.out_dir / "claims.json"))
        mlflow.set_tags({f"verdict_{r['claim']}": r["verdict"] for r in rows})
    for row in rows:
        log.info("%s: %s (%s)", row["claim"], row["verdict"], row["measured"])
