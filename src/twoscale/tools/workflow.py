"""Write both orchestrators' files from the pipeline's declaration (src/twoscale/pipeline/declaration/stages.yaml):
dvc.yaml, with the stages' derived source files and a chart of every run of params.yaml, and Snakemake's rule files
under workflow/rules/; a test fails when the committed files differ from what this writes. With --relock, also
record in dvc.lock the checkout's source files and the values of parameter keys declared since, and those keys in
the default run's build records, after a change shown to leave every output as it was (docs/development.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from twoscale.config.io import once_landed, write_text
from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration.dependencies import declaration
from twoscale.pipeline.declaration.dvc_file import dvc_yaml
from twoscale.pipeline.declaration.snakemake_rules import rule_files
from twoscale.pipeline.orchestrators import record_declared_keys, relock

HELP = ("write dvc.yaml and workflow/rules/*.smk from the pipeline's declaration (pipeline/declaration/stages.yaml); "
        "dvc.yaml's loss chart lists the runs of params.yaml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout to write them into")
    parser.add_argument("--relock", action="store_true",
                        help="then record in dvc.lock the checkout's source files and the values of parameter keys "
                             "declared since, and those keys in the default run's build records, keeping every "
                             "output and recorded value: only for a change shown to leave every output as it was "
                             "(docs/development.md)")


def run(args: argparse.Namespace) -> None:
    write_text(args.root / "dvc.yaml", dvc_yaml(read_raw(args.root / "params.yaml")))
    for path, text in rule_files(declaration()).items():
        write_text(args.root / path, text)
    if args.relock:  # from the dvc.yaml just written, once it has landed: a stage may have gained a source
        once_landed(lambda: _relock(args.root))


def _relock(root: Path) -> None:
    changed = relock(root)
    print(f"dvc.lock: {len(changed)} stages recorded with the checkout's sources and keys declared since")
    records = record_declared_keys(root, read_raw(root / "params.yaml"))
    print(f"build records: {len(records)} given the keys their stages declare since")
