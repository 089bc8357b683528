"""How the stages that work on one trained checkpoint (measure, sweep, sample, phases, distill) open it."""

from __future__ import annotations

import argparse

import numpy as np
import torch

from twoscale.models.looped_gpt import LoopedGPT
from twoscale.pipeline.io import load_token_array, read_json
from twoscale.pipeline.params import Params, RunParams
from twoscale.training.device import configure_torch, resolve_device
from twoscale.training.trainer import load_model_matching


def open_checkpoint(args: argparse.Namespace, params: Params, run: RunParams, threads: int
                    ) -> tuple[LoopedGPT, dict, np.ndarray, torch.device]:
    """How the stages on one trained checkpoint (--checkpoint, --data-dir) start: torch set up with `threads` and
    the run's seed; the run's model (refused if trained with other model parameters), its checkpoint metadata, the
    validation tokens and the device."""
    stats = read_json(args.data_dir / "stats.json")
    val_ids = load_token_array(args.data_dir / "val.npy")
    configure_torch(threads, run.seed)
    device = resolve_device(params.runtime.device)
    model, meta = load_model_matching(args.checkpoint, run.model, stats["vocab_size"], device)
    return model, meta, val_ids, device
