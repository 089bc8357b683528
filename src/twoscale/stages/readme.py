"""Write the README's table of verdicts from a claims.json: each claim by its registered title, each recipe's
verdict. A test fails when the committed README's table is not the one the committed claims.json gives."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from twoscale.claims.by_recipe import verdict_table, with_verdict_table
from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import write_text
from twoscale.report.claim import CLAIMS_DOC

HELP = "write the README's table of verdicts from results/claims.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--claims", type=Path, default=Path("results/claims.json"), help="the claims stage's JSON")
    parser.add_argument("--readme", type=Path, default=Path("README.md"), help="the file whose table is rewritten")


def run(args: argparse.Namespace) -> None:
    try:
        summary = json.loads(args.claims.read_text())["summary"]
    except (ValueError, KeyError, TypeError):
        raise TwoscaleError(f"{args.claims}: not a claims.json of the claims stage") from None
    docs = Path(os.path.relpath(CLAIMS_DOC, args.readme.resolve().parent)).as_posix()
    write_text(args.readme, with_verdict_table(args.readme.read_text(), verdict_table(summary, docs)))
