"""Stage `tokenize`: train a byte-level BPE on the training split and write train/validation token arrays."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import (
    atomic_path,
    load_token_array,
    read_json,
    read_token_blocks,
    write_json,
    write_text,
    write_token_array,
)
from twoscale.data.tokenization import (
    batched,
    encode_documents,
    id_dtype,
    read_documents,
    split_documents,
    token_counts,
    train_bpe,
    unigram_cross_entropy,
)
from twoscale.pipeline.observers import tracking
from twoscale.stages.common import load

HELP = "train the byte-level BPE and write train/validation token arrays"

log = logging.getLogger(__name__)

ENCODE_BATCH_CHARS = 1 << 20  # characters of documents encoded at a time: bounds the tokenizer's working memory


def splits(corpus_path: Path, manifest: dict[str, Any], val_fraction: float) -> Iterator[tuple[str, str]]:
    """Each document's train head and validation tail, read from the corpus one document at a time."""
    with corpus_path.open(encoding="utf-8") as corpus:
        yield from split_documents(read_documents(corpus, manifest), val_fraction)


def run(args: argparse.Namespace) -> None:
    params = load(args)
    corpus_path, val_fraction = args.corpus_dir / "corpus.txt", params.data.val_fraction
    if not corpus_path.is_file():
        raise TwoscaleError(f"{corpus_path}: corpus not found (run the corpus stage first)")
    manifest = read_json(args.corpus_dir / "manifest.json")
    # a first pass checks the corpus against its manifest and the split before the BPE's long one
    n_documents = train_chars = val_chars = 0
    for head, tail in splits(corpus_path, manifest, val_fraction):
        n_documents, train_chars, val_chars = n_documents + 1, train_chars + len(head), val_chars + len(tail)
    log.info("training BPE (vocab %d) on %d training documents", params.tokenize.vocab_size, n_documents)
    tokenizer = train_bpe((head for head, _ in splits(corpus_path, manifest, val_fraction)),
                          params.tokenize.vocab_size)
    heads = (head for head, _ in splits(corpus_path, manifest, val_fraction))  # every document has a head
    tails = (tail for _, tail in splits(corpus_path, manifest, val_fraction) if tail)  # not every one a tail
    dtype = id_dtype(tokenizer)
    # the id arrays go to temporary files, in place only once the stage has succeeded
    with atomic_path(args.out_dir / "train.npy") as train_path, atomic_path(args.out_dir / "val.npy") as val_path:
        for path, texts in [(train_path, heads), (val_path, tails)]:
            ids = (encode_documents(tokenizer, batch) for batch in batched(texts, ENCODE_BATCH_CHARS))
            write_token_array(path, ids, dtype)
        train_counts = token_counts(read_token_blocks(train_path), tokenizer.get_vocab_size())
        val_ids = load_token_array(val_path)  # the pairwise sum reads it in order, a block at a time
        stats = {
            "vocab_size": tokenizer.get_vocab_size(),
            "train_tokens": int(train_counts.sum()),
            "val_tokens": int(len(val_ids)),
            "train_chars": train_chars,
            "val_chars": val_chars,
            "unigram_val_loss": unigram_cross_entropy(train_counts, val_ids),
            "corpus_sha256": manifest["sha256"],  # which corpus the tokens are of (the train stage logs it)
        }
        del val_ids  # the memory map, before its file is renamed
        log.info("tokens: %d train, %d validation; unigram baseline %.3f nats/token",
                 stats["train_tokens"], stats["val_tokens"], stats["unigram_val_loss"])
        with tracking.stage_run(args.stage, {"data": params.data, "tokenize": params.tokenize}):
            tracking.log_metrics(stats)
            write_text(args.out_dir / "tokenizer.json", tokenizer.to_str())
            write_json(args.out_dir / "stats.json", stats)
