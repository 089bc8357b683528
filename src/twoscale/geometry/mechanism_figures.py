"""Figures of why the loops move as they do: the loop map's eigenvalues in the complex plane, its predictions held
against the measured late steps, and the logit lens across loop steps. Frames as the spectrum and lens stages write
them (docs/methods.md#the-loop-maps-spectrum, #a-logit-lens-across-loop-steps); each recipe's first seed."""

from __future__ import annotations

from pathlib import Path

import matplotlib.ticker
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.lines import Line2D

from twoscale.geometry.figures import COSINE, LOOP_AXIS, PAPER_COSINE_BAND
from twoscale.report.figures import (
    figure_recipes,
    figure_style,
    lead_runs,
    panel_grid,
    save_figure,
    suptitle,
)
from twoscale.report.tables import training_steps


def group_colours(frame: pl.DataFrame) -> dict[int, tuple]:
    groups = sorted(int(g) for g in frame["group"].unique())
    return dict(zip(groups, sns.color_palette("deep", len(groups)), strict=True))


def band_angles_deg() -> tuple[float, float]:
    """The dominant eigenvalue's angles whose cosine lies in the paper's band (0.65 -> 49.5°, 0.5 -> 60°)."""
    lo, hi = PAPER_COSINE_BAND
    return float(np.degrees(np.arccos(hi))), float(np.degrees(np.arccos(lo)))


def fig_spectrum(spectrum: pl.DataFrame, path: Path) -> None:
    """Every sampled token's leading eigenvalues of the one-step Jacobian in the complex plane, per recipe at its
    first and last checkpoint, a colour per group (the dominant eigenvalue larger), the unit circle and the angles
    whose cosine is in the paper's band."""
    name = "fig_spectrum"
    recipes = figure_recipes(spectrum, "spectrum", name)
    frame = lead_runs(spectrum)
    colours = group_colours(frame)
    low, high = np.radians(band_angles_deg())
    circle = np.linspace(0, 2 * np.pi, 361)
    with figure_style():
        fig, axes = panel_grid(len(recipes), 2, width=4.4, height=4.4, sharey=False)
        for recipe, row in zip(recipes, axes, strict=True):
            own = frame.filter(pl.col("recipe") == recipe)
            steps = training_steps(own)
            for ax, step in zip(row, (steps[0], steps[-1]), strict=True):
                at = own.filter(pl.col("step") == step)
                reach = max(1.05, float(at["spectral_radius"].max()) * 1.1)
                wedge = np.linspace(low, high, 30)
                for sign in (1, -1):
                    ax.fill(np.r_[0, reach * np.cos(wedge), 0], sign * np.r_[0, reach * np.sin(wedge), 0],
                            color="tab:orange", alpha=0.15, lw=0, zorder=0)
                ax.plot(np.cos(circle), np.sin(circle), color="black", lw=0.8, zorder=1)
                for group, colour in colours.items():
                    tokens = at.filter(pl.col("group") == group)
                    real = np.concatenate(tokens["eigenvalues_real"].to_list()) if tokens.height else []
                    imag = np.concatenate(tokens["eigenvalues_imag"].to_list()) if tokens.height else []
                    ax.scatter(real, imag, s=4, color=colour, alpha=0.35, lw=0, zorder=2)
                    dominant = [(r[0], i[0]) for r, i in zip(tokens["eigenvalues_real"], tokens["eigenvalues_imag"],
                                                             strict=True)]
                    if dominant:
                        ax.scatter(*zip(*dominant, strict=True), s=16, color=colour, edgecolor="black", lw=0.3,
                                   zorder=3)
                ax.set_xlim(-reach, reach)
                ax.set_ylim(-reach, reach)
                ax.set_aspect("equal")
                ax.axhline(0, color="0.5", lw=0.5)
                ax.axvline(0, color="0.5", lw=0.5)
                ax.set_title(f"{recipe} — step {step:,}")
                ax.set_xlabel("Re λ")
            row[0].set_ylabel("Im λ")
        handles = [Line2D([], [], marker="o", ls="", color=c, label=f"group {g}") for g, c in colours.items()]
        handles += [Line2D([], [], color="black", lw=0.8, label="unit circle"),
                    Line2D([], [], marker="s", ls="", color="tab:orange", alpha=0.4,
                           label=f"angles with cos in the paper's band {PAPER_COSINE_BAND[0]}–{PAPER_COSINE_BAND[1]}")]
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize=8)
        suptitle(fig, "Leading eigenvalues of one loop step's Jacobian per token, first and last checkpoint\n"
                     "(the token's own state at its last iterate; the dominant one outlined)")
        save_figure(fig, path)


AGREEMENT_PANELS = (  # (predicted column, measured column, axis label of the prediction, of the measurement)
    ("spectral_radius", "measured_step_ratio", "spectral radius of the token's own block",
     "measured late step ratio s(k+1)/s(k)"),
    ("prefix_radius", "measured_step_ratio", "largest radius over the token's prefix",
     "measured late step ratio s(k+1)/s(k)"),
    ("predicted_cosine", "measured_step_cosine", "cos(arg λ) of the dominant eigenvalue",
     f"measured late cosine {COSINE}"),
)


def fig_spectrum_agreement(spectrum: pl.DataFrame, path: Path) -> None:
    """Predicted against measured late dynamics per sampled token at the last checkpoint (filled) and the first
    (hollow), a colour per group, the diagonal drawn: the own block's and the prefix's spectral radius against the
    late step ratio, the dominant eigenvalue's cos(arg λ) against the late consecutive-step cosine."""
    name = "fig_spectrum_agreement"
    recipes = figure_recipes(spectrum, "spectrum", name)
    frame = lead_runs(spectrum)
    colours = group_colours(frame)
    with figure_style():
        fig, axes = panel_grid(len(recipes), len(AGREEMENT_PANELS), width=4.0, height=3.8, sharey=False)
        for recipe, row in zip(recipes, axes, strict=True):
            own = frame.filter(pl.col("recipe") == recipe)
            steps = training_steps(own)
            for ax, (predicted, measured, x_label, y_label) in zip(row, AGREEMENT_PANELS, strict=True):
                values = own.select(pl.col(predicted), pl.col(measured)).to_numpy()
                finite = values[np.isfinite(values).all(axis=1)]
                lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
                if predicted == "predicted_cosine":  # the whole range, so that the band shows where points are not
                    lo, hi = -1.05, 1.05
                    ax.set_xlim(lo, hi)
                    ax.set_ylim(lo, hi)
                    ax.axhspan(*PAPER_COSINE_BAND, color="tab:orange", alpha=0.2, lw=0, zorder=0)
                else:  # radii near 1 to four decimals: a few ticks, not one per 0.0025
                    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
                    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
                ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls="--", zorder=1)
                for step, filled in ((steps[0], False), (steps[-1], True)):
                    for group, colour in colours.items():
                        part = own.filter((pl.col("step") == step) & (pl.col("group") == group))
                        ax.scatter(part[predicted].to_numpy(), part[measured].to_numpy(), s=10, lw=0.8,
                                   color=colour if filled else "none", edgecolor=colour, alpha=0.7, zorder=2)
                ax.set_xlabel(x_label)
                ax.set_ylabel(y_label)
                ax.set_title(recipe)
        handles = [Line2D([], [], marker="o", ls="", color=c, label=f"group {g}") for g, c in colours.items()]
        handles += [Line2D([], [], marker="o", ls="", color="0.3", label="last checkpoint"),
                    Line2D([], [], marker="o", ls="", color="none", markeredgecolor="0.3", label="first checkpoint"),
                    Line2D([], [], color="black", lw=0.8, ls="--", label="prediction = measurement")]
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize=8)
        suptitle(fig, "The loop map's spectrum against the measured late loop steps (k > K/2), one point per token "
                     "and group")
        save_figure(fig, path)


DECODE_STYLES = {"rest": "-", "head": "--"}
DECODE_WORDS = {"rest": "the later layers once, then the head", "head": "the final norm and head alone"}


def fig_lens(lens: pl.DataFrame, path: Path) -> None:
    """The logit lens at the last checkpoint: per group and loop step k, the share of tokens whose top-1 token is
    the full-depth prediction's, and the mean KL to it (log scale); a colour per group, a line style per decode."""
    name = "fig_lens"
    recipes = figure_recipes(lens, "lens", name)
    frame = lead_runs(lens)
    colours = group_colours(frame)
    with figure_style():
        fig, axes = panel_grid(len(recipes), 2, width=4.6, height=3.4, sharey=False)
        for recipe, (agree_ax, kl_ax) in zip(recipes, axes, strict=True):
            own = frame.filter(pl.col("recipe") == recipe)
            step = training_steps(own)[-1]
            at = own.filter(pl.col("step") == step).sort("k")
            for (group, decode), part in at.group_by("group", "decode", maintain_order=True):
                style = {"color": colours[group], "ls": DECODE_STYLES.get(decode, ":"), "lw": 1.5}
                agree_ax.plot(part["k"], part["top1_agreement"], **style)
                kl_ax.plot(part["k"], np.maximum(part["mean_kl"].to_numpy(), 1e-12), **style)
            agree_ax.set_ylim(0, 1.02)
            agree_ax.set_ylabel("top-1 agreement with full depth")
            kl_ax.set_yscale("log")
            kl_ax.set_ylabel("mean KL(p_full ‖ p_k), nats (log)")
            for ax in (agree_ax, kl_ax):
                ax.set_xlabel(LOOP_AXIS)
                ax.set_title(f"{recipe} — step {step:,}")
        handles = [Line2D([], [], color=c, label=f"group {g} stopped at k") for g, c in colours.items()]
        handles += [Line2D([], [], color="0.3", ls=style, label=f"decoded by {DECODE_WORDS.get(d, d)}")
                    for d, style in DECODE_STYLES.items() if d in set(frame["decode"])]
        fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False, fontsize=8)
        suptitle(fig, "Logit lens across loop steps: what the model would predict\nif one group stopped after k "
                     "steps (the groups before it at full depth)")
        save_figure(fig, path)
