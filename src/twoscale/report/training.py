"""One training run's loss curves: the training loss at every step and the validation loss at each evaluation, in
nats per token, beside the unigram model's validation loss (what a model that ignores context scores)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import polars as pl

from twoscale.report.figures import figure_style, save_figure, suptitle
from twoscale.report.tables import require

TRAIN_COLOUR, VAL_COLOUR, BASELINE_COLOUR = "tab:blue", "tab:orange", "0.45"


def fig_loss_curves(history: pl.DataFrame, unigram_val_loss: float, run: str, path: Path) -> None:
    """The figure of `history` (the train stage's table: step, train_loss, val_loss null between evaluations) for the
    run named `run` (e.g. "huginn, seed 1337")."""
    history = require(history, "history", ["step", "train_loss", "val_loss"], "the loss curves")
    evaluated = history.filter(pl.col("val_loss").is_not_null() & pl.col("val_loss").is_not_nan())
    with figure_style():
        fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
        ax.plot(history["step"], history["train_loss"], color=TRAIN_COLOUR, linewidth=0.8, alpha=0.8,
                label="training (each step's batch)")
        last = f" (last {evaluated['val_loss'][-1]:.3f})" if len(evaluated) else ""
        ax.plot(evaluated["step"], evaluated["val_loss"], color=VAL_COLOUR, marker="o", markersize=4,
                label=f"validation{last}")
        ax.axhline(unigram_val_loss, color=BASELINE_COLOUR, linestyle="--", linewidth=1,
                   label=f"unigram model ({unigram_val_loss:.2f})")
        ax.set_xlabel("training step")
        ax.set_ylabel("loss (nats per token)")
        ax.set_xlim(0, max(int(history["step"].max()), 1))
        ax.legend(loc="upper right", fontsize="small")
        suptitle(fig, f"Loss during training: {run}")
        save_figure(fig, path)
