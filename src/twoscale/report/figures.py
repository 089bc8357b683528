"""What every figure shares: the style, atomic saving (temporary name, then rename: a failed plot leaves no file),
panel grids with one row per recipe, colours and keys by training step, and readable log axes.

Every frame is a Polars DataFrame stacked over training runs and checkpoints, with a string `recipe`, an int `seed`
and an int `step` column (the training step of the checkpoint); Polars becomes pandas only where seaborn is called.
Each figure has one row of panels (or one panel) per recipe, in the order the frame gives them. Where a figure draws
curves, every seed of a recipe is a line of its own in the same colour, so the spread over seeds shows; a figure of
one run's details shows each recipe's first seed. Empty or incomplete input raises `TwoscaleError` naming the
figure and what is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.colors import LogNorm, Normalize
from matplotlib.lines import Line2D

from twoscale.config.io import atomic_path
from twoscale.report.tables import RUN_KEYS, of_run, recipes_in, require, runs_in, training_steps

DPI = 150
STEP_CMAP = "viridis"
MAX_LEGEND_CHECKPOINTS = 10  # more checkpoints than this get a colour bar instead of a legend


def last_checkpoint(frame: pl.DataFrame) -> tuple[int, pl.DataFrame]:
    step = training_steps(frame)[-1]
    return step, frame.filter(pl.col("step") == step)


@contextlib.contextmanager
def figure_style() -> Iterator[None]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        yield


def save_figure(fig: plt.Figure, path: Path) -> None:
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI)
    finally:
        plt.close(fig)


def step_colours(steps: Sequence[int]) -> dict[int, tuple]:
    """Sequential colours by training step (log-spaced when all steps are positive), avoiding the pale end."""
    cmap = plt.get_cmap(STEP_CMAP)
    norm = step_norm(steps)
    return {s: cmap(0.85 * float(norm(s))) for s in steps}


def step_norm(steps: Sequence[int]) -> Normalize:
    lo, hi = min(steps), max(steps)
    if lo == hi:
        return Normalize(lo, lo + 1)  # one checkpoint: the dark end of the colour map
    return LogNorm(lo, hi) if lo > 0 else Normalize(lo, hi)


def checkpoint_key(fig: plt.Figure, axes, colours: dict[int, tuple]) -> None:
    """A legend of checkpoints, or a colour bar when there are many."""
    steps = sorted(colours)
    if len(steps) <= MAX_LEGEND_CHECKPOINTS:
        handles = [Line2D([], [], color=colours[s], lw=2, label=f"{s:,}") for s in steps]
        fig.legend(handles=handles, title="training step", loc="outside right upper", frameon=False)
    else:
        cmap = plt.get_cmap(STEP_CMAP)
        sliced = matplotlib.colors.ListedColormap(cmap(np.linspace(0, 0.85, 256)))
        mappable = plt.cm.ScalarMappable(norm=step_norm(steps), cmap=sliced)
        fig.colorbar(mappable, ax=axes, label="training step", shrink=0.9)


STEP_TICKS = 8  # at most this many checkpoints: each is a labelled tick of the training-step axis


def step_axis(ax: plt.Axes, steps: Sequence[int]) -> None:
    if min(steps) > 0:
        ax.set_xscale("log")
        plain_log_ticks(ax, "x")
        if len(steps) <= STEP_TICKS:  # a log axis of 25-600 would label 100 alone
            ax.set_xticks(list(steps), [f"{step:,}" for step in steps])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("training step (optimizer updates, log scale)")
    else:
        positive = [s for s in steps if s > 0]
        ax.set_xscale("symlog", linthresh=min(positive) if positive else 1)
        ax.set_xlabel("training step (optimizer updates, symmetric-log scale)")
    if len(steps) == 1:
        ax.set_xlim(steps[0] / 2 if steps[0] > 0 else -1, steps[0] * 2 if steps[0] > 0 else 1)


def panel_grid(rows: int, columns: int, width: float = 4.0, height: float = 3.4, sharey: bool | str = "row",
          sharex: bool | str = False):
    """A figure of rows x columns panels (one row per recipe) and its axes as a list of rows."""
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns + 1.8, height * rows + 0.9), sharey=sharey,
                             sharex=sharex, squeeze=False, layout="constrained")
    return fig, [list(row) for row in axes]


def figure_recipes(frame: pl.DataFrame | None, table: str, figure: str) -> list[str]:
    """The frame's recipes in order; an empty frame or one without run columns is a one-line error."""
    return recipes_in(require(frame, table, RUN_KEYS, figure))


def lead_runs(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of each recipe's first seed."""
    first: dict[str, int] = {}
    for recipe, seed in runs_in(frame):
        first.setdefault(recipe, seed)
    return pl.concat([of_run(frame, recipe, seed) for recipe, seed in first.items()])


def seed_note(frame: pl.DataFrame, recipe: str) -> str:
    seeds = [seed for r, seed in runs_in(frame) if r == recipe]
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds, one line each"


def plain_log_ticks(ax: plt.Axes, axis: str = "y") -> None:
    """Log axis labelled 0.5, 1, 2 (or 1,000), not 5×10⁻¹; minor ticks 2 and 5 labelled on short ranges."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    limits = ax.get_ylim if axis == "y" else ax.get_xlim

    def major(value: float, _pos: int) -> str:
        return f"{value:,.0f}" if value >= 1000 else f"{value:g}"

    def minor(value: float, _pos: int) -> str:
        lo, hi = limits()
        if lo <= 0 or hi / lo > 30:
            return ""
        return major(value, _pos) if f"{value:.0e}"[0] in "25" else ""

    target.set_major_formatter(matplotlib.ticker.FuncFormatter(major))
    target.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def log_safe(values: np.ndarray) -> np.ndarray:
    """NaN where a value cannot go on a log axis."""
    values = np.asarray(values, dtype=float)
    return np.where(values > 0, values, np.nan)
