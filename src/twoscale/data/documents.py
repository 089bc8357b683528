"""A document of a corpus, as every source reads it: its name, its text with normalised line endings, and where it
came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    name: str
    text: str
    source: str  # where it came from: a URL, a file path, or a dataset id and row index


def normalise(text: str) -> str:
    """Unix line endings, no trailing whitespace: the same text gives the same corpus on every platform."""
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip()
