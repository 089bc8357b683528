"""Write the README's tables of verdicts, each after a mark naming its claims.json ("<!-- verdicts:
results/study/claims.json ..."): each claim by its registered title, each recipe's verdict. A test fails when a
committed README table is not the one its committed claims.json gives."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from twoscale.claims.by_recipe import VERDICTS_MARK, verdict_sources, verdict_table, with_verdict_table
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import write_text
from twoscale.report.claim import CLAIMS_DOC

HELP = "write the README's tables of verdicts from the claims.json files its marks name"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readme", type=Path, default=Path("README.md"), help="the file whose tables are rewritten")


def summary_of(claims: Path) -> list[dict]:
    """The per-recipe summary of a claims stage's JSON."""
    try:
        return json.loads(claims.read_text())["summary"]
    except FileNotFoundError:
        raise TwoscaleError(f"{claims}: not found") from None
    except (ValueError, KeyError, TypeError):
        raise TwoscaleError(f"{claims}: not a claims.json of the claims stage") from None


def run(args: argparse.Namespace) -> None:
    readme = args.readme.read_text()
    sources = verdict_sources(readme)
    if not sources:
        raise TwoscaleError(f"{args.readme}: no line starting {VERDICTS_MARK!r} names a claims.json")
    folder = args.readme.resolve().parent
    docs = Path(os.path.relpath(CLAIMS_DOC, folder)).as_posix()
    for source in sources:
        readme = with_verdict_table(readme, source, verdict_table(summary_of(folder / source), docs))
    write_text(args.readme, readme)
