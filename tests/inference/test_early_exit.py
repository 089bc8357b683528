"""Teacher-forced evaluation with per-token exits: frozen-token semantics against an independent replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twoscale.inference.early_exit import compute_fraction, decode_rest, evaluate_with_exits, run_with_exits
from twoscale.inference.exits import head_decode, make_rule
from twoscale.models.looped_gpt import LoopedGPT
from replay import exit_steps

MAX_LOOPS = 6


@pytest.fixture(scope="module")
def model(tiny_model: LoopedGPT) -> LoopedGPT:
    return tiny_model


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 40, (2, 10), generator=torch.Generator().manual_seed(seed))


def rules(spec: dict, n: int = 3):
    return [make_rule(spec, max_loops=MAX_LOOPS) for _ in range(n)]


def replay(model: LoopedGPT, idx: torch.Tensor, loops: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Independent route: given each token's loop count per group, loop every group to its largest count and let
    a token's state change only while k <= its own count. Returns logits and each group's (K+1, N, C) path."""
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    paths = []
    for layers, group in [((0,), None), ((1,), 0), ((2, 3), 1), ((4,), 2), ((5,), None)]:
        if group is None:
            for layer in layers:
                x = model.blocks[layer](x)
            continue
        path = [x]
        for k in range(1, int(loops[group].max()) + 1):
            new = x
            for layer in layers:
                new = model.blocks[layer](new)
            x = torch.where((k <= loops[group])[..., None], new, x)
            path.append(x)
        paths.append(torch.stack(path).flatten(1, 2))
    return model.lm_head(model.ln_f(x)), paths


def test_fixed_rules_equal_the_plain_forward(model):
    idx = tokens()
    run = run_with_exits(model, idx, rules({"criterion": "fixed", "loops": 4}))
    torch.testing.assert_close(run.logits, model(idx, [4, 4, 4]).logits, rtol=0, atol=1e-12)
    assert run.loops.shape == (3, 2, 10) and bool((run.loops == 4).all())


def test_fixed_rules_equal_the_plain_forward_with_sandwich_norm_and_injection(variant_model):
    idx = tokens()
    run = run_with_exits(variant_model, idx, rules({"criterion": "fixed", "loops": 3}))
    torch.testing.assert_close(run.logits, variant_model(idx, [3, 3, 3]).logits, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "spec",
    [
        # thresholds inside the spread of this model's values, so that tokens exit at different steps
        {"criterion": "step_norm", "relative": True, "threshold": 0.065},
        {"criterion": "acceleration", "variant": "by_step", "threshold": 0.06},
        {"criterion": "kl", "decode": "head", "threshold": 1.3e-5},
        {"criterion": "kl", "decode": "rest", "threshold": 1.3e-5},
    ],
)
def test_exited_tokens_freeze_and_still_serve_as_keys(model, spec):
    idx = tokens()
    run = run_with_exits(model, idx, rules(spec))
    assert 1 <= int(run.loops.min()) and int(run.loops.max()) <= MAX_LOOPS
    assert len(set(run.loops.flatten().tolist())) > 1, "the threshold should make tokens exit at different steps"
    logits, paths = replay(model, idx, run.loops)
    torch.testing.assert_close(run.logits, logits, rtol=0, atol=1e-10)
    if spec.get("decode") == "rest":
        return  # replaying a "rest" decode needs the whole network per step; the state check above covers it
    for group, path in enumerate(paths):
        # each token's own path, as it was while it ran, gives the same exit step under a fresh rule
        fresh = make_rule(spec, max_loops=path.shape[0] - 1)
        head = lambda k, rows, path=path: head_decode(model, path[k, rows])  # noqa: E731
        assert torch.equal(exit_steps(fresh, path, head), run.loops[group].flatten())


def test_rest_decode_is_the_network_after_the_group(model):
    idx = tokens()
    x = model.embed(idx)
    x = model.apply_segment(model.segments[0], x)  # layer 0
    for _ in range(3):
        x = model.apply_segment(model.segments[1], x)  # group 0 three times
    torch.testing.assert_close(decode_rest(model, x, 1), model(idx, [3, 1, 1]).logits, rtol=0, atol=1e-12)


def test_compute_fraction_by_hand(model):
    # layers per token: 1 (layer 0) + 1*L0 + 2*L1 + 1*L2 + 1 (layer 5); at max: 2 + 4*6 = 26
    assert compute_fraction(model, [6, 6, 6], 6) == pytest.approx(1.0)
    assert compute_fraction(model, [1, 2, 3], 6) == pytest.approx((2 + 1 + 4 + 3) / 26)


def test_evaluate_with_exits_matches_the_plain_loss_at_fixed_depth(model):
    from twoscale.training.batches import evaluate_loss

    ids = (np.arange(300) * 7 % 40).astype(np.uint16)
    fixed = rules({"criterion": "fixed", "loops": 2})
    result = evaluate_with_exits(model, ids, fixed, MAX_LOOPS, 5, 2, torch.device("cpu"))
    plain = evaluate_loss(model, ids, [2, 2, 2], 5, 2, torch.device("cpu"))
    assert result["cross_entropy"] == pytest.approx(plain, rel=1e-9)
    assert result["perplexity"] == pytest.approx(np.exp(plain), rel=1e-9)
    assert [result[f"mean_loops_group{g}"] for g in range(3)] == [2, 2, 2]
    assert result["compute_fraction"] == pytest.approx((2 + 4 * 2) / (2 + 4 * 6))


def test_rules_need_a_maximum(model):
    with pytest.raises(ValueError, match="max_loops"):
        run_with_exits(model, tokens(), [make_rule({"criterion": "step_norm", "threshold": 0.1})] * 3)
