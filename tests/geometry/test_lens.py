"""The logit lens across loop steps against plain forward passes: stopping group g after k steps and running the
later groups once is a forward pass at those loop counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from twoscale.geometry.lens import decoded_logits, lens_means, lens_sums
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig

LOOPS = 3


def tiny_model() -> LoopedGPT:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=50, n_layer=6, n_head=2, n_embd=16, block_size=8, dropout=0.0, bias=False,
                         groups=((1, 1), (2, 3), (4, 4)), norm="sandwich", injection="adapter")
    return LoopedGPT(config).double().eval()


def windows() -> torch.Tensor:
    return (torch.arange(16).view(2, 8) * 7) % 50


@torch.no_grad()
def test_the_rest_decode_of_each_iterate_is_a_forward_pass_stopping_that_group_there():
    model, idx = tiny_model(), windows()
    trajectories = model(idx, [LOOPS] * 3, record_trajectories=True).trajectories
    for group, trajectory in enumerate(trajectories):
        for k in range(1, LOOPS + 1):
            loops = [LOOPS] * group + [k] + [1] * (2 - group)  # earlier groups in full, later ones once
            expected = model(idx, loops).logits
            assert torch.allclose(decoded_logits(model, trajectory[k], group, "rest"), expected, rtol=0, atol=1e-12)
    head = decoded_logits(model, trajectories[0][1], 0, "head")
    assert torch.equal(head, model.lm_head(model.ln_f(trajectories[0][1])))
    with pytest.raises(ValueError, match="decode must be one of"):
        decoded_logits(model, trajectories[0][1], 0, "tail")


@torch.no_grad()
def test_the_lens_counts_top1_agreement_and_kl_to_the_full_depth_prediction():
    model, idx = tiny_model(), windows()
    rows = {(r["group"], r["k"]): r for r in lens_sums(model, idx, LOOPS, "rest")}
    assert sorted(rows) == [(g, k) for g in range(3) for k in range(1, LOOPS + 1)]
    full = F.log_softmax(model(idx, [LOOPS] * 3).logits, dim=-1)
    for (group, k), row in rows.items():
        stopped = F.log_softmax(model(idx, [LOOPS] * group + [k] + [1] * (2 - group)).logits, dim=-1)
        assert row["tokens"] == 16
        assert row["top1_agree"] == int((stopped.argmax(-1) == full.argmax(-1)).sum())
        kl = F.kl_div(stopped, full, log_target=True, reduction="sum")  # sum of p_full (log p_full - log p_k)
        assert row["kl_sum"] == pytest.approx(float(kl), rel=1e-9, abs=1e-12)
    last = rows[(2, LOOPS)]  # the last group at full depth, then the last layer: the full prediction itself
    assert last["top1_agree"] == 16 and last["kl_sum"] == pytest.approx(0.0, abs=1e-12)


@torch.no_grad()
def test_lens_means_over_batches_equal_the_sums_of_one_batch_of_all_windows():
    model, idx = tiny_model(), windows()
    whole = {(r["group"], r["k"]): r for r in lens_sums(model, idx, LOOPS, "head")}
    means = lens_means(model, [idx[:1], idx[1:]], LOOPS, ["head"])
    assert {r["decode"] for r in means} == {"head"} and len(means) == len(whole)
    for row in means:
        one = whole[(row["group"], row["k"])]
        assert row["tokens"] == one["tokens"] == 16
        assert row["top1_agreement"] == one["top1_agree"] / 16
        assert row["mean_kl"] == pytest.approx(one["kl_sum"] / 16, rel=1e-12)


@torch.no_grad()
def test_the_lens_rest_is_not_the_exit_rules_rest_where_a_group_injects_its_input():
    """On one position (no earlier ones to attend to) a rule's rest decode is the later layers once without the
    groups' injection or norm; the lens's is the forward pass, injection included. With adapter injection the two
    differ; on a model without injection or group norm they are the same computation."""
    from twoscale.decoding.cache import new_cache
    from twoscale.decoding.engine import decode_rest

    def both(model: LoopedGPT) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = torch.tensor([[7]])
        state = model(idx, [LOOPS] * 3, record_trajectories=True).trajectories[0][2][:, 0]  # group 0, k = 2: (1, C)
        first = model.segment_index(0)
        rule = decode_rest(model, state, first, new_cache(model, LOOPS, 1), 0)
        by_hand = state[:, None]
        for segment in model.segments[first + 1:]:
            by_hand = model.apply_segment(segment, by_hand)  # each layer once, no injection, no group norm
        lens = decoded_logits(model, state[:, None], 0, "rest")[:, 0]
        return rule, model.logits_of(by_hand)[:, 0], lens

    adapter = tiny_model()
    for step in adapter.group_steps:  # trained away from its initial [I 0], as `huginn`'s is
        step.inject.weight.add_(0.1 * torch.randn(step.inject.weight.shape, dtype=torch.float64))
    rule, by_hand, lens = both(adapter)
    assert torch.allclose(rule, by_hand, rtol=0, atol=1e-12)
    assert (rule - lens).abs().max() > 1e-3
    torch.manual_seed(0)
    plain = LoopedGPT(ModelConfig(vocab_size=50, n_layer=6, n_head=2, n_embd=16, block_size=8, dropout=0.0,
                                  bias=False, groups=((1, 1), (2, 3), (4, 4)))).double().eval()
    rule, by_hand, lens = both(plain)
    assert torch.allclose(rule, lens, rtol=0, atol=1e-12) and torch.allclose(rule, by_hand, rtol=0, atol=1e-12)
