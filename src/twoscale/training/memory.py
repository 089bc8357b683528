"""Whether a training run fits the machine, checked before anything is allocated.

The estimate is a floor: the weights, their gradients and AdamW's two moments in float32 (16 bytes a parameter),
plus the activations kept for the backward pass of one batch, about 34 bytes per token and channel and 5 per
token pair and head for every layer application that is backpropagated (Korthikanti et al., 2022, without
recomputation). A run above it cannot fit; one below it may still run short of memory.
"""

from __future__ import annotations

import psutil
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.config.params import TrainParams
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig

GIB = 2**30
OPTIMIZER_BYTES_PER_PARAMETER = 16  # float32 weight, gradient, AdamW first and second moment


def parameter_count(config: ModelConfig) -> int:
    """The model's parameters, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        return sum(p.numel() for p in LoopedGPT(config).parameters())


def backpropagated_layers(config: ModelConfig, train: TrainParams) -> int:
    """Layer applications whose activations the backward pass keeps: every layer outside the loops, and the
    looped layers over at most backprop_depth steps of each group (the mean loop count when that is smaller)."""
    looped = sum(last - first + 1 for first, last in config.groups)
    depth = min(train.loops.backprop_depth, max(1, round(train.loops.mean))) if config.groups else 0
    return config.n_layer - looped + looped * depth


def training_bytes(config: ModelConfig, train: TrainParams) -> int:
    tokens = train.batch_size * config.block_size
    per_layer = 34 * tokens * config.n_embd + 5 * tokens * config.block_size * config.n_head
    return OPTIMIZER_BYTES_PER_PARAMETER * parameter_count(config) + per_layer * backpropagated_layers(config, train)


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return psutil.virtual_memory().available


def check_fits(config: ModelConfig, train: TrainParams, device: torch.device) -> None:
    """Refuse, in one line, a run whose estimated floor exceeds the device's free memory."""
    needed, free = training_bytes(config, train), available_bytes(device)
    if needed > free:
        raise TwoscaleError(f"training needs at least {needed / GIB:.1f} GiB (model, gradients, AdamW state and one "
                            f"batch's activations) but {device.type} has {free / GIB:.1f} GiB free: reduce model "
                            "or train.batch_size")
