"""`python -m twoscale set KEY=VALUE ...`: change values of a parameter file in place and leave every other byte of
it as written (comments, inline lists, blank lines), refusing in one line, with the file untouched, a key the file
lacks or a value the parameters' schema refuses.

It is what `dvc exp run -S KEY=VALUE` does to params.yaml, less DVC's rewriting of the whole file: DVC passes the
file through Hydra and OmegaConf, which writes every inline list out one item per line and moves comments
(treeverse/dvc#8720). `python -m twoscale set train.steps=300 && dvc exp run` runs the same experiment."""

from __future__ import annotations

import argparse
import io
import math
import re
from pathlib import Path
from typing import Any

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import write_text
from twoscale.config.parameter_files import parse_yaml, resolved_from
from twoscale.config.params import ParamsError, parse_params

HELP = "set values of a parameter file in place, keeping the rest as written (then: dvc exp run)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("assignments", nargs="+", metavar="KEY=VALUE",
                        help="a dotted key and a YAML value: train.steps=300, data.max_chars=null, "
                        "measure.loss_loops=[1,2,4]")
    parser.add_argument("--params", dest="target", type=Path, default=Path("params.yaml"), help="the file to change "
                        "(default: params.yaml)")


def block_list_offset(text: str) -> int:
    """How far the file indents a block list's dashes past its key: 2 in this project's files, 0 in PyYAML's (what
    `twoscale resolve` writes); 2 where the file has no block list."""
    lines = text.splitlines()
    for key, item in zip(lines, lines[1:]):
        if re.fullmatch(r"\s*[^\s#-][^#]*:\s*(#.*)?", key) and re.match(r"\s*- ", item):
            return (len(item) - len(item.lstrip())) - (len(key) - len(key.lstrip()))
    return 2


def round_trip(offset: int = 2):
    """ruamel.yaml's round-trip reader and writer, set so that a file written in this project's style (or with
    block lists `offset` past their key) reads back and writes out byte for byte: no line wrapping, null written
    as null."""
    from ruamel.yaml import YAML

    handler = YAML(typ="rt")
    handler.width = 4096
    handler.indent(mapping=2, sequence=offset + 2, offset=offset)
    handler.preserve_quotes = True
    handler.representer.add_representer(
        type(None), lambda representer, _: representer.represent_scalar("tag:yaml.org,2002:null", "null"))
    handler.representer.add_representer(
        float, lambda representer, value: representer.represent_scalar("tag:yaml.org,2002:float", float_text(value)))
    return handler


def float_text(value: float) -> str:
    """A float as both YAML versions read it: PyYAML (1.1; the jobs, Snakemake's schema check) reads 1e-07 as
    text, so the mantissa keeps a point (1.0e-07); .inf, -.inf, .nan as YAML spells them."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text


def assignment(text: str) -> tuple[list[str], Any]:
    """KEY=VALUE as the key's parts and the value parsed as YAML (TwoscaleError in one line otherwise)."""
    key, equals, value = text.partition("=")
    if not equals or not key or any(not part for part in key.split(".")):
        raise TwoscaleError(f"{text!r}: give KEY=VALUE, the key dotted (train.steps=300)")
    from ruamel.yaml import YAML, YAMLError

    try:  # YAML 1.2, as one would type it: 1e-7 is a number
        return key.split("."), YAML(typ="safe", pure=True).load(value)
    except YAMLError as exc:
        raise TwoscaleError(f"{text!r}: the value is not YAML ({str(exc).splitlines()[0]})") from None


def styled_like(old: Any, new: Any) -> Any:
    """`new` in the flow style (inline: [1, 2, 4]) of the list or mapping it replaces, where that one had it."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(new, list) and isinstance(old, CommentedSeq) and old.fa.flow_style():
        styled = CommentedSeq(new)
    elif isinstance(new, dict) and isinstance(old, CommentedMap) and old.fa.flow_style():
        styled = CommentedMap(new)
    else:
        return new
    styled.fa.set_flow_style()
    return styled


def set_values(text: str, assignments: list[tuple[list[str], Any]]) -> str:
    """The file's text with each key's value replaced, the rest as it was; TwoscaleError for a key it lacks."""
    handler = round_trip(block_list_offset(text))
    data = handler.load(text)
    for parts, value in assignments:
        section = data
        for depth, part in enumerate(parts[:-1]):
            section = section.get(part) if isinstance(section, dict) else None
            if not isinstance(section, dict):
                raise TwoscaleError(f"{'.'.join(parts[:depth + 1])}: not a section of the file")
        if parts[-1] not in section:
            raise TwoscaleError(f"{'.'.join(parts)}: the file has no such key (set changes values, it adds none)")
        section[parts[-1]] = styled_like(section[parts[-1]], value)
    written = io.StringIO()
    handler.dump(data, written)
    return written.getvalue()


def run(args: argparse.Namespace) -> None:
    assignments = [assignment(text) for text in args.assignments]
    changed = set_values(args.target.read_text(), assignments)  # an unreadable file: __main__'s one line
    try:  # the set as a job would read it: an overlay over its base
        parse_params(resolved_from(parse_yaml(changed), args.target, str(args.target)), str(args.target))
    except ParamsError as exc:
        raise TwoscaleError(f"not written: {exc}") from None
    write_text(args.target, changed)
    print(f"{args.target}: " + ", ".join(args.assignments))
