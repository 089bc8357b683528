"""Recovery measures against hand values: the recovered fraction, cross-entropy and KL of known distributions,
R² of known predictions, and the whole evaluation of a surrogate that is its teacher."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.surrogates.model import RaptorSurrogate, SurrogateConfig
from twoscale.surrogates.recovery import LogitScores, StateR2, evaluate_recovery, recovered_fraction


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


def test_evaluate_recovery_of_a_surrogate_that_is_the_teacher_against_another_model():
    """A surrogate with one block per layer, the teacher's weights and unit gains is the teacher: its R² is 1 at
    every layer, its KL 0 and it recovers everything. The control, another GPT, is scored by cross-entropy and
    KL computed here from its own logits; the unigram baseline from add-one counts of the training ids."""
    config = ModelConfig(vocab_size=13, n_layer=3, n_head=2, n_embd=8, block_size=6, dropout=0.0, bias=True, groups=())
    torch.manual_seed(0)
    teacher, control = LoopedGPT(config).double().eval(), LoopedGPT(config).double().eval()
    surrogate = RaptorSurrogate(SurrogateConfig(config, ((0, 0), (1, 1), (2, 2)), 8, 1.0)).double()
    for block, layer in zip(surrogate.blocks, teacher.blocks, strict=True):
        block.block.load_state_dict(layer.state_dict())
    tokens = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 13, (2, 6), generator=tokens), torch.randint(1, 13, (2, 6), generator=tokens))
               for _ in range(2)]
    # training ids that are mostly the one token no target is: a unigram baseline any model beats (about 6.9 nats)
    train_ids = np.array([0] * 1000 + [1, 2, 5, 5, 12], dtype=np.uint16)

    got = evaluate_recovery(teacher, surrogate, control, train_ids, batches, torch.device("cpu"))

    targets = torch.cat([t.flatten() for _, t in batches])
    with torch.no_grad():
        def logits_of(model):
            return torch.cat([model(idx, []).logits.reshape(-1, 13) for idx, _ in batches]).double()
        teacher_logits, control_logits = logits_of(teacher), logits_of(control)
    teacher_ce = F.cross_entropy(teacher_logits, targets).item()
    control_ce = F.cross_entropy(control_logits, targets).item()
    control_kl = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=teacher_logits),
                                                   torch.distributions.Categorical(logits=control_logits)).mean()
    counts = np.bincount(train_ids, minlength=13)
    unigram = -np.mean(np.log((counts[targets.numpy()] + 1) / (len(train_ids) + 13)))

    assert got["layer_r2"] == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)
    assert got["unigram_cross_entropy"] == pytest.approx(unigram, rel=1e-12)
    for name in ("teacher", "surrogate"):
        assert got[name]["cross_entropy"] == pytest.approx(teacher_ce, rel=1e-9)
        assert got[name]["kl_to_teacher"] == pytest.approx(0.0, abs=1e-9)
        assert got[name]["recovered"] == pytest.approx(1.0, rel=1e-9)
    assert got["control"]["cross_entropy"] == pytest.approx(control_ce, rel=1e-9)
    assert got["control"]["kl_to_teacher"] == pytest.approx(control_kl.item(), rel=1e-9)
    assert got["control"]["recovered"] == pytest.approx((unigram - control_ce) / (unigram - teacher_ce), rel=1e-9)
