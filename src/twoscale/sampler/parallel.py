"""The parallel "diffusion forcing" sampler for recurrent-depth models (Geiping et al., arXiv 2510.14961;
docs/methods.md#the-parallel-sampler), batch size 1.

Autoregressive decoding runs each new token through the full recurrence before the next token starts. This sampler
decodes a new position at every forward pass (an *outer step*) while the latent states of the recent, still
*active* positions keep refining in parallel. After a full-recurrence prefill of the prompt, each outer step works
on the active window, positions F..A−1 (everything before F is frozen):

1. the prelude (the layers before the first looped group) embeds the window's current tokens; where a position
   already had an embedding, the two are mixed by EMA: e = η e_prev + (1 − η) P(y);
2. noise is mixed into every looped group's state with weight β / (1 + iterations the position already had);
3. each looped group runs r′ (`inner_loops`) iterations on every active position at once, its input being the
   output of the segment before it in this outer step;
4. the coda decodes every active position and each one's next token is (re)picked from its logits;
5. freezing: a position has *settled* when its states moved less than ε over this outer step (‖s_t − s_{t−1}‖ /
   ‖s_t‖, the largest over groups; or the second difference ‖s_t − 2 s_{t−1} + s_{t−2}‖ / ‖s_t‖, "acceleration"),
   or when it has had `max_iterations` iterations. The whole prefix up to the right-most settled position freezes
   and keeps its KV entries; the other active positions' entries are recomputed next step. One guard: a position
   whose input token was re-picked differently in this step does not freeze (its state was computed from the old
   token), nor does anything after it;
6. `headway` new positions join the window (the first takes the token just picked for it, further ones a random
   token), unless the window already holds `max_wavefront` positions.

Generation stops once the requested number of tokens is final (a token is final when the position before it froze)
or a stop token becomes final; the output is cut there.

KV cache: one entry per position and loop iteration of a looped layer (`decoding.cache.LayerCache`). An active position
at its iteration i reads a frozen position's entry of iteration min(i, d) (d: the iterations that position had), as
cached autoregressive decoding does, but never an entry computed before that position's input token last changed (from
the first iteration after the change on). With r′ = `max_iterations` and a wavefront of one, every position runs its
full recurrence in one outer step and freezes, and the sampler is exactly cached autoregressive decoding at
`max_iterations` loops (tested; so is r′ = 1 with a wavefront of one, one iteration per outer step).

New positions start their loops as our models were trained: from the group input ("input"). Huginn trains from a
random state and starts new positions from one; "random" does that (a truncated normal of std `state_std`), and the
noise of step 2 is drawn from the same distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from twoscale.decoding.cache import LayerCache, new_cache
from twoscale.decoding.engine import step_token, token_stepper
from twoscale.decoding.rules import latent_difference, make_rule, relative_acceleration
from twoscale.models.looped_gpt import Block, KeysPerQuery, LoopedGPT, Segment
from twoscale.training.device import clock

Tensor = torch.Tensor

FREEZES = ("latent_difference", "acceleration")
INITS = ("input", "random")


@dataclass(frozen=True)
class SamplerSettings:
    inner_loops: int = 4  # r′: iterations of every looped group per outer step
    tolerance: float = 0.03  # ε of the freeze criterion
    freeze: str = "latent_difference"  # "latent_difference" | "acceleration"
    embedding_ema: float = 0.1  # η
    state_noise: float = 0.0  # β, dampened by the iterations a position already had
    headway: int = 1  # new positions per outer step
    max_wavefront: int = 128  # most active positions
    max_iterations: int = 32  # a position that had this many iterations has settled; also the prefill's loops
    init: str = "input"  # how new positions start: "input" (the group input) | "random"
    state_std: float = 0.63  # std of random states (Huginn's, per coordinate)

    def __post_init__(self) -> None:
        for key in ("inner_loops", "headway", "max_wavefront", "max_iterations"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        for key in ("tolerance", "state_std"):
            if not getattr(self, key) >= 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")
        for key in ("embedding_ema", "state_noise"):
            if not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"{key} must be in [0, 1], got {getattr(self, key)}")
        if self.freeze not in FREEZES:
            raise ValueError(f"freeze must be one of {', '.join(FREEZES)}, got {self.freeze!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")


@dataclass
class Sampled:
    tokens: list[int]  # the prompt and the continuation, cut at the requested length or a stop token
    new_tokens: int  # tokens after the prompt
    windows: list[tuple[int, int]]  # per outer step after the prefill: its window's first position and size
    loops: int  # iterations of every looped group per window position and outer step (r′; autoregressive: its loops)
    groups: int  # looped groups of the model
    seconds: float  # wall time after the prefill

    @property
    def forward_passes(self) -> int:
        """Outer steps after the prefill."""
        return len(self.windows)

    @property
    def group_iterations(self) -> int:
        """Looped-group applications summed over positions after the prefill (compute)."""
        return sum(size for _, size in self.windows) * self.loops * self.groups


# --- the formulas, on plain tensors ---------------------------------------------------------------------------


def mix_embeddings(new: Tensor, previous: Tensor, had_previous: Tensor, ema: float) -> Tensor:
    """e = η e_prev + (1 − η) e_new where a previous embedding exists (rows of `had_previous`), else e_new."""
    return torch.where(had_previous[:, None], ema * previous + (1 - ema) * new, new)


def noise_weight(beta: float, iterations: Tensor) -> Tensor:
    """The dampened mixing weight β / (1 + iterations already done at each position)."""
    return beta / (1 + iterations.to(torch.float64))


def mix_noise(states: Tensor, noise: Tensor, weight: Tensor) -> Tensor:
    """(1 − w) s + w n, one weight per position (row)."""
    w = weight.to(states.dtype)[:, None]
    return (1 - w) * states + w * noise


def frozen_prefix(settled: Tensor, token_changed: Tensor) -> int:
    """How many leading window positions freeze: all up to the right-most settled one, but none from the first
    position whose input token just changed."""
    settled_at = settled.nonzero()
    through_settled = int(settled_at[-1]) + 1 if len(settled_at) else 0
    changed_at = token_changed.nonzero()
    before_change = int(changed_at[0]) if len(changed_at) else len(token_changed)
    return min(through_settled, before_change)


def truncated_normal(shape: tuple[int, ...], std: float, generator: torch.Generator, dtype: torch.dtype) -> Tensor:
    """Normal of the given std, truncated at ±3 std (Huginn's random state)."""
    out = torch.empty(shape, dtype=torch.float64)
    torch.nn.init.trunc_normal_(out, std=std, a=-3 * std, b=3 * std, generator=generator)
    return out.to(dtype)


# --- one forward pass over the active window -------------------------------------------------------------------


def window_block(block: Block, x: Tensor, cache: LayerCache, steps: Tensor, start: int, fresh_from: Tensor
                 ) -> Tensor:
    """One block on the window's states x (W, C), positions start..start+W−1 at loop iterations `steps` (W,).

    Each position writes its key and value as its cache entry of that iteration; it attends to the window causally
    and to every frozen position p < start at that position's entry of iteration min(step, d_p), raised to the
    first iteration computed from p's final token (`fresh_from`) where that is later."""
    W = len(x)
    positions = torch.arange(start, start + W, device=x.device)
    slots = steps.clamp(max=cache.keys.shape[0])

    def context(k: Tensor, v: Tensor) -> KeysPerQuery:
        cache.keys[slots - 1, positions] = k.to(cache.keys.dtype)
        cache.values[slots - 1, positions] = v.to(cache.values.dtype)
        cache.depth[positions] = slots
        depth = cache.depth[:start]
        index = torch.maximum(torch.minimum(slots[:, None], depth), torch.minimum(fresh_from[:start], depth)) - 1
        prefix = torch.arange(start, device=x.device)
        keys = torch.cat([cache.keys[index, prefix], k[None].expand(W, *k.shape)], dim=1)  # (W, start + W, H, D)
        values = torch.cat([cache.values[index, prefix], v[None].expand(W, *v.shape)], dim=1)
        visible = torch.ones(W, start + W, dtype=torch.bool, device=x.device)
        visible[:, start:] = torch.ones(W, W, dtype=torch.bool, device=x.device).tril()
        return KeysPerQuery(keys, values, visible)

    return block.cached(x, context)


def run_once(model: LoopedGPT, segment: Segment, x: Tensor, caches: list[LayerCache], start: int,
             fresh_from: Tensor) -> Tensor:
    """A single-pass segment on the window (its layers have one cache entry per position)."""
    ones = torch.ones(len(x), dtype=torch.long, device=x.device)
    for layer in segment.layers:
        x = window_block(model.blocks[layer], x, caches[layer], ones, start, fresh_from)
    return x


def iterate_group(model: LoopedGPT, segment: Segment, state: Tensor, group_input: Tensor, caches: list[LayerCache],
                  start: int, iterations: Tensor, inner_loops: int, fresh_from: Tensor) -> Tensor:
    """`inner_loops` applications of a looped group to every window position; iterations (W,) before them."""
    for j in range(1, inner_loops + 1):
        state = model.apply_group(segment, state, group_input, lambda layer, x, j=j: window_block(
            model.blocks[layer], x, caches[layer], iterations + j, start, fresh_from))
    return state


# --- the sampler ------------------------------------------------------------------------------------------------


def check_model(model: LoopedGPT) -> None:
    if model.config.injection == "none":
        raise ValueError("the parallel sampler needs a model with input injection (model.injection), got 'none'")


@dataclass
class Prefill:
    """A prompt run through `loops` iterations of every group with the cache, as autoregressive decoding does: the
    caches (room for `positions` positions) and the logits of the prompt's last position."""

    prompt: list[int]
    loops: int
    positions: int
    caches: list[LayerCache]
    logits: Tensor

    def copy(self) -> Prefill:
        return Prefill(self.prompt, self.loops, self.positions, [c.copy() for c in self.caches], self.logits)


def fixed_rules(model: LoopedGPT, loops: int) -> list:
    """Every group looped `loops` times: autoregressive decoding's exit rules."""
    return [make_rule({"criterion": "fixed", "loops": loops}) for _ in range(model.n_groups)]


@torch.no_grad()
def prefill(model: LoopedGPT, prompt: Sequence[int], loops: int, positions: int) -> Prefill:
    model.eval()
    caches = new_cache(model, loops, positions)
    rules = fixed_rules(model, loops)
    logits = None
    for position, token in enumerate(prompt):
        logits, _ = step_token(model, token, position, caches, rules)
    return Prefill(list(prompt), loops, positions, caches, logits)


def _prefilled(model: LoopedGPT, prompt: Sequence[int], loops: int, total: int, given: Prefill | None) -> Prefill:
    """A fresh copy of a prefill done before (several settings share one), or a new one."""
    if given is None:
        return prefill(model, prompt, loops, total)
    if given.prompt != list(prompt) or given.loops != loops or given.positions < total:
        raise ValueError(f"the prefill was made for another prompt, loop count or length (loops {given.loops}, "
                         f"{given.positions} positions; needed {loops}, {total})")
    return given.copy()


def greedy(logits: Tensor) -> Tensor:
    return logits.argmax(dim=-1)


@torch.no_grad()
def autoregressive(model: LoopedGPT, prompt: Sequence[int], new_tokens: int, loops: int,
                   stop_tokens: Sequence[int] = (), prefilled: Prefill | None = None) -> Sampled:
    """Cached greedy autoregressive decoding with every group looped `loops` times, timed after the prefill."""
    model.eval()
    total = len(prompt) + new_tokens
    ready = _prefilled(model, prompt, loops, total, prefilled)
    caches, logits = ready.caches, ready.logits
    rules = fixed_rules(model, loops)
    tokens = [*prompt, int(logits.argmax())]
    device = model.lm_head.weight.device
    step = token_stepper(model, caches, rules)
    started = clock(device)
    while len(tokens) < total and tokens[-1] not in stop_tokens:
        logits, _ = step(tokens[-1], len(tokens) - 1)
        tokens.append(int(logits.argmax()))
    seconds = clock(device) - started
    windows = [(position, 1) for position in range(len(prompt), len(tokens) - 1)]  # one new position per step
    return Sampled(tokens, len(tokens) - len(prompt), windows, loops, model.n_groups, seconds)


@dataclass
class _Window:
    """The active positions start..start+size−1 and what the sampler keeps for each (rows in position order)."""

    start: int
    inner_loops: int  # r′: iterations of every group per outer step
    embeds: Tensor  # (W, C) prelude output after the EMA
    states: list[Tensor]  # per looped group, (W, C)
    history: list[list[Tensor]]  # per looped group, the states after each of the last three outer steps
    steps_active: Tensor  # (W,) long, outer steps each position has been through (0: joined, not run yet)

    @property
    def size(self) -> int:
        return len(self.steps_active)

    @property
    def iterations(self) -> Tensor:
        """(W,) iterations of every group each position has had."""
        return self.steps_active * self.inner_loops

    def drop_first(self, count: int) -> None:
        self.start += count
        self.embeds = self.embeds[count:]
        self.states = [s[count:] for s in self.states]
        self.history = [[h[count:] for h in hist] for hist in self.history]
        self.steps_active = self.steps_active[count:]

    def append(self, count: int, width: int, dtype: torch.dtype, device: torch.device) -> None:
        def pad(t: Tensor, rows: int) -> Tensor:
            return torch.cat([t, t.new_zeros((rows, *t.shape[1:]))])

        self.embeds = pad(self.embeds, count)
        self.states = [pad(s, count) for s in self.states]
        self.history = [[pad(h, count) for h in hist] for hist in self.history]
        self.steps_active = pad(self.steps_active, count)


def _settled(window: _Window, settings: SamplerSettings) -> Tensor:
    """Which window positions settled in this outer step (their states' history includes this step's)."""
    if settings.freeze == "latent_difference":
        enough = window.steps_active >= 2
        values = [latent_difference(h[-1], h[-2]) for h in window.history]
    else:
        enough = window.steps_active >= 3
        values = [relative_acceleration(h[-1], h[-2], h[-3]) for h in window.history]
    moved = torch.stack(values).amax(dim=0)
    return (enough & (moved < settings.tolerance)) | (window.iterations >= settings.max_iterations)


def _refine(model: LoopedGPT, window: _Window, tokens: list[int], caches: list[LayerCache], fresh_from: Tensor,
            settings: SamplerSettings, generator: torch.Generator) -> Tensor:
    """Steps 1-4 of an outer step on the window: embed (EMA), mix noise, iterate every group r′ times, decode.
    Updates the window's states and counts; returns its logits (W, V)."""
    start = window.start
    idx = torch.tensor(tokens[start : start + window.size], device=fresh_from.device)[None]
    x = model.embed(idx, start=start)[0]
    first_group = model.segment_index(0)
    for segment in model.segments[:first_group]:  # the prelude
        x = run_once(model, segment, x, caches, start, fresh_from)
    new = window.steps_active == 0  # joined and not run yet
    x = window.embeds = mix_embeddings(x, window.embeds, ~new, settings.embedding_ema)
    for segment in model.segments[first_group:]:
        if segment.group is None:
            x = run_once(model, segment, x, caches, start, fresh_from)
            continue
        g = segment.group
        initial = (x if settings.init == "input"
                   else truncated_normal(x.shape, settings.state_std, generator, x.dtype).to(x.device))
        state = torch.where(new[:, None], initial, window.states[g])
        if settings.state_noise > 0:
            noise = truncated_normal(x.shape, settings.state_std, generator, x.dtype).to(x.device)
            state = mix_noise(state, noise, noise_weight(settings.state_noise, window.iterations))
        state = iterate_group(model, segment, state, x, caches, start, window.iterations, settings.inner_loops,
                              fresh_from)
        window.states[g], window.history[g] = state, [*window.history[g][1:], state]
        x = state
    window.steps_active = window.steps_active + 1
    return model.logits_of(x)


def _repick(tokens: list[int], picked: list[int], start: int, end: int) -> Tensor:
    """Write the window's picks (position start + i picks token start + i + 1, up to position `end`) into
    `tokens`; which window positions' input token changed."""
    changed = torch.zeros(len(picked), dtype=torch.bool)
    for i, token in enumerate(picked):
        position = start + i + 1
        if position < len(tokens):
            if i + 1 < len(picked) and tokens[position] != token:
                changed[i + 1] = True
            tokens[position] = token
        elif position <= end:
            tokens.append(token)
    return changed


@torch.no_grad()
def sample(model: LoopedGPT, prompt: Sequence[int], new_tokens: int, settings: SamplerSettings,
           stop_tokens: Sequence[int] = (), pick: Callable[[Tensor], Tensor] = greedy, seed: int = 0,
           prefilled: Prefill | None = None) -> Sampled:
    """Generate up to `new_tokens` tokens after `prompt` with the parallel sampler (see the module docstring);
    `prefilled`: the prompt's prefill at `settings.max_iterations` loops, made once for several settings."""
    check_model(model)
    model.eval()
    total = len(prompt) + new_tokens
    if total > model.config.block_size:
        raise ValueError(f"prompt + new tokens = {total} exceeds block_size {model.config.block_size}")
    device = model.lm_head.weight.device
    dtype = model.lm_head.weight.dtype
    generator = torch.Generator().manual_seed(seed)
    ready = _prefilled(model, prompt, settings.max_iterations, total, prefilled)
    caches = [cache.row(0) for cache in ready.caches]
    tokens = [*prompt, int(pick(ready.logits[None])[0])]
    groups = [s for s in model.segments if s.group is not None]
    width = model.config.n_embd
    empty = torch.zeros((0, width), dtype=dtype, device=device)
    window = _Window(len(prompt), settings.inner_loops, empty, [empty] * len(groups), [[empty] * 3 for _ in groups],
                     torch.zeros(0, dtype=torch.long, device=device))
    fresh_from = torch.ones(total, dtype=torch.long, device=device)  # per position: first iteration of its token
    end = total - 1  # positions before it run: the logits of position end − 1 pick the last token
    if tokens[-1] in stop_tokens:  # the prefill's token is final at once
        end = len(prompt)
    window.append(1, width, dtype, device)
    out = Sampled(tokens, 0, [], settings.inner_loops, len(groups), 0.0)
    started = clock(device)
    while window.start < end:
        start, size = window.start, window.size
        logits = _refine(model, window, tokens, caches, fresh_from, settings, generator)
        out.windows.append((start, size))
        token_changed = _repick(tokens, pick(logits).tolist(), start, end).to(device)
        changed = token_changed.nonzero()[:, 0]
        fresh_from[start + changed] = window.iterations[changed] + 1
        window.drop_first(frozen_prefix(_settled(window, settings), token_changed))
        stops = [p for p in range(start + 1, window.start + 1) if tokens[p] in stop_tokens]  # newly final tokens
        if stops:
            del tokens[stops[0] + 1 :]
            break
        joining = min(settings.headway, settings.max_wavefront - window.size, end - (window.start + window.size))
        if joining > 0:
            for _ in range(joining - 1):
                tokens.append(int(torch.randint(model.config.vocab_size, (1,), generator=generator)))
            window.append(joining, width, dtype, device)
    out.seconds = clock(device) - started
    del tokens[total:]
    out.new_tokens = len(tokens) - len(prompt)
    return out
