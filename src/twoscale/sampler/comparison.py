"""What the sample stage measures: the parallel sampler at every setting of its grid and cached autoregressive decoding
at every loop count, greedy at batch size 1 on the same held-out prompts (docs/methods.md#the-parallel-sampler).

Per prompt and setting: the tokens per second after the prompt's prefill, forward passes and looped-group
applications per generated token, its cost per generated token in layer applications and GFLOPs (`generation_cost`),
the greedy agreement with autoregressive decoding at full recurrence (the fraction of generated positions with the same
token), the quality of the continuation as the model itself judges it (its mean cross-entropy re-scored by one
teacher-forced pass at full recurrence) and how repetitive it is (its distinct-token fraction).

After the grid, `sampler_throughput` times the chosen methods side by side in paired rounds, for the speed verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F

from twoscale.config.params import SampleParams
from twoscale.decoding.cost import TokenCost, token_costs
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.sampler.parallel import (
    Prefill,
    Sampled,
    SamplerSettings,
    autoregressive,
    fixed_rules,
    prefill,
    sample,
)
from twoscale.sampler.tables import AUTOREGRESSIVE, FULL_RECURRENCE, MATCHED, SAMPLER


@torch.no_grad()
def rescored_cross_entropy(model: LoopedGPT, tokens: Sequence[int], prompt_length: int, loops: int) -> float:
    """Mean next-token cross-entropy (nats) of tokens[prompt_length:] given everything before, every group looped
    `loops` times (teacher forcing)."""
    if len(tokens) <= prompt_length:
        raise ValueError("no generated tokens to score")
    idx = torch.tensor(tokens, device=model.lm_head.weight.device)[None]
    logits = model(idx[:, :-1], [loops] * model.n_groups).logits[0, prompt_length - 1 :]
    return F.cross_entropy(logits.float(), idx[0, prompt_length:]).item()


def agreement(tokens: Sequence[int], reference: Sequence[int], prompt_length: int) -> float:
    """The fraction of the reference's generated positions where `tokens` has the same token."""
    generated = reference[prompt_length:]
    return sum(a == b for a, b in zip(tokens[prompt_length:], generated, strict=False)) / len(generated)


def distinct_fraction(tokens: Sequence[int], prompt_length: int) -> float:
    """Distinct generated tokens over generated tokens: 1 for a continuation that never repeats a token, low for a
    degenerate, repetitive one."""
    generated = tokens[prompt_length:]
    return len(set(generated)) / len(generated)


def generation_cost(model: LoopedGPT, out: Sampled) -> TokenCost:
    """The cost of a generation after its prefill by the convention of `cost`, one entry per window position and
    outer step: each runs the single-pass layers once and every looped group `out.loops` times (input injection
    included) and is decoded by the LM head. Its attention is computed over the frozen prefix and the whole window,
    start + size keys (those after it masked), so it costs what a token at position start + size − 1 does.
    Autoregressive decoding is a window of one new position per step."""
    sizes = torch.tensor([size for _, size in out.windows], dtype=torch.long)
    last = torch.tensor([start + size - 1 for start, size in out.windows], dtype=torch.long)
    positions = last.repeat_interleave(sizes)
    loops = torch.full((out.groups, len(positions)), out.loops)
    return token_costs(model, loops, positions, fixed_rules(model, out.loops))


def _row(out: Sampled, prompt: int, model: LoopedGPT, prompt_length: int, full_loops: int,
         reference: Sequence[int], **setting: Any) -> dict[str, Any]:
    cost = generation_cost(model, out)
    return {
        **setting,
        "prompt": prompt,
        "new_tokens": out.new_tokens,
        "seconds": out.seconds,
        "forward_passes": out.forward_passes,
        "group_iterations": out.group_iterations,
        "layers_per_token": cost.layers.sum().item() / out.new_tokens,
        "gflops_per_token": cost.flops.sum().item() / out.new_tokens / 1e9,
        "agreement": agreement(out.tokens, reference, prompt_length),
        "distinct_fraction": distinct_fraction(out.tokens, prompt_length),
        "cross_entropy": rescored_cross_entropy(model, out.tokens, prompt_length, full_loops),
    }


def shared_settings(sample: SampleParams) -> dict[str, Any]:
    """The sampler's knobs that the sample section fixes for every setting of its grid."""
    return {"max_iterations": sample.loops, "embedding_ema": sample.embedding_ema, "state_noise": sample.state_noise,
            "headway": sample.headway, "max_wavefront": sample.max_wavefront, "init": sample.init,
            "state_std": sample.state_std}


def settings_of(row: Mapping[str, Any], sample: SampleParams) -> SamplerSettings:
    """The sampler setting of a summary row (its r′, ε and freeze criterion) with the section's shared knobs."""
    return SamplerSettings(inner_loops=int(row["inner_loops"]), tolerance=float(row["tolerance"]),
                           freeze=str(row["freeze"]), **shared_settings(sample))


def settings_grid(inner_loops: Iterable[int], tolerances: Iterable[float], freezes: Iterable[str],
                  **shared: Any) -> list[SamplerSettings]:
    """Every combination of r′, ε and freeze criterion, with the shared knobs."""
    return [SamplerSettings(inner_loops=r, tolerance=eps, freeze=freeze, **shared)
            for freeze in freezes for r in inner_loops for eps in tolerances]


def measure_prompt(model: LoopedGPT, index: int, prompt: Sequence[int], new_tokens: int, loops: int,
                   baseline_loops: Sequence[int], grid: Sequence[SamplerSettings]) -> list[dict[str, Any]]:
    """Rows for one prompt: autoregressive decoding at every loop count, then the sampler at every setting, all after
    one shared full-recurrence prefill (autoregressive decoding at fewer loops makes its own)."""
    total = len(prompt) + new_tokens
    full: Prefill = prefill(model, prompt, loops, total)
    baselines = {k: autoregressive(model, prompt, new_tokens, k, prefilled=full if k == loops else None)
                 for k in sorted(baseline_loops, reverse=True)}
    reference = baselines[loops].tokens
    rows = [_row(out, index, model, len(prompt), loops, reference, method=AUTOREGRESSIVE, loops=k)
            for k, out in baselines.items()]
    for settings in grid:
        out = sample(model, prompt, new_tokens, settings, prefilled=full)
        rows.append(_row(out, index, model, len(prompt), loops, reference, method=SAMPLER, loops=loops,
                         **{key: value for key, value in asdict(settings).items() if key != "max_iterations"}))
    return rows


def sampler_throughput(model: LoopedGPT, prompts: Sequence[Sequence[int]], new_tokens: int, full_loops: int,
                       matched_loops: int, settings: SamplerSettings | None, repeats: int) -> dict[str, list[float]]:
    """Tokens/s after the prefill of autoregressive decoding at `full_loops` (FULL_RECURRENCE) and at `matched_loops`
    (MATCHED), and of the sampler at `settings` (SAMPLER; left out without settings), timed side by side in
    `repeats` rounds: a round runs every method on every prompt in turn, in the reverse order of the round before.
    Per method, its tokens/s of every round (all tokens over all seconds); round i of two methods is a pair."""
    def autoregressive_at(loops: int) -> Callable[[Sequence[int], Prefill], Sampled]:
        return lambda prompt, ready: autoregressive(model, prompt, new_tokens, loops,
                                                    prefilled=ready if loops == full_loops else None)

    methods = {FULL_RECURRENCE: autoregressive_at(full_loops), MATCHED: autoregressive_at(matched_loops)}
    if settings is not None:
        methods[SAMPLER] = lambda prompt, ready: sample(model, prompt, new_tokens, settings, prefilled=ready)
    prefills = [prefill(model, prompt, full_loops, len(prompt) + new_tokens) for prompt in prompts]  # untimed
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for round_index in range(repeats):
        order = list(methods) if round_index % 2 == 0 else list(reversed(methods))
        totals = {name: [0, 0.0] for name in methods}
        for prompt, ready in zip(prompts, prefills, strict=True):
            for name in order:
                out = methods[name](prompt, ready)
                totals[name][0] += out.new_tokens
                totals[name][1] += out.seconds
        for name, (tokens, seconds) in totals.items():
            rates[name].append(tokens / seconds)
    return rates


def speed_rows(rates: Mapping[str, Sequence[float]], full_loops: int, matched_loops: int,
               settings: SamplerSettings | None) -> list[dict[str, Any]]:
    """`sampler_throughput`'s rounds as rows (method, round, tokens_per_s) with each method's setting."""
    no_sampler = {"inner_loops": None, "tolerance": None, "freeze": None}
    chosen = {FULL_RECURRENCE: {"loops": full_loops, **no_sampler}, MATCHED: {"loops": matched_loops, **no_sampler}}
    if settings is not None:
        chosen[SAMPLER] = {"loops": full_loops, "inner_loops": settings.inner_loops,
                           "tolerance": settings.tolerance, "freeze": settings.freeze}
    return [{"method": method, "round": index, "tokens_per_s": value, **chosen[method]}
            for method, values in rates.items() for index, value in enumerate(values)]
