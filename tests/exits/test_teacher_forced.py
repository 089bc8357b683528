"""The sweep's teacher-forced quality path: the KV-cache convention of exited tokens against an independent parallel
replay, and against cached generation position by position; its two routes (all positions at once, position by
position) against each other."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from replay import criterion_values, exit_steps

from twoscale.decoding.engine import generate
from twoscale.decoding.rules import ExitRule, head_decode, make_rule
from twoscale.exits.teacher_forced import (
    all_positions,
    compute_fraction,
    evaluate_with_exits,
    position_by_position,
    teacher_forced,
)
from twoscale.models.looped_gpt import LoopedGPT

MAX_LOOPS = 6
LAYOUT = [((0,), None), ((1,), 0), ((2, 3), 1), ((4,), 2), ((5,), None)]  # the tiny model's segments


@pytest.fixture(scope="module")
def model(tiny_model: LoopedGPT) -> LoopedGPT:
    return tiny_model


def tokens(seed: int = 1, batch: int = 2, length: int = 10) -> torch.Tensor:
    return torch.randint(0, 40, (batch, length), generator=torch.Generator().manual_seed(seed))


def rules(spec: dict, n: int = 3):
    return [make_rule(spec, max_loops=MAX_LOOPS) for _ in range(n)]


def frozen_key_block(block, x: torch.Tensor, frozen: dict, live: torch.Tensor) -> torch.Tensor:
    """One block on every position of x (B, T, C) in parallel, with explicit attention: a position where `live`
    (B, T) is False serves the key and value it had the last time it was live (kept in `frozen`)."""
    B, T, C = x.shape
    H = block.attn.n_head
    q, k, v = block.attn.qkv(block.ln_1(x)).split(C, dim=-1)
    if frozen:
        k = torch.where(live[..., None], k, frozen["k"])
        v = torch.where(live[..., None], v, frozen["v"])
    frozen.update(k=k, v=v)
    heads = lambda t: t.view(B, T, H, C // H).transpose(1, 2)  # noqa: E731
    scores = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(C // H)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mixed = (scores.masked_fill(~causal, float("-inf")).softmax(-1) @ heads(v)).transpose(1, 2).reshape(B, T, C)
    x = x + block.attn.proj(mixed)
    return x + block.mlp(block.ln_2(x))


def replay(model: LoopedGPT, idx: torch.Tensor, loops: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Independent route to the cached convention: given each token's loop count per group, loop every group to its
    largest count over all positions at once; a token's state changes only while k <= its own count, and after that
    it serves the keys and values of its last step. Returns logits and each group's (K+1, N, C) path."""
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    paths = []
    for layers, group in LAYOUT:
        if group is None:
            for layer in layers:
                x = frozen_key_block(model.blocks[layer], x, {}, torch.ones(idx.shape, dtype=torch.bool))
            continue
        path, frozen = [x], {layer: {} for layer in layers}
        for k in range(1, int(loops[group].max()) + 1):
            live = k <= loops[group]
            new = x
            for layer in layers:
                new = frozen_key_block(model.blocks[layer], new, frozen[layer], live)
            x = torch.where(live[..., None], new, x)
            path.append(x)
        paths.append(torch.stack(path).flatten(1, 2))
    return model.lm_head(model.ln_f(x)), paths


def test_fixed_rules_equal_the_plain_forward(model):
    idx = tokens()
    run = teacher_forced(model, idx, rules({"criterion": "fixed", "loops": 4}))
    torch.testing.assert_close(run.logits, model(idx, [4, 4, 4]).logits, rtol=0, atol=1e-12)
    assert run.loops.shape == (3, 2, 10) and bool((run.loops == 4).all())


def test_fixed_rules_equal_the_plain_forward_with_sandwich_norm_and_injection(variant_model):
    idx = tokens()
    run = teacher_forced(variant_model, idx, rules({"criterion": "fixed", "loops": 3}))
    torch.testing.assert_close(run.logits, variant_model(idx, [3, 3, 3]).logits, rtol=0, atol=1e-12)


# thresholds inside the spread of this model's values, so that tokens exit at three or more distinct steps per group
FIRING = {
    "acceleration": {"criterion": "acceleration", "variant": "vector", "hits": 1, "threshold": 7e-4},
    "step_norm": {"criterion": "step_norm", "threshold": 0.008},
    "kl_head": {"criterion": "kl", "decode": "head", "threshold": 1e-5},
    "kl_rest": {"criterion": "kl", "decode": "rest", "threshold": 1e-5},
}


@pytest.mark.parametrize("name", FIRING)
def test_exited_tokens_serve_their_deepest_keys(model, name):
    spec = FIRING[name]
    idx = tokens(batch=3, length=16)
    run = teacher_forced(model, idx, rules(spec))
    for group in range(3):
        assert len(set(run.loops[group].flatten().tolist())) >= 3, f"group {group}: exits at too few steps"
    logits, paths = replay(model, idx, run.loops)
    torch.testing.assert_close(run.logits, logits, rtol=0, atol=1e-10)
    if spec.get("decode") == "rest":
        return  # replaying a "rest" decode needs the cache per step; its loop counts are checked against generation
    for group, path in enumerate(paths):
        # each token's own path, as it was while it ran, gives the same exit step under a fresh rule
        fresh = make_rule(spec, max_loops=path.shape[0] - 1)
        head = lambda k, rows, path=path: head_decode(model, path[k, rows])  # noqa: E731
        assert torch.equal(exit_steps(fresh, path, head), run.loops[group].flatten())


@pytest.mark.parametrize("name", FIRING)
def test_teacher_forced_logits_are_those_of_cached_generation(model, name):
    """Tolerance 1e-10 in float64: a batch of windows teacher-forced together gives, position by position, the
    logits and loop counts of generating each window alone with the prompt being the whole window."""
    idx = tokens(batch=3, length=15)
    run = teacher_forced(model, idx, rules(FIRING[name]))
    for row in range(idx.shape[0]):
        window = idx[row].tolist()
        out = generate(model, window, 1, rules(FIRING[name]))
        torch.testing.assert_close(torch.stack(out.logits[: len(window)]), run.logits[row], rtol=0, atol=1e-10)
        assert torch.tensor(out.loops[: len(window)]).T.tolist() == run.loops[:, row].tolist()


@pytest.mark.parametrize("name", [name for name in FIRING if name != "kl_rest"])
def test_all_positions_at_once_equal_position_by_position(variant_model, name):
    """Settings of a rule stacked as rows (the sweep's batches), on every model variant: the same loop counts, and
    logits within float64 rounding. The thresholds are quantiles of the first group's values along the plain
    forward pass, so that the rule fires whatever the variant's scale."""
    spec = FIRING[name]
    idx = tokens(seed=2, batch=2, length=16)
    path = variant_model(idx, [MAX_LOOPS] * 3, record_trajectories=True).trajectories[0]
    head = lambda k, rows: head_decode(variant_model, path.flatten(1, 2)[k, rows])  # noqa: E731
    values = criterion_values(make_rule(spec, max_loops=MAX_LOOPS).criterion, path, head)
    thresholds = values[values.isfinite()].quantile(torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9], dtype=values.dtype))
    settings = [[make_rule({**spec, "threshold": float(threshold)}, max_loops=MAX_LOOPS) for _ in range(3)]
                for threshold in thresholds]
    idx = idx.repeat(len(settings), 1)

    def stacked():
        return [ExitRule.stacked([rule_set[g] for rule_set in settings], 2) for g in range(3)]

    together = all_positions(variant_model, idx, stacked())
    one_by_one = position_by_position(variant_model, idx, stacked())
    assert torch.equal(together.loops, one_by_one.loops)
    # the premise: in the first group some positions exit before others, so later ones read frozen entries
    assert len(set(together.loops[0].flatten().tolist())) >= 2, "every position exited at one step"
    torch.testing.assert_close(together.logits, one_by_one.logits, rtol=0, atol=1e-10)


def test_a_rest_decode_runs_position_by_position(model, monkeypatch):
    import twoscale.exits.teacher_forced as early_exit

    def refuse(*args):
        raise AssertionError("a rest decode cannot run on all positions at once")

    monkeypatch.setattr(early_exit, "all_positions", refuse)
    run = teacher_forced(model, tokens(), rules(FIRING["kl_rest"]))
    assert run.loops.shape == (3, 2, 10)


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
    # layer applications: 2 + 4 * 2 = 10; FLOPs: C = 16, V = 40, positions 0..15 read 1..16 keys (mean 8.5)
    assert result["layers_per_token"] == pytest.approx(10)
    assert result["gflops_per_token"] * 1e9 == pytest.approx(10 * (24 * 256 + 4 * 8.5 * 16) + 2 * 16 * 40)


def test_rules_need_a_maximum(model):
    with pytest.raises(ValueError, match="max_loops"):
        teacher_forced(model, tokens(), [make_rule({"criterion": "step_norm", "threshold": 0.1})] * 3)
