"""The paper's figures of the loop geometry (docs/methods.md#loop-geometry) from the geometry stage's frames, as PNGs
readable without the code: one function per figure, `fig_x(frames..., path)` (conventions in `report.figures`).

Units: states, steps and accelerations are L2 norms in the residual stream's own units (the model's hidden
width; no normalisation unless the name says "relative"); cosines and ratios are unitless; loss is in
nats/token.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from twoscale.config.errors import TwoscaleError
from twoscale.geometry.tables import FLOOR_EPS, REGIMES, dlr_loops, metric_rows
from twoscale.geometry.thresholds import C4_MIN_DLR
from twoscale.report.figures import (
    checkpoint_key,
    figure_recipes,
    figure_style,
    last_checkpoint,
    lead_runs,
    log_safe,
    panel_grid,
    plain_log_ticks,
    save_figure,
    seed_note,
    step_axis,
    step_colours,
    suptitle,
)
from twoscale.report.tables import of_run, require, training_steps

PAPER_COSINE_BAND = (0.5, 0.65)  # docs/claims.md#c3

STEP_NORM = r"$\|\Delta^{(k)}\|_2$"
ACCEL = r"$\|\Delta^{(k)} - \Delta^{(k-1)}\|_2$"
SIZE_DIFF = r"$|\,\|\Delta^{(k)}\| - \|\Delta^{(k-1)}\|\,|$"
COSINE = r"$\cos(\Delta^{(k)}, \Delta^{(k-1)})$"
LOOP_AXIS = "loop step k (applications of the group)"
STATE_LOOP_AXIS = "loop step k (0 = the group input)"
RESIDUAL_UNITS = "residual-stream units"


# --- Fig. 1: the trajectory of one token --------------------------------------------------------------------


def fig1_trajectory(trajectory: pl.DataFrame, path: Path) -> None:
    """2-D PCA path of one token over all loops of all groups: first and last checkpoint side by side, one row
    per recipe (its first seed)."""
    name = "fig1_trajectory"
    recipes = figure_recipes(trajectory, "trajectory", name)
    require(trajectory, "trajectory", ("step", "point", "group", "k", "pc1", "pc2", "explained_pc1",
                                     "explained_pc2"), name)
    lead = lead_runs(trajectory)
    steps = training_steps(lead)
    shown = sorted({steps[0], steps[-1]})
    groups = sorted(int(g) for g in lead["group"].unique())
    palette = dict(zip(groups, sns.color_palette("deep", len(groups)), strict=True))
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(shown), width=5.6, height=4.6, sharey=False)
        hand_offs = False
        for recipe, row in zip(recipes, axes, strict=True):
            own = lead.filter(pl.col("recipe") == recipe)
            for ax, step in zip(row, shown, strict=True):
                frame = own.filter(pl.col("step") == step).sort("point")
                if frame.height == 0:
                    ax.set_axis_off()
                    continue
                hand_offs |= _draw_token_path(ax, frame, groups, palette)
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
        ]
        if hand_offs:  # an entry only for what some panel shows
            handles.append(Line2D([], [], ls="--", color="0.45", label="between groups (single-pass layers)"))
        fig.legend(handles=handles, loc="outside lower center", ncols=3 if len(shown) == 1 else 6,
                   frameon=False)
        which = "first and last checkpoint" if len(shown) > 1 else "the only checkpoint"
        suptitle(fig, "Fig. 1 — one token's latent trajectory over every loop of every group\n"
                     f"(2-D PCA fitted per checkpoint; {which}; one row per recipe)")
        save_figure(fig, path)


HAND_OFF_SEEN = 0.01  # a hand-off shorter than this share of the path's extent is drawn on no panel


def _draw_token_path(ax: plt.Axes, frame: pl.DataFrame, groups: Sequence[int], palette: dict) -> bool:
    """The token's path through every group's loops; whether a hand-off between groups (the single-pass layers
    between them) was long enough to be seen, and so drawn dashed."""
    pdf = frame.to_pandas()
    extent = max(np.ptp(pdf["pc1"].to_numpy()), np.ptp(pdf["pc2"].to_numpy()), np.finfo(float).tiny)
    previous_end, drew_hand_off = None, False
    for g in groups:
        pts = pdf[pdf["group"] == g].sort_values("k")
        if pts.empty:
            continue
        x, y = pts["pc1"].to_numpy(), pts["pc2"].to_numpy()
        if previous_end is not None and np.hypot(x[0] - previous_end[0], y[0] - previous_end[1]) > (
                HAND_OFF_SEEN * extent):
            ax.plot([previous_end[0], x[0]], [previous_end[1], y[0]], ls="--", color="0.45", lw=1.2, zorder=1)
            drew_hand_off = True
        ax.plot(x, y, "-", color=palette[g], lw=1.0, alpha=0.8, zorder=2)
        ax.scatter(x[0], y[0], marker="s", s=90, color=palette[g], edgecolor="black", lw=1.2, zorder=4)
        ax.scatter(x[-1], y[-1], marker="X", s=90, color=palette[g], edgecolor="black", lw=0.8, zorder=4)
        previous_end = (x[-1], y[-1])
    sns.scatterplot(data=pdf, x="pc1", y="pc2", hue="group", palette=palette, s=16, ax=ax, legend=False,
                    zorder=3, edgecolor="none")
    ev1, ev2 = float(frame["explained_pc1"][0]), float(frame["explained_pc2"][0])
    ax.set_xlabel(f"PC1 ({ev1:.0%} of variance), {RESIDUAL_UNITS}")
    ax.set_ylabel(f"PC2 ({ev2:.0%} of variance), {RESIDUAL_UNITS}")
    return drew_hand_off


# --- Fig. 2: drift-to-loop ratio ----------------------------------------------------------------------------


def fig2_drift_to_loop(geometry: pl.DataFrame, path: Path) -> None:
    """Top row: the median drift-to-loop ratio DLR_K at each hand-off vs training step, K = `dlr_loops` (the K
    that C4 reads), one panel per recipe, one line per seed, with the 10th-90th percentile band over tokens.
    Bottom row: the median DLR_K against K (the loop steps averaged in its denominator) at the last checkpoint."""
    name = "fig2_drift_to_loop"
    recipes = figure_recipes(geometry, "geometry", name)
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
    with figure_style():
        fig, axes = panel_grid(2, len(recipes), width=6.2, height=4.2, sharey=True)
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
            step_axis(ax, steps)
            ax.set_title(f"{recipe} ({seed_note(rows, recipe)}): DLR_{loops} over training")
        for ax, recipe in zip(axes[1], recipes, strict=True):
            own = by_k[by_k["recipe"] == recipe]
            for (label, _), part in own.groupby(["hand-off", "seed"]):
                ax.fill_between(part["k"], part["q10"], part["q90"], color=palette[label], alpha=0.15, lw=0)
            sns.lineplot(data=own, x="k", y="median", hue="hand-off", units="seed", palette=palette, ax=ax,
                         estimator=None, legend=False)
            ax.axvline(loops, color="0.4", lw=1, ls="--")
            ax.set_xscale("log")
            plain_log_ticks(ax, "x")
            ax.set_xlabel("K: loop steps of the group averaged in the denominator (log scale)")
            ax.set_title(f"{recipe}: DLR_K against K, step {steps[-1]}")
        for ax in (a for row in axes for a in row):
            ax.axhline(1.0, color="black", lw=1.2)
            ax.axhline(C4_MIN_DLR, color="black", lw=1, ls=":")
            ax.set_yscale("log")
            plain_log_ticks(ax)
        every = every_k.to_pandas()
        low = float(np.nanmin(log_safe(every["q10"].to_numpy()))) if every["q10"].notna().any() else 1.0
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
        suptitle(fig, "Fig. 2 — drift-to-loop ratio at each hand-off between looped groups, per recipe")
        save_figure(fig, path)


# --- Fig. 3a / 3b: step size and consecutive-step cosine vs k -----------------------------------------------


def _per_group_curves(geometry: pl.DataFrame, metric: str, figure: str):
    recipes = figure_recipes(geometry, "geometry", figure)
    rows = metric_rows(geometry, metric, figure).filter(pl.col("k").is_not_null()).sort("recipe", "seed", "step",
                                                                                          "group", "k")
    if rows.height == 0:
        raise TwoscaleError(f"{figure}: the geometry table has no {metric} rows with a loop step k")
    steps = training_steps(rows)
    groups = sorted(int(g) for g in rows["group"].unique())
    return recipes, rows, groups, step_colours(steps)


def _curves_by_checkpoint(ax: plt.Axes, rows: pl.DataFrame, colours: dict[int, tuple], positive: bool) -> None:
    """One line per checkpoint (colour) and seed (a line each) of the rows' `mean` vs k."""
    pdf = rows.with_columns(pl.col("mean").fill_nan(None)).to_pandas()
    if positive:
        pdf["mean"] = log_safe(pdf["mean"].to_numpy())
    sns.lineplot(data=pdf, x="k", y="mean", hue="step", units="seed", palette=colours, legend=False, ax=ax,
                 estimator=None, lw=1.6)


def fig3a_step_size(geometry: pl.DataFrame, path: Path) -> None:
    """Mean step size ‖Δ^(k)‖ vs loop step k: one row of panels per recipe, one panel per group, one line per
    checkpoint and seed (log y)."""
    name = "fig3a_step_size"
    recipes, rows, groups, colours = _per_group_curves(geometry, "step_size", name)
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(groups))
        for recipe, row in zip(recipes, axes, strict=True):
            for ax, g in zip(row, groups, strict=True):
                _curves_by_checkpoint(ax, rows.filter((pl.col("recipe") == recipe) & (pl.col("group") == g)),
                                      colours, positive=True)
                if ax.get_xlim()[1] >= 10:  # the paper's "within 5-10 steps", where the loops reach it
                    ax.axvline(10, color="0.4", ls=":", lw=1)
                ax.set_yscale("log")
                plain_log_ticks(ax)
                ax.set_title(f"{recipe} — group {g}")
                ax.set_xlabel(LOOP_AXIS)
            row[0].set_ylabel(f"mean step size {STEP_NORM}\n({RESIDUAL_UNITS}, log scale)")
            if row[0].get_xlim()[1] >= 12:  # room for its label right of the line
                row[0].annotate("k = 10", xy=(10, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                                textcoords="offset points", fontsize=8, color="0.3")
        checkpoint_key(fig, axes, colours)
        suptitle(fig, "Fig. 3a — step size vs loop step, per recipe and looped group (mean over tokens; one line "
                     "per checkpoint and seed)")
        save_figure(fig, path)


def fig3b_step_cosine(geometry: pl.DataFrame, path: Path) -> None:
    """Mean consecutive-step cosine vs k per recipe and group, one line per checkpoint and seed; the paper's
    0.5-0.65 band."""
    name = "fig3b_step_cosine"
    recipes, rows, groups, colours = _per_group_curves(geometry, "step_cosine", name)
    lo, hi = PAPER_COSINE_BAND
    values = rows["mean"].fill_nan(None).drop_nulls()
    bottom = min(-0.05, float(values.min()) - 0.05) if values.len() else -0.05
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(groups), sharey=True)
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
        checkpoint_key(fig, axes, colours)
        axes[-1][-1].legend(handles=[
            Patch(color="tab:orange", alpha=0.3, label=f"paper: settles at {lo}–{hi}"),
            Line2D([], [], color="black", ls=":", label="orthogonal steps (cos = 0)"),
        ], loc="lower right", fontsize=8)
        suptitle(fig, "Fig. 3b — cosine between consecutive loop steps vs loop step, per recipe (mean over tokens; "
                     "one line per checkpoint and seed)")
        save_figure(fig, path)


def fig_regimes(geometry: pl.DataFrame, path: Path) -> None:
    """The share of tokens in each per-token regime (`tables.REGIMES`) across training, stacked,
    per recipe and group (mean over seeds)."""
    name = "fig_regimes"
    recipes = figure_recipes(geometry, "geometry", name)
    metrics = [f"regime_{regime}" for regime in REGIMES]
    rows = (metric_rows(geometry, metrics, name).group_by("recipe", "group", "step", "metric")
            .agg(pl.col("mean").mean()).sort("step"))
    groups = sorted(int(g) for g in rows["group"].unique())
    colours = dict(zip(REGIMES, sns.color_palette("deep", len(REGIMES)), strict=True))
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(groups), sharey=True)
        for recipe, row in zip(recipes, axes, strict=True):
            for ax, g in zip(row, groups, strict=True):
                own = rows.filter((pl.col("recipe") == recipe) & (pl.col("group") == g))
                steps = training_steps(own)
                shares = [[own.filter((pl.col("metric") == metric) & (pl.col("step") == step))["mean"].sum()
                           for step in steps] for metric in metrics]
                ax.stackplot(steps, shares, colors=[colours[r] for r in REGIMES], alpha=0.85)
                ax.set_ylim(0, 1)
                ax.set_title(f"{recipe} — group {g}")
                step_axis(ax, steps)
            row[0].set_ylabel("share of tokens")
        axes[-1][-1].legend(handles=[Patch(color=colours[r], label=r.replace("_", " ")) for r in REGIMES],
                            loc="lower right", fontsize=8)
        suptitle(fig, "Per-token regimes of each looped group across training (docs/methods.md#per-token-regimes; "
                     "mean over seeds)")
        save_figure(fig, path)


def precision_points(precision: pl.DataFrame) -> pl.DataFrame:
    """Per recipe, seed, checkpoint, precision and group: the late mean consecutive-step cosine and the late mean
    relative step size in units of the precision's machine epsilon (late: k > K/2, K the loops measured)."""
    rows = metric_rows(precision, ("step_cosine", "relative_step_size"), "fig_precision")
    keys = ["recipe", "seed", "step", "precision", "group"]
    late = rows.filter(pl.col("k") > pl.col("k").max().over(keys) // 2).with_columns(pl.col("mean").fill_nan(None))
    wide = late.group_by(*keys, "eps").agg(
        pl.col("mean").filter(pl.col("metric") == "step_cosine").mean().alias("late_cosine"),
        pl.col("mean").filter(pl.col("metric") == "relative_step_size").mean().alias("late_relative_step"))
    return wide.with_columns((pl.col("late_relative_step") / pl.col("eps")).alias("step_in_eps")).sort(*keys)


def fig_precision(precision: pl.DataFrame, path: Path) -> None:
    """The precision question: each group's late consecutive-step cosine against its late relative step size in
    units of the measuring precision's epsilon, one panel per recipe, a colour per precision, every checkpoint and
    seed a point (no floor: every step's direction counts); the paper's band and the float64 measurement's floor
    (FLOOR_EPS epsilons) marked."""
    name = "fig_precision"
    recipes = figure_recipes(precision, "precision", name)
    points = precision_points(precision).drop_nulls(["late_cosine", "step_in_eps"])
    names = list(dict.fromkeys(precision["precision"]))
    colours = dict(zip(names, sns.color_palette("deep", len(names)), strict=True))
    lo, hi = PAPER_COSINE_BAND
    with figure_style():
        fig, axes = panel_grid(1, len(recipes), width=6.2, height=4.6, sharey=True)
        for ax, recipe in zip(axes[0], recipes, strict=True):
            ax.axhspan(lo, hi, color="tab:orange", alpha=0.2, lw=0, zorder=0)
            ax.axvline(FLOOR_EPS, color="black", lw=1, ls=":", zorder=1)
            own = points.filter(pl.col("recipe") == recipe)
            for label in names:
                part = own.filter(pl.col("precision") == label)
                ax.scatter(log_safe(part["step_in_eps"].to_numpy()), part["late_cosine"].to_numpy(), s=22,
                           color=colours[label], alpha=0.8, label=label)
            ax.set_xscale("log")
            ax.set_ylim(-1.05, 1.05)
            ax.set_title(recipe)
            ax.set_xlabel("late relative step size ‖Δ‖/‖x‖ in machine epsilons of the measuring precision")
        axes[0][0].set_ylabel(f"late consecutive-step cosine\n{COSINE} (mean over k > K/2)")
        axes[0][-1].legend(handles=[*(Patch(color=colours[n], label=n) for n in names),
                                    Patch(color="tab:orange", alpha=0.3, label=f"paper: settles at {lo}–{hi}"),
                                    Line2D([], [], color="black", ls=":",
                                           label=f"the measure stage's floor ({FLOOR_EPS} eps)")],
                           loc="lower left", fontsize=8)
        suptitle(fig, "The precision question: late step cosine vs step size in units of the measuring precision "
                     "(one point per group, checkpoint and seed)")
        save_figure(fig, path)


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
    recipes = figure_recipes(similarity, "similarity", name)
    require(similarity, "similarity", ("step", "i", "j", "similarity"), name)
    require(depth, "depth", ("recipe", "seed", "step", "position", "layer", "group", "loop", "phase",
                             "layout_phase"), name)
    lead = lead_runs(similarity)
    with figure_style(), sns.axes_style("white"):
        fig, axes = panel_grid(1, len(recipes), width=7.2, height=6.6, sharey=False)
        for ax, recipe in zip(axes[0], recipes, strict=True):
            step, sim = last_checkpoint(lead.filter(pl.col("recipe") == recipe))
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
        suptitle(fig, "Similarity of the unrolled network's depth positions (mean cosine over held-out tokens)")
        save_figure(fig, path)


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
    recipes = figure_recipes(loss_vs_loops, "loss_vs_loops", name)
    require(loss_vs_loops, "loss_vs_loops", ("step", "loops", "val_loss"), name)
    rows = loss_vs_loops.sort("recipe", "seed", "step", "loops")
    colours = step_colours(training_steps(rows))
    loops = sorted(int(x) for x in rows["loops"].unique())
    with figure_style():
        fig, axes = panel_grid(1, len(recipes), width=5.4, height=4.4, sharey=True)
        for ax, recipe in zip(axes[0], recipes, strict=True):
            sns.lineplot(data=rows.filter(pl.col("recipe") == recipe).to_pandas(), x="loops", y="val_loss",
                         hue="step", units="seed", palette=colours, marker="o", ax=ax, legend=False,
                         estimator=None)
            ax.set_xscale("log", base=2)
            ax.set_xticks(loops, [str(x) for x in loops])
            ax.minorticks_off()
            ax.set_xlabel("loops per group at evaluation (log₂ scale)")
            ax.set_title(f"{recipe} ({seed_note(rows, recipe)})")
        axes[0][0].set_ylabel("validation loss (nats/token)")
        checkpoint_key(fig, axes, colours)
        suptitle(fig, "Held-out loss vs test-time loop count (every group looped this many times), per recipe")
        save_figure(fig, path)


# --- acceleration and the scalar second difference ----------------------------------------------------------


def fig_acceleration(geometry: pl.DataFrame, path: Path) -> None:
    """Last checkpoint: vector acceleration and scalar step-size difference vs k per recipe and group (median
    over tokens of each seed; q10-q90 of the first seed), with the step size for reference: the quantities an
    exit rule thresholds."""
    name = "fig_acceleration"
    recipes = figure_recipes(geometry, "geometry", name)
    series = {
        "acceleration": (f"acceleration {ACCEL}", "tab:red", "-"),
        "step_size_difference": (f"step-size difference {SIZE_DIFF}", "tab:blue", "-"),
        "step_size": (f"step size {STEP_NORM} (reference)", "0.35", ":"),
    }
    rows = metric_rows(geometry, list(series), name).filter(pl.col("k").is_not_null())
    groups = sorted(int(g) for g in rows["group"].unique())
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(groups))
        for recipe, row in zip(recipes, axes, strict=True):
            step, own = last_checkpoint(rows.filter(pl.col("recipe") == recipe))
            lead_seed = int(own["seed"][0])
            for ax, g in zip(row, groups, strict=True):
                for metric, (label, colour, ls) in series.items():
                    part = own.filter((pl.col("group") == g) & (pl.col("metric") == metric)).sort("seed", "k")
                    for (seed,), curve in part.group_by("seed", maintain_order=True):
                        pdf = curve.to_pandas()
                        if metric != "step_size" and seed == lead_seed:
                            ax.fill_between(pdf["k"], log_safe(pdf["q10"]), log_safe(pdf["q90"]),
                                            color=colour, alpha=0.15, lw=0)
                        ax.plot(pdf["k"], log_safe(pdf["median"]), color=colour, ls=ls, lw=1.6)
                ax.set_yscale("log")
                plain_log_ticks(ax)
                ax.set_title(f"{recipe} — group {g}, step {step:,}")
                ax.set_xlabel(LOOP_AXIS)
            row[0].set_ylabel(f"median over tokens\n({RESIDUAL_UNITS}, log scale)")
        handles = [Line2D([], [], color=colour, ls=ls, lw=1.6, label=label)
                   for label, colour, ls in series.values()]
        handles.append(Patch(color="0.5", alpha=0.3, label="10th–90th percentile over tokens (first seed)"))
        fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
        suptitle(fig, "Second differences of the loop trajectory vs loop step at the last checkpoint, per recipe "
                     "(one line per seed)")
        save_figure(fig, path)


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


def part_values_zero(rows: pl.DataFrame, metric: str, steps: dict[int, str]) -> bool:
    """Whether every value a diagnostics panel draws of `metric` at these checkpoints is 0."""
    values = rows.filter((pl.col("metric") == metric) & pl.col("step").is_in(list(steps)))["mean"].fill_nan(None)
    return values.len() > 0 and values.drop_nulls().len() == values.len() and bool((values == 0).all())


def fig_diagnostics(geometry: pl.DataFrame, path: Path) -> None:
    """What the loops do to the state, per recipe: its norm, the cosine between different tokens' states, the
    direction of each step relative to the state, and the fraction of tokens whose step is at the precision floor
    (exact fixed points included), vs loop step; one colour per group, the last checkpoint solid and the first
    dashed, one line per seed."""
    name = "fig_diagnostics"
    recipes = figure_recipes(geometry, "geometry", name)
    rows = metric_rows(geometry, list(DIAGNOSTICS), name).filter(pl.col("k").is_not_null())
    groups = sorted(int(g) for g in rows["group"].unique())
    palette = dict(zip(groups, sns.color_palette("deep", len(groups)), strict=True))
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(DIAGNOSTICS), width=4.2, sharey=False, sharex=True)
        for recipe, row in zip(recipes, axes, strict=True):
            own = rows.filter(pl.col("recipe") == recipe)
            steps = training_steps(own)
            shown = {steps[-1]: "-", steps[0]: "--"} if len(steps) > 1 else {steps[-1]: "-"}
            for ax, (metric, (title, label, axis)) in zip(row, DIAGNOSTICS.items(), strict=True):
                for step, ls in shown.items():
                    part = own.filter((pl.col("metric") == metric) & (pl.col("step") == step))
                    for (g, _seed), curve in part.sort("k").group_by("group", "seed", maintain_order=True):
                        values = curve["mean"].fill_nan(None).to_numpy().astype(float)
                        shown_values = log_safe(values) if axis == "log" else values
                        ax.plot(curve["k"], shown_values, color=palette[int(g)], ls=ls, lw=1.5)
                low, high = ax.dataLim.intervaly
                if axis == "log" and low > 0 and high >= 10 * low:
                    ax.set_yscale("log")
                    plain_log_ticks(ax)
                    label = label[:-1] + ", log scale)"
                elif axis == "signed":
                    ax.axhline(0.0, color="black", lw=0.8, ls=":")
                elif axis == "fraction":
                    ax.set_ylim(-0.03, 1.03)
                if part_values_zero(own, metric, shown):  # a flat line at 0 reads as a missing one: say it
                    ax.text(0.5, 0.5, "0 at every loop step\n(every group, both checkpoints, every seed)",
                            ha="center", va="center", transform=ax.transAxes, fontsize=8, color="0.3")
                ax.set_title(f"{recipe} — {title}")
                ax.set_ylabel(label)
                ax.set_xlabel(STATE_LOOP_AXIS)
        handles = [Line2D([], [], color=palette[g], lw=1.5, label=f"group {g}") for g in groups]
        all_steps = training_steps(rows)
        handles += [Line2D([], [], color="0.3", ls="-", label=f"last checkpoint (step {all_steps[-1]:,})")]
        if len(all_steps) > 1:
            handles += [Line2D([], [], color="0.3", ls="--", label=f"first checkpoint (step {all_steps[0]:,})")]
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        suptitle(fig, "What the loops do to the state, per recipe (mean over tokens; one line per group, "
                     "checkpoint and seed)")
        save_figure(fig, path)

