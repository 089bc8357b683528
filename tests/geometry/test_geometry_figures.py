"""The loop geometry's figures: each writes a readable PNG of sensible size from small synthetic frames of two recipes
(one with two seeds) and two checkpoints, writes it atomically, and fails with a clear error on empty or incomplete
input."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from PIL import Image

from twoscale.config.errors import TwoscaleError
from twoscale.geometry import figures as geometry_figures

STEPS = [50, 400]
GROUPS = [0, 1]
K = 8
METRICS_K1 = ["step_size", "relative_step_size"]
METRICS_K2 = ["step_cosine", "turning_angle", "acceleration", "acceleration_by_step", "acceleration_by_state",
              "step_size_difference"]
METRICS_K0 = ["state_norm", "cross_token_cosine"]
METRICS_SIGNED = ["radial_fraction", "at_fixed_point", "at_floor"]
RUNS = [("paper", 1), ("paper", 2), ("huginn", 1)]


def with_runs(rows: list[dict]) -> pl.DataFrame:
    """The same rows for every run, a run's values scaled so that the runs differ."""
    out = []
    for i, (recipe, seed) in enumerate(RUNS):
        for row in rows:
            scaled = {k: v * (1 + 0.1 * i) if k in ("mean", "median", "q10", "q90", "val_loss") else v
                      for k, v in row.items()}
            out.append({"recipe": recipe, "seed": seed, **scaled})
    return pl.DataFrame(out).with_columns(pl.col("step").cast(pl.Int32))


@pytest.fixture(scope="module")
def frames() -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(0)
    geometry, loss, depth, similarity, trajectory = [], [], [], [], []
    # layout: embedding + layer 0 single-pass, group 0 (layer 1) x K, group 1 (layer 2) x K, layer 3 once
    positions = ([(None, None, None), (0, None, None)] + [(1, 0, k) for k in range(1, K + 1)]
                 + [(2, 1, k) for k in range(1, K + 1)] + [(3, None, None)])
    layout = [0, 0] + [1] * K + [2] * K + [3]
    D = len(positions)
    for i, step in enumerate(STEPS):
        scale = 1.0 + i
        for g in GROUPS:
            for metric in METRICS_K0 + METRICS_K1 + METRICS_SIGNED + METRICS_K2:
                first = 0 if metric in METRICS_K0 else 2 if metric in METRICS_K2 else 1
                for k in range(first, K + 1):
                    v = (0.6 + 0.1 * rng.standard_normal() if metric in ("step_cosine", "radial_fraction",
                                                                         "cross_token_cosine", "at_fixed_point",
                                                                         "at_floor")
                         else 3.0 / ((k + 1) ** scale))
                    geometry.append({"step": step, "metric": metric, "group": g, "k": k, "n": 64, "mean": v,
                                     "median": v, "q10": 0.7 * v, "q90": 1.3 * v})
            shares = {"fixed_point": 0.3 + 0.3 * i, "slowing_drift": 0.05, "orbit": 0.05, "slider": 0.1,
                      "other": 0.5 - 0.3 * i}
            for regime, share in shares.items():
                geometry.append({"step": step, "metric": f"regime_{regime}", "group": g, "k": K, "n": 64,
                                 "mean": share, "median": share, "q10": share, "q90": share})
            if g < GROUPS[-1]:
                for k in range(1, K + 1):
                    v = (8.0 + 10 * i) * k
                    geometry.append({"step": step, "metric": "drift_to_loop_ratio", "group": g, "k": k,
                                     "n": 64, "mean": v, "median": v, "q10": v / 2, "q90": 2 * v})
            x0, y0 = 10.0 * g, 5.0 * g
            for k in range(K + 1):
                angle, radius = k * 0.9, 2.0 / (k + 1)
                trajectory.append({"step": step, "point": g * (K + 1) + k, "group": g, "k": k,
                                   "pc1": x0 + radius * np.cos(angle), "pc2": y0 + radius * np.sin(angle),
                                   "explained_pc1": 0.7, "explained_pc2": 0.2})
        for loops in [1, 2, 4, 8]:
            loss.append({"step": step, "loops": loops, "val_loss": 5.0 - i - 0.1 * np.log2(loops)})
        for p, (layer, group, loop) in enumerate(positions):
            depth.append({"step": step, "position": p, "layer": layer, "group": group, "loop": loop,
                          "phase": layout[p] if i else min(layout[p], 2), "layout_phase": layout[p]})
        for a in range(D):
            for b in range(D):
                similarity.append({"step": step, "i": a, "j": b,
                                   "similarity": 1.0 if layout[a] == layout[b] else 0.3 + 0.01 * abs(a - b)})
    precision = [{"step": step, "precision": name, "eps": eps, "metric": metric, "group": g, "k": k, "n": 64,
                  "mean": value, "median": value, "q10": value, "q90": value}
                 for step in STEPS for name, eps in (("float64", 2.0 ** -52), ("bfloat16", 2.0 ** -7))
                 for g in GROUPS for k in range(1, K + 1)
                 for metric, value in (("relative_step_size", 1e-3 / k), ("step_cosine", 0.9))
                 if metric == "relative_step_size" or k > 1]
    return {"geometry": with_runs(geometry), "loss_vs_loops": with_runs(loss), "depth": with_runs(depth),
            "similarity": with_runs(similarity), "trajectory": with_runs(trajectory),
            "precision": with_runs(precision)}


FIGURES = {
    "fig1_trajectory": ("trajectory",),
    "fig2_drift_to_loop": ("geometry",),
    "fig3a_step_size": ("geometry",),
    "fig3b_step_cosine": ("geometry",),
    "fig_similarity": ("similarity", "depth"),
    "fig_loss_vs_loops": ("loss_vs_loops",),
    "fig_acceleration": ("geometry",),
    "fig_diagnostics": ("geometry",),
    "fig_regimes": ("geometry",),
    "fig_precision": ("precision",),
}


@pytest.mark.parametrize("name", FIGURES)
def test_figure_is_a_readable_png(name, frames, tmp_path):
    path = tmp_path / "figures" / f"{name}.png"  # the folder does not exist yet
    getattr(geometry_figures, name)(*(frames[f] for f in FIGURES[name]), path)
    assert path.stat().st_size > 10_000
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert 600 <= width <= 4000 and 400 <= height <= 3000
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


@pytest.mark.parametrize("name, metric", [("fig3a_step_size", "step_size"), ("fig3b_step_cosine", "step_cosine")])
def test_each_panel_draws_the_table_s_mean_per_checkpoint_and_seed(name, metric, frames, tmp_path, monkeypatch):
    """The lines of a recipe's group panel are exactly its rows' mean against k, one per checkpoint and seed."""
    drawn = []
    monkeypatch.setattr(geometry_figures, "save_figure", lambda fig, path: drawn.append(fig))
    geometry = frames["geometry"].with_columns(median=2 * pl.col("mean"))  # the mean drawn, not the median
    getattr(geometry_figures, name)(geometry, tmp_path / "figure.png")
    geometry = geometry.filter(pl.col("metric") == metric)
    for recipe in ["huginn", "paper"]:
        for group in GROUPS:
            ax = next(a for a in drawn[0].axes if a.get_title() == f"{recipe} — group {group}")
            curves = {(tuple(line.get_xdata()), tuple(np.round(line.get_ydata(), 12))) for line in ax.get_lines()
                      if len(line.get_xdata()) > 2}  # not the reference lines
            rows = geometry.filter((pl.col("recipe") == recipe) & (pl.col("group") == group)).sort("k")
            expected = {(tuple(float(k) for k in run["k"]), tuple(np.round(run["mean"].to_numpy(), 12)))
                        for _, run in rows.group_by("step", "seed")}
            assert curves == expected and len(expected) == len(STEPS) * (2 if recipe == "paper" else 1)
    plt.close(drawn[0])


def test_one_checkpoint_is_enough(frames, tmp_path):
    last = {k: v.filter(pl.col("step") == STEPS[-1]) for k, v in frames.items()}
    for name, needs in FIGURES.items():
        getattr(geometry_figures, name)(*(last[f] for f in needs), tmp_path / f"{name}.png")
    assert len(list(tmp_path.glob("*.png"))) == len(FIGURES)


@pytest.mark.parametrize("name", FIGURES)
def test_empty_frame_is_a_clear_error_and_writes_nothing(name, frames, tmp_path):
    path = tmp_path / f"{name}.png"
    args = [frames[f].clear() if i == 0 else frames[f] for i, f in enumerate(FIGURES[name])]
    with pytest.raises(TwoscaleError, match=rf"{name}: the {FIGURES[name][0]} table is empty"):
        getattr(geometry_figures, name)(*args, path)
    assert list(tmp_path.iterdir()) == []


def test_missing_metric_and_mismatched_depth_are_clear_errors(frames, tmp_path):
    no_dlr = frames["geometry"].filter(pl.col("metric") != "drift_to_loop_ratio")
    with pytest.raises(TwoscaleError, match="no drift_to_loop_ratio rows"):
        geometry_figures.fig2_drift_to_loop(no_dlr, tmp_path / "f.png")
    with pytest.raises(TwoscaleError, match="depth table is empty"):
        geometry_figures.fig_similarity(frames["similarity"], frames["depth"].clear(), tmp_path / "f.png")
    short = frames["depth"].filter(pl.col("position") > 0)
    with pytest.raises(TwoscaleError, match="positions"):
        geometry_figures.fig_similarity(frames["similarity"], short, tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == []


def test_the_precision_points_by_hand():
    """Late = k > K/2 = 4 (K = 8): the mean cosine 0.9 and the mean relative step over k = 5..8,
    1e-3 x (1/5 + 1/6 + 1/7 + 1/8) / 4, in units of each precision's epsilon."""
    table = pl.DataFrame([
        {"recipe": "huginn", "seed": 1, "step": 400, "precision": name, "eps": eps, "group": 0, "k": k,
         "metric": metric, "n": 64, "mean": value, "median": value, "q10": value, "q90": value}
        for name, eps in (("float32", 2.0 ** -23), ("bfloat16", 2.0 ** -7)) for k in range(1, K + 1)
        for metric, value in (("relative_step_size", 1e-3 / k), ("step_cosine", -1.0 if k <= 4 else 0.9))])
    points = {row["precision"]: row for row in geometry_figures.precision_points(table).iter_rows(named=True)}
    late_step = 1e-3 * (1 / 5 + 1 / 6 + 1 / 7 + 1 / 8) / 4
    for name, eps in (("float32", 2.0 ** -23), ("bfloat16", 2.0 ** -7)):
        assert points[name]["late_cosine"] == pytest.approx(0.9)
        assert points[name]["step_in_eps"] == pytest.approx(late_step / eps)


def test_fig1_keys_the_hand_off_between_groups_only_where_a_panel_shows_one(frames, tmp_path, monkeypatch):
    """The fixture's groups start 11 units from where the previous one ended: a dashed hand-off, and its legend
    entry. Moved so that each group starts where the last ended (no single-pass layer between them moves the
    state), there is nothing to draw, and no entry for it."""
    drawn = []
    monkeypatch.setattr(geometry_figures, "save_figure", lambda fig, path: drawn.append(fig))
    trajectory = frames["trajectory"]
    keys = ["recipe", "seed", "step"]
    ends = trajectory.filter((pl.col("group") == 0) & (pl.col("k") == K)).select(*keys, end1="pc1", end2="pc2")
    starts = trajectory.filter((pl.col("group") == 1) & (pl.col("k") == 0)).select(*keys, start1="pc1",
                                                                                   start2="pc2")
    joined = trajectory.join(ends, on=keys).join(starts, on=keys).with_columns(
        pc1=pl.when(pl.col("group") == 1).then(pl.col("pc1") - pl.col("start1") + pl.col("end1")).otherwise("pc1"),
        pc2=pl.when(pl.col("group") == 1).then(pl.col("pc2") - pl.col("start2") + pl.col("end2")).otherwise("pc2"),
    ).select(trajectory.columns)
    for frame in (trajectory, joined):
        geometry_figures.fig1_trajectory(frame, tmp_path / "fig1.png")
    keyed = [[text.get_text() for text in fig.legends[0].get_texts()] for fig in drawn]
    assert "between groups (single-pass layers)" in keyed[0]
    assert "between groups (single-pass layers)" not in keyed[1] and "group 1" in keyed[1]
    dashed = [sum(line.get_linestyle() == "--" for ax in fig.axes for line in ax.get_lines()) for fig in drawn]
    assert dashed[0] > 0 and dashed[1] == 0
    for fig in drawn:
        plt.close(fig)
