"""The hardware-independent cost of decoding a token: layer applications and forward FLOPs, exit decodes included.

A token's cost follows from its loop count in every group, its position and the exit rules: a criterion that reads
a next-token distribution decodes after every loop step of its group ("head": the LM head only; "rest": every layer
of the later segments once, then the LM head; see `rules.head_decode` and `engine.decode_rest`).

FLOPs count 2 per multiply-add of every linear layer and of attention's scores and mixing, the usual model-FLOPs
count. A layer application on the token at position p reads p + 1 keys: 24 C² (query, key and value 6 C², output
projection 2 C², MLP 16 C²) plus 4 (p + 1) C (q·k over the keys and the weighted sum of the values). One application
of a group adds its input injection (adapter 4 C², add 2 C²); every LM head costs 2 C V. Embeddings, norms,
activations and softmax are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from twoscale.decoding.rules import ExitRule
from twoscale.models.looped_gpt import LoopedGPT

Tensor = torch.Tensor

INJECTION_MULTIPLY_ADDS = {"none": 0, "add": 1, "adapter": 2}  # per token, in units of C²


@dataclass(frozen=True)
class TokenCost:
    layers: Tensor  # (N,) layer applications per token, decodes included
    flops: Tensor  # (N,) forward FLOPs per token


def decode_layers(model: LoopedGPT, segment_index: int, rule: ExitRule) -> tuple[int, int]:
    """Layer applications and LM heads of one exit decision of `rule` after the group at `segment_index`."""
    if not rule.needs_logits:
        return 0, 0
    if rule.criterion.decode == "head":
        return 0, 1
    return sum(len(segment.layers) for segment in model.segments[segment_index + 1 :]), 1


def token_costs(model: LoopedGPT, loops: Tensor, positions: Tensor, rules: Sequence[ExitRule]) -> TokenCost:
    """Cost of N decoded tokens from their loop counts per group (G, N) and positions (N,) under `rules`."""
    config = model.config
    C, V = config.n_embd, config.vocab_size
    loops = loops.double()
    layers = torch.zeros(loops.shape[1], dtype=torch.float64, device=loops.device)
    heads = torch.ones_like(layers)  # the token's own LM head
    for segment_index, segment in enumerate(model.segments):
        if segment.group is None:
            layers += len(segment.layers)
            continue
        rule_layers, rule_heads = decode_layers(model, segment_index, rules[segment.group])
        layers += (len(segment.layers) + rule_layers) * loops[segment.group]
        heads += rule_heads * loops[segment.group]
    keys = positions.to(torch.float64) + 1
    injection = 2 * INJECTION_MULTIPLY_ADDS[config.injection] * C * C * loops.sum(0)
    flops = layers * (24 * C * C + 4 * keys * C) + injection + heads * 2 * C * V
    return TokenCost(layers, flops)
