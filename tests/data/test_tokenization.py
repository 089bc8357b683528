"""Train/validation split, BPE tokenizer, id arrays and the unigram baseline, against hand-computed values."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from twoscale.config.errors import TwoscaleError
from twoscale.data.tokenization import (
    EOT,
    batched,
    encode_documents,
    read_documents,
    split_documents,
    token_counts,
    train_bpe,
    unigram_cross_entropy,
)

# --- split -------------------------------------------------------------------------------------------

FOUR_LINES = "line1\nline2\nline3\nline4"  # 23 characters; lines start at 0, 6, 12, 18


def manifest_of(*spans: tuple[int, int]) -> dict:
    documents = [{"name": f"d{i}", "start": a, "end": b} for i, (a, b) in enumerate(spans)]
    return {"n_chars": spans[-1][1], "documents": documents}


def split(text: str, manifest: dict, val_fraction: float) -> tuple[list[str], list[str]]:
    """(train heads, non-empty validation tails), the corpus read from a text stream as the stage reads its file."""
    pairs = list(split_documents(read_documents(io.StringIO(text), manifest), val_fraction))
    return [head for head, _ in pairs], [tail for _, tail in pairs if tail]


@pytest.mark.parametrize(
    ("val_fraction", "train", "val"),
    [
        (0.2, "line1\nline2\nline3\n", "line4"),  # round(23 * 0.8) = 18: already a line start
        (0.3, "line1\nline2\nline3\n", "line4"),  # round(23 * 0.7) = 16: inside line3, moved to 18
        (0.45, "line1\nline2\nline3\n", "line4"),  # round(23 * 0.55) = 13: inside line3, moved to 18
        (0.49, "line1\nline2\n", "line3\nline4"),  # round(23 * 0.51) = 12: a line start
    ],
)
def test_split_hand_computed_boundaries(val_fraction, train, val):
    assert split(FOUR_LINES, manifest_of((0, 23)), val_fraction) == ([train], [val])


def test_split_per_document_short_documents_go_to_train_only():
    text = "single line\n\n" + FOUR_LINES + "\n\na\n" + "b" * 20
    manifest = manifest_of((0, 11), (13, 36), (38, 60))
    train, val = split(text, manifest, 0.3)
    # doc 1: round(11 * 0.7) = 8, inside the only line; doc 2: round(23 * 0.7) = 16, moved to 18;
    # doc 3: round(22 * 0.7) = 15, inside the last line with no newline after it
    assert train == ["single line", "line1\nline2\nline3\n", "a\n" + "b" * 20]
    assert val == ["line4"]


def test_split_all_tails_empty_is_an_error():
    with pytest.raises(TwoscaleError, match="validation split is empty"):
        split("one line only", manifest_of((0, 13)), 0.1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("single line\n\nline", "it ends inside 'd1'"),  # shorter than the manifest
        ("single line\n\nline1\nline2\nline3\nline4\nmore", "and the text goes on"),  # longer
    ],
)
def test_a_corpus_that_does_not_match_its_manifest_is_an_error(text, message):
    with pytest.raises(TwoscaleError, match=f"does not match its manifest.*{message}"):
        split(text, manifest_of((0, 11), (13, 36)), 0.3)


def test_documents_are_read_one_at_a_time_with_the_separators_skipped():
    corpus = io.StringIO("ab\n\ncdé\n\nf")
    spans = {"x": (0, 2), "y": (4, 7), "z": (9, 10)}
    manifest = {"n_chars": 10, "documents": [{"name": n, "start": a, "end": b} for n, (a, b) in spans.items()]}
    documents = read_documents(corpus, manifest)
    assert next(documents) == "ab" and corpus.tell() == 2  # nothing read ahead
    assert list(documents) == ["cdé", "f"]


@pytest.mark.parametrize(("max_chars", "expected"), [
    (5, [["ab", "cde"], ["fghijk"], ["l"]]),  # a text longer than max_chars goes alone
    (100, [["ab", "cde", "fghijk", "l"]]),
    (1, [["ab"], ["cde"], ["fghijk"], ["l"]]),
])
def test_batched_groups_consecutive_texts_up_to_max_chars(max_chars, expected):
    assert list(batched(["ab", "cde", "fghijk", "l"], max_chars)) == expected


lines = st.lists(st.text(alphabet="ab é🎉", max_size=8), min_size=1, max_size=8).map("\n".join)


@given(docs=st.lists(lines.filter(bool), min_size=1, max_size=5), val_fraction=st.floats(0.01, 0.49))
def test_split_head_plus_tail_is_the_document_and_tails_start_lines(docs, val_fraction):
    text = "\n\n".join(docs)
    starts = [sum(len(d) + 2 for d in docs[:i]) for i in range(len(docs))]
    manifest = manifest_of(*[(s, s + len(d)) for s, d in zip(starts, docs)])
    try:
        train, val = split(text, manifest, val_fraction)
    except TwoscaleError:
        return  # every tail empty: checked above
    assert split(text, manifest, val_fraction) == (train, val)  # deterministic
    tails = iter(val)
    for doc, head in zip(docs, train, strict=True):
        assert doc.startswith(head) and head
        tail = doc[len(head) :]
        if tail:
            assert tail == next(tails)
            assert head.endswith("\n")  # the tail starts a line
            assert len(head) >= round(len(doc) * (1 - val_fraction))  # never more than the fraction, rounded
            # the head ends at the first line start at or after the cut point
            assert "\n" not in doc[round(len(doc) * (1 - val_fraction)) : len(head) - 1]
        else:
            assert "\n" not in doc[round(len(doc) * (1 - val_fraction)) : len(doc) - 1]
    assert next(tails, None) is None


# --- tokenizer ---------------------------------------------------------------------------------------

CORPUS = [
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 5,
    "Resolved. resolved.\n\tThe quick brown fox jumps over the lazy dog; café, naïve.\n" * 5,
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(CORPUS, 300)


@pytest.mark.parametrize(
    "text",
    [
        "Speak, speak.",
        "  leading spaces, trailing spaces  \n\n\nand\r\nCRLF\ttabs",
        "naïve café — 日本語 🎉 👩‍👩‍👧 (emoji with joiners, never seen in training)",
        "",
    ],
)
def test_tokenizer_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_train_bpe_vocab_and_eot(tokenizer):
    assert tokenizer.get_vocab_size() == 300  # enough text for 300 - 257 merges
    assert tokenizer.token_to_id(EOT) == 0
    # too little text to reach vocab_size: 256 bytes + EOT + the one possible merge ("ab")
    assert train_bpe(["ab"], 1000).get_vocab_size() == 258


def test_train_bpe_is_deterministic(tokenizer):
    assert train_bpe(CORPUS, 300).to_str() == tokenizer.to_str()
    # an independent process with one thread gives the same tokenizer too
    script = (
        "import sys; from twoscale.data.tokenization import train_bpe; "
        f"sys.stdout.write(train_bpe({CORPUS!r}, 300).to_str())"
    )
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert other.returncode == 0, other.stderr
    assert other.stdout == tokenizer.to_str()


def test_encode_documents_puts_eot_after_each_document(tokenizer):
    texts = ["Speak, speak.", "", "a <|endoftext|> b", "日本"]
    ids = encode_documents(tokenizer, texts)
    assert ids.dtype == np.uint16 and ids.ndim == 1
    assert ids[-1] == 0
    ends = np.flatnonzero(ids == 0)
    assert len(ends) == 4  # the literal "<|endoftext|>" in the third text is text, not a boundary
    pieces = np.split(ids, ends + 1)[:-1]
    assert [tokenizer.decode(p[:-1].tolist()) for p in pieces] == texts
    assert len(pieces[1]) == 1  # the empty document is only its EOT


def test_encode_documents_uint32_for_a_large_vocabulary():
    class BigVocabulary:  # the interface encode_documents uses, with ids beyond uint16
        encode_special_tokens = False

        def token_to_id(self, token):
            return 70_000

        def get_vocab_size(self):
            return 70_001

        def encode_batch(self, texts, add_special_tokens):
            return [type("Encoding", (), {"ids": [65_536 + len(t)]}) for t in texts]

    ids = encode_documents(BigVocabulary(), ["ab", "c"])
    assert ids.dtype == np.uint32
    assert ids.tolist() == [65_538, 70_000, 65_537, 70_000]


# --- unigram baseline --------------------------------------------------------------------------------


def unigram(train_ids, val_ids, vocab_size: int) -> float:
    return unigram_cross_entropy(token_counts([np.asarray(train_ids)], vocab_size), np.asarray(val_ids))


def test_unigram_cross_entropy_hand_computed():
    # train counts [2, 1, 1, 0] + 1 = [3, 2, 2, 1] over 4 + 4 = 8; val tokens 0 and 3
    expected = (math.log(8 / 3) + math.log(8 / 1)) / 2
    value = unigram([0, 0, 1, 2], [0, 3], 4)
    assert value == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.5301353973457810, rel=1e-12)


def test_token_counts_add_up_over_blocks():
    blocks = [np.array([0, 0, 3], dtype=np.uint16), np.array([], dtype=np.uint16), np.array([3, 1], dtype=np.uint16)]
    assert token_counts(blocks, 5).tolist() == [2, 1, 0, 2, 0]


def test_unigram_cross_entropy_with_no_train_data_is_uniform():
    val = np.array([1, 2, 3], dtype=np.uint16)
    assert unigram(np.array([], dtype=np.uint16), val, 10) == pytest.approx(math.log(10))


def test_unigram_cross_entropy_bad_input():
    with pytest.raises(TwoscaleError, match="token id 4 is outside the vocabulary of 4"):
        unigram([0, 4], [0], 4)
    with pytest.raises(TwoscaleError, match="token id 7 is outside the vocabulary of 4"):
        unigram([0], [7], 4)
    with pytest.raises(TwoscaleError, match="empty validation"):
        unigram([0], np.array([], dtype=np.int64), 4)


@pytest.mark.parametrize("n_val", [1, 9, 65_536, 65_537, 200_003, 1_300_001])
def test_unigram_cross_entropy_has_the_bits_of_the_in_memory_formula(n_val):
    """Counted and summed block by block (the ids may be on disk, of any size), it equals to the last bit the plain
    numpy formula computed on whole arrays at once."""
    rng = np.random.default_rng(n_val)
    train, val = rng.integers(0, 500, size=300_000), rng.integers(0, 500, size=n_val)
    log_p = np.log(np.bincount(train, minlength=512) + 1.0) - math.log(train.size + 512)
    blocks = np.array_split(train.astype(np.uint16), 7)
    assert unigram_cross_entropy(token_counts(blocks, 512), val.astype(np.uint16)) == -log_p[val].mean()
