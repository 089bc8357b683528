"""Write dvc.yaml from the pipeline's declaration (src/twoscale/pipeline/stages.yaml) and the stages' derived
source files; a test fails when the committed dvc.yaml differs from what this writes."""

from __future__ import annotations

import argparse
from pathlib import Path

from twoscale.pipeline.dependencies import dvc_yaml
from twoscale.pipeline.io import write_text

HELP = "write dvc.yaml from the pipeline's declaration (src/twoscale/pipeline/stages.yaml)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("dvc.yaml"))


def run(args: argparse.Namespace) -> None:
    write_text(args.out, dvc_yaml())
