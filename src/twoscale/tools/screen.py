"""`python -m twoscale screen`: the depth screen's table and figure from every candidate that has run
(docs/results.md#the-depth-screen-pre-registered-2026-11-29-before-any-candidate-trained). A candidate is a parameter
set, configs/screen-<name>.yaml, run by `make screen-candidate NAME=<name>`; the default set (params.yaml) is the
first row. Each row reads the run's loss against loops, its teacher's 2-layer control and its models' training
histories (`analysis.depth_screen`); a candidate run on another machine keeps its row of the table already written
(`merged`), and a candidate run nowhere yet is listed as such."""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import polars as pl

from twoscale.analysis.depth_screen import (
    LOOPED,
    MAX_CONTROL_RECOVERY,
    MIN_DEPTH_GAIN,
    MIN_K_STAR,
    TEACHER,
    reading,
)
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import atomic_path
from twoscale.config.parameter_files import DEFAULT_PARAMS_FILE, results_root
from twoscale.pipeline.job_times import recorded_cpu_seconds
from twoscale.report.tables import markdown_table
from twoscale.surrogates.tables import read_recovery

HELP = "the depth screen's table and figure from every candidate run so far (configs/screen-*.yaml)"
SEED = 1337
COLUMNS = ("candidate", "gain_paper", "gain_huginn", "k_star_huginn", "control_recovered", "a", "b", "c",
           "uses_depth", "tflop_huginn", "minutes_huginn", "cpu_minutes_huginn", "tokens_per_cpu_s_huginn",
           "minutes_paper", "cpu_minutes_paper", "tokens_per_cpu_s_paper", "minutes_plain", "cpu_minutes_plain",
           "tokens_per_cpu_s_plain", "timed_share_huginn", "timed_share_paper", "timed_share_plain", "machine")
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", type=Path, default=Path("configs"), help="where the candidates' files are")
    parser.add_argument("--out-dir", type=Path, default=Path("results/screen"),
                        help="where the table (screen.csv, screen.md) and the figure go")


def candidates(configs: Path) -> dict[str, Path]:
    """The default set, then every configs/screen-<name>.yaml, by name."""
    return {"default": Path(DEFAULT_PARAMS_FILE),
            **{path.stem.removeprefix("screen-"): path for path in sorted(configs.glob("screen-*.yaml"))}}


def read_candidate(name: str, params_file: Path) -> dict | None:
    """The candidate's row, or None where its run has not left what the screen reads."""
    results = results_root(params_file) / "results"
    needed = {"loss": results / "geometry/loss_vs_loops.parquet", "recovery": results / "surrogates/recovery.csv",
              **{model: results / f"train/{model}/seed_{SEED}/history.parquet" for model in (*LOOPED, TEACHER)}}
    if not all(path.is_file() for path in needed.values()):
        return None
    metrics = json.loads((results / f"train/huginn/seed_{SEED}/metrics.json").read_text())
    logs = results_root(params_file) / "logs/train"
    return reading(name, pl.read_parquet(needed["loss"]), read_recovery(needed["recovery"]),
                   {model: pl.read_parquet(needed[model]) for model in (*LOOPED, TEACHER)}, SEED,
                   metrics["machine"],
                   {model: recorded_cpu_seconds(logs / f"{model}/seed_{SEED}.log") for model in (*LOOPED, TEACHER)})


PANELS = (  # what each panel draws per candidate, its line and its title
    ("k_star_huginn", MIN_K_STAR, "fewest loops within 1% of the lowest", "(b) huginn's K*"),
    ("control_recovered", MAX_CONTROL_RECOVERY, "share of the teacher's gain", "(c) the 2-layer control"),
)


def draw(rows: list[dict], path: Path) -> None:
    """The screen's three numbers against the training cost of a `huginn` model, each with its line: depth gain per
    looped recipe, `huginn`'s K*, the control's recovery."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

    from twoscale.report.figures import figure_style, save_figure, suptitle

    cost = [row["tflop_huginn"] for row in rows]
    with figure_style():
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
        fig.subplots_adjust(wspace=0.35)
        for recipe, marker in zip(LOOPED, "os", strict=True):
            axes[0].scatter(cost, [row[f"gain_{recipe}"] for row in rows], marker=marker, label=recipe)
        axes[0].legend(fontsize=8)
        for ax, (column, _, ylabel, title) in zip(axes[1:], PANELS, strict=True):
            ax.scatter(cost, [row[column] for row in rows], color="C2")
            ax.set(ylabel=ylabel, title=title)
        axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))  # K* is a count of loops
        axes[0].set(ylabel="loss at 1 loop − lowest (nats)", title="(a) depth gain")
        for ax, (column, line) in zip(axes, [("gain_huginn", MIN_DEPTH_GAIN), *[(c, v) for c, v, _, _ in PANELS]],
                                      strict=True):
            ax.axhline(line, color="black", lw=0.8, ls="--")
            ax.margins(y=0.2)  # room for names below the lowest point
            ax.set(xscale="log", xlabel="training cost of a huginn model (model TFLOP)")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))  # 100, 150, 200, ..., not 10^2
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
            values = [row[column] for row in rows]
            span = (max(values) - min(values)) or 1.0
            placed: list[tuple[float, float]] = []
            for row, x in sorted(zip(rows, cost, strict=True), key=lambda pair: pair[1]):
                y = row[column]
                right = x > max(cost) / 1.25  # names near the right edge stand left of their points, inside the
                # axes, the rightmost higher than the rest, clear of a neighbour's name; the names of points close
                # beside ones already named (K* alike at near costs) stand below them, a line lower each
                beside = sum(abs(math.log(x / other_x)) < 0.2 and abs(y - other_y) < 0.05 * span
                             for other_x, other_y in placed)
                placed.append((x, y))
                ax.annotate(row["candidate"], (x, y), fontsize=7, textcoords="offset points",
                            xytext=(-3 if right else 3, -11 * beside if beside else 12 if x == max(cost) else 3),
                            ha="right" if right else "left")
        suptitle(fig, "The depth screen: does looping change the answer? (dashed: the criterion's lines)")
        save_figure(fig, path)


def same_training(row: dict, kept: dict) -> bool:
    """Whether two rows read the same trainings: the same machine and the same criteria's numbers."""
    return row["machine"] == kept["machine"] and all(
        math.isclose(row[column], kept[column], rel_tol=1e-12)
        for column in ("gain_paper", "gain_huginn", "control_recovered"))


def merged(names: list[str], read: dict[str, dict | None], kept: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """The screen's rows in the candidates' order, and the names of those with none. A candidate's runs travel as
    its row in the committed table (`kept`), not as its run folder, which stays on the machine that made it: a row
    read here replaces the kept one, but a value this checkout cannot read (the CPU time in a log it does not have)
    is taken from the kept row of the same trainings; a candidate not run here keeps its kept row."""
    rows, waiting = [], []
    for name in names:
        row, old = read.get(name), kept.get(name)
        if row is None:
            row = old
        elif old is not None and same_training(row, old):
            row = {column: old.get(column) if value is None else value for column, value in row.items()}
        if row is None:
            waiting.append(name)
        else:
            rows.append(row)
    return rows, waiting


def kept_rows(path: Path) -> dict[str, dict]:
    """The rows of an earlier screen.csv by candidate (none where there is no such file)."""
    return {row["candidate"]: row for row in pl.read_csv(path).to_dicts()} if path.is_file() else {}


def run(args: argparse.Namespace) -> None:
    files = candidates(args.configs)
    read = {name: read_candidate(name, params_file) for name, params_file in files.items()}
    rows, waiting = merged(list(files), read, kept_rows(args.out_dir / "screen.csv"))
    if not rows:
        raise TwoscaleError("screen: no candidate has run yet (make screen-candidate NAME=<name>)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out_dir / "screen.csv") as tmp:
        pl.DataFrame(rows).write_csv(tmp)
    table = markdown_table(rows, COLUMNS)
    note = f"\n\nNot run yet: {', '.join(waiting)}.\n" if waiting else "\n"
    with atomic_path(args.out_dir / "screen.md") as tmp:
        tmp.write_text(table + note)
    draw(rows, args.out_dir / "depth_vs_cost.png")
    print(table + note, end="")
    log.info("screen: %d candidates read, %d not run yet", len(rows), len(waiting))
