"""The paper's figures (docs/methods.md#loop-geometry) from the geometry stage's frames, as PNGs readable
without the code.

One function per figure, `fig_x(frames..., path)`. Every frame is a Polars DataFrame stacked over training runs
and checkpoints, with a string `recipe`, an int `seed` and an int `step` column (the training step of the
checkpoint); Polars becomes pandas only where seaborn is called. Each figure has one row of panels (or one panel)
per recipe, in the order the frame gives them. Where a figure draws curves, every seed of a recipe is a line of
its own in the same colour, so the spread over seeds shows; a figure of one run's details (Fig. 1, the depth
similarity, the percentile bands) shows each recipe's first seed. A figure is written atomically (temporary name,
then rename), so a failed plot leaves no file.
Empty or incomplete input raises `TwoscaleError` naming the figure and what is missing.

Units: states, steps and accelerations are L2 norms in the residual stream's own units (the model's hidden
width; no normalisation unless the name says "relative"); cosines and ratios are unitless; loss is in
nats/token.
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
from matplotlib.patches import Patch

from twoscale.pipeline.errors import TwoscaleError
from twoscale.report.tables import (RUN_KEYS, dlr_loops, full_depth_rows, metric_rows, of_run, recipes_in, require,
                                    runs_in, training_steps)
from twoscale.report.thresholds import C4_MIN_DLR
from twoscale.pipeline.io import atomic_path

DPI = 150
PAPER_COSINE_BAND = (0.5, 0.65)  # docs/claims.md#c3
STEP_CMAP = "viridis"
MAX_LEGEND_CHECKPOINTS = 10  # more checkpoints than this get a colour bar instead of a legend

STEP_NORM = r"$\|\Delta^{(k)}\|_2$"
ACCEL = r"$\|\Delta^{(k)} - \Delta^{(k-1)}\|_2$"
SIZE_DIFF = r"$|\,\|\Delta^{(k)}\| - \|\Delta^{(k-1)}\|\,|$"
COSINE = r"$\cos(\Delta^{(k)}, \Delta^{(k-1)})$"
LOOP_AXIS = "loop step k (applications of the group)"
STATE_LOOP_AXIS = "loop step k (0 = the group input)"
RESIDUAL_UNITS = "residual-stream units"


# --- shared helpers -----------------------------------------------------------------------------------------


def _last(frame: pl.DataFrame) -> tuple[int, pl.DataFrame]:
    step = training_steps(frame)[-1]
    return step, frame.filter(pl.col("step") == step)


@contextlib.contextmanager
def _style() -> Iterator[None]:
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        yield


def _save(fig: plt.Figure, path: Path) -> None:
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI)
    finally:
        plt.close(fig)


def _step_colours(steps: Sequence[int]) -> dict[int, tuple]:
    """Sequential colours by training step (log-spaced when all steps are positive), avoiding the pale end."""
    cmap = plt.get_cmap(STEP_CMAP)
    norm = _step_norm(steps)
    return {s: cmap(0.85 * float(norm(s))) for s in steps}


def _step_norm(steps: Sequence[int]) -> Normalize:
    lo, hi = min(steps), max(steps)
    if lo == hi:
        return Normalize(lo, lo + 1)  # one checkpoint: the dark end of the colour map
    return LogNorm(lo, hi) if lo > 0 else Normalize(lo, hi)


def _checkpoint_key(fig: plt.Figure, axes, colours: dict[int, tuple]) -> None:
    """A legend of checkpoints, or a colour bar when there are many."""
    steps = sorted(colours)
    if len(steps) <= MAX_LEGEND_CHECKPOINTS:
        handles = [Line2D([], [], color=colours[s], lw=2, label=f"{s:,}") for s in steps]
        fig.legend(handles=handles, title="training step", loc="outside right upper", frameon=False)
    else:
        cmap = plt.get_cmap(STEP_CMAP)
        sliced = matplotlib.colors.ListedColormap(cmap(np.linspace(0, 0.85, 256)))
        mappable = plt.cm.ScalarMappable(norm=_step_norm(steps), cmap=sliced)
        fig.colorbar(mappable, ax=axes, label="training step", shrink=0.9)


def _step_axis(ax: plt.Axes, steps: Sequence[int]) -> None:
    if min(steps) > 0:
        ax.set_xscale("log")
        _plain_log_ticks(ax, "x")
        ax.set_xlabel("training step (optimizer updates, log scale)")
    else:
        positive = [s for s in steps if s > 0]
        ax.set_xscale("symlog", linthresh=min(positive) if positive else 1)
        ax.set_xlabel("training step (optimizer updates, symmetric-log scale)")
    if len(steps) == 1:
        ax.set_xlim(steps[0] / 2 if steps[0] > 0 else -1, steps[0] * 2 if steps[0] > 0 else 1)


def _grid(rows: int, columns: int, width: float = 4.0, height: float = 3.4, sharey: bool | str = "row",
          sharex: bool | str = False):
    """A figure of rows x columns panels (one row per recipe) and its axes as a list of rows."""
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns + 1.8, height * rows + 0.9), sharey=sharey,
                             sharex=sharex, squeeze=False, layout="constrained")
    return fig, [list(row) for row in axes]


def _recipes(frame: pl.DataFrame | None, table: str, figure: str) -> list[str]:
    """The frame's recipes in order; an empty frame or one without run columns is a one-line error."""
    return recipes_in(require(frame, table, RUN_KEYS, figure))


def _lead_runs(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of each recipe's first seed."""
    first: dict[str, int] = {}
    for recipe, seed in runs_in(frame):
        first.setdefault(recipe, seed)
    return pl.concat([of_run(frame, recipe, seed) for recipe, seed in first.items()])


def _seed_note(frame: pl.DataFrame, recipe: str) -> str:
    seeds = [seed for r, seed in runs_in(frame) if r == recipe]
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds, one line each"


def _plain_log_ticks(ax: plt.Axes, axis: str = "y") -> None:
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


def _positive(values: np.ndarray) -> np.ndarray:
    """NaN where a value cannot go on a log axis."""
    values = np.asarray(values, dtype=float)
    return np.where(values > 0, values, np.nan)


# --- Fig. 1: the trajectory of one token --------------------------------------------------------------------


def fig1_trajectory(trajectory: pl.DataFrame, path: Path) -> None:
    """2-D PCA path of one token over all loops of all groups: first and last checkpoint side by side, one row
    per recipe (its first seed)."""
    name = "fig1_trajectory"
    recipes = _recipes(trajectory, "trajectory", name)
    require(trajectory, "trajectory", ("step", "point", "group", "k", "pc1", "pc2", "explained_pc1",
                                     "explained_pc2"), name)
    lead = _lead_runs(trajectory)
    steps = training_steps(lead)
    shown = sorted({steps[0], steps[-1]})
    groups = sorted(int(g) for g in lead["group"].unique())
    palette = dict(zip(groups, sns.color_palette("deep", len(groups)), strict=True))
    with _style():
        fig, axes = _grid(len(recipes), len(shown), width=5.6, height=4.6, sharey=False)
        for recipe, row in zip(recipes, axes, strict=True):
            own = lead.filter(pl.col("recipe") == recipe)
            for ax, step in zip(row, shown, strict=True):
                frame = own.filter(pl.col("step") == step).sort("point")
                if frame.height == 0:
                    ax.set_axis_off()
                    continue
                _draw_token_path(ax, frame, groups, palette)
                ks = frame.group_by("group").agg(pl.col("k").max())["k"]
                ax.set_title(f"{recipe} (seed {frame['seed'][0]}), training step {step:,}\n"
                             f"up to {int(ks.max())} loops per group")
        handles = [Line2D([], [], color=palette[g], marker="o", ms=5, lw=1, label=f"group {g}")
                   for g in groups]
        handles += [
            Line2D([], [], ls="none", marker="s", ms=8, mfc="white", mec="black",
                   label=r"group input $x^{(0)}$"),
            Line2D([], [], ls="none", marker="X", ms=8, mfc="white", mec="black",
                   label=r"last loop $x^{(K)}$"),
            Line2D([], [], ls="--", color="0.45", label="between groups (single-pass layers)"),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=3 if len(shown) == 1 else 6,
                   frameon=False)
        which = "first and last checkpoint" if len(shown) > 1 else "the only checkpoint"
        fig.suptitle("Fig. 1 — one token's latent trajectory over every loop of every group\n"
                     f"(2-D PCA fitted per checkpoint; {which}; one row per recipe)")
        _save(fig, path)


def _draw_token_path(ax: plt.Axes, frame: pl.DataFrame, groups: Sequence[int], palette: dict) -> None:
    pdf = frame.to_pandas()
    previous_end = None
    for g in groups:
        pts = pdf[pdf["group"] == g].sort_values("k")
        if pts.empty:
            continue
        x, y = pts["pc1"].to_numpy(), pts["pc2"].to_numpy()
        if previous_end is not None:
            ax.plot([previous_end[0], x[0]], [previous_end[1], y[0]], ls="--", color="0.45", lw=1.2, zorder=1)
        ax.plot(x, y, "-", color=palette[g], lw=1.0, alpha=0.8, zorder=2)
        ax.scatter(x[0], y[0], marker="s", s=90, color=palette[g], edgecolor="black", lw=1.2, zorder=4)
        ax.scatter(x[-1], y[-1], marker="X", s=90, color=palette[g], edgecolor="black", lw=0.8, zorder=4)
        previous_end = (x[-1], y[-1])
    sns.scatterplot(data=pdf, x="pc1", y="pc2", hue="group", palette=palette, s=16, ax=ax, legend=False,
                    zorder=3, edgecolor="none")
    ev1, ev2 = float(frame["explained_pc1"][0]), float(frame["explained_pc2"][0])
    ax.set_xlabel(f"PC1 ({ev1:.0%} of variance), {RESIDUAL_UNITS}")
    ax.set_ylabel(f"PC2 ({ev2:.0%} of variance), {RESIDUAL_UNITS}")


# --- Fig. 2: drift-to-loop ratio ----------------------------------------------------------------------------


def fig2_drift_to_loop(geometry: pl.DataFrame, path: Path) -> None:
    """Top row: the median drift-to-loop ratio DLR_K at each hand-off vs training step, K = `dlr_loops` (the K
    that C4 reads), one panel per recipe, one line per seed, with the 10th-90th percentile band over tokens.
    Bottom row: the median DLR_K against K (the loop steps averaged in its denominator) at the last checkpoint."""
    name = "fig2_drift_to_loop"
    recipes = _recipes(geometry, "geometry", name)
    every_k = metric_rows(geometry, "drift_to_loop_ratio", name).sort("recipe", "seed", "group", "step", "k")
    loops = dlr_loops(geometry)
    rows = every_k.filter(pl.col("k") == loops)
    steps = training_steps(rows)
    handoffs = sorted(int(g) for g in rows["group"].unique())
    labels = {g: f"group {g} → {g + 1}" for g in handoffs}
    palette = dict(zip(labels.values(), sns.color_palette("deep", len(handoffs)), strict=True))

    def named(frame: pl.DataFrame):
        return frame.with_columns(pl.col("group").replace_strict(labels, return_dtype=pl.String)
                                  .alias("hand-off")).to_pandas()

    pdf, by_k = named(rows), named(every_k.filter(pl.col("step") == steps[-1]))
    with _style():
        fig, axes = _grid(2, len(recipes), width=6.2, height=4.2, sharey=True)
        for ax, recipe in zip(axes[0], recipes, strict=True):
            own = pdf[pdf["recipe"] == recipe]
            for (label, _), part in own.groupby(["hand-off", "seed"]):
                if len(steps) > 1:
                    ax.fill_between(part["step"], part["q10"], part["q90"], color=palette[label], alpha=0.15,
                                    lw=0)
                else:  # a band needs two checkpoints: show the spread as an error bar
                    ax.errorbar(part["step"], part["median"], yerr=[part["median"] - part["q10"],
                                                                    part["q90"] - part["median"]],
                                fmt="none", ecolor=palette[label], alpha=0.5, lw=6)
            sns.lineplot(data=own, x="step", y="median", hue="hand-off", units="seed", palette=palette,
                         marker="o", ax=ax, estimator=None, legend=False)
            _step_axis(ax, steps)
            ax.set_title(f"{recipe} ({_seed_note(rows, recipe)}): DLR_{loops} over training")
        for ax, recipe in zip(axes[1], recipes, strict=True):
            own = by_k[by_k["recipe"] == recipe]
            for (label, _), part in own.groupby(["hand-off", "seed"]):
                ax.fill_between(part["k"], part["q10"], part["q90"], color=palette[label], alpha=0.15, lw=0)
            sns.lineplot(data=own, x="k", y="median", hue="hand-off", units="seed", palette=palette, ax=ax,
                         estimator=None, legend=False)
            ax.axvline(loops, color="0.4", lw=1, ls="--")
            ax.set_xscale("log")
            _plain_log_ticks(ax, "x")
            ax.set_xlabel("K: loop steps of the group averaged in the denominator (log scale)")
            ax.set_title(f"{recipe}: DLR_K against K, step {steps[-1]}")
        for ax in (a for row in axes for a in row):
            ax.axhline(1.0, color="black", lw=1.2)
            ax.axhline(C4_MIN_DLR, color="black", lw=1, ls=":")
            ax.set_yscale("log")
            _plain_log_ticks(ax)
        every = every_k.to_pandas()
        low = float(np.nanmin(_positive(every["q10"].to_numpy()))) if every["q10"].notna().any() else 1.0
        high = float(np.nanmax(every["q90"].to_numpy())) if every["q90"].notna().any() else 10.0
        axes[0][0].set_ylim(min(0.7, low * 0.8), max(C4_MIN_DLR * 1.5, high * 1.3))
        for row in axes:
            row[0].set_ylabel("drift-to-loop ratio DLR_K (log scale)\n‖jump to next group‖ / mean of first K steps")
        handles = [Line2D([], [], color=colour, marker="o", label=label) for label, colour in palette.items()]
        handles += [Line2D([], [], color="black", lw=1.2, label="DLR = 1 (jump = one loop step)"),
                    Line2D([], [], color="black", lw=1, ls=":", label=f"DLR = {C4_MIN_DLR:g} ('≫ 1' in C4)"),
                    Line2D([], [], color="0.4", lw=1, ls="--", label=f"K = {loops}, read by C4 and C5"),
                    Patch(color="0.6", alpha=0.35, label="10th–90th percentile over tokens")]
        fig.legend(handles=handles, loc="outside right upper", title="median over tokens", frameon=False)
        fig.suptitle("Fig. 2 — drift-to-loop ratio at each hand-off between looped groups, per recipe")
        _save(fig, path)


# --- Fig. 3a / 3b: step size and consecutive-step cosine vs k -----------------------------------------------


def _per_group_curves(geometry: pl.DataFrame, metric: str, figure: str):
    recipes = _recipes(geometry, "geometry", figure)
    rows = metric_rows(geometry, metric, figure).filter(pl.col("k").is_not_null()).sort("recipe", "seed", "step",
                                                                                          "group", "k")
    if rows.height == 0:
        raise TwoscaleError(f"{figure}: the geometry table has no {metric} rows with a loop step k")
    steps = training_steps(rows)
    groups = sorted(int(g) for g in rows["group"].unique())
    return recipes, rows, groups, _step_colours(steps)


def _curves_by_checkpoint(ax: plt.Axes, rows: pl.DataFrame, colours: dict[int, tuple], positive: bool) -> None:
    """One line per checkpoint (colour) and seed (a line each) of the rows' `mean` vs k."""
    pdf = rows.with_columns(pl.col("mean").fill_nan(None)).to_pandas()
    if positive:
        pdf["mean"] = _positive(pdf["mean"].to_numpy())
    sns.lineplot(data=pdf, x="k", y="mean", hue="step", units="seed", palette=colours, legend=False, ax=ax,
                 estimator=None, lw=1.6)


def fig3a_step_size(geometry: pl.DataFrame, path: Path) -> None:
    """Mean step size ‖Δ^(k)‖ vs loop step k: one row of panels per recipe, one panel per group, one line per
    checkpoint and seed (log y)."""
    name = "fig3a_step_size"
    recipes, rows, groups, colours = _per_group_curves(geometry, "step_size", name)
    with _style():
        fig, axes = _grid(len(recipes), len(groups))
        for recipe, row in zip(recipes, axes, strict=True):
            for ax, g in zip(row, groups, strict=True):
                _curves_by_checkpoint(ax, rows.filter((pl.col("recipe") == recipe) & (pl.col("group") == g)),
                                      colours, positive=True)
                ax.axvline(10, color="0.4", ls=":", lw=1)
                ax.set_yscale("log")
                _plain_log_ticks(ax)
                ax.set_title(f"{recipe} — group {g}")
                ax.set_xlabel(LOOP_AXIS)
            row[0].set_ylabel(f"mean step size {STEP_NORM}\n({RESIDUAL_UNITS}, log scale)")
            row[0].annotate("k = 10", xy=(10, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                            textcoords="offset points", fontsize=8, color="0.3")
        _checkpoint_key(fig, axes, colours)
        fig.suptitle("Fig. 3a — step size vs loop step, per recipe and looped group (mean over tokens; one line "
                     "per checkpoint and seed)")
        _save(fig, path)


def fig3b_step_cosine(geometry: pl.DataFrame, path: Path) -> None:
    """Mean consecutive-step cosine vs k per recipe and group, one line per checkpoint and seed; the paper's
    0.5-0.65 band."""
    name = "fig3b_step_cosine"
    recipes, rows, groups, colours = _per_group_curves(geometry, "step_cosine", name)
    lo, hi = PAPER_COSINE_BAND
    values = rows["mean"].fill_nan(None).drop_nulls()
    bottom = min(-0.05, float(values.min()) - 0.05) if values.len() else -0.05
    with _style():
        fig, axes = _grid(len(recipes), len(groups), sharey=True)
        for recipe, row in zip(recipes, axes, strict=True):
            for ax, g in zip(row, groups, strict=True):
                ax.axhspan(lo, hi, color="tab:orange", alpha=0.2, lw=0, zorder=0)
                ax.axhline(0.0, color="black", lw=1, ls=":", zorder=1)
                _curves_by_checkpoint(ax, rows.filter((pl.col("recipe") == recipe) & (pl.col("group") == g)),
                                      colours, positive=False)
                ax.set_ylim(bottom, 1.05)
                ax.set_title(f"{recipe} — group {g}")
                ax.set_xlabel(LOOP_AXIS)
            row[0].set_ylabel(f"mean consecutive-step cosine\n{COSINE} (unitless)")
        _checkpoint_key(fig, axes, colours)
        axes[-1][-1].legend(handles=[
            Patch(color="tab:orange", alpha=0.3, label=f"paper: settles at {lo}–{hi}"),
            Line2D([], [], color="black", ls=":", label="orthogonal steps (cos = 0)"),
        ], loc="lower right", fontsize=8)
        fig.suptitle("Fig. 3b — cosine between consecutive loop steps vs loop step, per recipe (mean over tokens; "
                     "one line per checkpoint and seed)")
        _save(fig, path)


# --- depth similarity and phases ----------------------------------------------------------------------------


def _boundaries(labels: np.ndarray) -> list[int]:
    """Positions p where a new segment starts (labels[p] != labels[p-1])."""
    return [int(p) for p in np.flatnonzero(labels[1:] != labels[:-1]) + 1]


def _segment_names(depth: pl.DataFrame) -> list[tuple[float, str]]:
    """(centre position, short name) of each segment of the layout, for the top axis."""
    out = []
    for _, seg in depth.sort("position").group_by("layout_phase", maintain_order=True):
        first, last = int(seg["position"].min()), int(seg["position"].max())
        groups = seg["group"].drop_nulls().unique()
        if groups.len():
            loops = seg["loop"].max()
            layers = seg["layer"].drop_nulls().unique().sort()
            span = f"L{layers[0]}" if layers.len() == 1 else f"L{layers[0]}–{layers[-1]}"
            name = f"group {groups[0]}\n{span} ×{loops}"
        else:
            layers = seg["layer"].to_list()
            parts = ["emb" if layer is None else f"L{layer}" for layer in layers]
            name = parts[0] if len(parts) == 1 else f"{parts[0]}–{parts[-1]}"
        out.append(((first + last + 1) / 2, name))
    return out


def fig_similarity(similarity: pl.DataFrame, depth: pl.DataFrame, path: Path) -> None:
    """Depth-by-depth cosine similarity at the last checkpoint, with detected phases and the layout on it: one
    panel per recipe (its first seed)."""
    name = "fig_similarity"
    recipes = _recipes(similarity, "similarity", name)
    require(similarity, "similarity", ("step", "i", "j", "similarity"), name)
    require(depth, "depth", ("recipe", "seed", "step", "position", "layer", "group", "loop", "phase",
                             "layout_phase"), name)
    lead = _lead_runs(similarity)
    with _style(), sns.axes_style("white"):
        fig, axes = _grid(1, len(recipes), width=7.2, height=6.6, sharey=False)
        for ax, recipe in zip(axes[0], recipes, strict=True):
            step, sim = _last(lead.filter(pl.col("recipe") == recipe))
            seed = int(sim["seed"][0])
            d = of_run(depth, recipe, seed).filter(pl.col("step") == step).sort("position")
            if d.height == 0:
                raise TwoscaleError(f"{name}: the depth table has no rows for {recipe}, seed {seed}, step {step}")
            matched = _similarity_panel(ax, sim, d, name)
            ax.set_title(f"{recipe} (seed {seed}), training step {step:,}\n"
                         f"detected phases {'match' if matched else 'do not match'} the layout")
        axes[0][-1].legend(handles=[
            Line2D([], [], color="#ff3b30", lw=1.6, label="detected phase boundary (max-cut)"),
            Line2D([], [], color="white", ls=(0, (3, 2)), lw=2.8,
                   label="layout boundary (looped groups, single-pass layers)"),
        ], loc="upper right", bbox_to_anchor=(1.0, -0.08), facecolor="0.55", framealpha=1, fontsize=8,
            labelcolor="white")
        fig.suptitle("Similarity of the unrolled network's depth positions (mean cosine over held-out tokens)")
        _save(fig, path)


def _similarity_panel(ax: plt.Axes, sim: pl.DataFrame, d: pl.DataFrame, name: str) -> bool:
    """Draw one run's similarity matrix with its boundaries; whether the detected phases match the layout."""
    D = int(max(sim["i"].max(), sim["j"].max())) + 1
    if d.height != D:
        raise TwoscaleError(f"{name}: the similarity matrix has {D} positions but the depth table {d.height}")
    matrix = np.full((D, D), np.nan)
    matrix[sim["i"].to_numpy(), sim["j"].to_numpy()] = sim["similarity"].to_numpy()
    detected = _boundaries(d["phase"].to_numpy())
    layout = _boundaries(d["layout_phase"].to_numpy())
    colour_bar = {"label": "mean cosine similarity (unitless)", "shrink": 0.8}
    sns.heatmap(matrix, ax=ax, cmap="viridis", vmax=1.0, square=True, xticklabels=False, yticklabels=False,
                cbar_kws=colour_bar)
    tick_every = max(1, round(D / 12 / 5) * 5) if D > 12 else 1
    ticks = np.arange(0, D, tick_every)
    ax.set_xticks(ticks + 0.5, [str(t) for t in ticks], rotation=0)
    ax.set_yticks(ticks + 0.5, [str(t) for t in ticks])
    for b in layout:
        ax.axvline(b, color="white", ls=(0, (3, 2)), lw=2.8)
        ax.axhline(b, color="white", ls=(0, (3, 2)), lw=2.8)
    for b in detected:
        ax.axvline(b, color="#ff3b30", ls="-", lw=1.2)
        ax.axhline(b, color="#ff3b30", ls="-", lw=1.2)
    top = ax.secondary_xaxis("top")
    segments = _segment_names(d)
    top.set_xticks([c for c, _ in segments], [n for _, n in segments], fontsize=7)
    top.tick_params(length=0)
    ax.set_xlabel("depth position j (0 = embedding; every loop of a group is one position)")
    ax.set_ylabel("depth position i")
    return detected == layout


# --- loss vs loops ------------------------------------------------------------------------------------------


def fig_loss_vs_loops(loss_vs_loops: pl.DataFrame, path: Path) -> None:
    """Validation loss vs the loop count applied to every group, one panel per recipe, one line per checkpoint
    and seed (log-2 x axis)."""
    name = "fig_loss_vs_loops"
    recipes = _recipes(loss_vs_loops, "loss_vs_loops", name)
    require(loss_vs_loops, "loss_vs_loops", ("step", "loops", "val_loss"), name)
    rows = loss_vs_loops.sort("recipe", "seed", "step", "loops")
    colours = _step_colours(training_steps(rows))
    loops = sorted(int(x) for x in rows["loops"].unique())
    with _style():
        fig, axes = _grid(1, len(recipes), width=5.4, height=4.4, sharey=True)
        for ax, recipe in zip(axes[0], recipes, strict=True):
            sns.lineplot(data=rows.filter(pl.col("recipe") == recipe).to_pandas(), x="loops", y="val_loss",
                         hue="step", units="seed", palette=colours, marker="o", ax=ax, legend=False,
                         estimator=None)
            ax.set_xscale("log", base=2)
            ax.set_xticks(loops, [str(x) for x in loops])
            ax.minorticks_off()
            ax.set_xlabel("loops per group at evaluation (log₂ scale)")
            ax.set_title(f"{recipe} ({_seed_note(rows, recipe)})")
        axes[0][0].set_ylabel("validation loss (nats/token)")
        _checkpoint_key(fig, axes, colours)
        fig.suptitle("Held-out loss vs test-time loop count (every group looped this many times), per recipe")
        _save(fig, path)


# --- acceleration and the scalar second difference ----------------------------------------------------------


def fig_acceleration(geometry: pl.DataFrame, path: Path) -> None:
    """Last checkpoint: vector acceleration and scalar step-size difference vs k per recipe and group (median
    over tokens of each seed; q10-q90 of the first seed), with the step size for reference: the quantities an
    exit rule thresholds."""
    name = "fig_acceleration"
    recipes = _recipes(geometry, "geometry", name)
    series = {
        "acceleration": (f"acceleration {ACCEL}", "tab:red", "-"),
        "step_size_difference": (f"step-size difference {SIZE_DIFF}", "tab:blue", "-"),
        "step_size": (f"step size {STEP_NORM} (reference)", "0.35", ":"),
    }
    rows = metric_rows(geometry, list(series), name).filter(pl.col("k").is_not_null())
    groups = sorted(int(g) for g in rows["group"].unique())
    with _style():
        fig, axes = _grid(len(recipes), len(groups))
        for recipe, row in zip(recipes, axes, strict=True):
            step, own = _last(rows.filter(pl.col("recipe") == recipe))
            lead_seed = int(own["seed"][0])
            for ax, g in zip(row, groups, strict=True):
                for metric, (label, colour, ls) in series.items():
                    part = own.filter((pl.col("group") == g) & (pl.col("metric") == metric)).sort("seed", "k")
                    for (seed,), curve in part.group_by("seed", maintain_order=True):
                        pdf = curve.to_pandas()
                        if metric != "step_size" and seed == lead_seed:
                            ax.fill_between(pdf["k"], _positive(pdf["q10"]), _positive(pdf["q90"]),
                                            color=colour, alpha=0.15, lw=0)
                        ax.plot(pdf["k"], _positive(pdf["median"]), color=colour, ls=ls, lw=1.6)
                ax.set_yscale("log")
                _plain_log_ticks(ax)
                ax.set_title(f"{recipe} — group {g}, step {step:,}")
                ax.set_xlabel(LOOP_AXIS)
            row[0].set_ylabel(f"median over tokens\n({RESIDUAL_UNITS}, log scale)")
        handles = [Line2D([], [], color=colour, ls=ls, lw=1.6, label=label)
                   for label, colour, ls in series.values()]
        handles.append(Patch(color="0.5", alpha=0.3, label="10th–90th percentile over tokens (first seed)"))
        fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False)
        fig.suptitle("Second differences of the loop trajectory vs loop step at the last checkpoint, per recipe "
                     "(one line per seed)")
        _save(fig, path)


# --- diagnostics of the loop dynamics (docs/methods.md#the-looped-model-and-its-recipes) --------------------

DIAGNOSTICS = {  # metric: (title, y label, axis: "log" where the values span a decade, "signed", "fraction")
    "state_norm": ("state norm", r"mean $\|x^{(k)}\|_2$" + f"\n({RESIDUAL_UNITS})", "log"),
    "cross_token_cosine": ("collapse detector", "mean cosine between different\ntokens' states "
                           "(1 = all alike)", "signed"),
    "radial_fraction": ("direction of each step", r"mean $\cos(\Delta^{(k)}, x^{(k-1)})$" + "\n(+1 outward, "
                        "0 turning, −1 inward)", "signed"),
    "at_floor": ("steps at the precision floor", "fraction of tokens with\n" + r"$\|\Delta^{(k)}\| \leq$ floor "
                 r"$\cdot \|x^{(k-1)}\|$ (incl. $\Delta^{(k)} = 0$)", "fraction"),
}


def fig_diagnostics(geometry: pl.DataFrame, path: Path) -> None:
    """What the loops do to the state, per recipe: its norm, the cosine between different tokens' states, the
    direction of each step relative to the state, and the fraction of tokens whose step is at the precision floor
    (exact fixed points included), vs loop step; one colour per group, the last checkpoint solid and the first dashed, one line per seed."""
    name = "fig_diagnostics"
    recipes = _recipes(geometry, "geometry", name)
    rows = metric_rows(geometry, list(DIAGNOSTICS), name).filter(pl.col("k").is_not_null())
    groups = sorted(int(g) for g in rows["group"].unique())
    palette = dict(zip(groups, sns.color_palette("deep", len(groups)), strict=True))
    with _style():
        fig, axes = _grid(len(recipes), len(DIAGNOSTICS), width=4.2, sharey=False, sharex=True)
        for recipe, row in zip(recipes, axes, strict=True):
            own = rows.filter(pl.col("recipe") == recipe)
            steps = training_steps(own)
            shown = {steps[-1]: "-", steps[0]: "--"} if len(steps) > 1 else {steps[-1]: "-"}
            for ax, (metric, (title, label, axis)) in zip(row, DIAGNOSTICS.items(), strict=True):
                for step, ls in shown.items():
                    part = own.filter((pl.col("metric") == metric) & (pl.col("step") == step))
                    for (g, _seed), curve in part.sort("k").group_by("group", "seed", maintain_order=True):
                        values = curve["mean"].fill_nan(None).to_numpy().astype(float)
                        shown_values = _positive(values) if axis == "log" else values
                        ax.plot(curve["k"], shown_values, color=palette[int(g)], ls=ls, lw=1.5)
                low, high = ax.dataLim.intervaly
                if axis == "log" and low > 0 and high >= 10 * low:
                    ax.set_yscale("log")
                    _plain_log_ticks(ax)
                    label = label[:-1] + ", log scale)"
                elif axis == "signed":
                    ax.axhline(0.0, color="black", lw=0.8, ls=":")
                elif axis == "fraction":
                    ax.set_ylim(-0.03, 1.03)
                ax.set_title(f"{recipe} — {title}")
                ax.set_ylabel(label)
                ax.set_xlabel(STATE_LOOP_AXIS)
        handles = [Line2D([], [], color=palette[g], lw=1.5, label=f"group {g}") for g in groups]
        all_steps = training_steps(rows)
        handles += [Line2D([], [], color="0.3", ls="-", label=f"last checkpoint (step {all_steps[-1]:,})")]
        if len(all_steps) > 1:
            handles += [Line2D([], [], color="0.3", ls="--", label=f"first checkpoint (step {all_steps[0]:,})")]
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        fig.suptitle("What the loops do to the state, per recipe (mean over tokens; one line per group, "
                     "checkpoint and seed)")
        _save(fig, path)


# --- Fig. 4 and the trade-off: the early-exit sweep ---------------------------------------------------------

EXIT_MARKERS = "osD^vP<X>ph*"
FULL_DEPTH_LINE = {"color": "black", "ls": "--", "lw": 1.2}
CROSS_ENTROPY = "cross-entropy (nats/token)"
LATENCY = "latency (ms per generated token)"
SWEEP_KEYS = ("recipe", "seed", "strategy", "setting", "max_loops")


def _strategy_styles(strategies: Sequence[str]) -> dict[str, dict]:
    """Colour and marker per exit strategy, set by the sorted names so both sweep figures agree; fixed depth
    is black."""
    names = sorted(set(strategies) - {"fixed"})
    palette = sns.color_palette("deep" if len(names) <= 10 else "husl", len(names))
    styles = {name: {"color": colour, "marker": EXIT_MARKERS[i % len(EXIT_MARKERS)]}
              for i, (name, colour) in enumerate(zip(names, palette, strict=True))}
    styles["fixed"] = {"color": "black", "marker": "o"}
    return styles


def _strategy_lines(ax: plt.Axes, rows: pl.DataFrame, x: str, y: str, styles: dict[str, dict]) -> None:
    """One line with markers per strategy and seed, joining the rows in the order given."""
    strategies = sorted(rows["strategy"].unique())
    sns.lineplot(data=rows.to_pandas(), x=x, y=y, hue="strategy", style="strategy", units="seed",
                 palette={s: styles[s]["color"] for s in strategies},
                 markers={s: styles[s]["marker"] for s in strategies}, dashes=False, sort=False,
                 estimator=None, legend=False, ax=ax, lw=1.4, ms=6, alpha=0.9)


def _strategy_legend(fig: plt.Figure, styles: dict[str, dict], strategies: Sequence[str],
                     extra: Sequence[Line2D] = ()) -> None:
    handles = [Line2D([], [], lw=1.4, ms=6, label=s, **styles[s]) for s in strategies]
    fig.legend(handles=handles + list(extra), title="exit rule", loc="outside right upper", frameon=False)


def _cross_entropy_of(perplexity: np.ndarray) -> np.ndarray:
    """Log, clamped: the perplexity axis's tick locator may try perplexity 0."""
    return np.log(np.maximum(perplexity, 1e-300))


def fig4_exit_sweep(sweep: pl.DataFrame, path: Path) -> None:
    """Latency and cross-entropy vs exit threshold τ (log x), one row per recipe, one line per threshold-swept
    rule and seed; each seed's full depth as a dashed reference."""
    name = "fig4_exit_sweep"
    require(sweep, "sweep", (*SWEEP_KEYS, "swept", "cross_entropy", "ms_per_token"), name)
    recipes = recipes_in(sweep)
    on_log_axis = pl.col("setting").is_finite() & (pl.col("setting") > 0)
    lines = sweep.filter((pl.col("swept") == "threshold") & on_log_axis).sort("recipe", "seed", "strategy",
                                                                               "setting")
    if lines.height == 0:
        raise TwoscaleError(f"{name}: the sweep table has no threshold-swept rows with a threshold in (0, ∞)")
    styles = _strategy_styles(sweep["strategy"].unique().to_list())
    full = full_depth_rows(sweep)
    reference = ([Line2D([], [], label=f"full depth (K={int(full['max_loops'][0])})", **FULL_DEPTH_LINE)]
                 if full.height else [])
    panels = {"ms_per_token": LATENCY, "cross_entropy": CROSS_ENTROPY}
    with _style():
        fig, axes = _grid(len(recipes), 2, width=6.0, height=4.0, sharey=False, sharex=True)
        for recipe, row in zip(recipes, axes, strict=True):
            own = lines.filter(pl.col("recipe") == recipe)
            for ax, (column, label) in zip(row, panels.items(), strict=True):
                if own.height:
                    _strategy_lines(ax, own, "setting", column, styles)
                for value in full.filter(pl.col("recipe") == recipe)[column]:
                    ax.axhline(float(value), **FULL_DEPTH_LINE)
                ax.set_xlabel("exit threshold τ (each rule in its own units, log scale)")
                ax.set_ylabel(label)
                ax.set_xscale("log")
            _plain_log_ticks(row[0], "x")
            perplexity = row[1].secondary_yaxis("right", functions=(np.exp, _cross_entropy_of))
            perplexity.set_ylabel("perplexity (e^cross-entropy)")
            row[0].set_title(f"{recipe} — latency vs threshold ({_seed_note(sweep, recipe)})")
            row[1].set_title(f"{recipe} — loss vs threshold")
        _strategy_legend(fig, styles, sorted(lines["strategy"].unique()), reference)
        fig.suptitle("Fig. 4 — early exit: latency and loss vs exit threshold, per recipe and exit rule\n"
                     "(τ = 0 and τ = ∞, the never-exit and exit-at-once ends, are off the log axis: see the "
                     "trade-off figure)")
        _save(fig, path)


def _annotate_loop_counts(ax: plt.Axes, fixed: pl.DataFrame, x: str, max_loops: int) -> None:
    """K = 1, 2, 4, ... and the full depth next to their points on the fixed-depth frontier."""
    for row in fixed.iter_rows(named=True):
        k = int(row["setting"])
        point = (row[x], row["cross_entropy"])
        if k == max_loops:  # the frontier's top right end: label to its left, clear of the panel title
            ax.annotate(f"K={k} (full depth)", point, xytext=(-40, -6), textcoords="offset points", ha="right",
                        va="center", fontsize=8, arrowprops={"arrowstyle": "-", "color": "0.3", "lw": 0.8})
        elif k & (k - 1) == 0:
            ax.annotate(f"K={k}", point, xytext=(5, 4), textcoords="offset points", fontsize=8)


def _latency_spread(ax: plt.Axes, rows: pl.DataFrame) -> None:
    """Each point's fastest to slowest timing round, as a horizontal bar."""
    ms = rows["ms_per_token"].to_numpy()
    spread = np.vstack([ms - rows["ms_low"].to_numpy(), rows["ms_high"].to_numpy() - ms])
    ax.errorbar(ms, rows["cross_entropy"].to_numpy(), xerr=spread, fmt="none", ecolor="0.4", elinewidth=0.8,
                capsize=2, zorder=4)


def fig_exit_tradeoff(sweep: pl.DataFrame, path: Path) -> None:
    """Cross-entropy vs cost (GFLOPs per token, the exit decodes included) and vs latency (median over the timing
    rounds, bars from the fastest to the slowest round), every setting of every exit rule against the fixed-depth
    frontier: one row per recipe, one line per rule and seed."""
    name = "fig_exit_tradeoff"
    require(sweep, "sweep", (*SWEEP_KEYS, "cross_entropy", "gflops_per_token", "mean_loops", "ms_per_token",
                             "ms_low", "ms_high"), name)
    recipes = recipes_in(sweep)
    styles = _strategy_styles(sweep["strategy"].unique().to_list())
    rules = sweep.filter(pl.col("strategy") != "fixed").sort("recipe", "seed", "strategy", "mean_loops")
    fixed = sweep.filter(pl.col("strategy") == "fixed").sort("recipe", "seed", "mean_loops")
    max_loops = int(sweep["max_loops"][0])
    frontier = ([Line2D([], [], lw=2, label="fixed depth K (frontier)", **styles["fixed"])]
                if fixed.height else [])
    panels = {"gflops_per_token": "GFLOPs per token (exit decodes included)", "ms_per_token": LATENCY}
    with _style():
        fig, axes = _grid(len(recipes), 2, width=6.0, height=4.0, sharey="row")
        for recipe, row in zip(recipes, axes, strict=True):
            own_rules = rules.filter(pl.col("recipe") == recipe)
            own_fixed = fixed.filter(pl.col("recipe") == recipe)
            for ax, (column, label) in zip(row, panels.items(), strict=True):
                if own_rules.height:
                    _strategy_lines(ax, own_rules, column, "cross_entropy", styles)
                for i, (_, curve) in enumerate(own_fixed.group_by("seed", maintain_order=True)):
                    ax.plot(curve[column], curve["cross_entropy"], lw=2, ms=6, zorder=5, **styles["fixed"])
                    if i == 0:
                        _annotate_loop_counts(ax, curve, column, max_loops)
                if column == "ms_per_token":
                    _latency_spread(ax, sweep.filter(pl.col("recipe") == recipe))
                ax.set_xscale("log")  # the useful exits sit at a few loops, next to a 30-loop full depth
                _plain_log_ticks(ax, "x")
                ax.set_xlabel(f"{label}, log scale")
                ax.set_ylabel(CROSS_ENTROPY)
            row[0].set_title(f"{recipe} — loss vs FLOPs ({_seed_note(sweep, recipe)})")
            row[1].set_title(f"{recipe} — loss vs latency")
        _strategy_legend(fig, styles, sorted(rules["strategy"].unique()), frontier)
        fig.suptitle("Early exit: loss vs FLOPs and latency, every setting of every exit rule, per recipe\n"
                     "(points joined in order of mean loops, including the τ = 0 and τ = ∞ ends)")
        _save(fig, path)


# --- the parallel sampler -----------------------------------------------------------------------------------


# the sampler figure's axes: what each column of the summary is called on an axis
_SAMPLER_AXES = {
    "tokens_per_s": "tokens / s (batch size 1, after the prefill)",
    "layers_per_token": "layer applications per generated token",
    "gflops_per_token": "GFLOPs per generated token",
    "cross_entropy_gap": "re-scored cross-entropy − full recurrence's (nats)",
    "distinct_fraction": "distinct-token fraction of the continuation",
    "agreement": "greedy agreement with full recurrence",
}
# (x, y) of each panel: quality and repetition against wall-clock speed, then quality against the cost per token by
# the FLOP convention of decoding/cost.py, and speed against that cost
_SAMPLER_PANELS = (("tokens_per_s", "cross_entropy_gap"), ("tokens_per_s", "distinct_fraction"),
                   ("tokens_per_s", "agreement"), ("layers_per_token", "cross_entropy_gap"),
                   ("gflops_per_token", "cross_entropy_gap"), ("gflops_per_token", "tokens_per_s"))
_SAMPLER_LOG_AXES = ("tokens_per_s", "layers_per_token", "gflops_per_token")  # rates and costs: log scale


def _equal_quality_band(ax: plt.Axes, column: str, summary: pl.DataFrame, reference: dict) -> None:
    """Shade what counts as about equal quality on a quality axis: the cross-entropy gap within ± the quality
    tolerance, the distinct-token fraction at most the distinct tolerance below full recurrence's."""
    if column == "cross_entropy_gap":
        tolerance = float(summary["quality_tolerance"][0])
        ax.axhspan(-tolerance, tolerance, color="tab:green", alpha=0.08, lw=0)
        for edge in (-tolerance, tolerance):
            ax.axhline(edge, color="tab:green", lw=0.8, ls="--")
    elif column == "distinct_fraction":
        floor = reference["distinct_fraction"] - float(summary["distinct_tolerance"][0])
        ax.axhspan(floor, 1.02, color="tab:green", alpha=0.08, lw=0)
        ax.axhline(floor, color="tab:green", lw=0.8, ls="--")
        ax.set_ylim(top=1.02)
    elif column == "agreement":
        ax.set_ylim(0, 1.02)


def fig_sampler_tradeoff(summary: pl.DataFrame, path: Path) -> None:
    """One run's sampler against ordinary decoding: quality (the paired gap in re-scored cross-entropy to ordinary
    decoding at full recurrence), the distinct-token fraction and greedy agreement against tokens/s; the quality gap
    against layer applications and GFLOPs per generated token; tokens/s against GFLOPs per token. Ordinary decoding
    is one black line over its loop counts; the sampler one line per freeze criterion and ε over r′ (labelled)."""
    require(summary, "sampling summary", ("method", "loops", "inner_loops", "tolerance", "freeze", "full_loops",
                                          *_SAMPLER_AXES, "quality_tolerance", "distinct_tolerance"),
            "sampler figure")
    ordinary = summary.filter(pl.col("method") == "autoregressive").sort("loops")
    reference = ordinary.filter(pl.col("loops") == pl.col("full_loops")).row(0, named=True)
    sampler = summary.filter(pl.col("method") == "sampler").sort("inner_loops")
    lines = list(sampler.select("freeze", "tolerance").unique(maintain_order=True).iter_rows())
    palette = dict(zip(lines, sns.color_palette("deep", len(lines)), strict=True))
    markers = {"latent_diff": "o", "acceleration": "s"}
    with _style():
        fig, axes = plt.subplots(2, 3, figsize=(14, 9), layout="constrained")
        for ax, (x_column, y_column) in zip(axes.flat, _SAMPLER_PANELS, strict=True):
            ax.plot(ordinary[x_column], ordinary[y_column], color="black", marker="D", ms=5, lw=1.6)
            for x, y, loops in ordinary.select(x_column, y_column, "loops").iter_rows():
                ax.annotate(f"{loops}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
            for freeze, tolerance in lines:
                rows = sampler.filter((pl.col("freeze") == freeze) & (pl.col("tolerance") == tolerance))
                ax.plot(rows[x_column], rows[y_column], color=palette[(freeze, tolerance)],
                        marker=markers.get(freeze, "o"), ms=5, lw=1.3, alpha=0.9)
                for x, y, r in rows.select(x_column, y_column, "inner_loops").iter_rows():
                    ax.annotate(f"{r}", (x, y), textcoords="offset points", xytext=(3, -9), fontsize=6,
                                color=palette[(freeze, tolerance)])
            if x_column in _SAMPLER_LOG_AXES:
                ax.set_xscale("log")
                _plain_log_ticks(ax, "x")
            if y_column in _SAMPLER_LOG_AXES:
                ax.set_yscale("log")
                _plain_log_ticks(ax, "y")
            _equal_quality_band(ax, y_column, summary, reference)
            ax.set_xlabel(_SAMPLER_AXES[x_column])
            ax.set_ylabel(_SAMPLER_AXES[y_column])
        quality, distinct = float(summary["quality_tolerance"][0]), float(summary["distinct_tolerance"][0])
        handles = [Line2D([], [], color="black", marker="D", ms=5, label="ordinary decoding (labels: loops)")]
        handles += [Line2D([], [], color=palette[key], marker=markers.get(key[0], "o"), ms=5,
                           label=f"sampler, {key[0]}, ε {key[1]:g} (labels: r′)") for key in lines]
        handles += [Patch(color="tab:green", alpha=0.2, label=f"about equal quality: gap within ± {quality:g} "
                          f"nats,\ndistinct fraction ≥ full recurrence's − {distinct:g}")]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False,
                   fontsize=7)
        recipe, seed = summary["recipe"][0], summary["seed"][0]
        fig.suptitle(f"Parallel sampler vs ordinary cached decoding: {recipe}, seed {seed}")
        _save(fig, path)
