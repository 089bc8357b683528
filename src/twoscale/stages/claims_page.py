"""Stage `claims_page`: the claims report as an HTML page, which Snakemake's report shows inline (its Markdown it
offers only as a download). A stage of its own, so that editing the page reads no claim again."""

from __future__ import annotations

import argparse
import logging

from twoscale.config.io import read_text, write_text
from twoscale.pipeline.observers import tracking
from twoscale.report.pages import html_page

HELP = "render the claims report as an HTML page"
log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    markdown = read_text(args.claims, "claims")
    with tracking.stage_run(args.stage, {}):
        write_text(args.out, html_page(markdown))
        tracking.log_artifact(args.out)
    log.info("claims page: %s", args.out)
