"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest
import torch

from twoscale.models.looped_gpt import LoopedGPT, ModelConfig

# The longest modules first (docs/development.md#time-of-the-suite), the rest in their order. `make test` hands
# each module to one pytest-xdist worker in collection order: a long module collected late holds one worker after
# the other has run out of work (longest-processing-time-first scheduling).
LONGEST_FIRST = ["tests/test_end_to_end.py", "tests/test_paper_shape.py", "tests/data/test_bounded_memory.py",
                 "tests/test_documentation.py", "tests/test_orchestrator_killed.py",
                 "tests/stages/test_stage_errors.py", "tests/training/test_training.py",
                 "tests/pipeline/test_tracking.py", "tests/test_mid_run_edit.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {module: position for position, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep order


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
