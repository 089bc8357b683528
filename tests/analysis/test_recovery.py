"""Recovery measures against hand values: the recovered fraction, cross-entropy and KL of known distributions,
and R² of known predictions."""

from __future__ import annotations

import math

import pytest
import torch

from twoscale.analysis.recovery import LogitScores, StateR2, recovered_fraction


def test_recovered_fraction_by_hand():
    assert recovered_fraction(4.5, teacher=4.0, unigram=6.0) == pytest.approx(0.75)
    assert recovered_fraction(4.0, teacher=4.0, unigram=6.0) == 1.0
    assert recovered_fraction(6.5, teacher=4.0, unigram=6.0) == pytest.approx(-0.25)  # worse than unigram
    assert math.isnan(recovered_fraction(5.0, teacher=6.5, unigram=6.0))  # nothing to recover


def test_cross_entropy_and_kl_of_two_token_distributions():
    teacher = torch.log(torch.tensor([[[0.75, 0.25]]], dtype=torch.float64))
    model = torch.log(torch.tensor([[[0.5, 0.5]]], dtype=torch.float64))
    scores = LogitScores()
    scores.add(model, teacher, torch.tensor([[0]]))
    scores.add(model + 3.0, teacher, torch.tensor([[1]]))  # a shift of the logits changes nothing
    result = scores.result()
    assert result["cross_entropy"] == pytest.approx(math.log(2))
    assert result["kl_to_teacher"] == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5))


def test_a_model_equal_to_the_teacher_has_zero_kl():
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0))
    scores = LogitScores()
    scores.add(logits, logits, torch.zeros(2, 5, dtype=torch.long))
    assert scores.result()["kl_to_teacher"] == pytest.approx(0.0, abs=1e-12)


def test_r2_is_one_for_exact_states_zero_for_the_mean_and_accumulates_over_batches():
    generator = torch.Generator().manual_seed(1)
    target = [torch.randn(3, 4, 5, generator=generator, dtype=torch.float64) for _ in range(2)]
    mean = [t.reshape(-1, 5).mean(0).expand_as(t) for t in target]
    r2 = StateR2()
    r2.add(target, target)
    assert r2.result() == pytest.approx([1.0, 1.0])
    r2 = StateR2()
    r2.add([m[:1] for m in mean], [t[:1] for t in target])  # two batches, against the mean of both
    r2.add([m[1:] for m in mean], [t[1:] for t in target])
    assert r2.result() == pytest.approx([0.0, 0.0], abs=1e-12)
    half = [t + 0.5 * (m - t) for t, m in zip(target, mean)]  # error (t − m)/2: SSE = SST / 4
    r2 = StateR2()
    r2.add(half, target)
    assert r2.result() == pytest.approx([0.75, 0.75])
