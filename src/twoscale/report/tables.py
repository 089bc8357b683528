"""Checks and selections on the stacked tables that every system's figures and claims share: which training run
a row comes from, required columns, and what computed a table's numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.training.device import NUMBERS_ORIGIN

RUN_KEYS = ("recipe", "seed")  # every table after train says which training run its rows come from


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Rows as a Markdown table of these columns, floats to 3 significant digits."""
    def cell(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def require(frame: pl.DataFrame | None, name: str, columns: Sequence[str], user: str) -> pl.DataFrame:
    """The frame, if it has rows and the columns; else a one-line error naming the user (figure or claim)."""
    if frame is None or frame.height == 0:
        raise TwoscaleError(f"{user}: the {name} table is empty")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise TwoscaleError(f"{user}: the {name} table lacks column(s) {', '.join(missing)}")
    return frame


def origins(frame: pl.DataFrame, computation: str, prefix: str = "") -> list[dict[str, Any]]:
    """What computed a stacked table's numbers, one entry per run: {recipe, seed, computation, precision, machine,
    torch} from its columns `prefix` + NUMBERS_ORIGIN (several values joined by ' / '; 'not recorded' if absent)."""
    out = []
    for recipe, seed in runs_in(frame):
        own = of_run(frame, recipe, seed)
        entry: dict[str, Any] = {"recipe": recipe, "seed": seed, "computation": computation}
        for key in NUMBERS_ORIGIN:
            column = prefix + key
            entry[key] = " / ".join(own[column].unique(maintain_order=True).cast(pl.String)) \
                if column in own.columns else "not recorded"
        out.append(entry)
    return out


def training_steps(frame: pl.DataFrame) -> list[int]:
    return sorted(int(s) for s in frame["step"].unique())


def runs_in(frame: pl.DataFrame) -> list[tuple[str, int]]:
    """The (recipe, seed) pairs of a stacked table, in the order they first appear."""
    require(frame, "stacked", RUN_KEYS, "runs_in")
    return [(str(r), int(s)) for r, s in frame.select(RUN_KEYS).unique(maintain_order=True).iter_rows()]


def recipes_in(frame: pl.DataFrame) -> list[str]:
    """The recipes of a stacked table, in the order they first appear."""
    return list(dict.fromkeys(recipe for recipe, _ in runs_in(frame)))


def of_run(frame: pl.DataFrame, recipe: str, seed: int) -> pl.DataFrame:
    """The rows of one training run."""
    return frame.filter((pl.col("recipe") == recipe) & (pl.col("seed") == seed))


def finite(x: Any) -> float | None:
    """x as a float, or None where it is missing or not finite."""
    return float(x) if x is not None and math.isfinite(float(x)) else None
