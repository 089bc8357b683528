"""Forward FLOPs per token of the looped GPT's parts, the usual model-FLOPs count: 2 per multiply-add of every
linear layer and of attention's scores and mixing; embeddings, norms, activations and softmax left out. A training
step's count and a decoded token's cost are both sums of these."""

from __future__ import annotations

from typing import Any

from twoscale.models.looped_gpt import ModelConfig

INJECTION_MULTIPLY_ADDS = {"none": 0, "add": 1, "adapter": 2}  # per token, in units of C²


def layer_flops(config: ModelConfig, keys: Any) -> Any:
    """One layer application on a token that attends over `keys` keys (a number or a tensor of them): query, key
    and value 6 C², output projection 2 C², MLP 16 C², and 4 keys C for the scores and the weighted values."""
    C = config.n_embd
    return 24 * C * C + 4 * keys * C


def injection_flops(config: ModelConfig) -> int:
    """One group application's input injection: add 2 C², adapter 4 C²."""
    return 2 * INJECTION_MULTIPLY_ADDS[config.injection] * config.n_embd * config.n_embd


def head_flops(config: ModelConfig) -> int:
    """One LM head: 2 C V."""
    return 2 * config.n_embd * config.vocab_size
