"""Geometry of looped-group trajectories, per token and per loop step (docs/methods.md#loop-geometry).

A trajectory is x^(0..K) of one group: x^(0) is the group's input and x^(k) the residual stream after k
applications. Every function here takes the states flattened to tokens, x shaped (K+1, N, C) (see
`flatten_tokens`), and returns one scalar per (loop step, token). Row i of a result is loop step
k = first_k + i, where first_k is 0 for metrics of the state itself, 1 for first-order metrics (they need
x^(k-1)) and 2 for second-order ones (they need x^(k-2)); `FIRST_K` records it per metric.

The diagnostics of docs/methods.md#the-looped-model-and-its-recipes name the mechanism: the state norm ‖x^(k)‖
(a pre-LN loop's grows without bound), the mean cosine between different tokens' states (1 = every token has
the same state: collapse to the unigram distribution), and the split of each step into its part along the
previous state (radial: the state only grows or shrinks) and the part orthogonal to it (tangential: the state
turns).

Undefined values are NaN, never 0: a cosine with a zero step, and any ratio whose denominator is exactly zero.
Aggregators must ignore NaN (`MetricAccumulator` does). Functions compute in the input's dtype;
`measure_trajectories` upcasts half-precision states to float32 first.

The precision floor: a step smaller than `FLOOR_EPS` machine epsilons of the state it starts from is within the
rounding of the arithmetic that computed it (a layer's output is rounded at about one epsilon of the state it
is added to), so its size is known only to be tiny and its direction is noise. `measure_trajectories` marks such
steps (`at_floor`, which includes exact fixed points) and leaves them out of the metrics that read a step's
direction (`DIRECTIONAL`); sizes stay, since leaving tiny steps out would bias a mean of sizes upward.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from twoscale.geometry.tables import FLOOR_EPS, REGIMES

Tensor = torch.Tensor


def flatten_tokens(traj: Tensor) -> Tensor:
    """(K+1, B, T, C) -> (K+1, B*T, C); token n is (b, t) = divmod(n, T)."""
    return traj.reshape(traj.shape[0], -1, traj.shape[-1])


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den, NaN where den == 0."""
    return torch.where(den > 0, num / den, torch.full_like(num, math.nan))


def _norm(x: Tensor) -> Tensor:
    return torch.linalg.vector_norm(x, dim=-1)


# --- the state: k = 0..K, shape (K+1, N) ------------------------------------------------------------------


def state_norm(x: Tensor) -> Tensor:
    """‖x^(k)‖₂; (K+1, N), row i is k = i."""
    return _norm(x)


def cross_token_cosine(x: Tensor) -> Tensor:
    """Each token's mean cosine with the other tokens' states at the same step; (K+1, N), row i is k = i.

    Over the N tokens given (one batch), the mean of this over tokens is the mean pairwise cosine
    Σ_{i≠j} cos(x_i, x_j) / (N(N−1)) = (‖Σ_i x̂_i‖² − N) / (N(N−1)). A zero state has no direction: NaN for
    that token, and it is left out of the others' means. NaN for all with fewer than two nonzero states."""
    size = _norm(x)
    valid = size > 0
    unit = torch.where(valid[..., None], x / torch.where(valid, size, 1.0)[..., None], 0.0)
    others = valid.sum(-1, keepdim=True) - 1
    total = (unit * unit.sum(-2, keepdim=True)).sum(-1) - 1.0
    return torch.where(valid & (others > 0), total / others.clamp_min(1), math.nan)


# --- first order: k = 1..K, shape (K, N) -------------------------------------------------------------------


def steps(x: Tensor) -> Tensor:
    """Δ^(k) = x^(k) − x^(k−1); (K, N, C), row i is k = i+1."""
    return x[1:] - x[:-1]


def step_size(x: Tensor) -> Tensor:
    """‖Δ^(k)‖₂; (K, N), row i is k = i+1."""
    return _norm(steps(x))


def relative_step_size(x: Tensor) -> Tensor:
    """‖Δ^(k)‖ / ‖x^(k−1)‖; (K, N), row i is k = i+1. NaN where x^(k−1) = 0."""
    return _ratio(step_size(x), _norm(x[:-1]))


def radial_step(x: Tensor) -> Tensor:
    """The step's signed component along the previous state, Δ^(k) · x^(k−1) / ‖x^(k−1)‖ (> 0: the state grows
    along itself); (K, N), row i is k = i+1. NaN where x^(k−1) = 0."""
    previous = x[:-1]
    return _ratio((steps(x) * previous).sum(-1), _norm(previous))


def tangential_step(x: Tensor) -> Tensor:
    """The size of the step's part orthogonal to the previous state, ‖Δ^(k) − (Δ^(k)·x̂^(k−1)) x̂^(k−1)‖;
    (K, N), row i is k = i+1. NaN where x^(k−1) = 0."""
    previous = x[:-1]
    size = _norm(previous)[..., None]
    unit = torch.where(size > 0, previous / torch.where(size > 0, size, 1.0), math.nan)
    d = steps(x)
    return _norm(d - (d * unit).sum(-1, keepdim=True) * unit)


def radial_fraction(x: Tensor) -> Tensor:
    """cos(Δ^(k), x^(k−1)) = radial_step / ‖Δ^(k)‖: +1 a pure outward walk, 0 a pure turn, −1 a pull back toward
    the origin; (K, N), row i is k = i+1. NaN where either is zero."""
    return _ratio(radial_step(x), step_size(x)).clamp(-1.0, 1.0)


def at_floor(x: Tensor, floor: float) -> Tensor:
    """1 where the step is at most `floor` times the state it starts from, ‖Δ^(k)‖ <= floor · ‖x^(k−1)‖ (exact
    fixed points included), else 0; (K, N), row i is k = i+1."""
    return (step_size(x) <= floor * _norm(x[:-1])).to(x.dtype)


def precision_floor(dtype: torch.dtype) -> float:
    """The relative step size below which a step in `dtype` arithmetic is rounding: FLOOR_EPS epsilons."""
    return FLOOR_EPS * torch.finfo(dtype).eps


def at_fixed_point(x: Tensor) -> Tensor:
    """1 where the step is exactly zero in the state's precision (x^(k) = x^(k−1): a fixed point reached), else
    0; (K, N), row i is k = i+1. Its mean over tokens is the fraction of tokens at a fixed point."""
    return (steps(x) == 0).all(-1).to(x.dtype)


# --- second order: k = 2..K, shape (K-1, N) ----------------------------------------------------------------


def step_cosine(x: Tensor) -> Tensor:
    """cos(Δ^(k), Δ^(k−1)); (K−1, N), row i is k = i+2. NaN where either step is zero."""
    d = steps(x)
    dot = (d[1:] * d[:-1]).sum(-1)
    size = _norm(d)
    return _ratio(dot, size[1:] * size[:-1]).clamp(-1.0, 1.0)  # clamp keeps NaN


def turning_angle(x: Tensor) -> Tensor:
    """arccos(cos(Δ^(k), Δ^(k−1))) in degrees, 0 = straight on, 180 = reversal; (K−1, N), row i is k = i+2."""
    return torch.rad2deg(torch.arccos(step_cosine(x)))


def acceleration(x: Tensor) -> Tensor:
    """a^(k) = ‖Δ^(k) − Δ^(k−1)‖₂ = ‖x^(k) − 2x^(k−1) + x^(k−2)‖₂; (K−1, N), row i is k = i+2."""
    d = steps(x)
    return _norm(d[1:] - d[:-1])


def acceleration_by_step(x: Tensor) -> Tensor:
    """a^(k) / ‖Δ^(k−1)‖; (K−1, N), row i is k = i+2. NaN where Δ^(k−1) = 0."""
    return _ratio(acceleration(x), step_size(x)[:-1])


def acceleration_by_state(x: Tensor) -> Tensor:
    """a^(k) / ‖x^(k)‖; (K−1, N), row i is k = i+2. NaN where x^(k) = 0."""
    return _ratio(acceleration(x), _norm(x[2:]))


def step_size_difference(x: Tensor) -> Tensor:
    """The scalar reading of "second difference": |‖Δ^(k)‖ − ‖Δ^(k−1)‖|; (K−1, N), row i is k = i+2.

    Zero for any constant-length path (e.g. a rotation), where the vector `acceleration` is not."""
    s = step_size(x)
    return (s[1:] - s[:-1]).abs()


# --- between groups ----------------------------------------------------------------------------------------


def drift_to_loop_ratio(last_of_g: Tensor, first_of_h: Tensor, g_steps: Tensor) -> Tensor:
    """DLR_K = ‖x_h^(1) − x_g^(K_g)‖ / mean_{k<=K} ‖Δ_g^(k)‖ per token, for K = 1..K_g; (K_g, N), row i is
    K = i+1. The jump is the one made after all K_g loops; only the typical step it is compared with changes:
    the mean of g's first K steps. NaN where those steps are all zero.

    last_of_g: x_g^(K_g) (N, C); first_of_h: x_h^(1) (N, C), after the next group's first application, so the
    jump includes any single-pass layers in between; g_steps: `step_size` of g (K_g, N)."""
    counts = torch.arange(1, len(g_steps) + 1, dtype=g_steps.dtype, device=g_steps.device)[:, None]
    return _ratio(_norm(first_of_h - last_of_g)[None], g_steps.cumsum(0) / counts)


# --- per-token regimes: k = K, shape (N,) ---------------------------------------------------------------------
# Each token's trajectory in a group is read over its tail, the last half of its K loop steps (at least 2). Over
# the tail, the log step size is fitted by least squares against k, log ‖Δ^(k)‖ ≈ a + b·k, on the tail's steps
# above the precision floor (steps at the floor, exact zeros included, are left out of the fit); exp(b) is the
# tail's step ratio and se the fit's ordinary least-squares standard error of b. The token is *converging* when
# b + CONVERGING_SE·se < 0: its steps shrink, however slowly, by more than twice their own uncertainty, so a
# perfectly geometric ratio of 0.99 converges and noise around a constant step does not. A token with fewer than
# three tail steps above the floor has no standard error and is not called converging by the fit.
# Each token is then classified, in this order (docs/methods.md#per-token-regimes):
#   fixed_point    at or converging onto a fixed point: its last step is at most FIXED_POINT_STEP of the state it
#                  starts from (or at the precision floor), or it is converging and its fitted tail, extended,
#                  reaches that bound within as many further loops as were measured (K);
#   slowing_drift  its steps shrink (it is converging) but stay large against its state: a drift that slows down
#                  (a damped flip that stays large is one: hence this test comes before the orbit's);
#   orbit          it returns: for a period p in 2..ORBIT_MAX_PERIOD, ‖x^(K) − x^(K−p)‖ is at most ORBIT_RETURN of
#                  the tail's mean step (the smallest such p is its period);
#   slider         a steady drift: the tail's consecutive steps are aligned (mean cosine >= SLIDER_COSINE) and it is
#                  not converging;
#   other          anything else (a wandering or growing path, say).
# A group of fewer than MIN_REGIME_LOOPS loop steps has too short a tail to tell them apart: every token "other".
# Until 2026-11-29 a fixed point was any converging token, or one whose last step was at most 1% of the tail's
# largest, whatever its size against the state: `paper`'s tokens, whose steps of ~100 against states of ~6,000
# shrink by about 1% a loop, were 77-99% "fixed points". FIXED_POINT_STEP is the relative step at which the paper's
# first-order exit stops without cost (C6(c)'s 1e-3): a token below it has, for exiting, arrived.

FIXED_POINT_STEP = 1e-3
CONVERGING_SE = 2.0
ORBIT_RETURN = 0.1
ORBIT_MAX_PERIOD = 8
SLIDER_COSINE = 0.9
MIN_REGIME_LOOPS = 4
BY_REGIME = ("step_cosine", "turning_angle")  # metrics also kept per regime, as <metric>_<regime>


def tail_step_ratio_fit(sizes: Tensor, usable: Tensor) -> tuple[Tensor, Tensor]:
    """The least-squares slope b of log(step size) against k, and its ordinary standard error se, per token.

    sizes: step sizes (n_k, N) at consecutive k; usable: booleans (n_k, N), the steps to fit (each > 0). Both
    are (N,); NaN for a token with fewer than three usable steps (no residual degree of freedom)."""
    k = torch.arange(len(sizes), dtype=sizes.dtype, device=sizes.device)[:, None]
    w = usable.to(sizes.dtype)
    y = torch.where(usable, sizes, 1.0).log() * w  # log(1) = 0 where unused: never log(0)
    n = w.sum(0)
    fit = n >= 3
    n_ = torch.where(fit, n, 3.0)
    dk = (k - (w * k).sum(0) / n_) * w
    dy = (y - y.sum(0) / n_) * w
    sxx = (dk * dk).sum(0)
    b = (dk * dy).sum(0) / torch.where(sxx > 0, sxx, 1.0)
    residual = (dy - b * dk) * w
    se = ((residual * residual).sum(0) / (n_ - 2) / torch.where(sxx > 0, sxx, 1.0)).sqrt()
    return torch.where(fit, b, math.nan), torch.where(fit, se, math.nan)


def loops_to_fixed_point(relative_last: Tensor, b: Tensor) -> Tensor:
    """How many more loops a token whose relative step is `relative_last` and whose steps shrink by exp(b) a loop
    (b < 0) needs to come within FIXED_POINT_STEP of its state; 0 where it is already there, inf where its steps
    do not shrink (b >= 0 or NaN). The state's norm is taken as it is now: a converging state's norm settles."""
    needed = torch.log(FIXED_POINT_STEP / relative_last) / b
    there = relative_last <= FIXED_POINT_STEP
    return torch.where(there, 0.0, torch.where(b < 0, needed, math.inf))


def regimes(x: Tensor, floor: float) -> tuple[Tensor, Tensor]:
    """Each token's regime, an index into REGIMES, and its orbit's period (0 for the other regimes); both (N,)."""
    K, n = x.shape[0] - 1, x.shape[1]
    other = torch.full((n,), REGIMES.index("other"), dtype=torch.long, device=x.device)
    period = torch.zeros(n, dtype=torch.long, device=x.device)
    if K < MIN_REGIME_LOOPS:
        return other, period
    tail = max(2, K // 2)
    sizes = step_size(x)[-tail:]
    floored = at_floor(x, floor)[-tail:].bool()
    b, se = tail_step_ratio_fit(sizes, ~floored)
    converging = b + CONVERGING_SE * se < 0  # False where NaN: too few usable steps
    to_fixed_point = loops_to_fixed_point(relative_step_size(x)[-1], torch.where(converging, b, math.nan))
    fixed = (to_fixed_point <= K) | floored[-1]
    slowing = ~fixed & converging
    typical = sizes.mean(0)
    for p in range(min(ORBIT_MAX_PERIOD, K), 1, -1):  # the smallest period that returns is the one kept
        returns = _norm(x[-1] - x[-1 - p]) <= ORBIT_RETURN * typical
        period = torch.where(returns, p, period)
    orbit = ~fixed & ~slowing & (period > 0)
    aligned = torch.nanmean(step_cosine(x)[-(tail - 1):], 0) >= SLIDER_COSINE
    slider = ~fixed & ~slowing & ~orbit & aligned
    code = other
    for regime, members in (("slider", slider), ("orbit", orbit), ("slowing_drift", slowing), ("fixed_point", fixed)):
        code = torch.where(members, REGIMES.index(regime), code)
    return code, torch.where(orbit, period, 0)


def by_regime(values: Tensor, code: Tensor) -> dict[str, Tensor]:
    """A metric's values (n_k, N) split by the tokens' regimes: for each regime the values with NaN for the tokens
    in others."""
    return {regime: values.masked_fill((code != i)[None], math.nan) for i, regime in enumerate(REGIMES)}


# --- one batch, every metric -------------------------------------------------------------------------------

METRICS: dict[str, Callable[[Tensor], Tensor]] = {
    "state_norm": state_norm,
    "cross_token_cosine": cross_token_cosine,
    "step_size": step_size,
    "relative_step_size": relative_step_size,
    "step_cosine": step_cosine,
    "turning_angle": turning_angle,
    "acceleration": acceleration,
    "acceleration_by_step": acceleration_by_step,
    "acceleration_by_state": acceleration_by_state,
    "step_size_difference": step_size_difference,
    "radial_step": radial_step,
    "tangential_step": tangential_step,
    "radial_fraction": radial_fraction,
    "at_fixed_point": at_fixed_point,
}
LAST_STEP = -1  # in FIRST_K: one row, at the group's last loop step k = K (the per-token regimes)
FIRST_K: dict[str, int] = {
    "state_norm": 0, "cross_token_cosine": 0,
    "step_size": 1, "relative_step_size": 1, "radial_step": 1, "tangential_step": 1, "radial_fraction": 1,
    "at_fixed_point": 1, "at_floor": 1,
    "step_cosine": 2, "turning_angle": 2, "acceleration": 2, "acceleration_by_step": 2,
    "acceleration_by_state": 2, "step_size_difference": 2,
    "drift_to_loop_ratio": 1,  # k is K, the loop steps whose mean size the hand-off's jump is divided by
    **{f"regime_{regime}": LAST_STEP for regime in REGIMES}, "orbit_period": LAST_STEP,
    **{f"{metric}_{regime}": 2 for metric in BY_REGIME for regime in REGIMES},
}
# Metrics that read the direction of a step (of Δ^(k) for first order; of Δ^(k) or Δ^(k−1) for second order):
# NaN where a step they read is at the precision floor
DIRECTIONAL = ("radial_fraction", "step_cosine", "turning_angle", "acceleration_by_step")


def _upcast(x: Tensor) -> Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _off_the_floor(values: Tensor, floored: Tensor, first_k: int) -> Tensor:
    """values (rows k = first_k..K) with NaN where a step they read, Δ^(k) (and Δ^(k−1) for second order), is
    at the floor; floored: `at_floor` as booleans, (K, N), row i is k = i+1."""
    hidden = floored if first_k == 1 else floored[1:] | floored[:-1]
    return values.masked_fill(hidden, math.nan)


@torch.no_grad()
def measure_trajectories(trajectories: list[Tensor], floor: float | None = None) -> dict[str, list[Tensor]]:
    """Every metric for every group of one batch, with steps at the precision floor marked and left out of the
    `DIRECTIONAL` metrics.

    trajectories: one (K_g+1, B, T, C) tensor per group, as `LoopedGPT.forward(..., record_trajectories=True)`
    gives; floor: the relative step size of the floor, by default `precision_floor` of the states' dtype.
    Returns metric -> one tensor per group: (K_g, N) or (K_g−1, N) as in `FIRST_K`, N = B*T.
    "drift_to_loop_ratio" has one (K_g, N) tensor per hand-off: entry g is g -> g+1, so G−1 of them.
    The per-token regimes are (1, N) indicators "regime_<regime>" (their mean over tokens is the regime's share)
    and "orbit_period" (NaN off orbits); `BY_REGIME` metrics are also given per regime, NaN for other tokens.
    """
    xs = [_upcast(flatten_tokens(t)) for t in trajectories]
    floor = precision_floor(xs[0].dtype) if floor is None else floor
    out = {name: [fn(x) for x in xs] for name, fn in METRICS.items()}
    out["at_floor"] = [at_floor(x, floor) for x in xs]
    for name in DIRECTIONAL:
        out[name] = [_off_the_floor(v, f.bool(), FIRST_K[name]) for v, f in zip(out[name], out["at_floor"])]
    out["drift_to_loop_ratio"] = [
        drift_to_loop_ratio(xs[g][-1], xs[g + 1][1], out["step_size"][g]) for g in range(len(xs) - 1)
    ]
    codes, periods = zip(*(regimes(x, floor) for x in xs))
    for i, regime in enumerate(REGIMES):
        out[f"regime_{regime}"] = [(code == i).to(x.dtype)[None] for code, x in zip(codes, xs)]
    out["orbit_period"] = [torch.where(p > 0, p.to(x.dtype), math.nan)[None] for p, x in zip(periods, xs)]
    for metric in BY_REGIME:
        split = [by_regime(values, code) for values, code in zip(out[metric], codes)]
        out |= {f"{metric}_{regime}": [parts[regime] for parts in split] for regime in REGIMES}
    return out


# --- aggregation over batches ------------------------------------------------------------------------------


class MetricAccumulator:
    """Per-token scalars of named metrics by (group, loop step k), across batches; exact summaries at the end.

    Only the per-token scalars are kept, as float64 chunks on the CPU, never the (.., C) states: memory is
    8 bytes × #tokens × Σ_metrics #steps, i.e. O(#tokens × #metrics × K), independent of C. For example 4096
    tokens, 16 metrics, 3 groups of 30 steps: about 47 MB. Bound it by bounding the tokens measured.
    """

    def __init__(self) -> None:
        self._chunks: dict[tuple[str, int, int], list[Tensor]] = {}

    def add(self, metric: str, group: int, values: Tensor, first_k: int) -> None:
        """values (n_k, N): row i is loop step first_k + i."""
        values = values.detach().to("cpu", torch.float64)
        if values.dim() != 2:
            raise ValueError(f"{metric}: values must be (n_k, N), got {tuple(values.shape)}")
        for i, row in enumerate(values):
            self._chunks.setdefault((metric, group, first_k + i), []).append(row.clone())

    def add_measurements(self, measurements: dict[str, list[Tensor]]) -> None:
        """Add one batch of `measure_trajectories` output (list entry g is group g, or hand-off g -> g+1)."""
        for metric, per_group in measurements.items():
            for group, values in enumerate(per_group):
                first_k = FIRST_K[metric]
                if first_k == LAST_STEP:
                    first_k = len(measurements["step_size"][group])
                self.add(metric, group, values, first_k)

    def summary(self) -> list[dict]:
        """One row per (metric, group, k): {metric, group, k, n, mean, median, q10, q90}, NaNs dropped first.

        n counts the non-NaN values; with none left the statistics are NaN. Quantiles interpolate linearly
        (numpy's default). Rows are sorted by metric, group, k."""
        rows = []
        for (metric, group, k), chunks in sorted(self._chunks.items()):
            v = torch.cat(chunks).numpy()
            v = v[~np.isnan(v)]
            if v.size:
                mean = float(v.mean())
                q10, median, q90 = (float(q) for q in np.quantile(v, [0.1, 0.5, 0.9]))
            else:
                mean = q10 = median = q90 = math.nan
            rows.append(dict(metric=metric, group=group, k=k, n=int(v.size), mean=mean, median=median,
                             q10=q10, q90=q90))
        return rows


# --- Fig. 1 ------------------------------------------------------------------------------------------------


def token_path(trajectories: list[Tensor], token: int) -> tuple[Tensor, Tensor]:
    """One token's states over all groups, in depth order: points (M, C) and each point's group (M,).

    token indexes the flattened tokens (see `flatten_tokens`). Each group contributes x_g^(0..K_g)."""
    points = [flatten_tokens(t)[:, token] for t in trajectories]
    groups = [torch.full((len(p),), g, dtype=torch.long) for g, p in enumerate(points)]
    return torch.cat(points), torch.cat(groups)


@torch.no_grad()
def pca_2d(points: Tensor) -> tuple[Tensor, Tensor]:
    """Project points (M, C) on their first two principal components: coords (M, 2) and each component's share
    of the total variance (2,). Centered SVD; each component's sign is fixed so that its largest-magnitude
    loading is positive. NaN shares if all points coincide."""
    if points.dim() != 2 or points.shape[0] < 2 or points.shape[1] < 2:
        raise ValueError(f"pca_2d needs (M >= 2, C >= 2) points, got {tuple(points.shape)}")
    centered = _upcast(points) - _upcast(points).mean(0)
    _, s, vh = torch.linalg.svd(centered, full_matrices=False)
    components = vh[:2]
    pivot = components.abs().argmax(1)
    components = components * components.gather(1, pivot[:, None]).sign()
    var = s**2
    ratio = var[:2] / var.sum() if var.sum() > 0 else torch.full((2,), math.nan, dtype=var.dtype)
    return centered @ components.T, ratio
