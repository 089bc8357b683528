"""Write both orchestrators' files from the pipeline's declaration (src/twoscale/pipeline/stages.yaml): dvc.yaml,
with the stages' derived source files, and Snakemake's rule files under workflow/rules/; a test fails when the
committed files differ from what this writes. With --relock-sources, also record the checkout's source files in
dvc.lock, after a change shown to leave every output as it was (docs/development.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from twoscale.config.io import write_text
from twoscale.pipeline.dependencies import declaration, dvc_yaml
from twoscale.pipeline.orchestrators import relock_sources
from twoscale.pipeline.snakemake_rules import rule_files

HELP = "write dvc.yaml and workflow/rules/*.smk from the pipeline's declaration (src/twoscale/pipeline/stages.yaml)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout to write them into")
    parser.add_argument("--relock-sources", action="store_true",
                        help="then record the checkout's source files in dvc.lock, keeping its outputs and parameters: "
                             "only for a change shown to leave every output as it was (docs/development.md)")


def run(args: argparse.Namespace) -> None:
    write_text(args.root / "dvc.yaml", dvc_yaml())
    for path, text in rule_files(declaration()).items():
        write_text(args.root / path, text)
    if args.relock_sources:
        changed = relock_sources(args.root)
        print(f"dvc.lock: the sources of {len(changed)} stages recorded as they are in the checkout")
