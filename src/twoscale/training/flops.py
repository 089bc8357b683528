"""Model FLOPs of a training step of the looped GPT: the count behind tokens/s as TFLOP/s and MFU."""

from __future__ import annotations

from collections.abc import Sequence

from twoscale.models.flops import head_flops, injection_flops, layer_flops
from twoscale.models.looped_gpt import ModelConfig, segments


def training_step_flops(config: ModelConfig, loops: Sequence[int], backprop_depth: int, batch_size: int) -> float:
    """Matmul FLOPs of one training step, the usual model-FLOPs count: 2 per multiply-add of every linear layer
    (the input injection and the tied LM head included) and of attention's scores and mixing (the causal mask
    not subtracted), for every layer application; the applications that keep gradients cost twice that again
    backward. Normalisations, activations and the optimizer are left out."""
    tokens = batch_size * config.block_size
    block = tokens * layer_flops(config, config.block_size)  # every token read as attending to the whole window
    inject = tokens * injection_flops(config)
    head = tokens * head_flops(config)
    forward = with_grad = head
    for segment in segments(config):
        application = len(segment.layers) * block + (inject if segment.group is not None else 0)
        runs = 1 if segment.group is None else loops[segment.group]
        forward += runs * application
        with_grad += min(runs, backprop_depth) * application
    return forward + 2 * with_grad
