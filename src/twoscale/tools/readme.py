"""Write the README's tables of verdicts, each after a mark naming its claims.json ("<!-- verdicts:
results/study/claims.json ..."): each claim by its registered title, each recipe's verdict. A test fails when a
committed README table is not the one its committed claims.json gives. A claims.json of a run read against the
committed study (another processor or arithmetic: `claims.comparison`) leaves its table as it is."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from twoscale.claims.by_recipe import VERDICTS_MARK, verdict_sources, verdict_table, with_verdict_table
from twoscale.claims.comparison import read_claims
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import write_text
from twoscale.report.claim import CLAIMS_DOC

HELP = "write the README's tables of verdicts from the claims.json files its marks name"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readme", type=Path, default=Path("README.md"), help="the file whose tables are rewritten")


def run(args: argparse.Namespace) -> None:
    readme = args.readme.read_text()
    sources = verdict_sources(readme)
    if not sources:
        raise TwoscaleError(f"{args.readme}: no line starting {VERDICTS_MARK!r} names a claims.json")
    folder = args.readme.resolve().parent
    docs = Path(os.path.relpath(CLAIMS_DOC, folder)).as_posix()
    for source in sources:
        bundle = read_claims(folder / source)
        if "compared_with" in bundle:  # another draw of the committed study: the committed tables stay as they are
            log.warning("%s: left as it is: %s is a run of the committed study's parameters computed otherwise "
                        "(its claims.md opens with the comparison)", args.readme, source)
            continue
        readme = with_verdict_table(readme, source, verdict_table(bundle["summary"], docs))
    write_text(args.readme, readme)
