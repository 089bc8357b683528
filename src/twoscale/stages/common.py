"""What every stage module shares: the --params argument (and --recipe/--seed for the stages that run once per
training run, a recipe's or a teacher's), MLflow logging of parameters, the columns that name a table's run and
origin, drawing figures into a folder and reading a per-checkpoint stage's tables. It imports nothing of the cores, so that a stage's source files (what its module
imports) are its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from twoscale.config.io import read_parquet, run_subdir
from twoscale.config.params import Params, ParamsError, RunParams, load_params
from twoscale.pipeline import tracking


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="parameter file (params.yaml)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--params, and the training run a per-run stage works on."""
    add_params_argument(parser)
    parser.add_argument("--recipe", required=True, help="a recipe name under recipes")
    parser.add_argument("--seed", type=int, required=True, help="one of runtime.seeds")


def load(args: argparse.Namespace) -> Params:
    """The parameter file, validated (one line naming the bad key otherwise)."""
    return load_params(args.params)


def load_run(args: argparse.Namespace) -> tuple[Params, RunParams]:
    """The parameter file and the run named by --recipe and --seed."""
    params = load(args)
    return params, params.run(args.recipe, args.seed)


def load_teacher_run(args: argparse.Namespace) -> tuple[Params, RunParams]:
    """`load_run` for the stages of the plain GPTs: --recipe must name one of the teachers."""
    params, run = load_run(args)
    if run.recipe not in params.teachers:
        raise ParamsError(f"--recipe {run.recipe!r} is not under teachers ({', '.join(params.teachers) or 'none'})")
    return params, run


GEOMETRY_CURVES = ("step_size", "drift_to_loop_ratio", "step_cosine", "state_norm")  # MLflow curves over k


def log_geometry_curves(rows: list[dict], prefix: str = "") -> None:
    """The loop geometry's headline metrics (`MetricAccumulator.summary` rows), each group's mean as an MLflow curve
    over the loop step k: `<prefix><metric>_group<g>`."""
    tracking.log_curves([{"k": row["k"], f"{prefix}{row['metric']}_group{row['group']}": row["mean"]}
                         for row in rows if row["k"] is not None and row["metric"] in GEOMETRY_CURVES], step_key="k")


def draw_figures(drawings: Mapping[str, Callable[[Path], None]], folder: Path) -> None:
    """Draw each figure (file name: what draws it at a path) into `folder`, logged to the stage's MLflow run."""
    for filename, draw in drawings.items():
        draw(folder / filename)
        tracking.log_artifact(folder / filename, artifact_path="figures")


def run_columns(run: RunParams, step: int | None = None) -> list[pl.Expr]:
    """The literal columns that lead a stage's table: its run's recipe and seed and, where given, the checkpoint's
    training step (Int64)."""
    columns = [pl.lit(run.recipe).alias("recipe"), pl.lit(run.seed).alias("seed")]
    return columns if step is None else [*columns, pl.lit(step).cast(pl.Int64).alias("step")]


def origin_columns(source: Mapping[str, Any]) -> list[pl.Expr]:
    """The literal columns that close a stage's table: what computed its numbers (`provenance`: arithmetic,
    processor, torch)."""
    return [pl.lit(value).alias(key) for key, value in source.items()]


def per_checkpoint_tables(params: Params, directory: Path, stage: str) -> pl.DataFrame:
    """Every explained run's and checkpoint's table of a per-checkpoint explaining stage (spectrum, lens,
    precision), stacked."""
    return pl.concat([read_parquet(directory / run_subdir(recipe, seed) / f"step_{step}.parquet", stage)
                      for recipe, seed in params.explained_runs() for step in params.train.checkpoint_steps],
                     how="diagonal_relaxed")
