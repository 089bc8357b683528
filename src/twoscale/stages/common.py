"""What every stage module shares: the --params argument and MLflow logging of its parameters."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from twoscale.params import Params, load_params


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="parameter file (params.yaml)")


def load(args: argparse.Namespace) -> Params:
    return load_params(args.params)


def flatten(section: BaseModel | dict, prefix: str) -> dict[str, Any]:
    """Nested parameters as flat MLflow params: {'train.loops.max': 8, ...}."""
    raw = section.model_dump(mode="json") if isinstance(section, BaseModel) else section
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{prefix}.{key}"
        flat.update(flatten(value, name) if isinstance(value, dict) else {name: value})
    return flat


def log_sections(params: Params, *names: str) -> None:
    import mlflow

    for name in names:
        mlflow.log_params(flatten(getattr(params, name), name))
