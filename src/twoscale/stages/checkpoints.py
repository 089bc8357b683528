"""How the stages that work on one trained checkpoint (measure, sweep, sample, phases, distill) open it."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from twoscale.config.io import load_token_array, read_json, run_subdir
from twoscale.config.params import Params, RunParams
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.training.device import configure_torch, resolve_device
from twoscale.training.trainer import checkpoint_name, load_model_matching, run_fingerprint


def open_checkpoint(args: argparse.Namespace, params: Params, run: RunParams, threads: int
                    ) -> tuple[LoopedGPT, dict, np.ndarray, torch.device]:
    """How the stages on one trained checkpoint (--checkpoint, --data-dir) start: torch set up with `threads` and
    the run's seed; the run's model (refused unless it is the checkpoint its name says, of the run as the parameters
    and data in force train it), its checkpoint metadata, the validation tokens and the device."""
    stats = read_json(args.data_dir / "stats.json")
    val_ids = load_token_array(args.data_dir / "val.npy")
    configure_torch(threads, run.seed)
    device = resolve_device(params.runtime.device)
    fingerprint = run_fingerprint(params.runtime, run, args.data_dir)
    model, meta = load_model_matching(args.checkpoint, run, fingerprint, stats["vocab_size"], device)
    return model, meta, val_ids, device


def load_final_model(train_dir: Path, data_dir: Path, params: Params, run: RunParams, vocab_size: int,
                     device: torch.device) -> tuple[LoopedGPT, dict]:
    """The model of a run's final checkpoint under `train_dir` (<recipe>/seed_<seed>/checkpoints/), refused unless
    it is what the parameters and the data in `data_dir` train."""
    path = train_dir / run_subdir(run.recipe, run.seed) / "checkpoints" / checkpoint_name(run.train.steps)
    return load_model_matching(path, run, run_fingerprint(params.runtime, run, data_dir), vocab_size, device)
