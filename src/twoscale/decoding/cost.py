"""The hardware-independent cost of decoding a token: layer applications and forward FLOPs, exit decodes included.

A token's cost follows from its loop count in every group, its position and the exit rules: a criterion that reads
a next-token distribution decodes after every loop step of its group ("head": the LM head only; "rest": every layer
of the later segments once, then the LM head; see `rules.head_decode` and `engine.decode_rest`).

FLOPs are the forward model FLOPs of `models.flops`: a layer application on the token at position p reads p + 1 keys;
one application of a group adds its input injection; every LM head counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from twoscale.decoding.rules import ExitRule
from twoscale.models.flops import head_flops, injection_flops, layer_flops
from twoscale.models.looped_gpt import LoopedGPT

Tensor = torch.Tensor


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
    flops = layers * layer_flops(config, keys) + injection_flops(config) * loops.sum(0) + heads * head_flops(config)
    return TokenCost(layers, flops)
