"""For the scripts under scripts/ that read one run's tables of a stage from a folder named on their command line.
A module of its own that no stage imports, so that it is no stage's source: an edit here stales no stage."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import polars as pl


def run_tables(kind: str) -> Callable[[str], pl.DataFrame]:
    """An argparse type for a script that reads a run's tables of one stage (`kind`: spectrum, precision) from the
    folder named on its command line: every table (*.parquet) under it, stacked; none there, or one unreadable, is
    a usage error."""
    def read(path: Path) -> pl.DataFrame:
        try:
            return pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as error:
            raise argparse.ArgumentTypeError(f"{path}: not a readable table ({str(error).splitlines()[0]})") from None

    def stacked(folder: str) -> pl.DataFrame:
        tables = sorted(Path(folder).rglob("*.parquet"))
        if not tables:
            raise argparse.ArgumentTypeError(f"{folder}: no {kind} tables (*.parquet) there")
        return pl.concat([read(path) for path in tables], how="vertical_relaxed")
    return stacked
