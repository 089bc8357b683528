"""What every stage module shares: its command line, derived from its command in stages.yaml (--params, the options
that name its job, one option per file or folder it reads or writes, described by the declaration), MLflow logging
of parameters, the columns that name a table's run and origin, drawing figures into a folder and reading a
per-checkpoint stage's tables. It imports nothing of the cores, so that a stage's source files (what its module
imports) are its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from twoscale.config.io import read_parquet, run_subdir, write_json
from twoscale.config.parameter_files import load_params
from twoscale.config.params import Params, ParamsError, RunParams
from twoscale.pipeline.declaration.dependencies import (
    command_options,
    declared_stages,
    input_options,
    inside,
    output_options,
    output_paths,
    readable,
    same_or_inside,
)
from twoscale.pipeline.observers import tracking


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="parameter file (params.yaml)")


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


def write_headline(stage: str, run: RunParams, headline: Mapping[str, Any], out: Path) -> None:
    """A run's headline numbers (DVC's metrics) written to `out` and logged as the metrics of the stage's MLflow run,
    beside the run's model and training parameters (the run it sums up)."""
    with tracking.stage_run(stage, {"model": run.model, "train": run.train}, run.tags):
        write_json(out, headline)
        tracking.log_metrics(headline)


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


JOB_OPTIONS: dict[str, dict[str, Any]] = {  # the options of a stage's command that name its job, not a file
    "--recipe": {"help": "a recipe name under recipes (a teacher's under teachers)"},
    "--seed": {"type": int, "help": "one of runtime.seeds"},
    "--strategy": {"help": "a name under sweep.strategies"},
    "--blocks": {"type": int, "help": "k: the surrogate's shared blocks (distill.blocks)"},
}


def described(stage: str, option: str) -> str:
    """What an option of the stage's command names, from the declaration: the files it writes (a folder's named,
    those in a subfolder counted), or what it reads and the stages that write it."""
    stages = declared_stages()
    reads, writes = input_options(stage), output_options(stage)
    if option in writes:
        folder = readable(writes[option])
        names = [readable(path).removeprefix(folder + "/") for path in output_paths(stages[stage])
                 if inside(path, writes[option])]
        shown = [name for name in names if "/" not in name or name.endswith(".pt")]
        subfolders = sorted({name.split("/")[0] for name in names if name not in shown})
        shown += [f"{sub}/ ({sum(name.startswith(sub + '/') for name in names)} files)" for sub in subfolders]
        return f"writes {folder}" + (f": {', '.join(shown)}" if shown else "")
    folder = reads[option]
    makers = sorted({name for name, other in stages.items() if name != stage
                     and any(same_or_inside(path, folder) for path in output_paths(other))})
    named = makers[0] if len(makers) == 1 else f"{', '.join(makers[:-1])} and {makers[-1]} stages"
    written = f" (from the {named}{'' if len(makers) > 1 else ' stage'})" if makers else ""
    return f"reads {readable(folder)}{written}"


def add_declared_arguments(parser: argparse.ArgumentParser, stage: str, when_inputs_left_out: str = "") -> None:
    """The stage's command line as stages.yaml declares its command, in its order: --params, the options that name
    its job, and one option per file or folder it reads or writes, each required, but for the inputs where the
    stage says what happens `when_inputs_left_out` (its help then says so too)."""
    add_params_argument(parser)
    optional = input_options(stage) if when_inputs_left_out else ()
    for option in command_options(stage):
        if option in JOB_OPTIONS:
            parser.add_argument(option, required=True, **JOB_OPTIONS[option])
        elif option in optional:
            parser.add_argument(option, type=Path, help=f"{described(stage, option)}; {when_inputs_left_out}")
        else:
            parser.add_argument(option, type=Path, required=True, help=described(stage, option))
