"""Write the JSON schema of params.yaml (used by Snakemake's `validate`; a test keeps it in sync)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from twoscale.config.io import write_text
from twoscale.config.params import params_schema

HELP = "write the JSON schema of params.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("workflow/schemas/params.schema.json"))


def run(args: argparse.Namespace) -> None:
    write_text(args.out, json.dumps(params_schema(), indent=2) + "\n")
