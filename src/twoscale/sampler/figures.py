"""The parallel sampler's figure: its settings' quality, repetition and agreement against speed and cost beside
autoregressive decoding (conventions in `report.figures`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import matplotlib.ticker
import polars as pl
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from twoscale.report.figures import figure_style, plain_log_ticks, readable_point_labels, save_figure, suptitle
from twoscale.report.tables import require
from twoscale.sampler.tables import AUTOREGRESSIVE, SAMPLER

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
    """One run's sampler against autoregressive decoding: quality (the paired gap in re-scored cross-entropy to
    autoregressive decoding at full recurrence), the distinct-token fraction and greedy agreement against tokens/s; the
    quality gap against layer applications and GFLOPs per generated token; tokens/s against GFLOPs per token.
    Autoregressive decoding is one black line over its loop counts; the sampler one line per freeze criterion and ε over
    r′ (labelled)."""
    require(summary, "sampling summary", ("method", "loops", "inner_loops", "tolerance", "freeze", "full_loops",
                                          *_SAMPLER_AXES, "quality_tolerance", "distinct_tolerance"),
            "sampler figure")
    autoregressive = summary.filter(pl.col("method") == AUTOREGRESSIVE).sort("loops")
    reference = autoregressive.filter(pl.col("loops") == pl.col("full_loops")).row(0, named=True)
    sampler = summary.filter(pl.col("method") == SAMPLER).sort("inner_loops")
    lines = list(sampler.select("freeze", "tolerance").unique(maintain_order=True).iter_rows())
    palette = dict(zip(lines, sns.color_palette("deep", len(lines)), strict=True))
    markers = {"latent_difference": "o", "acceleration": "s"}
    with figure_style():
        fig, axes = plt.subplots(2, 3, figsize=(14, 9), layout="constrained")
        point_labels = {}
        for ax, (x_column, y_column) in zip(axes.flat, _SAMPLER_PANELS, strict=True):
            ax.plot(autoregressive[x_column], autoregressive[y_column], color="black", marker="D", ms=5, lw=1.6)
            point_labels[ax] = [ax.annotate(f"{loops}", (x, y), textcoords="offset points", xytext=(4, 4),
                                            fontsize=7)
                                for x, y, loops in autoregressive.select(x_column, y_column, "loops").iter_rows()]
            for freeze, tolerance in lines:
                rows = sampler.filter((pl.col("freeze") == freeze) & (pl.col("tolerance") == tolerance))
                ax.plot(rows[x_column], rows[y_column], color=palette[(freeze, tolerance)],
                        marker=markers.get(freeze, "o"), ms=5, lw=1.3, alpha=0.9)
                point_labels[ax] += [ax.annotate(f"{r}", (x, y), textcoords="offset points", xytext=(3, -9),
                                                 fontsize=6, color=palette[(freeze, tolerance)])
                                     for x, y, r in rows.select(x_column, y_column, "inner_loops").iter_rows()]
            if x_column in _SAMPLER_LOG_AXES:
                ax.set_xscale("log")
                plain_log_ticks(ax, "x")
            if y_column in _SAMPLER_LOG_AXES:
                ax.set_yscale("log")
                plain_log_ticks(ax, "y")
            _equal_quality_band(ax, y_column, summary, reference)
            ax.set_xlabel(_SAMPLER_AXES[x_column])
            ax.set_ylabel(_SAMPLER_AXES[y_column])
        quality, distinct = float(summary["quality_tolerance"][0]), float(summary["distinct_tolerance"][0])
        handles = [Line2D([], [], color="black", marker="D", ms=5, label="autoregressive decoding (labels: loops)")]
        handles += [Line2D([], [], color=palette[key], marker=markers.get(key[0], "o"), ms=5,
                           label=f"sampler, {key[0]}, ε {key[1]:g} (labels: r′)") for key in lines]
        handles += [Patch(color="tab:green", alpha=0.2, label=f"about equal quality: gap within ± {quality:g} "
                          f"nats,\ndistinct fraction ≥ full recurrence's − {distinct:g}")]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False,
                   fontsize=7)
        recipe, seed = summary["recipe"][0], summary["seed"][0]
        suptitle(fig, f"Parallel sampler vs cached autoregressive decoding: {recipe}, seed {seed}")
        for ax, labels in point_labels.items():  # where points crowd, autoregressive decoding's labels first
            readable_point_labels(ax, labels)
        save_figure(fig, path)
