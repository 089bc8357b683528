"""Stage `tokenize`: train a byte-level BPE on the training split and write train/validation token arrays."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from twoscale.data.tokenization import encode_documents, split_documents, train_bpe, unigram_cross_entropy
from twoscale.pipeline import tracking
from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import atomic_path, read_json, write_json, write_text
from twoscale.pipeline.params import params_hash
from twoscale.stages.common import add_params_argument, load, log_sections

log = logging.getLogger("twoscale.tokenize")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--corpus-dir", type=Path, required=True, help="reads corpus.txt and manifest.json")
    parser.add_argument("--out-dir", type=Path, required=True, help="writes tokenizer.json, train.npy, val.npy, stats.json")


def save_array(path: Path, ids: np.ndarray) -> None:
    with atomic_path(path) as tmp, tmp.open("wb") as handle:
        np.save(handle, ids)


def run(args: argparse.Namespace) -> None:
    params = load(args)
    corpus_path = args.corpus_dir / "corpus.txt"
    if not corpus_path.is_file():
        raise TwoscaleError(f"{corpus_path}: corpus not found (run the corpus stage first)")
    text = corpus_path.read_text()
    manifest = read_json(args.corpus_dir / "manifest.json")
    if manifest.get("n_chars") != len(text):
        raise TwoscaleError(f"{corpus_path}: does not match its manifest ({len(text)} vs {manifest.get('n_chars')} chars)")
    train_texts, val_texts = split_documents(text, manifest, params.data.val_fraction)
    if not val_texts:
        raise TwoscaleError(f"no validation text: data.val_fraction = {params.data.val_fraction} holds out no line")
    log.info("training BPE (vocab %d) on %d training documents", params.tokenize.vocab_size, len(train_texts))
    tokenizer = train_bpe(train_texts, params.tokenize.vocab_size)
    train_ids = encode_documents(tokenizer, train_texts)
    val_ids = encode_documents(tokenizer, val_texts)
    stats = {
        "vocab_size": tokenizer.get_vocab_size(),
        "train_tokens": int(len(train_ids)),
        "val_tokens": int(len(val_ids)),
        "train_chars": sum(map(len, train_texts)),
        "val_chars": sum(map(len, val_texts)),
        "unigram_val_loss": unigram_cross_entropy(train_ids, val_ids, tokenizer.get_vocab_size()),
    }
    log.info("tokens: %d train, %d validation; unigram baseline %.3f nats/token",
             stats["train_tokens"], stats["val_tokens"], stats["unigram_val_loss"])
    with tracking.stage_run("tokenize", params_hash(params.data, params.tokenize)):
        import mlflow

        log_sections(params, "tokenize")
        mlflow.log_metrics({k: float(v) for k, v in stats.items()})
        write_text(args.out_dir / "tokenizer.json", tokenizer.to_str())
        save_array(args.out_dir / "train.npy", train_ids)
        save_array(args.out_dir / "val.npy", val_ids)
        write_json(args.out_dir / "stats.json", stats)
