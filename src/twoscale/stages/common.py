"""What every stage module shares: the --params argument (and --recipe/--seed for the stages that run once per
training run, a recipe's or a teacher's) and MLflow logging of parameters."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel

from twoscale.inference.sweep import check_strategies
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.pipeline.io import load_token_array, read_json
from twoscale.pipeline.params import Params, ParamsError, RunParams, load_params
from twoscale.training.device import configure_torch, resolve_device
from twoscale.training.trainer import load_model_matching


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="parameter file (params.yaml)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--params, and the training run a per-run stage works on."""
    add_params_argument(parser)
    parser.add_argument("--recipe", required=True, help="a recipe name under recipes")
    parser.add_argument("--seed", type=int, required=True, help="one of runtime.seeds")


def read_params(path: Path) -> Params:
    """The parameter file, validated: its keys and values, then what only the stages' cores can judge (that every
    exit spec builds); one line naming the bad key otherwise."""
    params = load_params(path)
    try:
        check_strategies(params.sweep)
    except ParamsError as exc:
        raise ParamsError(f"{path}: {exc}") from None
    return params


def load(args: argparse.Namespace) -> Params:
    return read_params(args.params)


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


def open_checkpoint(args: argparse.Namespace, params: Params, run: RunParams, threads: int
                    ) -> tuple[LoopedGPT, dict, np.ndarray, torch.device]:
    """How the stages on one trained checkpoint (--checkpoint, --data-dir) start: torch set up with `threads` and
    the run's seed; the run's model (refused if trained with other model parameters), its checkpoint metadata, the
    validation tokens and the device."""
    stats = read_json(args.data_dir / "stats.json")
    val_ids = load_token_array(args.data_dir / "val.npy")
    configure_torch(threads, run.seed)
    device = resolve_device(params.runtime.device)
    model, meta = load_model_matching(args.checkpoint, run.model, stats["vocab_size"], device)
    return model, meta, val_ids, device


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
    import mlflow

    for name, section in sections.items():
        mlflow.log_params(flatten(section, name))
