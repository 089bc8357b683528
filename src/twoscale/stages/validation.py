"""The whole parameter file checked before a workflow starts: what the schema and the parameter models check, and
what only the cores can judge (that every exit spec builds).

Building the exit rules loads torch, which takes longer than the rest of a Snakemake call that plans: given a
folder of marks (the Snakefile's), a sweep section checked once under the same code is not checked again.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from twoscale.config.parameter_files import load_params
from twoscale.config.params import Params, ParamsError, SweepParams
from twoscale.pipeline.declaration import dependencies

CHECKER = "twoscale.exits.sweep"  # the module of check_strategies


def read_params(path: Path | str, name: str | None = None, marks: Path | None = None) -> Params:
    """The parameter file, validated; ParamsError in one line naming the bad key otherwise (and the file, as `name`
    if given). With `marks`, a mark there records a sweep section that passed, under the code that checked it."""
    params = load_params(Path(path), name)
    mark = None if marks is None else marks / strategies_key(params.sweep)
    if mark is not None and mark.is_file():
        return params
    from twoscale.exits.sweep import check_strategies  # loads torch

    try:
        check_strategies(params.sweep)
    except ParamsError as exc:
        raise ParamsError(f"{name or path}: {exc}") from None
    if mark is not None:
        with contextlib.suppress(OSError):  # a mark that cannot be written only costs the next call the check
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
    return params


def strategies_key(sweep: SweepParams) -> str:
    """A hash of what decides whether the sweep section passes: its values (repr keeps inf and nan apart) and the
    source files of the code that checks them."""
    digest = hashlib.sha256(repr(sweep.model_dump()).encode())
    for path in dependencies.module_sources(CHECKER):
        digest.update(path.encode() + b"\0" + (dependencies.SOURCE_ROOT.parent / path).read_bytes())
    return digest.hexdigest()[:16]
