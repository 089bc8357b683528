"""The sample stage's measurements: re-scored quality against the model's own teacher-forced loss, agreement by
hand, and the rows of one prompt."""

from __future__ import annotations

import pytest
import torch

from twoscale.inference.sampler import SamplerSettings
from twoscale.inference.sampling import agreement, measure_prompt, rescored_cross_entropy, settings_grid

from test_sampler import PROMPT, injected_model


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


def test_one_prompt_gives_a_row_per_loop_count_and_setting():
    model = injected_model()
    grid = settings_grid([1, 2], [0.03, 0.1], ["latent_diff", "acceleration"], max_iterations=4)
    assert len(grid) == 8 and all(isinstance(s, SamplerSettings) and s.max_iterations == 4 for s in grid)
    rows = measure_prompt(model, 0, PROMPT, 6, 4, [4, 2, 1], grid)
    ordinary = [r for r in rows if r["method"] == "autoregressive"]
    assert [r["loops"] for r in ordinary] == [4, 2, 1]
    assert ordinary[0]["agreement"] == 1.0 and all(r["new_tokens"] == 6 for r in rows)
    assert len(rows) == 3 + 8 and {(r["inner_loops"], r["tolerance"], r["freeze"]) for r in rows[3:]} == {
        (s.inner_loops, s.tolerance, s.freeze) for s in grid}
