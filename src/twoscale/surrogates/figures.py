"""Figures of the block-recurrent surrogates (docs/methods.md#block-recurrent-surrogates): a teacher's phases,
what its surrogates recover, and the dynamics of depth of teachers, surrogates and looped models. Written
atomically (`report.figures`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.lines import Line2D

from twoscale.config.errors import TwoscaleError
from twoscale.report.figures import figure_style, panel_grid, save_figure, suptitle
from twoscale.report.tables import require
from twoscale.surrogates.thresholds import C8_RECOVERY

MEASURES = {
    "convergence": r"directional convergence $\cos(\hat x_\ell, \hat x_L)$",
    "angular_speed": r"angular speed $\arccos(\hat x_\ell \cdot \hat x_{\ell+1})$ (radians)",
    "stable_rank": r"stable rank of the update $\hat x_{\ell+1} - \hat x_\ell$ across tokens",
}


def fig_teacher_phases(distance: np.ndarray, phases: Mapping[int, Sequence[tuple[int, int]]], title: str,
                       path: Path) -> None:
    """Left: the layer-by-layer cosine distance with the boundaries of the most phases; right: the phases for
    every k, one row each."""
    L = distance.shape[0]
    if distance.shape != (L, L) or not phases:
        raise TwoscaleError("fig_teacher_phases: need a square distance matrix and at least one k")
    ks = sorted(phases)
    with figure_style(), sns.axes_style("white"):
        fig, (ax, bars) = plt.subplots(1, 2, figsize=(11.5, 4.8), layout="constrained",
                                       gridspec_kw={"width_ratios": [1.15, 1]})
        sns.heatmap(np.clip(distance, 0, None), ax=ax, cmap="magma_r", vmin=0, square=True, annot=L <= 12, fmt=".2f",
                    annot_kws={"fontsize": 6}, cbar_kws={"label": "mean cosine distance 1 − cos (unitless)"})
        ax.set_xticklabels(range(L))
        ax.set_yticklabels(range(L), rotation=0)
        for first, _ in phases[ks[-1]][1:]:
            ax.axvline(first, color="#0a84ff", lw=2)
            ax.axhline(first, color="#0a84ff", lw=2)
        ax.set_xlabel("layer j (its output)")
        ax.set_ylabel("layer i")
        ax.set_title(f"distance between layer outputs; blue: the {ks[-1]} phases", fontsize=9)
        palette = sns.color_palette("tab10")
        for row, k in enumerate(ks):
            for index, (first, last) in enumerate(phases[k]):
                bars.barh(row, last - first + 1, left=first - 0.5, color=palette[index % 10], edgecolor="white")
                bars.text((first + last) / 2, row, f"{first}–{last}" if last > first else str(first),
                          ha="center", va="center", fontsize=8, color="white")
        bars.set_yticks(range(len(ks)), [f"k = {k}" for k in ks])
        bars.invert_yaxis()
        bars.set_xlim(-0.5, L - 0.5)
        bars.set_xticks(range(L))
        bars.set_xlabel("layer (one shared block per phase)")
        bars.set_title("contiguous phases by exact max-cut", fontsize=9)
        suptitle(fig, f"Phases of teacher {title}: mean over held-out windows of two summaries "
                     "(mean token state, last token state)", fontsize=10)
        save_figure(fig, path)


def fig_surrogate_recovery(recovery: pl.DataFrame, layer_r2: pl.DataFrame, path: Path) -> None:
    """Per teacher (a row of panels): the recovered fraction and KL to the teacher against k for the surrogates
    and the k-layer controls, every seed a point; and each surrogate's per-layer R². Without teachers (a recovery
    table with its columns and no rows), a figure saying so."""
    name = "fig_surrogate_recovery"
    if recovery.height == 0 and "teacher" in recovery.columns:  # a parameter set without teachers
        with figure_style():
            fig, ax = plt.subplots(figsize=(6, 2), layout="constrained")
            ax.axis("off")
            ax.text(0.5, 0.5, "no plain GPT under `teachers`: nothing distilled", ha="center", va="center")
            save_figure(fig, path)
        return
    require(recovery, "recovery", ("teacher", "seed", "blocks", "surrogate_recovered", "control_recovered"), name)
    require(layer_r2, "layer_r2", ("teacher", "seed", "blocks", "layer", "r2"), name)
    teachers = list(dict.fromkeys(recovery["teacher"]))
    ks = sorted(set(recovery["blocks"]))
    colours = dict(zip(ks, sns.color_palette("viridis", len(ks))))
    styles = {"surrogate": {"color": "#0a84ff", "marker": "o", "ls": "-"},
              "control": {"color": "0.45", "marker": "s", "ls": "--"}}
    with figure_style():
        fig, axes = panel_grid(len(teachers), 3, width=4.3, height=3.6, sharey=False)
        for (ax_rec, ax_kl, ax_r2), teacher in zip(axes, teachers, strict=True):
            rows = recovery.filter(pl.col("teacher") == teacher).sort("blocks", "seed")
            n_seeds = rows["seed"].n_unique()
            for model, style in styles.items():
                for ax, column in ((ax_rec, f"{model}_recovered"), (ax_kl, f"{model}_kl_to_teacher")):
                    means = rows.group_by("blocks").agg(pl.col(column).mean()).sort("blocks")
                    ax.plot(means["blocks"], means[column], color=style["color"], ls=style["ls"], lw=1.6)
                    ax.scatter(rows["blocks"], rows[column], color=style["color"], marker=style["marker"], s=18,
                               zorder=3)
            ax_rec.axhline(1.0, color="black", lw=0.8)
            ax_rec.axhline(C8_RECOVERY, color="#ff3b30", lw=1, ls=":")
            ax_rec.set_ylabel("recovered fraction of the teacher\n(CE_unigram − CE) / (CE_unigram − CE_teacher)")
            ax_kl.set_ylabel("KL(teacher ‖ model), nats per token")
            ax_kl.set_yscale("log")
            for ax in (ax_rec, ax_kl):
                ax.set_xticks(ks)
                ax.set_xlabel("k (surrogate blocks = control layers)")
                ax.set_title(f"teacher {teacher} ({n_seeds} seed{'s' if n_seeds > 1 else ''})", fontsize=9)
            r2 = layer_r2.filter(pl.col("teacher") == teacher)
            for (k, _seed), curve in r2.sort("layer").group_by("blocks", "seed", maintain_order=True):
                ax_r2.plot(curve["layer"], curve["r2"], color=colours[k], marker=".", lw=1.2)
            ax_r2.set_xlabel("teacher layer")
            ax_r2.set_ylabel("R² of the surrogate's state")
            ax_r2.set_title("per-layer R² (every seed a line)", fontsize=9)
            ax_r2.legend(handles=[Line2D([], [], color=colours[k], lw=1.6, label=f"k = {k}") for k in ks],
                         fontsize=7, frameon=False)
        axes[0][0].legend(handles=[
            Line2D([], [], color=styles["surrogate"]["color"], marker="o", label="surrogate (k shared blocks)"),
            Line2D([], [], color=styles["control"]["color"], marker="s", ls="--",
                   label="control (k layers from scratch)"),
            Line2D([], [], color="#ff3b30", ls=":", label=f"{100 * C8_RECOVERY:g}% (claim C8)")],
            fontsize=7, frameon=False)
        suptitle(fig, "What block-recurrent surrogates recover of a plain GPT, read through its final norm and LM head"
                     " (lines: mean over seeds)", fontsize=10)
        save_figure(fig, path)


def fig_depth_dynamics(dynamics: pl.DataFrame, path: Path) -> None:
    """The three measures of `surrogates.dynamics` against relative depth, for the teachers (black), their
    surrogates (by k) and the looped recipes (dashed); every seed a line of its own."""
    name = "fig_depth_dynamics"
    require(dynamics, "dynamics", ("model", "name", "seed", "blocks", "relative_depth", *MEASURES), name)
    ks = sorted(k for k in set(dynamics["blocks"]) if k is not None)
    k_colours = dict(zip(ks, sns.color_palette("viridis", len(ks))))
    looped = list(dict.fromkeys(dynamics.filter(pl.col("model") == "looped")["name"]))
    looped_colours = dict(zip(looped, sns.color_palette("Set1", max(len(looped), 1))))

    def style(model: str, name: str, k: int | None) -> dict:
        if model == "teacher":
            return {"color": "black", "lw": 2.0, "ls": "-", "label": f"teacher {name}"}
        if model == "surrogate":
            return {"color": k_colours[k], "lw": 1.3, "ls": "-", "label": f"surrogate k = {k}"}
        return {"color": looped_colours[name], "lw": 1.3, "ls": "--", "label": f"looped {name}"}

    with figure_style():
        fig, axes = panel_grid(1, 3, width=4.6, height=3.8, sharey=False)
        legend: dict[str, Line2D] = {}
        for (model, name_, seed, k), curve in dynamics.group_by("model", "name", "seed", "blocks",
                                                                  maintain_order=True):
            curve = curve.sort("relative_depth")
            line = style(model, name_, k)
            for ax, measure in zip(axes[0], MEASURES, strict=True):
                ax.plot(curve["relative_depth"], curve[measure], color=line["color"], lw=line["lw"], ls=line["ls"])
            legend.setdefault(line["label"], Line2D([], [], color=line["color"], lw=line["lw"], ls=line["ls"],
                                                    label=line["label"]))
        for ax, (measure, label) in zip(axes[0], MEASURES.items(), strict=True):
            ax.set_xlabel("relative depth ℓ / L (0 = embedding; loops unrolled)\n"
                          + ("" if measure == "convergence" else "of the step's start ℓ → ℓ + 1"))
            ax.set_ylabel(label, fontsize=8)
        fig.legend(handles=list(legend.values()), loc="outside right upper", frameon=False, fontsize=8)
        suptitle(fig, "Dynamics of depth on unit-normalised states (held-out tokens; every seed a line)", fontsize=10)
        save_figure(fig, path)
