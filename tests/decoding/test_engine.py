"""Cached generation with per-token exits: equal to the full forward pass when exits are off, deepest-entry reads."""

from __future__ import annotations

import pytest
import torch

from twoscale.decoding.cache import LayerCache, new_cache
from twoscale.decoding.engine import (
    CriterionClock,
    block_step,
    decode_prompt,
    decode_rest,
    generate,
    step_token,
    step_tokens,
)
from twoscale.decoding.rules import make_rule
from twoscale.models.looped_gpt import LoopedGPT

MAX_LOOPS = 5


@pytest.fixture(scope="module")
def model(tiny_model: LoopedGPT) -> LoopedGPT:
    return tiny_model


def fixed(*loops: int):
    return [make_rule({"criterion": "fixed", "loops": n}, max_loops=MAX_LOOPS) for n in loops]


@pytest.mark.parametrize("loops", [(1, 1, 1), (2, 3, 1), (5, 5, 5)])
def test_cached_generation_equals_the_full_forward_when_exits_are_off(model, loops):
    out = generate(model, [3, 1, 4, 1], new_tokens=8, rules=fixed(*loops))
    assert len(out.tokens) == 12 and len(out.ms_per_token) == 8
    full = model(torch.tensor([out.tokens[:-1]]), list(loops)).logits[0]
    torch.testing.assert_close(torch.stack(out.logits), full, rtol=0, atol=1e-10)
    assert out.tokens[4:] == [int(row.argmax()) for row in full[3:]]  # greedy picks
    assert all(position_loops == list(loops) for position_loops in out.loops)


def test_cached_generation_equals_the_full_forward_with_sandwich_norm_and_injection(variant_model):
    out = generate(variant_model, [3, 1, 4, 1], new_tokens=6, rules=fixed(2, 3, 1))
    full = variant_model(torch.tensor([out.tokens[:-1]]), [2, 3, 1]).logits[0]
    torch.testing.assert_close(torch.stack(out.logits), full, rtol=0, atol=1e-10)


def test_an_exited_position_is_read_at_its_deepest_step():
    # keys[step, row, position] = 3 * step + position (+ 100 in row 1); entries deeper than a position's depth are
    # garbage (-1) until the position is finished
    keys = (torch.arange(3 * 3, dtype=torch.float64).view(3, 1, 3) + torch.tensor([0.0, 100.0]).view(1, 2, 1))
    depth = torch.tensor([[1, 3, 2], [3, 1, 3]])
    keys = torch.where(torch.arange(1, 4).view(3, 1, 1) <= depth[None], keys, -1.0)[..., None, None]
    cache = LayerCache(keys, -keys, depth=depth)
    for position in range(3):
        cache.finish(position, fewest=int(depth[:, position].min()), deepest=int(depth[:, position].max()))
    got, values = cache.visible(step=2, count=3, rows=None)
    # step 2 for positions whose deepest step is >= 2, else their deepest: row 0 steps (1, 2, 2), row 1 (2, 1, 2)
    assert got.flatten().tolist() == [0.0, 4.0, 5.0, 103.0, 101.0, 105.0]
    assert torch.equal(values, -got)
    assert cache.visible(step=3, count=2, rows=torch.tensor([1]))[0].flatten().tolist() == [106.0, 101.0]
    assert cache.visible(step=1, count=3, rows=None)[0].flatten().tolist() == [0.0, 1.0, 2.0, 100.0, 101.0, 102.0]
    assert cache.depth.tolist() == depth.tolist()  # the copies are not entries of their own


def test_rows_that_stopped_at_the_same_step_serve_it_at_every_deeper_step():
    keys = torch.full((3, 2, 1, 1, 1), -1.0, dtype=torch.float64)
    keys[:2, :, 0] = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(2, 2, 1, 1)  # both rows ran 2 of 3 steps
    cache = LayerCache(keys, -keys, depth=torch.tensor([[2], [2]]))
    cache.finish(0, fewest=2, deepest=2)
    assert cache.keys.flatten().tolist() == [1.0, 2.0, 3.0, 4.0, 3.0, 4.0]
    assert torch.equal(cache.values, -cache.keys)


def test_cache_rows_are_independent_sequences(model):
    rules = [make_rule({"criterion": "step_norm", "relative": True, "threshold": 0.07}, max_loops=MAX_LOOPS)
             for _ in range(3)]
    batch = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]
    caches = new_cache(model, MAX_LOOPS, 5, rows=2)
    together = [step_tokens(model, torch.tensor([a, b]), position, caches, rules)
                for position, (a, b) in enumerate(zip(*batch, strict=True))]
    for row, sequence in enumerate(batch):
        alone = new_cache(model, MAX_LOOPS, 5)
        for position, token in enumerate(sequence):
            logits, loops = step_token(model, token, position, alone, rules)
            torch.testing.assert_close(together[position][0][row], logits, rtol=0, atol=1e-12)
            assert together[position][1][:, row].tolist() == loops


def test_exits_give_each_token_its_own_loop_counts(model):
    rules = [make_rule({"criterion": "step_norm", "relative": True, "threshold": 0.07}, max_loops=MAX_LOOPS)
             for _ in range(3)]
    out = generate(model, [3, 1, 4, 1], new_tokens=8, rules=rules)
    counts = [n for position in out.loops for n in position]
    assert min(counts) >= 1 and max(counts) <= MAX_LOOPS and len(set(counts)) > 1


@pytest.mark.parametrize("spec", [{"criterion": "step_norm", "relative": True, "threshold": 0.07},
                                  {"criterion": "kl", "decode": "rest", "threshold": 1e-5}])
def test_generation_from_a_decoded_prompt_is_generation_from_the_prompt(model, spec):
    """The prompt decoded once (decode_prompt) serves any number of generations, each equal to the one-pass loop
    over the prompt and the new tokens in one cache, written out here."""
    prompt, new_tokens = [3, 1, 4, 1, 5], 6
    rules = [make_rule(spec, max_loops=MAX_LOOPS) for _ in range(3)]
    caches, tokens, expected_logits, expected_loops = new_cache(model, MAX_LOOPS, len(prompt) + new_tokens), \
        list(prompt), [], []
    for position in range(len(prompt) + new_tokens - 1):
        logits, loops = step_token(model, tokens[position], position, caches, rules)
        expected_logits.append(logits)
        expected_loops.append(loops)
        if position >= len(prompt) - 1:
            tokens.append(int(logits.argmax()))
    assert len({n for loops in expected_loops for n in loops}) > 1  # the rule exits at several depths
    decoded = decode_prompt(model, prompt, rules)
    for out in (generate(model, prompt, new_tokens, rules),
                generate(model, prompt, new_tokens, rules, decoded=decoded),
                generate(model, prompt, new_tokens, rules, decoded=decoded)):
        assert out.tokens == tokens and out.loops == expected_loops and len(out.ms_per_token) == new_tokens
        assert all(torch.equal(got, want) for got, want in zip(out.logits, expected_logits, strict=True))
    with pytest.raises(ValueError, match="not this prompt"):
        generate(model, prompt[:-1], new_tokens, rules, decoded=decoded)


def test_rest_decode_reads_the_cache_of_the_later_layers(model):
    tokens, K = [5, 9, 2, 7], 3
    caches = new_cache(model, MAX_LOOPS, len(tokens))
    for position, token in enumerate(tokens[:-1]):  # earlier tokens ran the last group once, as the decode does
        step_token(model, token, position, caches, fixed(K, K, 1))
    # the newest token, run by hand through layer 0 and both first groups with the cache, then decoded
    position = len(tokens) - 1
    x = model.wte(torch.tensor([tokens[-1]])) + model.wpe(torch.tensor([position]))
    for layer, steps in ((0, 1), (1, K)):
        for k in range(1, steps + 1):
            x = block_step(model.blocks[layer], x, caches[layer], k, position)
    for k in range(1, K + 1):
        for layer in (2, 3):
            x = block_step(model.blocks[layer], x, caches[layer], k, position)
    with torch.no_grad():
        logits = decode_rest(model, x, 2, caches, position)  # after group 1: layer 4 once, then layer 5
        full = model(torch.tensor([tokens]), [K, K, 1]).logits[0, -1]
    torch.testing.assert_close(logits[0], full, rtol=0, atol=1e-10)


def test_too_long_or_unbounded_requests_are_refused(model):
    with pytest.raises(ValueError, match="block_size"):
        generate(model, [1] * 10, new_tokens=10, rules=fixed(1, 1, 1))
    with pytest.raises(ValueError, match="max_loops"):
        generate(model, [1], new_tokens=2, rules=[make_rule({"criterion": "step_norm", "threshold": 0.1})] * 3)


def test_autoregressive_decoding_runs_no_exit_bookkeeping(model):
    """With `fixed` rules no rule is ever started or stepped, and no time goes to exit decisions."""
    rules = fixed(2, 3, 1)
    for rule in rules:
        rule.start = rule.step = None  # calling either would fail
    timer = CriterionClock()
    out = generate(model, [3, 1, 4, 1], new_tokens=4, rules=rules, timer=timer)
    assert all(position == [2, 3, 1] for position in out.loops) and timer.seconds == 0.0

