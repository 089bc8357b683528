"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest
import torch

from twoscale.models.looped_gpt import LoopedGPT, ModelConfig


@pytest.fixture(scope="module")
def tiny_model() -> LoopedGPT:
    """A small float64 looped GPT in eval mode with the default 1/2/1 layout (6 layers, groups 1, 2-3, 4)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=40, n_layer=6, n_head=2, n_embd=16, block_size=16, dropout=0.0, bias=True,
                         groups=((1, 1), (2, 3), (4, 4)))
    return LoopedGPT(config).double().eval()


VARIANTS = [("pre", "adapter", False), ("sandwich", "none", False), ("group", "add", False),
            ("rescale", "none", False), ("sandwich", "adapter", True)]


@pytest.fixture(scope="module", params=VARIANTS,
                ids=["-".join(v[:2]) + ("-scaled" if v[2] else "") for v in VARIANTS])
def variant_model(request) -> LoopedGPT:
    """The tiny model with another norm, input injection and/or scaled embedding; injection weights moved off
    their start (which ignores the group input) so that the group input matters."""
    norm, injection, scale_embedding = request.param
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=40, n_layer=6, n_head=2, n_embd=16, block_size=16, dropout=0.0, bias=True,
                         groups=((1, 1), (2, 3), (4, 4)), norm=norm, injection=injection,
                         scale_embedding=scale_embedding)
    model = LoopedGPT(config).double().eval()
    with torch.no_grad():
        for step in model.group_steps:
            if step.injection != "none":
                step.inject.weight.add_(0.2 * torch.randn_like(step.inject.weight))
    return model
