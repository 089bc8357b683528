"""The parameter files: reading one (YAML, an overlay resolved over its base), where a set writes its results
(`results_root`: the checkout for params.yaml, runs/<name>/ for another file), loading and validating one, and what
changed between two readings. The schema they are validated against is `params`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from twoscale.config.params import Params, ParamsError, overlaid, parse_params

BASE = "base"  # an overlay's key: the parameter file it changes, relative to the overlay's own folder
MOST_BASES = 8  # overlays over overlays, at most this deep


def read_raw(path: str | Path, name: str | None = None) -> Any:
    """The parameter set a file holds, as parsed YAML: the file itself, or, for an overlay (a file with a `base`
    key), its base with the overlay's changes merged in (`overlaid`). ParamsError in one line, naming it `name` (a
    copy's original, say) or its path, if it or a base cannot be read or parsed."""
    return _resolved(Path(path), name or str(path), MOST_BASES)


def is_overlay(raw: Any) -> bool:
    return isinstance(raw, dict) and BASE in raw


def _resolved(path: Path, shown: str, depth: int) -> Any:
    return resolved_from(_parsed(path, shown), path, shown, depth)


def resolved_from(raw: Any, path: Path, shown: str, depth: int = MOST_BASES) -> Any:
    """The set that `raw`, parsed from the file at `path`, holds: itself, or for an overlay its base (found from
    `path`'s folder) with its changes merged in."""
    if not is_overlay(raw):
        return raw
    raw = dict(raw)
    base = raw.pop(BASE)
    if not isinstance(base, str):
        raise ParamsError(f"{shown}: base = {base!r}: give the path of the parameter file this one changes")
    if depth == 0:
        raise ParamsError(f"{shown}: more than {MOST_BASES} overlays deep (does a base lead back to itself?)")
    base_path = path.parent / base
    base_raw = _resolved(base_path, f"{shown}: base {base_path}", depth - 1)
    if not isinstance(base_raw, dict):
        raise ParamsError(f"{shown}: base {base_path}: not a mapping of sections")
    try:
        return overlaid(base_raw, raw)
    except ParamsError as exc:
        raise ParamsError(f"{shown}: {exc}") from None


def parse_yaml(text: str | bytes) -> Any:
    """yaml.safe_load through libyaml's parser where PyYAML has it: seven to nine times faster, and every job and
    every Snakemake call reads the parameter file and the stages' declaration."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _parsed(path: Path, shown: str) -> Any:
    try:
        return parse_yaml(path.read_text())
    except FileNotFoundError:
        raise ParamsError(f"{shown}: parameter file not found") from None
    except IsADirectoryError:
        raise ParamsError(f"{shown}: is a folder, not a parameter file") from None
    except UnicodeDecodeError:
        raise ParamsError(f"{shown}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise ParamsError(f"{shown}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{shown}: not valid YAML ({str(exc).splitlines()[0]})") from None


DEFAULT_PARAMS_FILE = "params.yaml"
RUNS = "runs"  # where every parameter set but the default writes: runs/<its file's name>/{data,results,logs}/
PARAMS_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def results_root(params_file: str | Path) -> Path:
    """The folder under which a parameter set's data/, results/ and logs/ lie: the checkout itself for params.yaml
    (whose results are committed), runs/<name> for any other file (configs/smoke.yaml: runs/smoke), so that running
    another set never touches the default's results. Relative to the checkout, where every command runs."""
    path = Path(params_file)
    if path.resolve() == Path(DEFAULT_PARAMS_FILE).resolve():
        return Path(".")
    if not PARAMS_FILE_NAME.fullmatch(path.stem):
        shown = path.stem if path.stem.isprintable() and len(path.stem) <= 64 else repr(path.stem[:64]) + "..."
        raise ParamsError(f"{shown}: a parameter file other than {DEFAULT_PARAMS_FILE} names its results folder "
                          f"({RUNS}/<name>), so its name is 1 to 64 letters, digits, - and _ before .yaml")
    return Path(RUNS) / path.stem


def parameter_set_of(path: str | Path) -> str | None:
    """The parameter set whose results folder (`results_root`) holds `path`, relative to the checkout: its name
    for runs/<name>/..., None for the default set's."""
    parts = Path(path).parts
    return parts[1] if len(parts) > 2 and parts[0] == RUNS else None


def load_params(path: str | Path, name: str | None = None) -> Params:
    """The parameter file at `path`, validated; errors name it `name` or its path."""
    return parse_params(read_raw(path, name), name or str(path))


_ABSENT = object()


def changed_keys(before: Any, after: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two parsed parameter files (a key added or removed included)."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = [*before, *(key for key in after if key not in before)]
        return [changed for key in keys for changed in changed_keys(
            before.get(key, _ABSENT), after.get(key, _ABSENT), f"{prefix}.{key}" if prefix else str(key))]
    return [] if before == after else [prefix or "the whole file"]


def shown_keys(keys: list[str], most: int = 3) -> str:
    """Changed keys for a one-line message: 'a.b, c and 2 more'."""
    return ", ".join(keys[:most]) + (f" and {len(keys) - most} more" if len(keys) > most else "")
