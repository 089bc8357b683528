"""The sample stage's measurements: re-scored quality against the model's own teacher-forced loss, agreement and
the distinct-token fraction by hand, the cost per token against PyTorch's FLOP counter, the rows of one prompt, and
the paired timing rounds."""

from __future__ import annotations

import pytest
import torch
from test_parallel import PROMPT, injected_model
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from twoscale.sampler import comparison
from twoscale.sampler.comparison import (
    agreement,
    distinct_fraction,
    generation_cost,
    measure_prompt,
    rescored_cross_entropy,
    sampler_throughput,
    settings_grid,
    speed_rows,
)
from twoscale.sampler.parallel import SamplerSettings, autoregressive, prefill, sample
from twoscale.sampler.tables import FULL_RECURRENCE, MATCHED, SAMPLER


def test_rescored_cross_entropy_is_the_teacher_forced_loss_of_the_continuation():
    model = injected_model()
    tokens = [*PROMPT, 4, 8, 15, 16]
    idx = torch.tensor(tokens)[None]
    # the summed loss of the first t targets, from the model's own loss on prefixes
    summed = [0.0] + [model(idx[:, :t], [6] * 3, targets=idx[:, 1 : t + 1]).loss.item() * t for t in range(1, 9)]
    continuation = [summed[j + 1] - summed[j] for j in range(len(PROMPT) - 1, 8)]  # targets = tokens 5..8
    assert rescored_cross_entropy(model, tokens, len(PROMPT), 6) == pytest.approx(sum(continuation) / 4)


def test_agreement_counts_the_reference_s_generated_positions():
    assert agreement([1, 2, 3, 4, 9], [1, 2, 3, 5, 9], 2) == pytest.approx(2 / 3)
    assert agreement([1, 2, 3], [1, 2, 3, 4, 5], 2) == pytest.approx(1 / 3)  # cut short: the rest disagree


def test_distinct_fraction_counts_the_generated_tokens_only():
    assert distinct_fraction([1, 1, 3, 3, 3, 4], 2) == pytest.approx(2 / 4)  # 3, 3, 3, 4: two distinct of four
    assert distinct_fraction([1, 1, 2, 5, 6], 2) == 1.0  # the prompt's repeat does not count
    assert distinct_fraction([1, 2, 7, 7, 7, 7], 2) == pytest.approx(1 / 4)  # a degenerate, repetitive output


SETTINGS = [SamplerSettings(inner_loops=2, max_iterations=4, tolerance=0.05),
            SamplerSettings(inner_loops=1, max_iterations=3, tolerance=0.0, headway=3, max_wavefront=4),
            SamplerSettings(inner_loops=2, max_iterations=4, freeze="acceleration", state_noise=0.5, init="random")]


@pytest.mark.parametrize("injection", ["adapter", "add"])
@pytest.mark.parametrize("settings", SETTINGS, ids=["latent_difference", "headway-3", "acceleration-noise"])
def test_the_sampler_s_cost_matches_the_flop_counter(injection, settings):
    """The sampler after a prefill made outside the counter, under PyTorch's FLOP counter, against the count from
    its windows alone; attention as explicit matmuls (the counter does not see the CPU's fused kernel)."""
    model, new_tokens = injected_model(injection=injection), 7
    ready = prefill(model, PROMPT, settings.max_iterations, len(PROMPT) + new_tokens)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = sample(model, PROMPT, new_tokens, settings, prefilled=ready)
    assert max(size for _, size in out.windows) > 1  # positions refined in parallel
    assert counter.get_total_flops() == generation_cost(model, out).flops.sum().item()


def test_autoregressive_decoding_costs_what_the_flop_counter_counts_and_a_wavefront_of_one_the_same():
    model = injected_model()
    ready = prefill(model, PROMPT, 3, len(PROMPT) + 6)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        reference = autoregressive(model, PROMPT, 6, loops=3, prefilled=ready)
    cost = generation_cost(model, reference)
    assert counter.get_total_flops() == cost.flops.sum().item()
    # 5 steps at positions 5..9 (the first new token comes from the prefill): 2 single-pass layers, 4 looped ones
    assert cost.layers.tolist() == [2 + 4 * 3] * 5
    one_wide = sample(model, PROMPT, 6, SamplerSettings(inner_loops=3, max_iterations=3, max_wavefront=1))
    assert one_wide.tokens == reference.tokens
    assert torch.equal(generation_cost(model, one_wide).flops, cost.flops)


def test_one_prompt_gives_a_row_per_loop_count_and_setting():
    model = injected_model()
    grid = settings_grid([1, 2], [0.03, 0.1], ["latent_difference", "acceleration"], max_iterations=4)
    assert len(grid) == 8 and all(isinstance(s, SamplerSettings) and s.max_iterations == 4 for s in grid)
    rows = measure_prompt(model, 0, PROMPT, 6, 4, [4, 2, 1], grid)
    reference = [r for r in rows if r["method"] == "autoregressive"]
    assert [r["loops"] for r in reference] == [4, 2, 1]
    assert reference[0]["agreement"] == 1.0 and all(r["new_tokens"] == 6 for r in rows)
    assert len(rows) == 3 + 8 and {(r["inner_loops"], r["tolerance"], r["freeze"]) for r in rows[3:]} == {
        (s.inner_loops, s.tolerance, s.freeze) for s in grid}
    # 5 steps after the prefill for 6 tokens, each 2 single-pass layers and 4 looped ones per loop
    assert [r["layers_per_token"] for r in reference] == [pytest.approx(5 * (2 + 4 * k) / 6) for k in (4, 2, 1)]
    assert all(0 < r["distinct_fraction"] <= 1 and r["gflops_per_token"] > 0 for r in rows)


def test_paired_rounds_time_every_method_in_alternating_order(monkeypatch):
    """Three rounds over two prompts: each method once per prompt and round, the order reversed every round, and
    one tokens/s per method and round."""
    calls = []

    def recording(generate, label):
        def generate_and_record(model, prompt, new_tokens, how, **kwargs):
            calls.append(label(how))
            return generate(model, prompt, new_tokens, how, **kwargs)
        return generate_and_record

    monkeypatch.setattr(comparison, "autoregressive", recording(autoregressive, lambda loops: loops))
    monkeypatch.setattr(comparison, "sample", recording(sample, lambda settings: SAMPLER))
    model = injected_model()
    settings = SamplerSettings(inner_loops=2, max_iterations=4)
    rates = sampler_throughput(model, [PROMPT, PROMPT[::-1]], 4, 4, 2, settings, repeats=3)
    assert list(rates) == [FULL_RECURRENCE, MATCHED, SAMPLER]
    assert all(len(values) == 3 and all(v > 0 for v in values) for values in rates.values())
    forward, backward = [4, 2, SAMPLER] * 2, [SAMPLER, 2, 4] * 2  # full recurrence at 4 loops, matched at 2
    assert calls == forward + backward + forward
    without = sampler_throughput(model, [PROMPT], 4, 4, 2, None, repeats=2)
    assert list(without) == [FULL_RECURRENCE, MATCHED]


def test_speed_rows_name_each_method_s_setting():
    settings = SamplerSettings(inner_loops=2, tolerance=0.1, max_iterations=4)
    rows = speed_rows({FULL_RECURRENCE: [10.0, 11.0], MATCHED: [20.0, 21.0], SAMPLER: [40.0, 41.0]}, 4, 2, settings)
    assert [(r["method"], r["round"], r["tokens_per_s"], r["loops"]) for r in rows] == [
        (FULL_RECURRENCE, 0, 10.0, 4), (FULL_RECURRENCE, 1, 11.0, 4), (MATCHED, 0, 20.0, 2), (MATCHED, 1, 21.0, 2),
        (SAMPLER, 0, 40.0, 4), (SAMPLER, 1, 41.0, 4)]
    assert rows[-1] | {"round": 0} == {"method": SAMPLER, "round": 0, "tokens_per_s": 41.0, "loops": 4,
                                       "inner_loops": 2, "tolerance": 0.1, "freeze": "latent_difference"}
    assert rows[0]["inner_loops"] is None
