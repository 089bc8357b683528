"""Decoding on static buffers (the CUDA-graph path, run here as plain functions): the same tokens, loop counts,
logits and cache as the engine's decoding, whenever the host reads the exit decisions."""

from __future__ import annotations

import contextlib
import copy
import inspect

import pytest
import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from workspace import load_script

from twoscale.decoding.cache import new_cache
from twoscale.decoding.engine import CriterionClock, generate, step_token, token_stepper
from twoscale.decoding.graphed import (
    GraphedDecoder,
    GraphOptions,
    SideStream,
    first_read,
    judge,
    keep,
    read_spans,
)
from twoscale.decoding.rules import ACCELERATION_VARIANTS, CRITERIA, DECODES, ExitRule, make_rule
from twoscale.models.looped_gpt import LoopedGPT

MAX_LOOPS = 6
PROMPT = [3, 1, 4, 1, 5]
NEW_TOKENS = 7

RULE_SETS = {  # one spec per group; thresholds at which the tiny model's tokens exit at several depths
    "acceleration": [{"criterion": "acceleration", "threshold": 1e-3}] * 3,
    "acceleration_by_step": [{"criterion": "acceleration", "variant": "by_step", "threshold": 0.1}] * 3,
    "step_norm_relative": [{"criterion": "step_norm", "relative": True, "threshold": 0.1}] * 3,
    "kl_head": [{"criterion": "kl", "decode": "head", "threshold": 1e-5}] * 3,
    "kl_rest": [{"criterion": "kl", "decode": "rest", "threshold": 1e-5}] * 3,
    "argmax_cosine": [{"criterion": "argmax", "hits": 2}, {"criterion": "cosine", "threshold": 3e-3},
                      {"criterion": "fixed", "loops": 4}],
    "argmax_head": [{"criterion": "argmax", "decode": "head", "hits": 1}, {"criterion": "argmax", "decode": "head",
                    "hits": 2}, {"criterion": "fixed", "loops": 3}],
    "entropy_difference": [{"criterion": "entropy_difference", "decode": "head", "threshold": 1e-4},
                           {"criterion": "entropy_difference", "decode": "rest", "threshold": 1e-4},
                           {"criterion": "entropy_difference", "decode": "head", "threshold": 1e-4}],
    "latent_difference": [{"criterion": "latent_difference", "threshold": 0.1}] * 3,
    "by_state_size_difference_step_norm": [
        {"criterion": "acceleration", "variant": "by_state", "threshold": 1e-2},
        {"criterion": "acceleration", "variant": "size_difference", "threshold": 1e-4},
        {"criterion": "step_norm", "threshold": 1e-2}],
}
OTHER_MODELS_RULE_SETS = {  # the other norms and injections: autoregressive decoding, and rules beside a fixed group
    "fixed": [{"criterion": "fixed", "loops": n} for n in (2, 6, 3)],
    "mixed": [{"criterion": "fixed", "loops": 5}, {"criterion": "acceleration", "threshold": 1e-3, "min_loops": 4},
              {"criterion": "kl", "decode": "rest", "threshold": 3e-3, "max_loops": 4}],
}


# every option of a criterion that changes what its static decoding computes, with the values it takes
OPTIONS = {("acceleration", "variant"): ACCELERATION_VARIANTS, ("kl", "decode"): DECODES,
           ("entropy_difference", "decode"): DECODES, ("argmax", "decode"): DECODES,
           ("step_norm", "relative"): (True, False)}


def test_every_exit_criterion_and_option_has_a_static_decoding_test():
    """A rule added to the registry (`rules.CRITERIA`) without a case here would run on the GPU path untested."""
    specs = [spec for specs in {**RULE_SETS, **OTHER_MODELS_RULE_SETS}.values() for spec in specs]
    assert {spec["criterion"] for spec in specs} == set(CRITERIA)
    for (criterion, option), values in OPTIONS.items():
        default = inspect.signature(CRITERIA[criterion]).parameters[option].default
        tested = {spec.get(option, default) for spec in specs if spec["criterion"] == criterion}
        assert tested == set(values), (criterion, option)


def rules_of(name: str) -> list[ExitRule]:
    return [make_rule(spec, max_loops=MAX_LOOPS) for spec in {**RULE_SETS, **OTHER_MODELS_RULE_SETS}[name]]


@torch.no_grad()
def decode(model: LoopedGPT, rules: list[ExitRule], graphed: GraphOptions | None):
    """Greedy decoding of PROMPT and NEW_TOKENS more, one position at a time from the first, by the engine or on
    static buffers laid out as `graphed` says: the logits and loop counts of every position, and the caches."""
    caches = new_cache(model, MAX_LOOPS, len(PROMPT) + NEW_TOKENS)
    step = (GraphedDecoder(model, rules, caches, graphed).step if graphed else
            lambda token, position: step_token(model, token, position, caches, rules))
    tokens, logits, loops = list(PROMPT), [], []
    for position in range(len(PROMPT) + NEW_TOKENS - 1):
        out, counts = step(tokens[position], position)
        logits.append(out)
        loops.append(counts)
        if position >= len(PROMPT) - 1:
            tokens.append(int(out.argmax()))
    return tokens, torch.stack(logits), loops, caches


def assert_same_decoding(model: LoopedGPT, name: str, options: GraphOptions) -> list[list[int]]:
    """Static decoding's tokens, loop counts, logits and caches, laid out as `options` say, are the engine's; the
    loop counts."""
    tokens, logits, loops, caches = decode(model, rules_of(name), graphed=None)
    got_tokens, got_logits, got_loops, got_caches = decode(model, rules_of(name), graphed=options)
    assert got_tokens == tokens and got_loops == loops
    torch.testing.assert_close(got_logits, logits, rtol=0, atol=1e-12)
    decoded = len(PROMPT) + NEW_TOKENS - 1  # the last slot is where the graphs were captured: never decoded here
    for got, want in zip(got_caches, caches, strict=True):  # every entry a later token could read
        torch.testing.assert_close(got.keys[:, :, :decoded], want.keys[:, :, :decoded], rtol=0, atol=1e-12)
        torch.testing.assert_close(got.values[:, :, :decoded], want.values[:, :, :decoded], rtol=0, atol=1e-12)
    return loops


CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))


@pytest.mark.parametrize("device", ["cpu", CUDA])  # on a GPU the graphs are captured and replayed
@pytest.mark.parametrize("name", list(RULE_SETS))
@pytest.mark.parametrize("read_every", [1, 3])
def test_static_decoding_under_exit_rules_is_the_engines_decoding(tiny_model, name, read_every, device):
    loops = assert_same_decoding(copy.deepcopy(tiny_model).to(device), name, GraphOptions(read_every))
    depths = {n for counts in loops for n in counts}
    assert len(depths) > 2 and min(depths) < MAX_LOOPS, depths  # the premise: tokens exit at several depths


def test_the_rules_compiled_arithmetic_decodes_as_the_engine(tiny_model):
    """torch.compile's fused kernels (here Inductor's C++ on the CPU, Triton on a GPU) for the acceleration rule:
    the history of two steps, and a first step whose history differs."""
    loops = assert_same_decoding(tiny_model, "acceleration", GraphOptions(read_every=1, fuse_rules=True))
    assert len({n for counts in loops for n in counts}) > 2  # the premise: tokens exit at several depths
    assert len(_debug_get_cache_entry_list(judge.__code__)) >= 2  # and it ran compiled: first and later steps
    assert _debug_get_cache_entry_list(keep.__code__)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", ["acceleration", "kl_head", "kl_rest", "argmax_head"])
@pytest.mark.parametrize("fuse_rules", [True, False])
def test_on_cuda_judgements_in_line_decode_as_the_engine(tiny_model, name, fuse_rules):
    """The layout before the second stream (a GPU's default now judges beside the next step), kept as the timed
    comparison's reference."""
    options = GraphOptions(read_every=3, fuse_rules=fuse_rules, overlap_rules=False)
    assert_same_decoding(copy.deepcopy(tiny_model).to("cuda"), name, options)


def test_a_second_stream_is_refused_without_cuda(tiny_model):
    with pytest.raises(ValueError, match="needs a CUDA device, not cpu"):
        GraphedDecoder(tiny_model, rules_of("acceleration"), new_cache(tiny_model, MAX_LOOPS, 8),
                       GraphOptions(overlap_rules=True))


def test_a_join_waits_only_for_work_forked_since_the_last(monkeypatch):
    """A stretch's graph begins with a join and nothing forked in it yet: in a capture, a wait for the second
    stream's work from before it crosses the capture's boundary, which CUDA refuses. The streams are stood in for by
    objects that note who waits for whom (no CUDA here)."""
    waits = []

    class Noted:
        def __init__(self, name: str) -> None:
            self.name, self.device = name, torch.device("cuda")

        def wait_stream(self, other: Noted) -> None:
            waits.append((self.name, other.name))

    main = Noted("main")
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: Noted("side"))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: main)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    side = SideStream(torch.device("cuda"), separate=True)
    side.join()
    assert waits == []
    with side.fork():
        assert waits == [("side", "main")]
    side.join()
    side.join()
    assert waits == [("side", "main"), ("main", "side")]


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("name", list(OTHER_MODELS_RULE_SETS))
def test_static_decoding_with_every_norm_and_injection_is_the_engines_decoding(variant_model, name, device):
    assert_same_decoding(copy.deepcopy(variant_model).to(device), name, GraphOptions(read_every=2))


def test_generation_on_static_buffers_is_the_engines_generation(tiny_model):
    rules = rules_of("acceleration")
    eager = generate(tiny_model, PROMPT, NEW_TOKENS, rules, graphs=False)
    static = generate(tiny_model, PROMPT, NEW_TOKENS, rules_of("acceleration"), graphs=True)
    assert static.tokens == eager.tokens and static.loops == eager.loops
    torch.testing.assert_close(torch.stack(static.logits), torch.stack(eager.logits), rtol=0, atol=1e-12)


def test_the_host_reads_an_exit_first_when_the_rule_can_exit():
    def rule(spec: dict) -> ExitRule:
        return make_rule(spec, max_loops=MAX_LOOPS)

    assert first_read(rule({"criterion": "acceleration", "threshold": 1.0})) == 3  # a hit from step 2, two hits
    assert first_read(rule({"criterion": "step_norm", "threshold": 1.0})) == 1
    assert first_read(rule({"criterion": "step_norm", "threshold": 1.0, "min_loops": 4})) == 4
    assert first_read(rule({"criterion": "argmax", "max_loops": 3})) == 3  # five hits from step 2: its limit first


def test_the_steps_between_two_reads_are_one_graph():
    def spans(spec: dict, read_every: int, max_loops: int = 12) -> list[list[int]]:
        return [list(span) for span in read_spans(make_rule(spec, max_loops=max_loops), read_every)]

    # one hit needed: the first read after step 1, then every read_every steps, the last stretch to max_loops
    assert spans({"criterion": "step_norm", "threshold": 1.0}, 4) == [[1], [2, 3, 4, 5], [6, 7, 8, 9], [10, 11, 12]]
    assert spans({"criterion": "step_norm", "threshold": 1.0}, 1, 3) == [[1], [2], [3]]
    # two hits from step 2 (the acceleration needs two steps for a value): first read at 3
    assert spans({"criterion": "acceleration", "threshold": 1.0}, 4, 8) == [[1, 2, 3], [4, 5, 6, 7], [8]]
    # five hits: the reads every five steps, not every two
    assert spans({"criterion": "argmax"}, 2, 12) == [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11], [12]]
    assert spans({"criterion": "argmax", "max_loops": 3}, 4, 3) == [[1, 2, 3]]  # its limit before any exit: no read


def test_batches_and_per_row_settings_are_refused(tiny_model):
    rules = rules_of("acceleration")
    with pytest.raises(ValueError, match="one sequence"):
        GraphedDecoder(tiny_model, rules, new_cache(tiny_model, MAX_LOOPS, 8, rows=2))
    stacked = ExitRule.stacked([make_rule({"criterion": "step_norm", "threshold": t}, max_loops=MAX_LOOPS)
                                for t in (0.1, 0.2)], rows_each=1)
    with pytest.raises(ValueError, match="one setting per rule"):
        GraphedDecoder(tiny_model, [stacked] * 3, new_cache(tiny_model, MAX_LOOPS, 8))


def test_a_cpu_decodes_by_the_engine_unless_told_and_graphs_have_no_exit_clock(tiny_model):
    caches = new_cache(tiny_model, MAX_LOOPS, 8)
    assert not isinstance(getattr(token_stepper(tiny_model, caches, rules_of("acceleration")), "__self__", None),
                          GraphedDecoder)
    assert isinstance(token_stepper(tiny_model, caches, rules_of("acceleration"), graphs=True).__self__,
                      GraphedDecoder)
    with pytest.raises(ValueError, match="no separate time"):
        token_stepper(tiny_model, caches, rules_of("acceleration"), CriterionClock(), graphs=True)


def test_the_profile_script_counts_busy_and_idle_time_of_overlapping_kernels():
    """scripts/profile_decoding.py's reading of a kernel timeline, against hand values: overlaps counted once, the
    gaps between them idle."""
    script = load_script("profile_decoding")
    assert script.busy_and_idle([(0, 2), (1, 3), (1.5, 2.5), (5, 6), (8, 9)]) == (5, 4)
    assert script.busy_and_idle([]) == (0, 0)
