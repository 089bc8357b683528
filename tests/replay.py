"""Replaying a precomputed trajectory x^(0..K) through an exit rule: the tests' independent route to the exit
steps that the sweep and generation reach by running the group step by step."""

from __future__ import annotations

from collections.abc import Callable

import torch

from twoscale.decoding.rules import Criterion, ExitRule, HitCounter

Tensor = torch.Tensor

LogitsFn = Callable[[int, Tensor], Tensor]  # (k, token indices (n,)) -> logits (n, V) of those tokens' x^(k)


def _tokens(trajectory: Tensor) -> Tensor:
    """(K+1, N, C), or (K+1, B, T, C) flattened as `geometry.flatten_tokens` (token n = (b, t))."""
    if trajectory.dim() == 4:
        trajectory = trajectory.reshape(trajectory.shape[0], -1, trajectory.shape[-1])
    if trajectory.dim() != 3 or trajectory.shape[0] < 2:
        raise ValueError(f"need a trajectory (K+1 >= 2, N, C), got {tuple(trajectory.shape)}")
    return trajectory


@torch.no_grad()
def exit_steps(rule: ExitRule, trajectory: Tensor, logits_fn: LogitsFn | None = None) -> Tensor:
    """Each token's exit step (N,) long in 1..K when `rule` runs along a precomputed trajectory x^(0..K).

    Tokens still running after step K get K (the trajectory ends: they ran to the maximum). A rule with
    max_loops > K is an error. logits_fn(k, idx) gives the logits of x^(k) for the tokens idx; needed when
    `rule.needs_logits`, e.g. `lambda k, idx: head_decode(model, trajectory[k, idx])` for the "head" decode.
    """
    x = _tokens(trajectory)
    K, N = x.shape[0] - 1, x.shape[1]
    if rule.max_loops is not None and rule.max_loops > K:
        raise ValueError(f"the rule may run {rule.max_loops} loops, the trajectory has only {K}")
    if rule.needs_logits and logits_fn is None:
        raise ValueError(f"{rule.name} needs logits_fn")
    out = torch.full((N,), K, dtype=torch.long, device=x.device)
    rule.start(x[0])
    for k in range(1, K + 1):
        idx = rule.running
        if idx.numel() == 0:
            break
        exit_now = rule.step(x[k, idx], logits_fn(k, idx) if rule.needs_logits else None)
        out[idx[exit_now]] = k
    return out


@torch.no_grad()
def criterion_values(criterion: Criterion, trajectory: Tensor, logits_fn: LogitsFn | None = None) -> Tensor:
    """The criterion's value at every step for every token, (K, N); row i is step k = i+1.

    Values do not depend on the threshold or the hit rule, so a threshold sweep computes them once and calls
    `exit_steps_from_values` per setting."""
    x = _tokens(trajectory)
    if criterion.needs_logits and logits_fn is None:
        raise ValueError(f"{criterion.name} needs logits_fn")
    idx = torch.arange(x.shape[1], device=x.device)
    criterion.reset(x[0])
    rows = [criterion.score(x[k], logits_fn(k, idx) if criterion.needs_logits else None)
            for k in range(1, x.shape[0])]
    return torch.stack(rows)


def exit_steps_from_values(
    values: Tensor, threshold: float, hits: int = 1, min_loops: int = 1, max_loops: int | None = None
) -> Tensor:
    """Exit steps (N,) from precomputed values (K, N), with the same hit rule as `ExitRule`: the result
    equals `exit_steps` of an ExitRule with the same criterion and settings."""
    K, N = values.shape
    if max_loops is not None and max_loops > K:
        raise ValueError(f"the rule may run {max_loops} loops, the values cover only {K}")
    counter = HitCounter(hits, min_loops, max_loops)
    counter.reset(N, values.device)
    out = torch.full((N,), K, dtype=torch.long, device=values.device)
    done = torch.zeros(N, dtype=torch.bool, device=values.device)
    for k in range(1, (max_loops or K) + 1):
        exit_now = counter.update(values[k - 1] < threshold) & ~done
        out[exit_now] = k
        done |= exit_now
    return out


def exit_states(trajectory: Tensor, steps: Tensor) -> Tensor:
    """The state each token leaves its group with: x^(steps[n]) of token n; (N, C)."""
    x = _tokens(trajectory)
    return x[steps, torch.arange(x.shape[1], device=x.device)]
