"""The geometry claims (S, C1-C5) of two runs side by side, read by the claims' own functions from each run's
geometry tables: which verdicts differ, and their headline numbers.

    python scripts/compare_geometry_verdicts.py results/geometry OTHER_CHECKOUT/results/geometry
"""

import argparse
from pathlib import Path

import polars as pl

from twoscale.claims.table import claims_table
from twoscale.geometry.tables import MEASUREMENT_TABLES
from twoscale.report.tables import of_run, runs_in


def verdicts(directory: Path) -> dict[tuple[str, int, str], tuple[str, str, dict]]:
    """(recipe, seed, claim) -> (training precision, verdict, headline numbers), for every run in the tables."""
    tables = {name: pl.read_parquet(directory / f"{name}.parquet") for name in MEASUREMENT_TABLES}
    found = {}
    for recipe, seed in runs_in(tables["geometry"]):
        precision = of_run(tables["geometry"], recipe, seed)["train_precision"][0]
        for row in claims_table({name: of_run(frame, recipe, seed) for name, frame in tables.items()}):
            found[(recipe, seed, row["claim"])] = (precision, row["verdict"], row["headline"])
    return found


def number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def compare(first: Path, second: Path) -> None:
    a, b = verdicts(first), verdicts(second)
    for key in [key for key in a if key in b]:
        (precision_a, verdict_a, headline_a), (precision_b, verdict_b, headline_b) = a[key], b[key]
        same = "SAME" if verdict_a == verdict_b else "DIFFERS"
        print(f"## {key[0]} seed {key[1]} {key[2]}: {precision_a} {verdict_a} | {precision_b} {verdict_b}  [{same}]")
        for name, value in headline_a.items():
            print(f"   {name}: {number(value)} | {number(headline_b.get(name))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="a run's geometry folder (results/geometry)")
    parser.add_argument("second", type=Path, help="another run's geometry folder")
    args = parser.parse_args()
    for folder in (args.first, args.second):
        if not folder.is_dir():
            parser.error(f"{folder}: no such folder")
    compare(args.first, args.second)


if __name__ == "__main__":
    main()
