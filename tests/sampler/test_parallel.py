"""The parallel sampler: its reduction to cached autoregressive decoding, its formulas against hand values, freezing and
the KV entries a window reads and writes, and bad settings."""

from __future__ import annotations

import math
from typing import get_args

import pytest
import torch
import torch.nn.functional as F

from twoscale.config.params import SampleParams
from twoscale.decoding.cache import new_cache
from twoscale.decoding.engine import generate
from twoscale.decoding.rules import CRITERIA, latent_difference, make_rule, relative_acceleration
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.sampler.parallel import (
    FREEZES,
    SamplerSettings,
    autoregressive,
    frozen_prefix,
    iterate_group,
    mix_embeddings,
    mix_noise,
    noise_weight,
    run_once,
    sample,
    window_block,
)

PROMPT = [3, 7, 1, 9, 22]


def injected_model(groups=((1, 1), (2, 3), (4, 4)), n_layer=6, injection="adapter") -> LoopedGPT:
    """A float64 model with Huginn's choices (or another injection), its injection moved off its start so that the
    input matters."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=40, n_layer=n_layer, n_head=2, n_embd=16, block_size=32, dropout=0.0,
                         bias=True, groups=groups, norm="sandwich", injection=injection, scale_embedding=True)
    model = LoopedGPT(config).double().eval()
    with torch.no_grad():
        for step in model.group_steps:
            step.inject.weight.add_(0.2 * torch.randn_like(step.inject.weight))
    return model


def engine_tokens(model: LoopedGPT, loops: int, new_tokens: int = 12) -> list[int]:
    """Cached autoregressive decoding by the decoding engine with a fixed rule: the route independent of the sampler."""
    rules = [make_rule({"criterion": "fixed", "loops": loops}) for _ in range(model.n_groups)]
    return generate(model, PROMPT, new_tokens, rules).tokens


# --- reduction to autoregressive decoding -----------------------------------------------------------------------------


def test_full_recurrence_and_a_wavefront_of_one_is_cached_autoregressive_decoding():
    model = injected_model()
    settings = SamplerSettings(inner_loops=5, max_iterations=5, max_wavefront=1, tolerance=0.5, embedding_ema=0.3)
    out = sample(model, PROMPT, 12, settings)
    assert out.tokens == engine_tokens(model, 5)
    assert out.forward_passes == 11  # the first new token comes from the prefill
    assert out.group_iterations == 11 * 5 * 3


def test_one_iteration_per_outer_step_with_a_wavefront_of_one_is_autoregressive_decoding_for_one_group():
    """Every frozen position's cache entries all come from its final token, so later positions read them
    iteration by iteration, as autoregressive decoding does."""
    model = injected_model(groups=((1, 3),), n_layer=5)
    out = sample(model, PROMPT, 12, SamplerSettings(inner_loops=1, max_iterations=5, max_wavefront=1, tolerance=0))
    assert out.tokens == engine_tokens(model, 5)
    assert out.forward_passes == 11 * 5


def test_autoregressive_baseline_matches_generate():
    model = injected_model()
    out = autoregressive(model, PROMPT, 12, loops=3)
    assert out.tokens == engine_tokens(model, 3)
    assert out.new_tokens == 12 and out.forward_passes == 11


# --- outputs: length, stop tokens, parallel work -----------------------------------------------------------------


@pytest.mark.parametrize("settings", [
    SamplerSettings(inner_loops=2, max_iterations=6, tolerance=0.05),
    SamplerSettings(inner_loops=1, max_iterations=4, tolerance=0.0, headway=3, max_wavefront=5),
    SamplerSettings(inner_loops=2, max_iterations=6, freeze="acceleration", state_noise=0.5, init="random"),
])
def test_output_is_cut_at_the_requested_length(settings):
    out = sample(injected_model(), PROMPT, 9, settings)
    assert len(out.tokens) == len(PROMPT) + 9 and out.tokens[: len(PROMPT)] == PROMPT
    assert out.new_tokens == 9


def test_a_stop_token_ends_generation_once_it_is_final():
    model = injected_model()
    full = sample(model, PROMPT, 12, SamplerSettings(inner_loops=5, max_iterations=5, max_wavefront=1))
    stop = full.tokens[len(PROMPT) + 3]
    first = full.tokens.index(stop, len(PROMPT))
    out = sample(model, PROMPT, 12, SamplerSettings(inner_loops=5, max_iterations=5, max_wavefront=1),
                 stop_tokens=[stop])
    assert out.tokens == full.tokens[: first + 1]


def test_with_a_wide_wavefront_positions_refine_in_parallel():
    """Never settling by ε, every position runs max_iterations / r′ outer steps, but they overlap: the number of
    forward passes is far below one per iteration, and the work per position is exactly max_iterations."""
    model = injected_model()
    out = sample(model, PROMPT, 12, SamplerSettings(inner_loops=2, max_iterations=6, tolerance=0.0))
    assert out.forward_passes == 11 + 2  # one new position per outer step; the last needs 3 steps to settle
    assert out.group_iterations == 11 * 6 * 3


# --- formulas ---------------------------------------------------------------------------------------------------


def test_embedding_ema_against_hand_values():
    new = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    previous = torch.tensor([[5.0, 6.0], [7.0, 8.0]])
    mixed = mix_embeddings(new, previous, torch.tensor([True, False]), ema=0.25)
    assert torch.allclose(mixed, torch.tensor([[0.25 * 5 + 0.75 * 1, 0.25 * 6 + 0.75 * 2], [3.0, 4.0]]))


def test_dampened_noise_against_hand_values():
    weight = noise_weight(0.5, torch.tensor([0, 1, 4]))
    assert torch.allclose(weight, torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64))
    states, noise = torch.tensor([[2.0], [2.0], [2.0]]), torch.tensor([[-2.0], [-2.0], [-2.0]])
    assert torch.allclose(mix_noise(states, noise, weight), torch.tensor([[0.0], [1.0], [1.6]]))


def test_freeze_criteria_against_hand_values():
    current, previous, before = torch.tensor([[3.0, 4.0]]), torch.tensor([[3.0, 3.0]]), torch.tensor([[3.0, 1.0]])
    assert latent_difference(current, previous).item() == pytest.approx(1 / 5)
    assert relative_acceleration(current, previous, before).item() == pytest.approx(abs(4 - 6 + 1) / 5)


@pytest.mark.parametrize(("settled", "changed", "frozen"), [
    ([False, False, False], [False, False, False], 0),  # nothing settled: nothing freezes
    ([False, True, False], [False, False, False], 2),  # the prefix up to the right-most settled position
    ([True, False, True, False], [False, False, False, False], 3),  # unsettled positions before it freeze too
    ([True, True, True], [False, True, False], 1),  # not from a position whose token just changed
    ([False, False, True], [False, False, True], 2),  # those before the changed token still freeze
    ([True, True, True, True], [False, False, False, False], 4),
])
def test_which_prefix_freezes(settled, changed, frozen):
    assert frozen_prefix(torch.tensor(settled), torch.tensor(changed)) == frozen


# --- the window's KV entries -------------------------------------------------------------------------------------


def test_a_window_keeps_frozen_entries_rewrites_its_own_and_reads_the_fresh_ones():
    """Window positions 3..5 at iterations 1, 2, 4 over frozen positions 0..2 with 4, 2, 4 iterations, position 2's
    last token arriving at iteration 3. Checked against attention built one query at a time."""
    model = injected_model()
    block = model.blocks[2]
    cache = new_cache(model, 4, 6)[2].row(0)
    torch.manual_seed(1)
    cache.keys.normal_(), cache.values.normal_()
    cache.depth[:3] = torch.tensor([4, 2, 4])
    frozen_keys, frozen_values = cache.keys[:, :3].clone(), cache.values[:, :3].clone()
    fresh_from = torch.tensor([1, 1, 3, 1, 1, 1])
    steps = torch.tensor([1, 2, 4])
    x = torch.randn(3, 16, dtype=torch.float64)
    out = window_block(block, x, cache, steps, 3, fresh_from)

    assert torch.equal(cache.keys[:, :3], frozen_keys) and torch.equal(cache.values[:, :3], frozen_values)
    q, k, v = block.attn.qkv(block.ln_1(x)).split(16, dim=-1)
    for w, step in enumerate(steps.tolist()):
        assert torch.equal(cache.keys[step - 1, 3 + w], k[w].view(2, 8))
    assert cache.depth[3:6].tolist() == [1, 2, 4]

    # frozen depths (4, 2, 4), fresh from (1, 1, 3): at step 1 position 2 reads its iteration 3, the first computed
    # from its final token; at step 4 position 1 reads its deepest entry, 2
    entries_read = {1: [1, 1, 3], 2: [2, 2, 3], 4: [4, 2, 4]}
    expected = []
    for w, step in enumerate(steps.tolist()):
        read = entries_read[step]
        keys = [frozen_keys[i - 1, p] for p, i in enumerate(read)] + [k[u].view(2, 8) for u in range(w + 1)]
        values = [frozen_values[i - 1, p] for p, i in enumerate(read)] + [v[u].view(2, 8) for u in range(w + 1)]
        y = F.scaled_dot_product_attention(q[w].view(2, 1, 8), torch.stack(keys, 1), torch.stack(values, 1))
        expected.append(y.reshape(16))
    attended = block.attn.proj(torch.stack(expected))
    assert torch.allclose(out, block.feed_forward(block.add_attention(x, attended)), atol=1e-12)


@pytest.mark.parametrize("loops", [1, 3])
def test_a_window_over_the_whole_sequence_is_the_full_forward_pass(loops):
    """Every position in one window from an empty cache, each group iterated `loops` times together: position t
    attends to positions <= t at the same iteration, as in the model's own forward pass."""
    model = injected_model()
    tokens = torch.tensor([[5, 9, 2, 7, 30, 1, 4]])
    T = tokens.shape[1]
    caches = [cache.row(0) for cache in new_cache(model, loops, T)]
    fresh_from = torch.ones(T, dtype=torch.long)
    with torch.no_grad():
        x = model.embed(tokens)[0]
        for segment in model.segments:
            if segment.group is None:
                x = run_once(model, segment, x, caches, 0, fresh_from)
            else:
                x = iterate_group(model, segment, x, x, caches, 0, torch.zeros(T, dtype=torch.long), loops,
                                  fresh_from)
        full = model(tokens, [loops] * model.n_groups).logits[0]
    torch.testing.assert_close(model.lm_head(model.ln_f(x)), full, rtol=0, atol=1e-10)


# --- bad settings -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "key"), [
    ({"inner_loops": 0}, "inner_loops"), ({"tolerance": -0.1}, "tolerance"),
    ({"tolerance": math.nan}, "tolerance"), ({"headway": 0}, "headway"), ({"max_wavefront": 0}, "max_wavefront"),
    ({"embedding_ema": 1.5}, "embedding_ema"),
    ({"state_noise": -1}, "state_noise"), ({"freeze": "vibes"}, "freeze"), ({"init": "zeros"}, "init"),
])
def test_bad_settings_fail_naming_the_key(changes, key):
    with pytest.raises(ValueError, match=key) as error:
        SamplerSettings(**changes)
    assert "\n" not in str(error.value)


def test_a_model_without_input_injection_is_refused(tiny_model):
    with pytest.raises(ValueError, match="input injection"):
        sample(tiny_model, PROMPT, 4, SamplerSettings())


def test_the_freezes_are_exit_criteria_by_name_and_the_parameters_choices():
    """A freeze test is an exit criterion's formula (decoding/rules.py), so it goes by that criterion's name; the
    parameters' schema lists the same choices."""
    assert set(FREEZES) <= set(CRITERIA)
    (choices,) = get_args(SampleParams.model_fields["freezes"].annotation)
    assert get_args(choices) == FREEZES
