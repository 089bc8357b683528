"""Exit criteria (docs/methods.md#early-exit) on hand-built trajectories whose exit steps are worked out by
hand in the comments, the hit rule's corner cases, KL and entropy against direct computations, and make_rule's
errors."""

from __future__ import annotations

import math

import pytest
import torch
from replay import criterion_values, exit_states, exit_steps, exit_steps_from_values

from twoscale.decoding.rules import (
    CRITERIA,
    KL,
    Acceleration,
    Cosine,
    EntropyDifference,
    ExitRule,
    HitCounter,
    LatentDifference,
    StepNorm,
    head_decode,
    make_rule,
)

torch.set_num_threads(1)


def line(values) -> torch.Tensor:
    """A 1-D path along the first axis of a 2-D space, one token: (K+1, 1, 2)."""
    v = torch.tensor(values, dtype=torch.float64)
    return torch.stack([v, torch.zeros_like(v)], -1)[:, None, :]


def from_steps(deltas) -> torch.Tensor:
    """A 1-D path from x^(0) = 0 with the given steps Δ^(1..K): (K+1, 1, 2)."""
    return line([0.0] + torch.tensor(deltas, dtype=torch.float64).cumsum(0).tolist())


def steps_of(rule: ExitRule, traj: torch.Tensor, logits_fn=None) -> list[int]:
    return exit_steps(rule, traj, logits_fn).tolist()


# x^(k) = 1 − 2^(−k), k = 0..8: x = 0, 1/2, 3/4, 7/8, ...; Δ^(k) = 2^(−k); a^(k) = |Δ^(k) − Δ^(k−1)| = 2^(−k).
K = 8
HALVING = line([1 - 2.0**-k for k in range(K + 1)])


# --- acceleration ------------------------------------------------------------------------------------------


def test_acceleration_vector_on_halving_path():
    # a^(2..) = 1/4, 1/8, 1/16 = 0.0625, 1/32: below 0.1 from k = 4.
    assert steps_of(ExitRule(Acceleration(), 0.1), HALVING) == [5]  # default two hits: k = 4, 5
    assert steps_of(ExitRule(Acceleration(), 0.1, hits=1), HALVING) == [4]
    assert steps_of(ExitRule(Acceleration(), 0.1, hits=3), HALVING) == [6]
    # below 0.2 from k = 3 (1/8): two hits at k = 3, 4.
    assert steps_of(ExitRule(Acceleration(), 0.2), HALVING) == [4]


def test_acceleration_normalised_variants_on_halving_path():
    # by_step: a^(k) / ‖Δ^(k−1)‖ = 2^(−k) / 2^(−k+1) = 1/2 at every k >= 2.
    assert steps_of(ExitRule(Acceleration("by_step"), 0.6), HALVING) == [3]  # hits at k = 2, 3
    assert steps_of(ExitRule(Acceleration("by_step"), 0.4), HALVING) == [K]  # never
    # by_state: a^(k) / ‖x^(k)‖ = 2^(−k) / (1 − 2^(−k)) = 1/(2^k − 1) = 1/3, 1/7, 1/15, 1/31 for k = 2..5.
    assert steps_of(ExitRule(Acceleration("by_state"), 0.1), HALVING) == [5]  # hits at k = 4 (1/15), 5
    assert steps_of(ExitRule(Acceleration("by_state"), 0.2), HALVING) == [4]  # hits at k = 3 (1/7), 4
    # size_difference: |‖Δ^(k)‖ − ‖Δ^(k−1)‖| = 2^(−k), the same as the vector variant on a straight line.
    assert steps_of(ExitRule(Acceleration("size_difference"), 0.1), HALVING) == [5]


def test_acceleration_values_match_the_formulas():
    rule = ExitRule(Acceleration(), 1.0)
    rule.start(HALVING[0])
    rule.step(HALVING[1])
    assert math.isnan(rule.last_value.item())  # undefined at k = 1, never a hit
    rule.step(HALVING[2])
    assert rule.last_value.item() == pytest.approx(0.25)


def test_size_difference_sees_constant_speed_rotation_as_converged_but_vector_does_not():
    # Unit circle in steps of 60°: every step has length 1, so |‖Δ^(k)‖ − ‖Δ^(k−1)‖| = 0 (hits from k = 2,
    # exit at k = 3), while a^(k) = ‖Δ^(k) − Δ^(k−1)‖ = 4 sin²(30°) = 1 at every k (never below 0.5).
    angles = torch.arange(K + 1, dtype=torch.float64) * math.pi / 3
    circle = torch.stack([angles.cos(), angles.sin()], -1)[:, None, :]
    assert steps_of(ExitRule(Acceleration("size_difference"), 1e-9), circle) == [3]
    assert steps_of(ExitRule(Acceleration("vector"), 0.5), circle) == [K]
    values = criterion_values(Acceleration("vector"), circle)
    assert torch.allclose(values[1:], torch.ones(K - 1, 1, dtype=torch.float64))


def test_two_hit_rule_needs_consecutive_hits_and_resets():
    # Steps 1, 2, 2.01, 3.01, 3.02, 3.03, 4.03, 4.04 give a^(k) for k = 2..8: 1, .01, 1, .01, .01, 1, .01.
    # With τ = 0.1 the hits are at k = 3, 5, 6, 8. A lone hit (k = 3) followed by a miss does not exit; the
    # count restarts, and k = 5, 6 in a row exit at 6. Three in a row never happen: run to K = 8.
    traj = from_steps([1, 2, 2.01, 3.01, 3.02, 3.03, 4.03, 4.04])
    assert steps_of(ExitRule(Acceleration(), 0.1, hits=1), traj) == [3]
    assert steps_of(ExitRule(Acceleration(), 0.1, hits=2), traj) == [6]
    assert steps_of(ExitRule(Acceleration(), 0.1, hits=3), traj) == [8]


# --- extremes ----------------------------------------------------------------------------------------------


def random_path(k: int = 6, n: int = 4, c: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k + 1, n, c, generator=g, dtype=torch.float64)


def random_logits(k: int = 6, n: int = 4, v: int = 7, seed: int = 1) -> torch.Tensor:
    """Logits of x^(0..k) (row 0 unused)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k + 1, n, v, generator=g, dtype=torch.float64)


THRESHOLD_CRITERIA = [
    lambda: Acceleration("vector"), lambda: Acceleration("by_step"), lambda: Acceleration("by_state"),
    lambda: Acceleration("size_difference"), lambda: StepNorm(), lambda: StepNorm(relative=True),
    lambda: LatentDifference(), lambda: Cosine(), lambda: KL(), lambda: EntropyDifference(),
]


def test_every_criterion_that_takes_a_threshold_is_checked_at_both_ends():
    """A criterion added to the registry that takes a threshold is missed here until it is in THRESHOLD_CRITERIA."""
    takes_a_threshold = set()
    for name in CRITERIA:
        try:
            make_rule({"criterion": name, "threshold": 1.0}, max_loops=6)
        except ValueError:  # fixed and argmax: no threshold to set
            continue
        takes_a_threshold.add(name)
    assert len(takes_a_threshold) >= 2  # the premise: the probe tells the two kinds apart
    assert takes_a_threshold == {make().name for make in THRESHOLD_CRITERIA}


@pytest.mark.parametrize("make", THRESHOLD_CRITERIA)
def test_threshold_zero_never_exits(make):
    traj, logits = random_path(), random_logits()
    rule = ExitRule(make(), 0.0, hits=1)
    assert steps_of(rule, traj, lambda k, idx: logits[k, idx]) == [6] * 4


@pytest.mark.parametrize("make", THRESHOLD_CRITERIA)
def test_huge_threshold_exits_at_once(make):
    # Every defined value is a hit: one hit exits at the first step with a value, two hits one step later.
    traj, logits = random_path(), random_logits()
    criterion = make()
    first = criterion.first_k
    assert steps_of(ExitRule(criterion, 1e30, hits=1), traj, lambda k, idx: logits[k, idx]) == [first] * 4
    expected = first + make().default_hits - 1  # acceleration: 2 + 2 − 1 = 3; the others: 1
    assert steps_of(ExitRule(make(), 1e30), traj, lambda k, idx: logits[k, idx]) == [expected] * 4


def test_exit_at_once_defaults():
    # Acceleration is defined from k = 2 and needs two hits: k = 3. Step norm: one hit at k = 1.
    traj = random_path()
    assert steps_of(ExitRule(Acceleration(), 1e30), traj) == [3] * 4
    assert steps_of(ExitRule(StepNorm(), 1e30), traj) == [1] * 4


def test_tokens_exit_independently_in_one_batch():
    # Three tokens in one batch (C = 2): the two-hit path (exit 6), a path that stops dead after one step
    # (a^(2) = 1, then 0: hits at k = 3, 4, exit 4), and the halving path (exit 5 at τ = 0.1).
    # The early token sits in the middle, so the rule must drop it and keep the others' history aligned.
    two_hit = from_steps([1, 2, 2.01, 3.01, 3.02, 3.03, 4.03, 4.04])
    dead_stop = from_steps([1, 0, 0, 0, 0, 0, 0, 0])
    traj = torch.cat([two_hit, dead_stop, HALVING], dim=1)
    rule = ExitRule(Acceleration(), 0.1)
    assert steps_of(rule, traj) == [6, 4, 5]
    states = exit_states(traj, exit_steps(rule, traj))
    assert torch.equal(states, torch.stack([traj[6, 0], traj[4, 1], traj[5, 2]]))


def test_streaming_by_hand_drops_exited_tokens():
    traj = torch.cat([from_steps([1, 0, 0, 0]), line([1 - 2.0**-k for k in range(5)])], dim=1)
    rule = ExitRule(StepNorm(), 0.1)  # token 0 stops at k = 2 (‖Δ‖ = 0); token 1's steps 1/2..1/16: k = 4
    rule.start(traj[0])
    assert rule.step(traj[1]).tolist() == [False, False]
    assert rule.step(traj[2]).tolist() == [True, False]
    assert rule.running.tolist() == [1]
    assert rule.step(traj[3, 1:]).tolist() == [False]
    assert rule.step(traj[4, 1:]).tolist() == [True]
    assert rule.running.numel() == 0 and rule.k == 4
    with pytest.raises(ValueError, match="running"):
        rule.step(traj[4])


def test_min_and_max_loops():
    # Step norm on the halving path hits from k = 4 at τ = 0.1; huge τ hits from k = 1.
    assert steps_of(ExitRule(StepNorm(), 1e30, min_loops=3), HALVING) == [3]
    assert steps_of(ExitRule(StepNorm(), 0.1, max_loops=3), HALVING) == [3]
    assert steps_of(ExitRule(StepNorm(), 0.0, max_loops=K), HALVING) == [K]
    with pytest.raises(ValueError, match="only 8"):
        exit_steps(ExitRule(StepNorm(), 0.1, max_loops=9), HALVING)
    counter = HitCounter(hits=1, max_loops=1)
    counter.reset(1)
    assert counter.update(torch.tensor([False])).tolist() == [True]
    with pytest.raises(RuntimeError, match="past max_loops"):
        counter.update(torch.tensor([False]))


def test_stacked_rules_exit_each_row_by_its_own_setting():
    # the halving path's absolute step norm is 1/2, 1/4, 1/8, ...: below 0.3 from k = 2, below 0.1 from k = 4;
    # rows 0-1 follow tau 0.3, rows 2-3 tau 0.1, rows 4-5 tau 0 capped at 3 loops
    rules = [ExitRule(StepNorm(), 0.3, max_loops=K), ExitRule(StepNorm(), 0.1, max_loops=K),
             ExitRule(StepNorm(), 0.0, max_loops=3)]
    stacked = ExitRule.stacked(rules, rows_each=2)
    path = HALVING[:, :1].expand(-1, 6, -1)
    assert exit_steps(stacked, path).tolist() == [2, 2, 4, 4, 3, 3]
    assert stacked.max_loops == K
    assert exit_steps(ExitRule.stacked([ExitRule(StepNorm(), 0.1, hits=h, max_loops=K) for h in (1, 3)], 1),
                      HALVING[:, :1].expand(-1, 2, -1)).tolist() == [4, 6]


def test_stacked_rules_must_differ_in_their_settings_only():
    with pytest.raises(ValueError, match="share criterion"):
        ExitRule.stacked([ExitRule(StepNorm(), 0.1, max_loops=K), ExitRule(StepNorm(relative=True), 0.1,
                                                                          max_loops=K)], 2)
    with pytest.raises(ValueError, match="share criterion"):
        ExitRule.stacked([ExitRule(StepNorm(), 0.1)], 2)  # no max_loops
    rule = ExitRule.stacked([ExitRule(StepNorm(), 0.1, max_loops=K)], 2)
    with pytest.raises(ValueError, match="2 entries for 3 rows"):
        rule.start(torch.zeros(3, 4))


# --- first order and the Huginn latent criteria ------------------------------------------------------------


def test_step_norm_absolute_and_relative():
    # absolute: ‖Δ^(k)‖ = 2^(−k) = 1/2, 1/4, 1/8, 1/16: below 0.1 first at k = 4.
    assert steps_of(ExitRule(StepNorm(), 0.1), HALVING) == [4]
    # relative: ‖Δ^(k)‖ / ‖x^(k−1)‖ = (1/2)/0 = inf, (1/4)/(1/2) = 1/2, (1/8)/(3/4) = 1/6,
    # (1/16)/(7/8) = 1/14.
    values = criterion_values(StepNorm(relative=True), HALVING)[:4, 0].tolist()
    assert values[0] == math.inf
    assert values[1:] == pytest.approx([1 / 2, 1 / 6, 1 / 14])
    assert steps_of(ExitRule(StepNorm(relative=True), 0.2), HALVING) == [3]
    assert steps_of(ExitRule(StepNorm(relative=True), 0.1), HALVING) == [4]


def test_latent_difference():
    # ‖Δ^(k)‖ / ‖x^(k)‖ = 2^(−k) / (1 − 2^(−k)) = 1/(2^k − 1) = 1, 1/3, 1/7, 1/15, 1/31 ≈ .032, 1/63 ≈ .016:
    # below Huginn's 0.03 first at k = 6.
    assert steps_of(ExitRule(LatentDifference()), HALVING) == [6]
    assert criterion_values(LatentDifference(), HALVING)[:, 0].tolist() == pytest.approx(
        [1 / (2**k - 1) for k in range(1, K + 1)])


def test_cosine_ignores_length():
    # Angles 0, .5, .7, .75, .76 (turns .5, .2, .05, .01) on radii 1, 2, 3, 4, 5: 1 − cos(turn) = .122, .0199,
    # .00125, .00005: below Huginn's 1e-3 first at k = 4, whatever the radii.
    angles = torch.tensor([0, 0.5, 0.7, 0.75, 0.76], dtype=torch.float64)
    radii = torch.arange(1, 6, dtype=torch.float64)
    traj = (radii[:, None] * torch.stack([angles.cos(), angles.sin()], -1))[:, None, :]
    values = criterion_values(Cosine(), traj)[:, 0]
    turns = torch.tensor([0.5, 0.2, 0.05, 0.01], dtype=torch.float64)
    assert values.tolist() == pytest.approx((1 - turns.cos()).tolist())
    assert steps_of(ExitRule(Cosine()), traj) == [4]


def test_zero_states_count_as_converged_not_as_nan():
    # A token that never moves from 0: every ratio is 0/0 -> 0, so each rule exits as early as it can.
    still = torch.zeros(5, 1, 3, dtype=torch.float64)
    for criterion, expected in [(StepNorm(relative=True), 1), (LatentDifference(), 1), (Cosine(), 1),
                                (Acceleration("by_step"), 3), (Acceleration("by_state"), 3)]:
        assert steps_of(ExitRule(criterion, 1e-3), still) == [expected], criterion.name


# --- logit criteria ----------------------------------------------------------------------------------------


def test_kl_against_the_definition():
    # KL(p_{k−1} ‖ p_k) with p_0 uniform, from torch.distributions and from explicit sums.
    logits = random_logits(k=4, n=3, v=5)
    values = criterion_values(KL(), random_path(k=4, n=3), lambda k, idx: logits[k, idx])
    cat = torch.distributions.Categorical
    uniform = cat(probs=torch.full((3, 5), 1 / 5, dtype=torch.float64))
    expected = [torch.distributions.kl_divergence(uniform, cat(logits=logits[1]))]
    expected += [torch.distributions.kl_divergence(cat(logits=logits[k - 1]), cat(logits=logits[k]))
                 for k in range(2, 5)]
    assert torch.allclose(values, torch.stack(expected))
    p0, p1 = torch.full((5,), 1 / 5, dtype=torch.float64), logits[1, 0].softmax(-1)
    assert values[0, 0].item() == pytest.approx((p0 * (p0.log() - p1.log())).sum().item())
    p2 = logits[2, 0].softmax(-1)
    assert values[1, 0].item() == pytest.approx((p1 * (p1.log() - p2.log())).sum().item())


def test_kl_exit_steps():
    # Token 0 decodes to uniform logits at k = 1: KL(p_0 ‖ p_1) = 0 < 5e-4, exit at once.
    # Token 1 has logits (0, 0, s_k) with s = 3, 1, .5, .01, 0: p_k moves less and less; the exit step is
    # the first k with KL below 5e-4, found by a direct loop over the definition.
    s = [None, 3.0, 1.0, 0.5, 0.01, 0.0]
    logits = torch.zeros(6, 2, 3, dtype=torch.float64)
    logits[1:, 1, 2] = torch.tensor(s[1:], dtype=torch.float64)
    rule = ExitRule(KL())
    assert rule.threshold == 5e-4 and rule.hits == 1
    got = steps_of(rule, random_path(k=5, n=2), lambda k, idx: logits[k, idx])
    p = [torch.full((3,), 1 / 3, dtype=torch.float64)] + [logits[k, 1].softmax(-1) for k in range(1, 6)]
    kl = [(p[k - 1] * (p[k - 1] / p[k]).log()).sum().item() for k in range(1, 6)]
    assert got == [1, next(k for k in range(1, 6) if kl[k - 1] < 5e-4)]
    # By hand, KL ≈ ½ Var_p(Δlogit) for small moves: .5 -> .01 moves one logit by .49 with p ≈ .45 there,
    # KL ≈ ½ · .49² · .45 · .55 ≈ .03 > 5e-4; .01 -> 0 gives ≈ ½ · .01² · .34 · .66 ≈ 1e-5 < 5e-4: exit at 5.
    assert got[1] == 5


def test_kl_is_never_negative_so_threshold_zero_never_exits_a_converged_token():
    # Distributions that barely move (logits change by 1e-6 in float32): the plain sum over the vocabulary goes
    # negative by rounding for some tokens (checked here), KL itself is >= 0, so a threshold of 0 never hits.
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 2048, generator=g).expand(7, 64, 2048).clone()
    logits += 1e-6 * torch.randn(logits.shape, generator=g)
    logp = logits.log_softmax(-1)
    plain = (logp[1:-1].exp() * (logp[1:-1] - logp[2:])).sum(-1)
    assert (plain < 0).any()
    values = criterion_values(KL(), torch.zeros(7, 64, 1), lambda k, idx: logits[k, idx])
    assert (values >= 0).all()
    assert steps_of(ExitRule(KL(), 0.0), torch.zeros(7, 64, 1), lambda k, idx: logits[k, idx]) == [6] * 64


def test_entropy_difference_by_hand_and_kl_with_zero_probabilities():
    # V = 4, logits = log p. H(p_0) = log 4.
    # p_1 = (1/2, 1/2, 0, 0): H = log 2, |ΔH| = log 2.
    # p_2 = (1/2, 1/4, 1/4, 0): H = 1.5 log 2, |ΔH| = 0.5 log 2.
    # p_3 = (1/4, 1/2, 0, 1/4): a permutation of p_2, H unchanged, |ΔH| = 0: hit at k = 3 (entropy ignores
    # which token is likely). KL(p_2 ‖ p_3) is +inf (p_2 puts 1/4 where p_3 puts 0): never a hit.
    probs = torch.tensor([[.25, .25, .25, .25], [.5, .5, 0, 0], [.5, .25, .25, 0], [.25, .5, 0, .25]],
                         dtype=torch.float64)
    logits = probs.log()[:, None, :]
    log2 = math.log(2)
    values = criterion_values(EntropyDifference(), torch.zeros(4, 1, 2), lambda k, idx: logits[k, idx])
    assert values[:, 0].tolist() == pytest.approx([log2, 0.5 * log2, 0.0])
    assert steps_of(ExitRule(EntropyDifference()), torch.zeros(4, 1, 2), lambda k, idx: logits[k, idx]) == [3]
    # KL(p_0 ‖ p_1) = +inf too (uniform p_0 has mass where p_1 has none);
    # KL(p_1 ‖ p_2) = ½ log(½/¼) = ½ log 2.
    kl = criterion_values(KL(), torch.zeros(4, 1, 2), lambda k, idx: logits[k, idx])[:, 0]
    assert kl[0].item() == math.inf and kl[2].item() == math.inf
    assert kl[1].item() == pytest.approx(0.5 * log2)


def test_argmax_stability_five_hits():
    # Argmax tokens for k = 1..10: 0 0 0 1 1 1 1 1 1 1. Unchanged at k = 2, 3 (hits), changed at k = 4
    # (reset), unchanged at k = 5..9: the fifth hit in a row is k = 9. A token whose argmax never changes
    # has hits at k = 2..6 and exits at 6, as Huginn's "5 unchanged steps".
    tokens = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1], [2] * 11])  # row 0 (k = 0) unused
    logits = torch.nn.functional.one_hot(tokens.T, 3).double()  # (11, 2, 3)
    rule = make_rule("argmax")
    assert rule.hits == 5
    assert steps_of(rule, torch.zeros(11, 2, 1), lambda k, idx: logits[k, idx]) == [9, 6]
    assert steps_of(make_rule({"criterion": "argmax", "hits": 1}), torch.zeros(11, 2, 1),
                    lambda k, idx: logits[k, idx]) == [2, 2]


# --- fixed, replay vs precomputed values, make_rule --------------------------------------------------------


def test_fixed():
    rule = make_rule({"criterion": "fixed", "loops": 4})
    assert steps_of(rule, random_path(k=6)) == [4] * 4
    with pytest.raises(ValueError, match="only 6"):
        exit_steps(make_rule({"criterion": "fixed", "loops": 7}), random_path(k=6))


@pytest.mark.parametrize("name", sorted(set(CRITERIA) - {"fixed"}))
@pytest.mark.parametrize("threshold", [1e-2, 0.3, 1.0])
def test_replay_equals_precomputed_values(name, threshold):
    # Slowly converging random paths and logits, so that exits spread over the steps.
    traj = random_path(k=10, n=16)
    scale = 0.6 ** torch.arange(11, dtype=torch.float64)[:, None, None]
    traj = (traj * scale).cumsum(0)
    logits = (random_logits(k=10, n=16) * scale).cumsum(0)
    spec = {"criterion": name} if name == "argmax" else {"criterion": name, "threshold": threshold}
    rule = make_rule(spec)
    fn = lambda k, idx: logits[k, idx]  # noqa: E731
    replayed = exit_steps(rule, traj, fn)
    values = criterion_values(rule.criterion, traj, fn)
    assert values.shape == (10, 16)
    assert torch.equal(replayed, exit_steps_from_values(values, rule.threshold, rule.hits))


def test_make_rule_specs_and_defaults():
    rule = make_rule({"criterion": "acceleration", "variant": "by_state", "threshold": 1e-3})
    assert (rule.hits, rule.threshold, rule.criterion.variant) == (2, 1e-3, "by_state")
    assert make_rule({"criterion": "step_norm", "relative": True, "threshold": 1e-2}).criterion.relative
    kl = make_rule({"criterion": "kl", "decode": "head"})
    assert (kl.threshold, kl.hits, kl.criterion.decode, kl.needs_logits) == (5e-4, 1, "head", True)
    assert make_rule("kl").criterion.decode == "rest"
    assert make_rule("latent_difference").threshold == 0.03
    assert make_rule("cosine").threshold == 1e-3
    assert make_rule("entropy_difference").threshold == 1e-3
    assert make_rule({"criterion": "cosine", "max_loops": 5}, max_loops=9).max_loops == 5
    assert make_rule("cosine", max_loops=9).describe()["max_loops"] == 9


@pytest.mark.parametrize("spec, match", [
    ({"criterion": "halting"}, "known: fixed, acceleration"),
    ("nope", "unknown exit criterion"),
    ({"criterion": "acceleration", "variant": "jerk", "threshold": 1}, "variant"),
    ({"criterion": "acceleration"}, "needs a threshold"),
    ({"criterion": "step_norm", "treshold": 1e-3}, "unknown keys"),
    ({"criterion": "cosine", "relative": True}, "unknown keys"),
    ({"criterion": "kl", "decode": "coda"}, "decode"),
    ({"criterion": "fixed"}, "loops"),
    ({"criterion": "fixed", "loops": 3, "threshold": 1}, "loops"),
    ({"criterion": "fixed", "loops": 9, "max_loops": 5}, "max_loops"),
    ({"criterion": "argmax", "threshold": 5}, "no threshold"),
    ({"criterion": "step_norm", "threshold": 1, "hits": 0}, "hits"),
])
def test_make_rule_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        make_rule(spec)


def test_logits_are_required():
    rule = make_rule("kl")
    with pytest.raises(ValueError, match="logits_fn"):
        exit_steps(rule, random_path())
    rule.start(random_path()[0])
    with pytest.raises(ValueError, match="logits"):
        rule.step(random_path()[1])


def test_head_decode_and_the_kl_exit_on_a_tiny_model():
    """The looped group is the model's last layer, so the head decode of x^(k) is the model's own output at k
    loops; each token exits at the first k whose KL(p_{k-1} || p_k) (torch.distributions, p_0 uniform) is below
    the threshold, or at 4."""
    from twoscale.models.looped_gpt import LoopedGPT, ModelConfig

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=11, n_layer=2, n_head=2, n_embd=8, block_size=8, dropout=0.0, bias=True,
                         groups=((1, 1),))
    model = LoopedGPT(config).eval()
    idx = torch.randint(0, 11, (2, 5))
    with torch.no_grad():
        traj = model(idx, loops=[4], record_trajectories=True).trajectories[0]  # (5, 2, 5, 8)
        flat = traj.reshape(5, 10, 8)
        for k in range(1, 5):
            assert torch.allclose(head_decode(model, traj[k]), model(idx, loops=[k]).logits, atol=1e-6)
        p = [torch.distributions.Categorical(logits=torch.zeros(10, 11))]
        p += [torch.distributions.Categorical(logits=model(idx, loops=[k]).logits.reshape(10, 11))
              for k in (1, 2, 3, 4)]
        kl = torch.stack([torch.distributions.kl_divergence(p[k - 1], p[k]) for k in range(1, 5)])  # (4, 10)
        middle = kl[1:].flatten().sort().values[14:16]  # some tokens exit early, some run to the end; a
        threshold = middle.mean().item()                 # threshold between two values, not on one
        rule = make_rule({"criterion": "kl", "decode": "head", "threshold": threshold})
        got = exit_steps(rule, traj, lambda k, i: head_decode(model, flat[k, i]))
    below = kl < threshold
    expected = torch.where(below.any(0), below.int().argmax(0) + 1, torch.tensor(4))
    assert torch.equal(got, expected) and len(set(expected.tolist())) > 1
