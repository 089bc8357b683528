"""The whole parameter file checked before a workflow starts: what the schema and the parameter models check, and
what only the cores can judge (that every exit spec builds)."""

from __future__ import annotations

from pathlib import Path

from twoscale.exits.sweep import check_strategies
from twoscale.pipeline.params import Params, ParamsError, load_params


def read_params(path: Path | str, name: str | None = None) -> Params:
    """The parameter file, validated; ParamsError in one line naming the bad key otherwise (and the file, as `name`
    if given)."""
    params = load_params(Path(path), name)
    try:
        check_strategies(params.sweep)
    except ParamsError as exc:
        raise ParamsError(f"{name or path}: {exc}") from None
    return params
