"""Copy into a parameter set's run the jobs another set's run has already built as it would (`pipeline.records.reuse`):
`make study` takes the default run's seed-1337 jobs this way instead of running them again."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from twoscale.config.parameter_files import load_params, read_raw, results_root
from twoscale.pipeline.records.reuse import copy_jobs, shared_jobs, summary

HELP = "copy into a parameter set's run the jobs another set's run has built as it would"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, required=True, help="the parameter set whose run takes the jobs")
    parser.add_argument("--from", dest="source", type=Path, default=Path("params.yaml"),
                        help="the parameter set whose run they are taken from (params.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="say which jobs would be taken, copy nothing")


def run(args: argparse.Namespace) -> None:
    for path in (args.params, args.source):
        load_params(path)  # one line naming a bad key
    target_root, source_root = results_root(args.params), results_root(args.source)
    taken = shared_jobs(read_raw(args.source), source_root, read_raw(args.params), target_root, args.params)
    if not args.dry_run:
        copy_jobs(taken)
    log.info("%s %d jobs of %s's run (%s) into %s's (%s): %s", "would take" if args.dry_run else "took",
             len(taken), args.source, source_root, args.params, target_root, summary(taken))
