"""Model FLOPs of a training step of the looped GPT: the count behind tokens/s as TFLOP/s and MFU."""

from __future__ import annotations

from collections.abc import Sequence

from twoscale.models.looped_gpt import ModelConfig, segments


def training_step_flops(config: ModelConfig, loops: Sequence[int], backprop_depth: int, batch_size: int) -> float:
    """Matmul FLOPs of one training step, the usual model-FLOPs count: 2 per multiply-add of every linear layer
    (the input injection and the tied LM head included) and of attention's scores and mixing (the causal mask
    not subtracted), for every layer application; the applications that keep gradients cost twice that again
    backward. Normalisations, activations and the optimizer are left out."""
    C, T = config.n_embd, config.block_size
    tokens = batch_size * T
    block = 2 * tokens * 12 * C * C + 4 * batch_size * T * T * C  # qkv 3C², proj C², MLP 8C²; QKᵀ and AV
    inject = {"none": 0, "add": 2 * tokens * C * C, "adapter": 2 * tokens * 2 * C * C}[config.injection]
    head = 2 * tokens * C * config.vocab_size
    forward = with_grad = head
    for segment in segments(config):
        application = len(segment.layers) * block + (inject if segment.group is not None else 0)
        runs = 1 if segment.group is None else loops[segment.group]
        forward += runs * application
        with_grad += min(runs, backprop_depth) * application
    return forward + 2 * with_grad
