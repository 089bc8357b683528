"""Stage `corpus`: fetch or read the raw text (data.source) and write it with a manifest of its documents."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from twoscale.config.io import atomic_path, write_json
from twoscale.data.corpus import build_corpus
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import load

HELP = "fetch or read the raw text and write it with a manifest"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", type=Path, default=Path("data/cache"), help="downloaded sources")


def run(args: argparse.Namespace) -> None:
    params = load(args)
    with atomic_path(args.out_dir / "corpus.txt") as corpus:  # in place only once everything else is
        with corpus.open("w", encoding="utf-8") as out:
            manifest = build_corpus(params.data, root=Path.cwd(), cache_dir=args.cache_dir, out=out)
        log.info("corpus: %d documents, %d characters from %s",
                 manifest["n_documents"], manifest["n_chars"], params.data.source)
        with tracking.stage_run(args.stage, {"data": params.data}) as _:
            tracking.log_metrics({"n_documents": manifest["n_documents"], "n_chars": manifest["n_chars"]})
            write_json(args.out_dir / "manifest.json", manifest)
            tracking.log_artifact(args.out_dir / "manifest.json")
