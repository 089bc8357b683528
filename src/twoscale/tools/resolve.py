"""Write the whole parameter set a parameter file holds: for an overlay (configs/*.yaml hold only what they change,
over the `base` they name), its base with its changes merged in, validated. What Snakemake's jobs read of an
overlay, and what DVC, which reads params.yaml alone, runs another set from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from twoscale.config.io import write_text
from twoscale.config.parameter_files import read_raw
from twoscale.config.params import parse_params

HELP = "write the whole parameter set that a parameter file (an overlay of params.yaml) resolves to"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a parameter file, e.g. configs/smoke.yaml")
    parser.add_argument("--out", type=Path, help="writes the set here (default: standard output)")


def run(args: argparse.Namespace) -> None:
    raw = read_raw(args.file)
    parse_params(raw, str(args.file))  # a bad set: its one-line refusal, nothing written
    text = f"# {args.file} resolved by `python -m twoscale resolve`\n" + yaml.safe_dump(raw, sort_keys=False)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_text(args.out, text)
