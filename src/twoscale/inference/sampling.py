"""What the sample stage measures: the parallel sampler at every setting of its grid and ordinary cached decoding at
every loop count, greedy at batch size 1 on the same held-out prompts (SCIENCE §3).

Per prompt and setting: the tokens per second after the prompt's prefill, forward passes and looped-group
applications per generated token, the greedy agreement with ordinary decoding at full recurrence (the fraction of
generated positions with the same token), and the quality of the continuation as the model itself judges it: its
mean cross-entropy re-scored by one teacher-forced pass at full recurrence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F

from twoscale.inference.sampler import Prefill, Sampled, SamplerSettings, autoregressive, prefill, sample
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.pipeline.params import SampleParams

SAMPLER, AUTOREGRESSIVE = "sampler", "autoregressive"


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


def _row(out: Sampled, prompt: int, model: LoopedGPT, prompt_length: int, full_loops: int,
         reference: Sequence[int], **setting: Any) -> dict[str, Any]:
    return {
        **setting,
        "prompt": prompt,
        "new_tokens": out.new_tokens,
        "seconds": out.seconds,
        "forward_passes": out.forward_passes,
        "group_iterations": out.group_iterations,
        "agreement": agreement(out.tokens, reference, prompt_length),
        "cross_entropy": rescored_cross_entropy(model, out.tokens, prompt_length, full_loops),
    }


def shared_settings(sample: SampleParams) -> dict[str, Any]:
    """The sampler's knobs that the sample section fixes for every setting of its grid."""
    return {"max_iterations": sample.loops, "embedding_ema": sample.embedding_ema, "state_noise": sample.state_noise,
            "headway": sample.headway, "max_wavefront": sample.max_wavefront, "init": sample.init,
            "state_std": sample.state_std}


def settings_grid(inner_loops: Iterable[int], tolerances: Iterable[float], freezes: Iterable[str],
                  **shared: Any) -> list[SamplerSettings]:
    """Every combination of r′, ε and freeze criterion, with the shared knobs."""
    return [SamplerSettings(inner_loops=r, tolerance=eps, freeze=freeze, **shared)
            for freeze in freezes for r in inner_loops for eps in tolerances]


def measure_prompt(model: LoopedGPT, index: int, prompt: Sequence[int], new_tokens: int, loops: int,
                   baseline_loops: Sequence[int], grid: Sequence[SamplerSettings]) -> list[dict[str, Any]]:
    """Rows for one prompt: ordinary decoding at every loop count, then the sampler at every setting, all after
    one shared full-recurrence prefill (ordinary decoding at fewer loops makes its own)."""
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
