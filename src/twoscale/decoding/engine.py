"""Cached decoding with per-token exits in every looped group, for a batch of sequences that advance together one
position at a time. Autoregressive generation (one sequence, the next token picked from the logits) and the sweep's
teacher-forced quality (a batch of held-out windows, the next token given) are this one computation, so the quality
the sweep reports is the quality of the decoding whose latency it times (the sweep computes it on all positions at
once where its rules allow: `exits.teacher_forced`).

KV-cache convention for exited positions (Geiping et al.): each layer keeps one cache entry per position for every
time it ran (single-pass layers once, layers of a looped group once per loop step). A position that left group g
after k_exit steps has no entries for deeper steps; a later token attending at loop step k reads, for every earlier
position p, the entry of step min(k, k_exit(p)): the deepest one p has. (Once a position is done with a layer, its
deepest entry is copied into the deeper steps' slots, so a read at any step is a plain slice.) With every token
running the same loop counts this is exactly the full forward pass (tested).

The "rest" decode of a criterion (its next-token distribution after group g) runs the later segments once on the
token's current state, each later looped group's layers once without their input injection, then the final norm and
LM head. Its layers attend to the earlier positions' step-1 entries (for a single-pass layer its only entry, computed
on that position's final pass) and to the token's own key and value; it writes nothing to the cache.

Autoregressive decoding at a fixed depth (a `fixed` rule in a group) loops the group's layers with no exit
bookkeeping at all.

One sequence's generation on a GPU replays each token from CUDA graphs (`graphed`: the same tokens and loop counts on
static buffers); on a CPU, and for a batch of sequences, it runs the functions here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from twoscale.decoding.cache import LayerCache, Rows, new_cache
from twoscale.decoding.graphed import GraphedDecoder, GraphOptions, uses_graphs
from twoscale.decoding.rules import ExitRule, head_decode
from twoscale.models.looped_gpt import Block, KeysPerQuery, LoopedGPT, Segment
from twoscale.training.device import clock

Tensor = torch.Tensor
def block_step(block: Block, x: Tensor, cache: LayerCache, step: int, position: int, rows: Rows = None,
               store: bool = True) -> Tensor:
    """One block on the rows' newest position x (R, C) at loop `step`, attending to the earlier positions' cache.

    With `store` its own key and value become the cache entry of (step, position); without, the cache is only
    read (a look-ahead decode)."""
    def context(k: Tensor, v: Tensor) -> KeysPerQuery:
        if store:  # the position's own entry is then the last one read
            cache.store(step, position, rows, k, v)
            return KeysPerQuery(*cache.visible(step, position + 1, rows))
        past_k, past_v = cache.visible(step, position, rows)
        return KeysPerQuery(torch.cat([past_k, k[:, None]], 1), torch.cat([past_v, v[:, None]], 1))

    return block.cached(x, context)


def decode_rest(model: LoopedGPT, x: Tensor, after_segment: int, caches: list[LayerCache], position: int,
                rows: Rows = None) -> Tensor:
    """The "rest" decode of the rows' newest position: later segments once each (reading, not writing, the cache)."""
    for segment in model.segments[after_segment + 1 :]:
        for layer in segment.layers:
            x = block_step(model.blocks[layer], x, caches[layer], 1, position, rows, store=False)
    return model.logits_of(x)


def criterion_logits(model: LoopedGPT, rule: ExitRule, x: Tensor, segment_index: int, caches: list[LayerCache],
                     position: int, rows: Rows = None) -> Tensor:
    """The logits a criterion reads for states x after the group at `segment_index`, by the decode it names."""
    if rule.criterion.decode == "head":
        return head_decode(model, x)
    return decode_rest(model, x, segment_index, caches, position, rows)


def group_step(model: LoopedGPT, segment: Segment, x: Tensor, group_input: Tensor, caches: list[LayerCache], k: int,
               position: int, rows: Rows = None) -> Tensor:
    """Loop step k of a looped group on the rows' newest position, writing its cache entries of step k."""
    return model.apply_group(segment, x, group_input,
                             lambda layer, h: block_step(model.blocks[layer], h, caches[layer], k, position, rows))


def loop_fixed(model: LoopedGPT, segment: Segment, x: Tensor, caches: list[LayerCache], position: int,
               loops: int) -> Tensor:
    """Autoregressive decoding at a fixed depth: the group looped `loops` times on every row, with no exit
    bookkeeping."""
    group_input = x
    for k in range(1, loops + 1):
        x = group_step(model, segment, x, group_input, caches, k, position)
    return x


@dataclass
class CriterionClock:
    """Wall time of the generated tokens and, within it, of their exit decisions (each criterion's decode and
    arithmetic): the benchmark's split of a token's latency into layer work and criterion work."""

    seconds: float = 0.0  # exit decisions
    token_seconds: float = 0.0  # whole tokens

    @property
    def criterion_share(self) -> float:
        return self.seconds / self.token_seconds if self.token_seconds else 0.0


def loop_with_exits(model: LoopedGPT, segment_index: int, x: Tensor, caches: list[LayerCache], position: int,
                    rule: ExitRule, timer: CriterionClock | None = None) -> tuple[Tensor, Tensor]:
    """The group on every row until the rule lets each one exit: the final states and each row's loop count."""
    segment = model.segments[segment_index]
    rows_total = x.shape[0]
    rule.start(x)
    group_input = x
    loops = torch.zeros(rows_total, dtype=torch.long, device=x.device)
    k = 0
    while rule.running.numel():
        k += 1
        running = rule.running
        if running.numel() == rows_total:  # no row has exited: work on the whole batch without gathering
            x = group_step(model, segment, x, group_input, caches, k, position)
            current, rows = x, None
        else:
            current = group_step(model, segment, x[running], group_input[running], caches, k, position, running)
            x, rows = x.index_copy(0, running, current), running
        started = clock(x.device) if timer else 0.0
        logits = (criterion_logits(model, rule, current, segment_index, caches, position, rows)
                  if rule.needs_logits else None)
        exiting = rule.step(current, logits)
        if timer:
            timer.seconds += clock(x.device) - started
        loops[running[exiting]] = k
    return x, loops


@torch.no_grad()
def step_tokens(model: LoopedGPT, tokens: Tensor, position: int, caches: list[LayerCache],
                rules: Sequence[ExitRule], timer: CriterionClock | None = None) -> tuple[Tensor, Tensor]:
    """Run one new token per row (tokens (R,)) at `position` through the network with the cache: the logits (R, V)
    and each row's loop count per group (G, R). `timer` adds up the time of the exit decisions."""
    x = model.embed(tokens[:, None], start=position)[:, 0]
    loops = []
    for segment_index, segment in enumerate(model.segments):
        if segment.group is None:
            for layer in segment.layers:
                x = block_step(model.blocks[layer], x, caches[layer], 1, position)
            continue
        rule = rules[segment.group]
        if rule.fixed_loops is not None:
            x = loop_fixed(model, segment, x, caches, position, rule.fixed_loops)
            steps = torch.full((x.shape[0],), rule.fixed_loops, dtype=torch.long, device=x.device)
            fewest = deepest = rule.fixed_loops
        else:
            x, steps = loop_with_exits(model, segment_index, x, caches, position, rule, timer)
            fewest, deepest = int(steps.min()), int(steps.max())
        for layer in segment.layers:
            caches[layer].finish(position, fewest, deepest)
        loops.append(steps)
    return model.logits_of(x), torch.stack(loops)


def step_token(model: LoopedGPT, token: int, position: int, caches: list[LayerCache], rules: Sequence[ExitRule],
               timer: CriterionClock | None = None) -> tuple[Tensor, list[int]]:
    """`step_tokens` for one sequence: the new token's logits (V,) and its loop count per group."""
    device = model.lm_head.weight.device
    logits, loops = step_tokens(model, torch.tensor([token], device=device), position, caches, rules, timer)
    return logits[0], loops[:, 0].tolist()


TokenStep = Callable[[int, int], tuple[Tensor, list[int]]]  # (token, position) -> (logits (V,), loops per group)


def token_stepper(model: LoopedGPT, caches: list[LayerCache], rules: Sequence[ExitRule],
                  timer: CriterionClock | None = None, graphs: bool | None = None,
                  options: GraphOptions = GraphOptions()) -> TokenStep:
    """How one sequence's next tokens are decoded into `caches`: replayed from CUDA graphs (`GraphedDecoder`, laid
    out as `options` say) where `graphs` says so, by default on a GPU; else by
    `step_token`, always so with a `timer`, which times the exit decisions inside a token. Graphs are captured here,
    before any token is timed."""
    if graphs is None:
        graphs = timer is None and uses_graphs(model.lm_head.weight.device, rules)
    if graphs:
        if timer is not None:
            raise ValueError("a token replayed from graphs has no separate time for its exit decisions")
        return GraphedDecoder(model, rules, caches, options).step
    return lambda token, position: step_token(model, token, position, caches, rules, timer)


@dataclass
class Generation:
    tokens: list[int]
    logits: list[Tensor]  # per generated position (prompt included), (V,) each
    loops: list[list[int]]  # per position, loop count of each group
    ms_per_token: list[float]  # wall time of each generated (not prompt) token


def check_rules(rules: Sequence[ExitRule]) -> None:
    """Each rule carries the loop budget: the cache holds as many loop steps as the largest."""
    if any(rule.max_loops is None for rule in rules):
        raise ValueError("every exit rule needs a max_loops (the most loops a token may run)")


@dataclass
class PromptState:
    """A prompt decoded under some rules up to its last position (the first that generation times): the caches of
    the decoded positions, and their logits and loop counts. Generation continues from a copy, so one decoded
    prompt serves every timed repeat of the same rules."""

    prompt: list[int]
    caches: list[LayerCache]
    logits: list[Tensor]
    loops: list[list[int]]


@torch.no_grad()
def decode_prompt(model: LoopedGPT, prompt: Sequence[int], rules: Sequence[ExitRule]) -> PromptState:
    """Every position of the prompt but the last, under the rules, one at a time and untimed."""
    model.eval()
    check_rules(rules)
    if not prompt:
        raise ValueError("generation needs a prompt of at least one token")
    state = PromptState(list(prompt), new_cache(model, max(rule.max_loops for rule in rules), len(prompt) - 1), [],
                        [])
    for position in range(len(prompt) - 1):
        logits, loops = step_token(model, prompt[position], position, state.caches, rules)
        state.logits.append(logits)
        state.loops.append(loops)
    return state


@torch.no_grad()
def generate(
    model: LoopedGPT,
    prompt: Sequence[int],
    new_tokens: int,
    rules: Sequence[ExitRule],
    pick: Callable[[Tensor], int] = lambda logits: int(logits.argmax()),
    timer: CriterionClock | None = None,
    decoded: PromptState | None = None,
    graphs: bool | None = None,
    graph_options: GraphOptions = GraphOptions(),
) -> Generation:
    """Greedy (or `pick`) generation at batch size 1 with per-token exits, timing every generated token (and with
    `timer`, the exit decisions of the generated tokens). The prompt is decoded first under the same rules, untimed,
    unless `decoded` holds it decoded under these very rules (`decode_prompt`). `graphs` and `graph_options`: see
    `token_stepper`."""
    model.eval()
    total = len(prompt) + new_tokens
    if total > model.config.block_size:
        raise ValueError(f"prompt + new tokens = {total} exceeds block_size {model.config.block_size}")
    if decoded is None:
        decoded = decode_prompt(model, prompt, rules)
    elif decoded.prompt != list(prompt):
        raise ValueError("the decoded prompt is not this prompt")
    check_rules(rules)
    caches = [cache.grown(total) for cache in decoded.caches]
    out = Generation(list(prompt), list(decoded.logits), list(decoded.loops), [])
    device = model.lm_head.weight.device
    step = token_stepper(model, caches, rules, timer, graphs, graph_options)
    for position in range(len(prompt) - 1, total - 1):
        started = clock(device)
        logits, loops = step(out.tokens[position], position)
        out.logits.append(logits)
        out.loops.append(loops)
        out.tokens.append(pick(logits))
        out.ms_per_token.append(1000 * (clock(device) - started))
        if timer:
            timer.token_seconds += out.ms_per_token[-1] / 1000
    return out
