"""Progress of a long stage: a bar on the terminal for a stage run by hand; for a workflow job (one with a log
file), a line in the job's log at most every LOG_INTERVAL_S, so that the console keeps to each job's start and end
and Snakemake's own progress, and a Slurm user reading the job's log sees where it is."""

from __future__ import annotations

import logging
from typing import Any

from tqdm import tqdm

LOG_INTERVAL_S = 60.0

log = logging.getLogger("twoscale.progress")
_into_log = False


def into_log(enabled: bool) -> None:
    """Write progress (and a bar's `write`) as lines of the log from now on (True) or as a bar on stderr."""
    global _into_log
    _into_log = enabled


class _LogLines:
    """A stream for tqdm that logs each state it writes as one line."""

    def write(self, text: str) -> None:
        text = text.strip("\r\n ")
        if text:
            log.info(text)

    def flush(self) -> None:
        pass


def progress_bar(iterable: Any = None, **options: Any) -> tqdm:
    """tqdm(iterable, **options), drawn as the stage's mode asks (`into_log`)."""
    if _into_log and not options.get("disable"):
        options = {**options, "file": _LogLines(), "mininterval": LOG_INTERVAL_S, "ascii": True, "ncols": 100}
    return tqdm(iterable, **options)
