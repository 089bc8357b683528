"""What every corpus source shares: a document (its name, its text with normalised line endings, and where it came
from) and the verified, cached download of a pinned file."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import atomic_path, sha256_file


@dataclass(frozen=True)
class Document:
    name: str
    text: str
    source: str  # where it came from: a URL, a file path, or a dataset id and row index


def normalise(text: str) -> str:
    """Unix line endings, no trailing whitespace: the same text gives the same corpus on every platform."""
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip()


def fetch_verified(cached: Path, sha256: str, download: Callable[[Path], Path]) -> Path:
    """`cached`, downloaded by `download` (into the folder it is given, returning the file) unless a copy with the
    pinned sha256 is there; TwoscaleError, nothing kept, where the download's sha256 is another."""
    if cached.is_file() and sha256_file(cached) == sha256:
        return cached
    with tempfile.TemporaryDirectory(prefix="twoscale-download-") as tmp:
        downloaded = download(Path(tmp))
        digest = sha256_file(downloaded)
        if digest != sha256:
            raise TwoscaleError(f"{cached.name}: sha256 {digest} does not match the expected {sha256}")
        with atomic_path(cached, now=True) as tmp_path:  # a download is kept, whatever becomes of the stage
            shutil.copyfile(downloaded, tmp_path)
    return cached
