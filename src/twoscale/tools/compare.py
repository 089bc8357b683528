"""`python -m twoscale compare RUN REFERENCE`: one claims bundle read against another, as claims.md opens for a
reproduction elsewhere (twoscale.claims.comparison): whether their parameters are the same but the seeds and what
computed their numbers, then each verdict and headline number of RUN beside REFERENCE's."""

from __future__ import annotations

import argparse
from pathlib import Path

from twoscale.claims import comparison

HELP = "read one claims.json against another: verdicts and headline numbers side by side"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a claims.json (results/claims.json, say)")
    parser.add_argument("reference", type=Path, help="the claims.json to read it against (results/study/claims.json)")
    parser.add_argument("--name", help="what to call the reference in the text (default: its path)")


def run(args: argparse.Namespace) -> None:
    run_bundle, reference = comparison.read_claims(args.run), comparison.read_claims(args.reference)
    keys = run_bundle.get("parameters"), reference.get("parameters")
    same = ("unknown (a bundle without the key of its parameters)" if None in keys
            else "the same but the seeds" if keys[0] == keys[1] else "other: another experiment")
    ours, theirs = comparison.computed_by(run_bundle["origins"]), comparison.computed_by(reference["origins"])
    print(f"parameters: {same}; numbers computed {'alike' if ours == theirs else 'otherwise'}\n")
    rows = comparison.compare(run_bundle["summary"], reference["summary"])
    print("\n".join(comparison.to_markdown(rows, ours, theirs, args.name or str(args.reference))))
