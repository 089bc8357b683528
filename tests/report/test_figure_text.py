"""What every figure shares about its text (twoscale.report.figures): the check that no text leaves the figure or
its axes or covers another, on figures built by hand whose defects are known; wrapped titles, point labels that
give way, and log axes labelled one way throughout."""

from __future__ import annotations

import logging
import re

import matplotlib.pyplot as plt
import pytest

from twoscale.report import figures


@pytest.fixture
def panel():
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.plot([0, 1], [0, 1])
    ax.set_title("a title")
    yield fig, ax
    plt.close(fig)


def test_a_clean_figure_has_no_text_defects(panel):
    fig, ax = panel
    ax.text(0.5, 0.5, "inside", transform=ax.transAxes, ha="center")
    assert figures.text_defects(fig) == []


def test_a_text_off_the_figure_or_off_its_axes_or_over_another_is_named(panel):
    fig, ax = panel
    ax.text(1.3, 0.5, "beside the panel", transform=ax.transAxes)  # on the axes, outside its area
    fig.text(0.9, 0.5, "cut by the right edge")
    ax.text(0.2, 0.2, "first", transform=ax.transAxes)
    ax.text(0.2, 0.2, "second", transform=ax.transAxes)
    defects = figures.text_defects(fig)
    assert "'beside the panel' leaves its axes" in defects
    assert "'cut by the right edge' leaves the figure" in defects
    assert "'first' overlaps 'second'" in defects


def test_tick_labels_crowding_each_other_are_named(panel):
    fig, ax = panel
    ax.set_xticks([0.0, 0.01, 0.02], ["a long tick label", "another long one", "and a third"])
    assert any("overlaps" in defect and "long" in defect for defect in figures.text_defects(fig))


def test_save_figure_warns_of_each_defect_and_saves_all_the_same(panel, tmp_path, caplog):
    fig, ax = panel
    fig.text(0.95, 0.5, "cut by the right edge")
    with caplog.at_level(logging.WARNING):
        figures.save_figure(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").is_file()
    assert caplog.messages == [f"{figures.UNREADABLE} f.png: 'cut by the right edge' leaves the figure"]


def test_a_long_title_is_wrapped_to_the_figure_s_width(panel):
    fig, _ = panel
    long = "a title that runs far wider than a four-inch figure could ever hold on one line of text " * 2
    fig.suptitle(long)
    assert any("leaves the figure" in defect for defect in figures.text_defects(fig))  # the premise
    figures.suptitle(fig, long)
    assert figures.text_defects(fig) == [] and fig.get_suptitle().count("\n") >= 2


def test_point_labels_that_would_cover_another_or_leave_the_panel_give_way(panel):
    fig, ax = panel
    labels = [ax.annotate("kept", (0.5, 0.5)), ax.annotate("covered", (0.5, 0.5)),
              ax.annotate("off the panel", (1.0, 1.0), xytext=(30, 0), textcoords="offset points")]
    figures.readable_point_labels(ax, labels)
    assert [label.get_visible() for label in labels] == [True, False, False]
    assert figures.text_defects(fig) == []


@pytest.mark.parametrize("low, high, pattern", [
    (0.5, 100, r"1|10|100"),
    (1e-6, 100, r"\$10\^\{-?\d\}\$"),  # never 1e-06 beside 100
])
def test_a_log_axis_is_labelled_one_way_throughout(panel, low, high, pattern):
    fig, ax = panel
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    figures.plain_log_ticks(ax)
    fig.canvas.draw()
    shown = [label.get_text() for label in ax.yaxis.get_majorticklabels()
             if label.get_text() and low <= float(label.get_position()[1]) <= high]
    assert len(shown) >= 3 and all(re.fullmatch(pattern, text) for text in shown), shown


def test_checkpoints_named_in_a_legend_get_colours_evenly_spaced_in_order():
    """Six checkpoints 25-600: viridis at 0, 0.184, ..., 0.92 (log-spaced to 0.85, 400 and 600 sat at 0.74 and 0.85,
    two near-equal greens); more than a legend names follow the colour bar's log scale, to 0.85."""
    viridis = plt.get_cmap("viridis")
    steps = [25, 50, 100, 200, 400, 600]
    assert figures.step_colours(steps) == {step: viridis(0.184 * i) for i, step in enumerate(steps)}
    assert figures.step_colours([40]) == {40: viridis(0.0)}
    many = [2 ** i for i in range(12)]  # 1 ... 2048: a colour bar
    colours = figures.step_colours(many)
    assert colours[1] == viridis(0.0) and colours[2048] == viridis(0.85) and colours[64] == viridis(0.85 * 6 / 11)
