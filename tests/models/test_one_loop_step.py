"""The loop step is written once, `LoopedGPT.apply_group`: every caller runs its loop steps through it, so a change
to what one step is, made there, is one that every caller sees.

Each caller runs on the tiny float64 model twice: with the loop step as it is, and with an edited one (a share of
the group input added to each step's output, as a change of the injection would), against the model's own forward
pass under the same step. A caller with a loop step of its own would follow the first and miss the second. The
recorded pass runs the plain layers and agrees bit for bit; the cached callers attend from some positions to keys
kept from earlier ones, whose matrix products round differently from the whole sequence's, so they agree to
float64's rounding (1e-10), while the edit moves the logits by far more than that (checked)."""

from __future__ import annotations

import copy

import pytest
import torch

from twoscale.decoding.engine import generate
from twoscale.decoding.rules import make_rule
from twoscale.exits.teacher_forced import teacher_forced
from twoscale.geometry.spectrum import token_step
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.sampler.parallel import iterate_group, new_cache, run_once
from twoscale.tools.timings import step_costs

EDIT = 0.25  # the share of the group input the edited step adds to its output
LOOPS = [2, 3, 1]
ROUNDING = {"rtol": 0, "atol": 1e-10}


def edited_step(monkeypatch) -> None:
    plain = LoopedGPT.apply_group

    def apply_group(self, segment, x, group_input, run_layer=None):
        return plain(self, segment, x, group_input, run_layer) + EDIT * group_input

    monkeypatch.setattr(LoopedGPT, "apply_group", apply_group)


@pytest.fixture(params=["as it is", "edited"])
def step(request, monkeypatch) -> str:
    if request.param == "edited":
        edited_step(monkeypatch)
    return request.param


def tokens() -> torch.Tensor:
    return torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))


def test_the_edit_moves_the_logits_far_beyond_rounding(tiny_model, monkeypatch):
    before = tiny_model(tokens(), LOOPS).logits
    edited_step(monkeypatch)
    assert (tiny_model(tokens(), LOOPS).logits - before).abs().max() > 1e-2


def test_the_recorded_pass(tiny_model, step):
    recorded = tiny_model(tokens(), LOOPS, record_trajectories=True)
    assert torch.equal(recorded.logits, tiny_model(tokens(), LOOPS).logits)


def test_cached_decoding(tiny_model, step):
    fixed = [make_rule({"criterion": "fixed", "loops": n}, max_loops=5) for n in LOOPS]
    out = generate(tiny_model, [3, 1, 4, 1], new_tokens=5, rules=fixed)
    full = tiny_model(torch.tensor([out.tokens[:-1]]), LOOPS).logits[0]
    torch.testing.assert_close(torch.stack(out.logits), full, **ROUNDING)


# all positions at once; position by position (a rest decode reads later layers' keys), a threshold of 0 never met
@pytest.mark.parametrize("spec", [{"criterion": "fixed", "loops": 3},
                                  {"criterion": "kl", "decode": "rest", "threshold": 0.0}], ids=["fixed", "kl_rest"])
def test_teacher_forced_exits(tiny_model, step, spec):
    run = teacher_forced(tiny_model, tokens(), [make_rule(spec, max_loops=3) for _ in LOOPS])
    assert bool((run.loops == 3).all())  # the premise: full depth everywhere
    torch.testing.assert_close(run.logits, tiny_model(tokens(), [3, 3, 3]).logits, **ROUNDING)


def test_the_parallel_sampler(tiny_model, step):
    idx = tokens()[:1]
    T = idx.shape[1]
    caches = [cache.row(0) for cache in new_cache(tiny_model, 3, T)]
    fresh_from = torch.ones(T, dtype=torch.long)
    with torch.no_grad():
        x = tiny_model.embed(idx)[0]
        for segment in tiny_model.segments:
            if segment.group is None:
                x = run_once(tiny_model, segment, x, caches, 0, fresh_from)
            else:
                x = iterate_group(tiny_model, segment, x, x, caches, 0, torch.zeros(T, dtype=torch.long), 3, fresh_from)
        full = tiny_model(idx, [3, 3, 3]).logits[0]
    torch.testing.assert_close(tiny_model.logits_of(x), full, **ROUNDING)


def test_the_spectrum_s_token_map(tiny_model, step):
    with torch.no_grad():
        trajectory = tiny_model(tokens()[:1], LOOPS, record_trajectories=True).trajectories[1][:, 0]  # (K + 1, T, C)
        for k in range(1, LOOPS[1] + 1):
            mapped = token_step(tiny_model, 1, trajectory[k - 1], trajectory[0])(trajectory[k - 1][-1])
            torch.testing.assert_close(mapped, trajectory[k][-1], **ROUNDING)


def test_the_benchmark_times_the_model_s_loop_step(tiny_model, monkeypatch):
    """The benchmark's loop step is a timed closure, whose value is not kept: that it runs `apply_group` is what
    can be checked."""
    calls = []
    plain = LoopedGPT.apply_group

    def counted(self, *args, **kwargs):
        calls.append(args[0].group)
        return plain(self, *args, **kwargs)

    monkeypatch.setattr(LoopedGPT, "apply_group", counted)
    model = copy.deepcopy(tiny_model).float()  # the benchmark's states are float32
    with torch.no_grad():
        step_costs(model, [3, 1, 4], {}, max_loops=2, repeats=3)  # the prompt's decoding, then the timed steps
    prompt_calls = 3 * sum(2 for segment in model.segments if segment.group is not None)
    assert len(calls) == prompt_calls + 3 + 1  # the timed repeats after one untimed call
