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
import itertools
import logging
import textwrap
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
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from twoscale.config.io import atomic_path
from twoscale.report.tables import RUN_KEYS, of_run, recipes_in, require, runs_in, training_steps

log = logging.getLogger(__name__)

DPI = 150
STEP_CMAP = "viridis"
MAX_LEGEND_CHECKPOINTS = 10  # more checkpoints than this get a colour bar instead of a legend
LEGEND_END = 0.92  # the colour map's share a legend's checkpoints span: yellow-green, short of the palest yellow


def last_checkpoint(frame: pl.DataFrame) -> tuple[int, pl.DataFrame]:
    step = training_steps(frame)[-1]
    return step, frame.filter(pl.col("step") == step)


@contextlib.contextmanager
def figure_style() -> Iterator[None]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        yield


UNREADABLE = "unreadable text in"  # how a figure's text defects start in a job's log


def save_figure(fig: plt.Figure, path: Path) -> None:
    """Save the figure (at once, or not at all), then warn of each text in it that cannot be read (`text_defects`)."""
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI)
        for defect in text_defects(fig):
            log.warning("%s %s: %s", UNREADABLE, path.name, defect)
    finally:
        plt.close(fig)


def drawn_texts(fig: plt.Figure) -> list[tuple[Text, plt.Axes | None]]:
    """Every text of the figure a reader sees, with the axes whose data area must hold it (None: the figure's):
    titles, axis labels, the labels of ticks inside the view, an axis's offset, legends, texts placed on axes
    (which must stay in them) and on the figure."""
    found: list[tuple[Text, plt.Axes | None]] = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        found += [(title, None) for title in (ax.title, ax._left_title, ax._right_title)]
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            found += [(axis.label, None), (axis.get_offset_text(), None)]
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if tick.get_visible() and low <= tick.get_loc() <= high:
                    found += [(label, None) for label in (tick.label1, tick.label2) if label.get_visible()]
        found += [(text, ax) for text in ax.texts]
        if ax.get_legend() is not None:
            found += [(text, None) for text in (ax.get_legend().get_title(), *ax.get_legend().get_texts())]
    for legend in fig.legends:
        found += [(text, None) for text in (legend.get_title(), *legend.get_texts())]
    found += [(text, None) for text in fig.texts]  # the suptitle among them
    return [(text, ax) for text, ax in found if text.get_visible() and text.get_text().strip()]


def text_defects(fig: plt.Figure, slack: float = 1.0) -> list[str]:
    """The texts a reader cannot read whole, each in a line: one that leaves the figure, one placed on an axes that
    leaves its data area, two that overlap (boxes as drawn, each `slack` pixels smaller on every side)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(text, ax, text.get_window_extent(renderer)) for text, ax in drawn_texts(fig)]

    def shrunk(box: Bbox) -> Bbox:
        return Bbox.from_extents(box.x0 + slack, box.y0 + slack, box.x1 - slack, box.y1 - slack)

    def within(box: Bbox, frame: Bbox) -> bool:
        inner = shrunk(box)
        return frame.x0 <= inner.x0 and inner.x1 <= frame.x1 and frame.y0 <= inner.y0 and inner.y1 <= frame.y1

    defects = [f"{text.get_text()!r} leaves the figure" for text, _, box in boxes if not within(box, fig.bbox)]
    defects += [f"{text.get_text()!r} leaves its axes" for text, ax, box in boxes
                if ax is not None and not within(box, ax.bbox)]
    defects += [f"{one.get_text()!r} overlaps {other.get_text()!r}"
                for (one, _, first), (other, _, second) in itertools.combinations(boxes, 2)
                if shrunk(first).overlaps(shrunk(second))]
    return defects


def step_colours(steps: Sequence[int]) -> dict[int, tuple]:
    """Sequential colours by training step, avoiding the pale end: evenly spaced in order where a legend names each
    checkpoint (on a log scale the late ones, 400 and 600 of 25-600, would be two near-equal greens), on the colour
    bar's scale (log-spaced when all steps are positive) where there are too many to name."""
    cmap = plt.get_cmap(STEP_CMAP)
    ordered = sorted(set(steps))
    if len(ordered) <= MAX_LEGEND_CHECKPOINTS:
        return {s: cmap(LEGEND_END * i / max(len(ordered) - 1, 1)) for i, s in enumerate(ordered)}
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
        # beside the panels, halfway down: clear of a title across the top
        fig.legend(handles=handles, title="training step", loc="outside right center", frameon=False)
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


SMALLEST_PLAIN = 1e-3  # a log axis reaching below this is labelled in powers of ten throughout


def plain_log_ticks(ax: plt.Axes, axis: str = "y") -> None:
    """Log axis labelled 0.5, 1, 2 (or 1,000), not 5×10⁻¹; minor ticks 2 and 5 labelled on short ranges. An axis
    reaching below 0.001 is labelled 10⁻⁶ ... 10² throughout, never 1e-06 beside 100."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    limits = ax.get_ylim if axis == "y" else ax.get_xlim

    def major(value: float, _pos: int) -> str:
        if 0 < min(limits()) < SMALLEST_PLAIN:
            return f"$10^{{{round(np.log10(value))}}}$"
        return f"{value:,.0f}" if value >= 1000 else f"{value:g}"

    def minor(value: float, _pos: int) -> str:
        lo, hi = limits()
        if lo <= 0 or hi / lo > 30:
            return ""
        return major(value, _pos) if f"{value:.0e}"[0] in "25" else ""

    target.set_major_formatter(matplotlib.ticker.FuncFormatter(major))
    target.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def suptitle(fig: plt.Figure, text: str, fontsize: float | None = None) -> None:
    """The figure's title, each of its lines wrapped to the figure's width (a long title on a narrow figure would
    run off both sides)."""
    size = fontsize or matplotlib.rcParams["figure.titlesize"]
    points = matplotlib.font_manager.FontProperties(size=size).get_size_in_points()
    columns = max(20, int(fig.get_figwidth() * 72 / (0.55 * points)))  # a character is about 0.55 em wide
    fig.suptitle("\n".join(textwrap.fill(line, columns) for line in text.split("\n")), fontsize=size)


def readable_point_labels(ax: plt.Axes, labels: Sequence[Text]) -> None:
    """Hide the labels of points (in the order given, the first kept) that would leave the panel or cover a label
    already kept, as the figure is laid out now: where points crowd, some go unlabelled rather than unreadable."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    kept: list[Bbox] = []
    for label in labels:
        box = label.get_window_extent(renderer)
        inside = ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1 and ax.bbox.y0 <= box.y0 and box.y1 <= ax.bbox.y1
        if not inside or any(box.overlaps(other) for other in kept):
            label.set_visible(False)
        else:
            kept.append(box)


def log_safe(values: np.ndarray) -> np.ndarray:
    """NaN where a value cannot go on a log axis."""
    values = np.asarray(values, dtype=float)
    return np.where(values > 0, values, np.nan)
