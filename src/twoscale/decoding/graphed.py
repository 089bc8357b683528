"""Cached decoding of one sequence on static buffers, so that a GPU replays each token's work from CUDA graphs
instead of launching its thousands of small kernels one by one from Python.

At batch size 1 a token of the looped model is mostly launch overhead on a GPU: a loop step of a two-layer group is
a few dozen small kernels of microseconds each, and an exit rule adds its own kernels and a host
synchronisation after every step (results/gpu/run-d/README.md). Here every tensor a token touches has a fixed
address and shape (the KV cache of every position, the states, the rule's history), the position is a device
tensor, and attention reads the whole cache under a mask of the positions written so far. Each piece of
work is then one function of those buffers (`StaticStep`): run as it is on a CPU, captured once as a CUDA graph and
replayed on a GPU. The pieces of a token:

- the work between the exit rules' groups (embedding, single-pass layers, groups looped a fixed number of times,
  the head): one graph each, so autoregressive decoding at a fixed depth is one graph per token;
- a group under an exit rule: one graph per stretch of loop steps between two reads of the exit decision (the
  first with the rule's start), each step reading its cache entries as views, and the copy of the token's deepest
  cache entry into the deeper steps' slots once it is done.

The rule's arithmetic (its criterion, the consecutive-hit count, the exit test) runs on the device inside the step's
graph, on a GPU compiled into a few fused kernels (`fused`): on an H200 a rule that never exits cost 40-61% more
than the same loops with its arithmetic launched op by op, 12-24% compiled (results/gpu/run-e). A token that has
exited keeps its state, its loop count and its cache entries; the steps replayed after its exit only compute what is
thrown away. So the host need not read the exit decision after every step: it reads it first at the earliest step
the rule can exit (`first_read`), and from then every `read_every` steps or, if more, every as many steps as the
rule needs hits (`read_spans`); the steps between two reads are one graph (on an H200, never-exiting rules cost
12-15% more than the same loops with one graph per step, 7-8% with one per stretch, KL 19%: its head's decode at
every step is 27% more FLOPs than the loops; results/gpu/run-e, run-f). The exits, loop counts, states and cache are
those of the same rule read after every step (`engine.step_tokens`, tested equal); a later read only costs the
steps replayed past the exit.

The judgement of step k (`judge`: the criterion, with the head's decode for the rules that read logits, and the exit
test) decides only whether step k+1's state is kept (`keep`), not what step k+1 computes from the state kept after
step k. On a GPU it runs on a second stream beside loop step k+1, both in the same graph
(`GraphOptions`, its `overlap_rules`), where at batch size 1 neither fills the device.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from twoscale.decoding.cache import LayerCache
from twoscale.decoding.rules import Criterion, ExitRule
from twoscale.models.looped_gpt import LoopedGPT, Segment, SharedKeys, at_least_float32

Tensor = torch.Tensor

READ_EVERY = 4  # loop steps between two reads of an exit decision, once the rule can exit


@dataclass(frozen=True)
class GraphOptions:
    """How `GraphedDecoder` lays out a token's work. `read_every`: loop steps between two reads of an exit decision,
    once the rule can exit (`read_spans`). `fuse_rules`: the rules' arithmetic compiled into a few fused kernels
    (`fused`) or launched op by op. `overlap_rules`: each step's judgement on a second CUDA stream beside the next
    loop step, or in line. None: as on the decoder's device (on a GPU, yes)."""

    read_every: int = READ_EVERY
    fuse_rules: bool | None = None
    overlap_rules: bool | None = None


class SideStream:
    """Work forked off the current stream and joined back to it: on a second CUDA stream, where it runs beside what
    the current stream is given meanwhile (captured into the same graph as a branch); without one, in line. A join
    waits only for work forked since the last one: in a graph being captured, a wait for the second stream's work
    from before the capture would cross the capture's boundary, which CUDA refuses."""

    def __init__(self, device: torch.device, separate: bool) -> None:
        if separate and device.type != "cuda":
            raise ValueError(f"a second stream needs a CUDA device, not {device}")
        self.stream = torch.cuda.Stream(device) if separate else None
        self.forked = False

    @contextlib.contextmanager
    def fork(self) -> Iterator[None]:
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        self.forked = True
        with torch.cuda.stream(self.stream):
            yield

    def join(self) -> None:
        if self.forked:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)
            self.forked = False


class StaticStep:
    """`work`, a function of buffers whose addresses never change, run once when built (a warm-up: on a GPU on a side
    stream, for lazy initialisation and allocations outside the graph) and then, on a GPU, captured as a CUDA graph
    that every call replays; on a CPU every call runs it as it is."""

    def __init__(self, work: Callable[[], None], device: torch.device, pool: tuple | None = None) -> None:
        self.work = work
        self.graph: torch.cuda.CUDAGraph | None = None
        if device.type != "cuda":
            work()
            return
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            work()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        collecting = gc.isenabled()
        gc.disable()  # a collection during the capture may free an earlier decoder's graph: that breaks the capture
        try:
            with torch.cuda.graph(self.graph, pool=pool):
                work()
        finally:
            if collecting:
                gc.enable()

    def __call__(self) -> None:
        if self.graph is None:
            self.work()
        else:
            self.graph.replay()


def first_read(rule: ExitRule) -> int:
    """The earliest loop step at which the rule can let a token exit (its max_loops at the latest)."""
    earliest = max(rule.counter.min_loops, rule.criterion.first_k + int(rule.hits) - 1)
    return min(earliest, rule.max_loops)


def read_spans(rule: ExitRule, read_every: int) -> list[range]:
    """The loop steps (1-based) of each graph of a group under `rule`; the host reads the exit decision after each
    but the last: first at `first_read`, then every `read_every` steps, or every `rule.hits` steps if more (a token
    that a read found running without a hit needs that many steps before it can exit: an earlier read is in vain)."""
    every = max(read_every, int(rule.hits))
    reads = [*range(first_read(rule), rule.max_loops, every), rule.max_loops]
    return [range(start + 1, end + 1) for start, end in zip([0, *reads], reads)]


class GraphedDecoder:
    """One sequence's tokens, one at a time, through `model` under `rules` (one per looped group), with the KV
    caches `caches` (one row, room for every position to be decoded): `step(token, position)` gives the logits
    (V,) and each group's loop count, as `engine.step_token` does. The caches' `depth` is not kept up to date."""

    @torch.no_grad()  # the warm-ups and captures record no autograd graph, whoever builds the decoder
    def __init__(self, model: LoopedGPT, rules: Sequence[ExitRule], caches: Sequence[LayerCache],
                 options: GraphOptions = GraphOptions()) -> None:
        if not one_setting_per_rule(rules):
            raise ValueError("graphed decoding takes one setting per rule, not a value per row")
        if caches[0].keys.shape[1] != 1:
            raise ValueError("graphed decoding decodes one sequence")
        config = model.config
        self.model, self.rules, self.read_every = model, list(rules), options.read_every
        self.device = model.lm_head.weight.device
        on_gpu = self.device.type == "cuda"
        self.fuse_rules = on_gpu if options.fuse_rules is None else options.fuse_rules
        self.overlap_rules = on_gpu if options.overlap_rules is None else options.overlap_rules
        self.keys = [cache.keys[:, 0] for cache in caches]  # (steps, positions, heads, head_dim)
        self.values = [cache.values[:, 0] for cache in caches]
        positions = self.keys[0].shape[1]
        self.slots = torch.arange(positions, device=self.device)
        # the graphs are captured at the last slot: whatever they write there is rewritten if it is ever decoded
        self.position = torch.full((), positions - 1, dtype=torch.long, device=self.device)
        self.token = torch.zeros(1, dtype=torch.long, device=self.device)
        self.x = torch.zeros(1, config.n_embd, dtype=model.lm_head.weight.dtype, device=self.device)
        self.logits = torch.zeros(1, config.vocab_size, dtype=self.x.dtype, device=self.device)
        self.pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        self.fixed_loops = [rule.fixed_loops for rule in self.rules]
        self.pieces: list[StaticStep | RuleGroup] = []
        pending: list[Callable[[Tensor], Tensor]] = [self._embed]
        for index, segment in enumerate(model.segments):
            if segment.group is not None and self.fixed_loops[segment.group] is None:
                if pending:  # nothing between two groups under rules
                    self.pieces.append(self._piece(pending))
                self.pieces.append(RuleGroup(self, index, self.rules[segment.group]))
                pending = []
            else:
                pending.append(self._segment_work(segment))
        pending.append(lambda x: self.logits.copy_(model.logits_of(x)))
        self.pieces.append(self._piece(pending))
        self.rule_groups = [piece for piece in self.pieces if isinstance(piece, RuleGroup)]

    # --- the work on the buffers ---------------------------------------------------------------------------------

    def _embed(self, _: Tensor) -> Tensor:
        return self.model.embed_at(self.token, self.position.view(1))

    def block(self, layer: int, x: Tensor, step: int) -> Tensor:
        """Layer `layer` on the newest position's state x (1, C) at loop step `step`, writing its cache entry there
        and reading the cache's entries of that step up to the newest position."""
        keys, values = self.keys[layer], self.values[layer]
        heads = keys.shape[2:]

        def context(k: Tensor, v: Tensor) -> SharedKeys:
            slot = (step * keys.shape[1] + self.position).view(1)
            keys.view(-1, *heads).index_copy_(0, slot, k)
            values.view(-1, *heads).index_copy_(0, slot, v)
            return SharedKeys(keys[step], values[step], (self.slots <= self.position)[None])

        return self.model.blocks[layer].cached(x, context)

    def look_ahead(self, layer: int, x: Tensor) -> Tensor:
        """Layer `layer` on x reading the earlier positions' step-1 entries and its own key and value, writing
        nothing: the rest decode's layer (`engine.decode_rest`)."""
        keys, values = self.keys[layer], self.values[layer]

        def context(k: Tensor, v: Tensor) -> SharedKeys:
            visible = torch.cat([self.slots < self.position, self.slots.new_ones(1, dtype=torch.bool)])
            return SharedKeys(torch.cat([keys[0], k]), torch.cat([values[0], v]), visible[None])

        return self.model.blocks[layer].cached(x, context)

    def group_step(self, segment: Segment, x: Tensor, group_input: Tensor, step: int) -> Tensor:
        return self.model.apply_group(segment, x, group_input, lambda layer, h: self.block(layer, h, step))

    def finish(self, segment: Segment, loops: int | Tensor) -> None:
        """The newest position is done with the segment's layers after `loops` steps: its deepest entry fills the
        deeper steps' slots (`LayerCache.finish`)."""
        for layer in segment.layers:
            for held in (self.keys[layer], self.values[layer]):
                steps = held.shape[0]
                if isinstance(loops, int) and loops >= steps:
                    continue
                every = torch.arange(steps, device=self.device)
                deepest = every.clamp(max=loops - 1) if isinstance(loops, int) else torch.minimum(every, loops - 1)
                here = self.position.view(1)
                held.index_copy_(1, here, held.index_select(1, here).index_select(0, deepest.view(-1)))

    def _segment_work(self, segment: Segment) -> Callable[[Tensor], Tensor]:
        if segment.group is None:
            def once(x: Tensor) -> Tensor:
                for layer in segment.layers:
                    x = self.block(layer, x, 0)
                return x
            return once
        loops = self.fixed_loops[segment.group]

        def fixed(x: Tensor) -> Tensor:
            group_input = x
            for step in range(loops):
                x = self.group_step(segment, x, group_input, step)
            self.finish(segment, loops)
            return x
        return fixed

    def _piece(self, work: Sequence[Callable[[Tensor], Tensor]]) -> StaticStep:
        def run() -> None:
            x = self.x
            for part in work:
                x = part(x)
            if x is not self.logits:
                self.x.copy_(x)
        return StaticStep(run, self.device, self.pool)

    # --- decoding ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, token: int, position: int) -> tuple[Tensor, list[int]]:
        self.token.fill_(token)
        self.position.fill_(position)
        for piece in self.pieces:
            piece()
        counts = list(self.fixed_loops)
        if self.rule_groups:
            read = torch.cat([group.loops for group in self.rule_groups]).tolist()
            for group, count in zip(self.rule_groups, read, strict=True):
                counts[group.group] = count
        return self.logits[0].clone(), counts


class RuleGroup:
    """A looped group under an exit rule, for `GraphedDecoder`: one graph per stretch of steps between two reads
    (`read_spans`; each step known when it is captured, so every layer reads its cache entries as views), each
    step's judgement beside the next step (`SideStream`), the rule's state on the device, and the host's loop that
    reads the exit decision after each stretch."""

    def __init__(self, decoder: GraphedDecoder, segment_index: int, rule: ExitRule) -> None:
        model = decoder.model
        self.decoder, self.rule, self.segment_index = decoder, rule, segment_index
        self.segment = model.segments[segment_index]
        self.group = self.segment.group
        device = decoder.device
        self.group_input = torch.zeros_like(decoder.x)
        value_dtype = at_least_float32(decoder.x).dtype
        self.threshold = torch.full((), float(rule.threshold), dtype=value_dtype, device=device)
        # the step being run, 1-based: each step's graph knows it, but as a tensor one compilation serves them all
        self.k = torch.ones((), dtype=torch.long, device=device)
        self.running = torch.ones(1, dtype=torch.bool, device=device)
        self.hits = torch.zeros(1, dtype=torch.long, device=device)
        self.loops = torch.ones(1, dtype=torch.long, device=device)  # any count: the warm-up of `done` reads it
        self.memory: dict[str, Tensor] = {}  # the criterion's history, kept at fixed addresses
        self.judge, self.keep = (fused(judge), fused(keep)) if decoder.fuse_rules else (judge, keep)
        self.judging = SideStream(device, decoder.overlap_rules)
        self.held: set[int] = set()  # the steps whose history buffers exist
        # a stretch's graph; the warm-up of step k writes step k's cache slot, which exists up to max_loops
        self.spans = [StaticStep(functools.partial(self._steps, span), device, decoder.pool)
                      for span in read_spans(rule, decoder.read_every)]
        self.done = StaticStep(lambda: decoder.finish(self.segment, self.loops), device, decoder.pool)

    def _decode(self, x: Tensor) -> Tensor:
        model = self.decoder.model
        if self.rule.criterion.decode == "rest":
            for segment in model.segments[self.segment_index + 1 :]:
                for layer in segment.layers:
                    x = self.decoder.look_ahead(layer, x)
        return model.logits_of(x)

    def _steps(self, span: range) -> None:
        """Loop steps `span`, each judged beside the next: step k's state is computed from the state kept after
        step k-1 while step k-1 is judged, and kept once that judgement says the token ran step k."""
        x = self.decoder.x
        judged: list[object] = []  # what the judgement beside the next step reads, held until it is joined: freed
        # before, its memory could be given to a tensor of that step while the other stream still reads it
        for k in span:
            history = self._start() if k == 1 else self.memory
            new = self.decoder.group_step(self.segment, x, self.group_input, k - 1)
            self.judging.join()
            judged.clear()
            self.keep(new, self.running, x)
            with self.judging.fork():
                self._judge(k, new, history)
            judged += [new, history]
        self.judging.join()

    def _start(self) -> dict[str, Tensor]:
        """A token's first step under the rule: its state, counts and criterion from the group's input; the
        criterion's history."""
        self.group_input.copy_(self.decoder.x)
        self.k.fill_(1)
        self.running.fill_(True)
        self.hits.zero_()  # `loops` is set at the token's exit, which comes by max_loops
        self.rule.criterion.reset(self.group_input)
        return dict(self.rule.criterion.memory)

    def _judge(self, k: int, new: Tensor, history: dict[str, Tensor]) -> None:
        criterion = self.rule.criterion
        logits = self._decode(new) if criterion.needs_logits else None
        if k not in self.held:  # the first run of this step, before its capture: the history's buffers
            self._hold_history(history, new, logits)
            self.held.add(k)
        for key, held in history.items():
            if held is not self.memory[key]:
                self.memory[key].copy_(held)
        counter = self.rule.counter
        self.judge(criterion, tuple(history), counter.hits, counter.min_loops, counter.max_loops, new, logits,
                   self.memory, self.hits, self.running, self.loops, self.k, self.threshold)

    def _hold_history(self, history: dict[str, Tensor], new: Tensor, logits: Tensor | None) -> None:
        """Buffers for every entry of the criterion's history before and after a step from `history`."""
        probe = copy.copy(self.rule.criterion)
        probe.memory = {key: held.clone() for key, held in history.items()}
        probe.score(new, logits)
        for key, held in {**history, **probe.memory}.items():
            if key not in self.memory:
                self.memory[key] = torch.zeros_like(held)

    def __call__(self) -> None:
        for index, span in enumerate(self.spans):
            if index and not self.running.item():  # the read: has the token exited?
                break
            span()
        self.done()


def judge(criterion: Criterion, history: tuple[str, ...], hits_needed: int, min_loops: int, max_loops: int,
          new: Tensor, logits: Tensor | None, memory: dict[str, Tensor], hits: Tensor, running: Tensor,
          loops: Tensor, k: Tensor, threshold: Tensor) -> None:
    """The rule's arithmetic after loop step k (a device scalar) gave the state `new` (and its logits): the
    criterion's value from the history entries named `history`, the consecutive hits, the exit test, the token's
    loop count and running flag, all written in place (`memory` keeps the history after the step). With `keep`
    before it, `ExitRule.step`'s arithmetic with one setting for the row."""
    criterion.memory = {key: memory[key] for key in history}
    value = criterion.score(new, logits)
    for key, held in criterion.memory.items():
        memory[key].copy_(held)
    hits.copy_(torch.where(value < threshold, hits + 1, 0))  # NaN is never a hit
    exits = running & (((hits >= hits_needed) & (k >= min_loops)) | (k >= max_loops))
    loops.copy_(torch.where(exits, k, loops))
    running.copy_(running & ~exits)
    k.add_(1)


def keep(new: Tensor, running: Tensor, x: Tensor) -> None:
    """The token's state after a step: the step's `new` while it runs, else the state it exited with."""
    x.copy_(torch.where(running[:, None], new.to(x.dtype), x))


RULE_COMPILATIONS = 64  # torch.compile's default of 8 is fewer than the criteria and first steps of one run


@functools.cache
def fused(arithmetic: Callable[..., None]) -> Callable[..., None]:
    """The rules' `arithmetic` (`judge`, `keep`) compiled (a few fused kernels on a GPU instead of a few dozen small
    ones): once per process, and again per criterion, first step and rule setting it meets (the threshold is a
    tensor: a sweep's thresholds share one compilation)."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RULE_COMPILATIONS)
    return torch.compile(arithmetic, dynamic=False)


def one_setting_per_rule(rules: Sequence[ExitRule]) -> bool:
    """Whether every rule has one threshold, hit count and loop limit for all rows (not a value per row)."""
    return not any(isinstance(value, Tensor) for rule in rules
                   for value in (rule.threshold, rule.hits, rule.counter.max_loops))


def uses_graphs(device: torch.device, rules: Sequence[ExitRule]) -> bool:
    """Whether decoding on `device` under `rules` replays graphs: on a GPU, with one setting per rule."""
    return device.type == "cuda" and one_setting_per_rule(rules)
