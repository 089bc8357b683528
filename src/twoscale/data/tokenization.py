"""Train/validation split, byte-level BPE, token ids, and the unigram baseline loss.

No stage IO here: the tokenize stage opens the corpus and calls these. Everything takes documents one at a
time or in batches (`read_documents`, `split_documents`, `batched`), so memory stays bounded by the largest
document and the batch size, whatever the corpus size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from twoscale.config.errors import TwoscaleError

EOT = "<|endoftext|>"
PAIRWISE_LEAF = 1 << 16  # validation log-probabilities gathered at a time for the unigram baseline


def read_documents(corpus: TextIO, manifest: dict[str, Any]) -> Iterator[str]:
    """The manifest's documents in order, read one at a time from the open corpus text (the separators between
    them skipped). Raises if the text is shorter or longer than the manifest says."""
    position = 0
    for entry in manifest["documents"]:
        corpus.read(entry["start"] - position)
        document = corpus.read(entry["end"] - entry["start"])
        position = entry["end"]
        if len(document) != entry["end"] - entry["start"]:
            raise TwoscaleError(f"the corpus does not match its manifest: it ends inside {entry['name']!r}")
        yield document
    n_chars, more = manifest.get("n_chars"), corpus.read(1)
    if more or position != n_chars:
        raise TwoscaleError(f"the corpus does not match its manifest (its documents end at character {position}, "
                            f"n_chars is {n_chars}" + (", and the text goes on)" if more else ")"))


def split_document(document: str, val_fraction: float) -> tuple[str, str]:
    """A train head and a validation tail; head + tail is the document. Deterministic, no randomness.

    For a document of n characters the tail starts at character round(n * (1 - val_fraction)), moved forward
    to the next line start (just after a newline) unless it is already at one, so no line is cut in two.
    A document with no line start at or after that point (e.g. a single line) has an empty tail.
    """
    cut = round(len(document) * (1 - val_fraction))
    if 0 < cut < len(document) and document[cut - 1] != "\n":
        newline = document.find("\n", cut)
        cut = len(document) if newline < 0 else newline + 1
    return document[:cut], document[cut:]


def split_documents(documents: Iterable[str], val_fraction: float) -> Iterator[tuple[str, str]]:
    """`split_document` of each document, in order; raises once they are exhausted if every tail was empty."""
    any_tail = False
    for document in documents:
        head, tail = split_document(document, val_fraction)
        any_tail = any_tail or bool(tail)
        yield head, tail
    if not any_tail:
        raise TwoscaleError(
            f"validation split is empty: no document has a line in its last {val_fraction:g} "
            "(data.val_fraction); use documents with several lines"
        )


def batched(texts: Iterable[str], max_chars: int) -> Iterator[list[str]]:
    """Consecutive texts grouped into lists of at most `max_chars` characters (a longer text alone)."""
    batch: list[str] = []
    size = 0
    for text in texts:
        if batch and size + len(text) > max_chars:
            yield batch
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    if batch:
        yield batch


def train_bpe(train_texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE (GPT-2 style: all 256 bytes in the base alphabet, so any text encodes) with EOT as id 0.

    Deterministic: the same texts give the same tokenizer JSON, whatever the thread count (checked with
    RAYON_NUM_THREADS=1, 2, 7 and 16 on the Shakespeare corpus, and on a small corpus full of count ties).
    The vocabulary can come out smaller than `vocab_size` when the texts run out of pairs to merge.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(train_texts, trainer=trainer)
    return tokenizer


def id_dtype(tokenizer: Tokenizer) -> type:
    """uint16 when the vocabulary fits, else uint32."""
    return np.uint16 if tokenizer.get_vocab_size() <= 1 << 16 else np.uint32


def encode_documents(tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """One flat id array (`id_dtype`): each text's ids, then the EOT id."""
    eot = tokenizer.token_to_id(EOT)
    if eot is None:
        raise TwoscaleError(f"the tokenizer has no {EOT} token")
    dtype = id_dtype(tokenizer)
    # A literal "<|endoftext|>" inside a document is text, not a boundary: encode special tokens as text.
    # (The flag is not saved in the tokenizer JSON, so set it for this call only.)
    previous, tokenizer.encode_special_tokens = tokenizer.encode_special_tokens, True
    try:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    finally:
        tokenizer.encode_special_tokens = previous
    pieces = [np.array([*encoding.ids, eot], dtype=dtype) for encoding in encodings]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)


def token_counts(blocks: Iterable[np.ndarray], vocab_size: int) -> np.ndarray:
    """How often each id of the vocabulary occurs in the blocks of token ids (int64, `vocab_size` long)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for block in blocks:
        if block.size and int(block.max()) >= vocab_size:
            raise TwoscaleError(f"token id {int(block.max())} is outside the vocabulary of {vocab_size}")
        counts += np.bincount(block.astype(np.int64), minlength=vocab_size)
    return counts


def unigram_cross_entropy(train_counts: np.ndarray, val_ids: np.ndarray) -> float:
    """Nats per token of `val_ids` under the add-one smoothed unigram distribution of the training ids, given by
    their `token_counts` (so the training ids can be counted block by block).

    p(t) = (count_train(t) + 1) / (n_train + vocab_size); the result is -mean(log p(val_ids)). This is the loss
    of a model that ignores context: a trained model's validation loss should be well below it.
    """
    val_ids = np.asarray(val_ids)
    vocab_size = len(train_counts)
    if val_ids.size == 0:
        raise TwoscaleError("unigram cross-entropy of an empty validation set")
    if int(val_ids.max()) >= vocab_size:
        raise TwoscaleError(f"token id {int(val_ids.max())} is outside the vocabulary of {vocab_size}")
    log_p = np.log(train_counts.astype(np.float64) + 1) - math.log(int(train_counts.sum()) + vocab_size)
    total = _pairwise_sum(lambda start, n: log_p[val_ids[start : start + n]], 0, val_ids.size)
    return -(total / val_ids.size)


def _pairwise_sum(values: Callable[[int, int], np.ndarray], start: int, n: int) -> float:
    """The sum of the `n` float64 values from `start` exactly as numpy's `add.reduce` (and so `mean`) computes it
    on them all at once, but holding at most PAIRWISE_LEAF of them: numpy sums pairwise, splitting n values at
    n // 2 rounded down to a multiple of 8, so recursing the same way down to blocks it sums gives its bits."""
    if n <= PAIRWISE_LEAF:
        return float(np.add.reduce(values(start, n), initial=0.0))
    half = n // 2 - (n // 2) % 8
    return _pairwise_sum(values, start, half) + _pairwise_sum(values, start + half, n - half)
