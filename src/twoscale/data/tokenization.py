"""Train/validation split, byte-level BPE, token ids, and the unigram baseline loss.

No stage IO here: the tokenize stage reads the corpus and manifest, calls these and writes the results.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from twoscale.pipeline.errors import TwoscaleError

EOT = "<|endoftext|>"


def split_documents(text: str, manifest: dict[str, Any], val_fraction: float) -> tuple[list[str], list[str]]:
    """Split every manifest document into a train head and a validation tail; deterministic, no randomness.

    For a document of n characters the tail starts at character round(n * (1 - val_fraction)), moved forward
    to the next line start (just after a newline) unless it is already at one, so no line is cut in two.
    Head + tail is the document. A document with no line start at or after that point (e.g. a single line)
    has an empty tail and goes to train only. Returns (train texts, validation texts) in manifest order;
    documents with an empty tail are absent from the validation list. Raises if every tail is empty.
    """
    train, val = [], []
    for entry in manifest["documents"]:
        doc = text[entry["start"] : entry["end"]]
        cut = round(len(doc) * (1 - val_fraction))
        if 0 < cut < len(doc) and doc[cut - 1] != "\n":
            newline = doc.find("\n", cut)
            cut = len(doc) if newline < 0 else newline + 1
        train.append(doc[:cut])
        if doc[cut:]:
            val.append(doc[cut:])
    if not val:
        raise TwoscaleError(
            f"validation split is empty: no document has a line in its last {val_fraction:g} "
            "(data.val_fraction); use documents with several lines"
        )
    return train, val


def train_bpe(train_texts: list[str], vocab_size: int) -> Tokenizer:
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


def encode_documents(tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """One flat id array: each text's ids, then the EOT id; uint16 when the vocabulary fits, else uint32."""
    eot = tokenizer.token_to_id(EOT)
    if eot is None:
        raise TwoscaleError(f"the tokenizer has no {EOT} token")
    dtype = np.uint16 if tokenizer.get_vocab_size() <= 1 << 16 else np.uint32
    # A literal "<|endoftext|>" inside a document is text, not a boundary: encode special tokens as text.
    # (The flag is not saved in the tokenizer JSON, so set it for this call only.)
    previous, tokenizer.encode_special_tokens = tokenizer.encode_special_tokens, True
    try:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    finally:
        tokenizer.encode_special_tokens = previous
    pieces = [np.array([*encoding.ids, eot], dtype=dtype) for encoding in encodings]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)


def unigram_cross_entropy(train_ids: np.ndarray, val_ids: np.ndarray, vocab_size: int) -> float:
    """Nats per token of `val_ids` under the add-one smoothed unigram distribution of `train_ids`.

    p(t) = (count_train(t) + 1) / (len(train_ids) + vocab_size); the result is -mean(log p(val_ids)). This is
    the loss of a model that ignores context: a trained model's validation loss should be well below it.
    """
    train_ids, val_ids = np.asarray(train_ids), np.asarray(val_ids)
    if val_ids.size == 0:
        raise TwoscaleError("unigram cross-entropy of an empty validation set")
    largest = int(max(train_ids.max(initial=0), val_ids.max()))
    if largest >= vocab_size:
        raise TwoscaleError(f"token id {largest} is outside the vocabulary of {vocab_size}")
    counts = np.bincount(train_ids.astype(np.int64), minlength=vocab_size).astype(np.float64)
    log_p = np.log(counts + 1) - math.log(train_ids.size + vocab_size)
    return float(-log_p[val_ids.astype(np.int64)].mean())
