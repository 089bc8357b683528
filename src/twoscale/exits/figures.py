"""The exit rules' figures: Fig. 4 (perplexity against the exit setting) and the trade-off of quality against cost
and latency, from the sweep table, and the per-token depth map from the depth tables (conventions in
`report.figures`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.colors import LogNorm
from matplotlib.lines import Line2D
from matplotlib.text import Text

from twoscale.config.errors import TwoscaleError
from twoscale.exits.tables import FULL_DEPTH, SWEEP_COLUMNS, best_within, full_depth_rows
from twoscale.report.figures import (
    figure_style,
    panel_grid,
    plain_log_ticks,
    readable_point_labels,
    save_figure,
    seed_note,
    suptitle,
)
from twoscale.report.tables import of_run, recipes_in, require, runs_in

# --- Fig. 4 and the trade-off: the early-exit sweep ---------------------------------------------------------

EXIT_MARKERS = "osD^vP<X>ph*"
FULL_DEPTH_LINE = {"color": "black", "ls": "--", "lw": 1.2}
FULL_DEPTH_POINT = {"marker": "*", "ms": 15, "color": "gold", "markeredgecolor": "black", "markeredgewidth": 0.8}
LABEL_BOX = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}
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
    with figure_style():
        fig, axes = panel_grid(len(recipes), 2, width=6.0, height=4.0, sharey=False, sharex=True)
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
            plain_log_ticks(row[0], "x")
            perplexity = row[1].secondary_yaxis("right", functions=(np.exp, _cross_entropy_of))
            perplexity.set_ylabel("perplexity (e^cross-entropy)")
            row[0].set_title(f"{recipe} — latency vs threshold ({seed_note(sweep, recipe)})")
            row[1].set_title(f"{recipe} — loss vs threshold")
        _strategy_legend(fig, styles, sorted(lines["strategy"].unique()), reference)
        suptitle(fig, "Fig. 4 — early exit: latency and loss vs exit threshold, per recipe and exit rule\n"
                     "(τ = 0 and τ = ∞, the never-exit and exit-at-once ends, are off the log axis: see the "
                     "trade-off figure)")
        save_figure(fig, path)


def _annotate_loop_counts(ax: plt.Axes, fixed: pl.DataFrame, x: str, max_loops: int) -> list[Text]:
    """K = 1, 2, 4, ... next to their points on the fixed-depth frontier (those it has: a seed outside
    runtime.explain_seeds times only the depths the verdicts compare), each on a pale box so that it reads over the
    curves, and the full depth's point as the legend's star (a label there would lie across the other rules'
    curves, which meet at full depth); the labels."""
    labels = []
    for row in fixed.drop_nulls(x).iter_rows(named=True):
        k = int(row["setting"])
        point = (row[x], row["cross_entropy"])
        if k == max_loops:
            ax.plot(*point, linestyle="none", zorder=7, **FULL_DEPTH_POINT)
        elif k & (k - 1) == 0:
            labels.append(ax.annotate(f"K={k}", point, xytext=(5, 4), textcoords="offset points", fontsize=8,
                                      zorder=8, bbox=LABEL_BOX))
    return labels


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
    frontier = ([Line2D([], [], lw=2, label="fixed depth K (frontier)", **styles["fixed"]),
                 Line2D([], [], linestyle="none", label=f"full depth (K={max_loops})", **FULL_DEPTH_POINT)]
                if fixed.height else [])
    panels = {"gflops_per_token": "GFLOPs per token (exit decodes included)", "ms_per_token": LATENCY}
    point_labels = {}
    with figure_style():
        fig, axes = panel_grid(len(recipes), 2, width=6.0, height=4.0, sharey="row")
        for recipe, row in zip(recipes, axes, strict=True):
            own_rules = rules.filter(pl.col("recipe") == recipe)
            own_fixed = fixed.filter(pl.col("recipe") == recipe)
            for ax, (column, label) in zip(row, panels.items(), strict=True):
                if own_rules.height:
                    _strategy_lines(ax, own_rules, column, "cross_entropy", styles)
                for i, (_, curve) in enumerate(own_fixed.group_by("seed", maintain_order=True)):
                    ax.plot(curve[column], curve["cross_entropy"], lw=2, ms=6, zorder=5, **styles["fixed"])
                    if i == 0:
                        point_labels[ax] = _annotate_loop_counts(ax, curve, column, max_loops)
                if column == "ms_per_token":
                    _latency_spread(ax, sweep.filter(pl.col("recipe") == recipe))
                ax.set_xscale("log")  # the useful exits sit at a few loops, next to a 30-loop full depth
                plain_log_ticks(ax, "x")
                ax.set_xlabel(f"{label}, log scale")
                ax.set_ylabel(CROSS_ENTROPY)
            row[0].set_title(f"{recipe} — loss vs FLOPs ({seed_note(sweep, recipe)})")
            row[1].set_title(f"{recipe} — loss vs latency")
        _strategy_legend(fig, styles, sorted(rules["strategy"].unique()), frontier)
        suptitle(fig, "Early exit: loss vs FLOPs and latency, every setting of every exit rule, per recipe\n"
                     "(points joined in order of mean loops, including the τ = 0 and τ = ∞ ends)")
        for ax, labels in point_labels.items():
            readable_point_labels(ax, labels)
        save_figure(fig, path)


# --- the depth map: which tokens exit when ---------------------------------------------------------------------

DEPTH_KEYS = ("recipe", "seed", "strategy", "setting", "window", "position", "group", "exit_step")
DEPTH_WINDOW = 0  # the map shows the first held-out window


def depth_map_points(sweep: pl.DataFrame) -> list[dict[str, Any]]:
    """The points the depth map draws, per recipe's first seed: each exit rule's best point (its cheapest setting
    within 1% of full depth's perplexity, as C6 reads it), with recipe, seed and swept added; rules with no setting
    within 1% and fixed depth (K loops on every token) are left out."""
    first_seeds: dict[str, int] = {}
    for recipe, seed in runs_in(sweep):
        first_seeds.setdefault(recipe, seed)
    points = []
    for recipe, seed in first_seeds.items():
        own_run = of_run(sweep, recipe, seed)
        for strategy in sorted(set(own_run["strategy"]) - {FULL_DEPTH}):
            best = best_within(own_run, strategy)
            if best is not None:
                swept = own_run.filter(pl.col("strategy") == strategy)["swept"][0]
                points.append({**best, "recipe": recipe, "seed": seed, "swept": swept})
    return points


def _depth_rows(depth: pl.DataFrame, point: dict[str, Any]) -> np.ndarray:
    """A point's exit steps in the depth map's window, (groups, positions)."""
    own = of_run(depth, point["recipe"], point["seed"]).filter(
        (pl.col("strategy") == point["strategy"]) & (pl.col("setting") == point["setting"])
        & (pl.col("window") == DEPTH_WINDOW))
    if own.height == 0:
        raise TwoscaleError(f"fig_exit_depth: the depth table has no rows of {point['recipe']}, seed {point['seed']}, "
                            f"{point['strategy']} at {point['setting']:g}")
    grid = own.pivot(on="position", index="group", values="exit_step", sort_columns=True).sort("group")
    return grid.drop("group").to_numpy()


def fig_exit_depth(sweep: pl.DataFrame, depth: pl.DataFrame, path: Path) -> None:
    """Each token's exit step in every looped group across the first held-out window, one panel per recipe (its
    first seed): a band of rows (one per group) per exit rule at its best point (`depth_map_points`), positions
    across, colour = loops run."""
    name = "fig_exit_depth"
    require(sweep, "sweep", ("recipe", "seed", *SWEEP_COLUMNS), name)
    points = depth_map_points(sweep)
    if points:
        require(depth, "depth", DEPTH_KEYS, name)
    recipes = recipes_in(sweep)
    max_loops = int(sweep["max_loops"][0])
    bands = {recipe: [(point, _depth_rows(depth, point)) for point in points if point["recipe"] == recipe]
             for recipe in recipes}
    tallest = max([sum(len(rows) for _, rows in band) for band in bands.values()] + [1])
    # log-spaced colours: the useful exits run a few loops, next to a full depth of tens (a linear scale gives
    # 1 to 5 loops one purple)
    colours, loops_norm = plt.get_cmap("viridis"), LogNorm(vmin=1, vmax=max_loops)
    with figure_style():
        fig, axes = panel_grid(len(recipes), 1, width=11.0, height=0.25 * tallest + 1.2, sharey=False)
        for recipe, (ax,) in zip(recipes, axes, strict=True):
            seed = next(seed for r, seed in runs_in(sweep) if r == recipe)
            ax.set_title(f"{recipe}, seed {seed}")
            ax.grid(False)
            if not bands[recipe]:
                ax.text(0.5, 0.5, "no exit rule comes within 1% of full depth's perplexity", ha="center",
                        va="center", transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            image = ax.imshow(np.vstack([rows for _, rows in bands[recipe]]), aspect="auto", cmap=colours,
                              norm=loops_norm, interpolation="nearest")
            labels, top = [], 0
            for point, rows in bands[recipe]:
                setting = f"τ = {point['setting']:g}" if point["swept"] == "threshold" else \
                    f"{point['swept']} = {point['setting']:g}"
                labels += [f"{point['strategy']} {setting} · group {g}" for g in range(len(rows))]
                top += len(rows)
                ax.axhline(top - 0.5, color="white", lw=2)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
            ax.set_xlabel(f"position in held-out window {DEPTH_WINDOW}")
        if any(bands.values()):
            bar = fig.colorbar(image, ax=[row[0] for row in axes], label="exit step (loops the group ran, log scale)")
            ticks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k < max_loops] + [max_loops]
            bar.set_ticks(ticks, labels=[str(k) for k in ticks])
            bar.minorticks_off()
        suptitle(fig, f"Per-token depth: loops each token ran in each looped group (of at most {max_loops}), "
                     "each rule at its cheapest setting within 1% of full depth's perplexity\n(fixed depth runs K "
                     "loops on every token)")
        save_figure(fig, path)

