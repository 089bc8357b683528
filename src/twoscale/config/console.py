"""Console lines that reach the console whole.

A workflow's jobs and Snakemake write to one console (a terminal, or the pipe a test or a scheduler reads). The
kernel keeps one write of up to PIPE_BUF bytes (4,096 on Linux) whole, but nothing holds two writes of one process
together: Python's stderr, unbuffered when it is not a terminal, sends a print's text and its line end in two writes,
and Snakemake's handler writes a record's text and its line end apart, so that another process's line can land
between them ("Finished jobid: 7 (Rule: lens)twoscale sweep (...): started"). Each writer below keeps a line, or a
record, until it is whole and sends it in one write.
"""

from __future__ import annotations

import io


def whole_lines(stream: io.TextIOWrapper) -> None:
    """A job's console: each line leaves in one write, when its line end is written (a print's pieces, a logging
    record) and not before."""
    stream.reconfigure(write_through=False, line_buffering=True)


def whole_records(stream: io.TextIOWrapper) -> None:
    """The workflow's console: a record leaves in one write when its writer flushes (Snakemake's handler does after
    each record, its line ends written), not at each line end inside it."""
    stream.reconfigure(write_through=False, line_buffering=False)
