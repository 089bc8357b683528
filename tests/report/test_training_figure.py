"""One training run's loss curves (twoscale.report.training): the curves drawn are the history's numbers, the
validation points only where it was evaluated, and the unigram line at its value."""

from __future__ import annotations

import polars as pl
import pytest
from PIL import Image

from twoscale.config.errors import TwoscaleError
from twoscale.report import training

HISTORY = pl.DataFrame({"step": [1, 2, 3, 4], "train_loss": [7.0, 6.5, 6.1, 5.9],
                        "val_loss": [None, 6.6, None, 6.0], "lr": [1e-3] * 4})


def test_the_curves_are_the_history_s_numbers(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(training, "save_figure", lambda fig, path: drawn.update(fig=fig, path=path))
    training.fig_loss_curves(HISTORY, 6.15, "huginn, seed 1337", tmp_path / "loss.png")
    (ax,) = drawn["fig"].axes
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    assert lines["training (each step's batch)"] == ([1, 2, 3, 4], [7.0, 6.5, 6.1, 5.9])
    assert lines["validation (last 6.000)"] == ([2, 4], [6.6, 6.0])
    assert lines["unigram model (6.15)"][1] == [6.15, 6.15]
    assert "huginn, seed 1337" in drawn["fig"]._suptitle.get_text()


def test_the_figure_is_a_png_with_readable_text(tmp_path, caplog):
    path = tmp_path / "loss.png"
    training.fig_loss_curves(HISTORY, 6.15, "paper, seed 1", path)
    with Image.open(path) as image:
        assert image.format == "PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["loss.png"]
    assert not [message for message in caplog.messages if "unreadable" in message]


def test_a_history_without_losses_is_one_line_naming_the_figure(tmp_path):
    with pytest.raises(TwoscaleError, match="loss curves"):
        training.fig_loss_curves(pl.DataFrame({"step": [1]}), 6.15, "huginn, seed 1", tmp_path / "loss.png")
    assert list(tmp_path.iterdir()) == []
