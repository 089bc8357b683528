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
from pydantic import BaseModel

from twoscale.pipeline import tracking
from twoscale.pipeline.io import read_parquet, run_subdir
from twoscale.pipeline.params import Params, ParamsError, RunParams, load_params


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


def flatten(section: BaseModel | dict, prefix: str) -> dict[str, Any]:
    """Nested parameters as flat MLflow params: {'train.loops.max': 8, ...}."""
    raw = section.model_dump(mode="json") if isinstance(section, BaseModel) else section
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{prefix}.{key}"
        flat.update(flatten(value, name) if isinstance(value, dict) else {name: value})
    return flat


def log_sections(params: Params, *names: str) -> None:
    log_params({name: getattr(params, name) for name in names})


def log_params(sections: dict[str, BaseModel]) -> None:
    """Parameter sections as flat MLflow params, each under its name."""
    for name, section in sections.items():
        tracking.log_params(flatten(section, name))


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
