"""The exit sweep's figures: each writes a readable PNG of sensible size from a small synthetic sweep of two recipes
(one with two seeds), writes it atomically, and fails with a clear error on empty or incomplete input."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from PIL import Image

from twoscale.config.errors import TwoscaleError
from twoscale.exits import figures as exit_figures

RUNS = [("paper", 1), ("paper", 2), ("huginn", 1)]


SWEEP_FIGURES = ["fig4_exit_sweep", "fig_exit_tradeoff"]
MAX_LOOPS = 6


@pytest.fixture(scope="module")
def sweep() -> pl.DataFrame:
    """Fixed depth 1..6, two threshold rules with the τ = 0 (never exit) and τ = ∞ (exit at once) ends, and
    the argmax rule swept by hits."""
    rows = []

    def add(run, strategy, criterion, swept, setting, loops):
        ce = 3.0 + 2.0 / loops + 0.05 * run
        rows.append({"recipe": RUNS[run][0], "seed": RUNS[run][1], "strategy": strategy, "criterion": criterion,
                     "swept": swept, "setting": float(setting), "cross_entropy": ce, "perplexity": float(np.exp(ce)),
                     "compute_fraction": loops / MAX_LOOPS, "mean_loops": loops, "ms_per_token": 2.0 + loops,
                     "ms_low": 1.9 + loops, "ms_high": 2.2 + loops, "gflops_per_token": 1e-3 * (2 + loops),
                     "generated_mean_loops": loops, "max_loops": MAX_LOOPS})

    for run in range(len(RUNS)):
        for k in range(1, MAX_LOOPS + 1):
            add(run, "fixed", "fixed", "loops", k, float(k))
        for strategy, scale in [("acceleration", 1.0), ("kl_head", 0.01)]:
            for tau, loops in [(0.0, 6.0), (0.1, 5.0), (1.0, 3.5), (10.0, 1.5), (np.inf, 1.0)]:
                add(run, strategy, strategy, "threshold", scale * tau, loops)
        for hits, loops in [(1, 2.0), (2, 3.0), (3, 4.5)]:
            add(run, "argmax", "argmax", "hits", hits, loops)
    return pl.DataFrame(rows)


@pytest.mark.parametrize("name", SWEEP_FIGURES)
def test_sweep_figure_is_a_readable_png(name, sweep, tmp_path):
    path = tmp_path / "figures" / f"{name}.png"
    getattr(exit_figures, name)(sweep, path)
    assert path.stat().st_size > 10_000
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert 600 <= width <= 4000 and 400 <= height <= 3000
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize("name", SWEEP_FIGURES)
def test_sweep_without_full_depth_row_still_plots(name, sweep, tmp_path):
    getattr(exit_figures, name)(sweep.filter(pl.col("setting") != MAX_LOOPS), tmp_path / "f.png")
    assert (tmp_path / "f.png").exists()


@pytest.mark.parametrize("name", SWEEP_FIGURES)
def test_incomplete_sweep_is_a_clear_error_and_writes_nothing(name, sweep, tmp_path):
    with pytest.raises(TwoscaleError, match=rf"{name}: the sweep table lacks column\(s\) cross_entropy"):
        getattr(exit_figures, name)(sweep.drop("cross_entropy"), tmp_path / "f.png")
    with pytest.raises(TwoscaleError, match=rf"{name}: the sweep table is empty"):
        getattr(exit_figures, name)(sweep.clear(), tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == []


def test_fig4_needs_a_threshold_rule_on_the_log_axis(sweep, tmp_path):
    ends_only = sweep.filter((pl.col("swept") != "threshold") | pl.col("setting").is_in([0.0, np.inf]))
    with pytest.raises(TwoscaleError, match="no threshold-swept rows"):
        exit_figures.fig4_exit_sweep(ends_only, tmp_path / "f.png")


def with_acceleration_within_one_percent(sweep: pl.DataFrame) -> pl.DataFrame:
    """The sweep with acceleration at τ = 0.1 (5 loops) as good as full depth: its cheapest point within 1%."""
    full = sweep.filter((pl.col("strategy") == "fixed") & (pl.col("setting") == MAX_LOOPS))
    chosen = (pl.col("strategy") == "acceleration") & (pl.col("setting") == 0.1)
    return sweep.join(full.select("recipe", "seed", pl.col("perplexity").alias("full")), on=["recipe", "seed"]) \
        .with_columns(pl.when(chosen).then(pl.col("full")).otherwise(pl.col("perplexity")).alias("perplexity")) \
        .drop("full")


def depth_of(points: list[tuple[str, int, str, float]]) -> pl.DataFrame:
    """Exit steps 1..6 for two windows of 10 positions and three groups at each (recipe, seed, strategy, setting)."""
    rows = [{"recipe": recipe, "seed": seed, "strategy": strategy, "setting": setting, "window": window,
             "position": position, "token": 7 * position % 40, "group": group,
             "exit_step": 1 + (position + 2 * group + window) % MAX_LOOPS}
            for recipe, seed, strategy, setting in points for window in range(2) for position in range(10)
            for group in range(3)]
    return pl.DataFrame(rows)


def test_depth_map_draws_each_rule_s_best_point_of_each_recipe_s_first_seed(sweep, tmp_path):
    """Full depth's perplexity is exp(3 + 2/6 + 0.05 run); within 1% of it: acceleration at τ = 0.1 (made so) and
    kl_head at τ = 0 only, the cheapest of each; argmax (2 to 4.5 loops) is never within 1%; fixed is left out."""
    tuned = with_acceleration_within_one_percent(sweep)
    points = [(p["recipe"], p["seed"], p["strategy"], p["setting"]) for p in exit_figures.depth_map_points(tuned)]
    assert points == [("paper", 1, "acceleration", 0.1), ("paper", 1, "kl_head", 0.0),
                      ("huginn", 1, "acceleration", 0.1), ("huginn", 1, "kl_head", 0.0)]
    path = tmp_path / "figures" / "exit_depth.png"
    exit_figures.fig_exit_depth(tuned, depth_of(points), path)
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert path.stat().st_size > 10_000 and 600 <= width <= 4000 and 400 <= height <= 3000
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    with pytest.raises(TwoscaleError, match="fig_exit_depth: the depth table has no rows of huginn, seed 1, kl_head"):
        exit_figures.fig_exit_depth(tuned, depth_of(points[:3]), tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()


def test_depth_map_without_a_rule_within_one_percent_says_so(sweep, tmp_path):
    worse = sweep.with_columns(pl.when(pl.col("strategy") == "fixed").then(pl.col("perplexity"))
                               .otherwise(2 * pl.col("perplexity")).alias("perplexity"))
    assert exit_figures.depth_map_points(worse) == []
    exit_figures.fig_exit_depth(worse, pl.DataFrame(), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_strategy_colours_do_not_depend_on_order_and_fixed_is_black():
    names = ["kl_head", "fixed", "acceleration", "argmax"]
    forward, backward = exit_figures._strategy_styles(names), exit_figures._strategy_styles(names[::-1])
    assert forward == backward
    assert forward["fixed"]["color"] == "black"
    assert len({tuple(forward[n]["color"]) for n in names}) == len(names)
