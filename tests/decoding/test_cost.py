"""The cost of a decoded token: by hand, and against PyTorch's FLOP counter on the real decoding."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from twoscale.decoding.cache import new_cache
from twoscale.decoding.cost import token_costs
from twoscale.decoding.engine import step_token
from twoscale.decoding.rules import make_rule
from twoscale.models.looped_gpt import LoopedGPT

C, V = 16, 40  # the tiny models' width and vocabulary; layout 0 | (1) | (2, 3) | (4) | 5


def by_hand(loops, position, decode_layers=(0, 0, 0), decode_heads=(0, 0, 0), injection=0):
    layers = 2 + sum((n + d) * k for n, d, k in zip((1, 2, 1), decode_layers, loops, strict=True))
    heads = 1 + sum(h * k for h, k in zip(decode_heads, loops, strict=True))
    per_layer = 24 * C * C + 4 * (position + 1) * C
    return layers, layers * per_layer + injection * 2 * C * C * sum(loops) + heads * 2 * C * V


def test_costs_by_hand(tiny_model):
    loops = torch.tensor([[1, 3], [2, 5], [4, 1]])
    positions = torch.tensor([0, 7])
    fixed = [make_rule({"criterion": "fixed", "loops": 5}) for _ in range(3)]
    cost = token_costs(tiny_model, loops, positions, fixed)
    expected = [by_hand((1, 2, 4), 0), by_hand((3, 5, 1), 7)]
    assert cost.layers.tolist() == [e[0] for e in expected]
    assert cost.flops.tolist() == [e[1] for e in expected]
    # "rest" after group g runs the later segments once: after group 0 layers 2-5 (4), after 1: 4-5 (2), after 2: 1
    rest = [make_rule({"criterion": "kl", "decode": "rest", "threshold": 0.1}) for _ in range(3)]
    cost = token_costs(tiny_model, loops, positions, rest)
    assert cost.flops.tolist()[1] == by_hand((3, 5, 1), 7, (4, 2, 1), (1, 1, 1))[1]
    head = [make_rule({"criterion": "kl", "decode": "head", "threshold": 0.1}) for _ in range(3)]
    assert token_costs(tiny_model, loops, positions, head).layers.tolist()[0] == by_hand((1, 2, 4), 0)[0]


@pytest.mark.parametrize("spec", [{"criterion": "fixed", "loops": 3},
                                  {"criterion": "kl", "decode": "rest", "threshold": 1e-5},
                                  {"criterion": "kl", "decode": "head", "threshold": 1e-5},
                                  {"criterion": "step_norm", "threshold": 0.008}])
def test_costs_match_the_flop_counter(variant_model: LoopedGPT, spec):
    """Every token of a short sequence decoded under PyTorch's FLOP counter against the count from its loop counts
    and position. Attention runs as explicit matmuls (the counter does not see the CPU's fused kernel)."""
    caches = new_cache(variant_model, 6, 6)
    for position, token in enumerate([5, 9, 2, 7, 30, 1]):
        rules = [make_rule(spec, max_loops=6) for _ in range(3)]
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            _, loops = step_token(variant_model, token, position, caches, rules)
        cost = token_costs(variant_model, torch.tensor(loops)[:, None], torch.tensor([position]), rules)
        assert counter.get_total_flops() == cost.flops.item(), (position, loops)
