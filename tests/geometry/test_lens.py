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
