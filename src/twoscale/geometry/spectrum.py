"""The loop map's spectrum: why a group's late steps shrink and turn as they do.

Near a fixed point x* of a group's loop map f (one loop step, the group input held), the steps obey
Δ^(k+1) ≈ J Δ^(k) with J = ∂f/∂x at x*. The late step ratio ‖Δ^(k+1)‖ / ‖Δ^(k)‖ then tends to J's spectral radius,
and the late consecutive-step cosine to cos(arg λ) of its dominant eigenvalue λ: 1 for a real positive one, −1 for
a real negative one, cos θ for a complex pair ρe^{±iθ} (the steps turn by θ each loop; exactly so where J acts on
that plane as a scaled rotation, approximately where it is close to one).

Under causal attention one loop step over a sequence has a block lower-triangular Jacobian in the positions (token
t's new state reads the states of tokens s <= t only), so its eigenvalues are those of the diagonal blocks
J_tt = ∂f_t/∂x_t: each token's own block, the earlier positions' states and the group input held, carries the
whole spectrum. It is computed exactly (`jacobian`, C backward passes) where the width allows, or its leading
eigenvalues by Arnoldi iteration on Jacobian-vector products (`leading_eigenvalues_arnoldi`, no C x C matrix),
and, as a second route needing no model call, from the recorded late steps themselves (`ritz_values`, a dynamic
mode decomposition).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, eigs
from threadpoolctl import threadpool_limits
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from twoscale.config.progress import progress_bar
from twoscale.geometry.metrics import step_cosine, step_size, steps
from twoscale.models.looped_gpt import LoopedGPT, SharedKeys

StepMap = Callable[[Tensor], Tensor]


def group_keys_values(model: LoopedGPT, group: int, states: Tensor, group_input: Tensor
                      ) -> list[tuple[Tensor, Tensor]]:
    """Per layer of looped group `group`, the keys and values (T, H, D) of one application to one sequence's states
    (T, C) with its group input (T, C). Causal: position t's entries depend on positions <= t only, so a prefix's
    are the first rows of the whole sequence's."""
    segment = model.segments[model.segment_index(group)]
    cache = []

    def keep(layer: int, h: Tensor) -> Tensor:
        block = model.blocks[layer]
        cache.append(block.attn.heads(block.ln_1(h))[1:])
        return block(h[None])[0] if len(h) else h  # a first token holds no earlier position

    with torch.no_grad():
        model.apply_group(segment, states, group_input, keep)
    return cache


def token_step(model: LoopedGPT, group: int, states: Tensor, group_input: Tensor,
               held: list[tuple[Tensor, Tensor]] | None = None) -> StepMap:
    """One loop step of looped group `group` as a map of the last token's state alone, (C,) -> (C,): `states`
    (T, C) are one sequence's states up to and including that token, `group_input` (T, C) the group's input for
    the same positions; the earlier tokens' states and the group input are held. Later positions are left out:
    under causal attention they do not reach this token. The earlier tokens' keys and values at every layer of
    the group do not depend on the token's state either: `held` gives them (at least T − 1 rows per layer, from
    `group_keys_values`; computed here if None), and the map runs the layers on the one token against them (a KV
    cache), so a Jacobian's backward passes cost one position each, not T."""
    segment = model.segments[model.segment_index(group)]
    if held is None:
        held = group_keys_values(model, group, states[:-1], group_input[:-1])
    earlier = states.shape[0] - 1
    cache = {layer: (keys[:earlier], values[:earlier])
             for layer, (keys, values) in zip(segment.layers, held, strict=True)}
    token_input = group_input[-1:]

    def cached(layer: int, h: Tensor) -> Tensor:
        keys, values = cache[layer]
        return model.blocks[layer].cached(h, lambda k, v: SharedKeys(torch.cat([keys, k]), torch.cat([values, v])))

    def step(x: Tensor) -> Tensor:
        return model.apply_group(segment, x[None], token_input, cached)[0]

    return step


# the fused attention kernels have no forward-mode derivative and no batching rule for their backward: the
# Jacobians go through attention's plain composite form, the same arithmetic op for op
COMPOSITE_ATTENTION = SDPBackend.MATH


def jacobian(step: StepMap, x: Tensor) -> Tensor:
    """∂step/∂x at x, (C, C), by reverse mode."""
    with sdpa_kernel(COMPOSITE_ATTENTION):
        return torch.func.jacrev(step)(x)


def by_modulus(values: np.ndarray) -> np.ndarray:
    """Eigenvalues sorted by modulus, largest first (a conjugate pair: the one with positive imaginary part first)."""
    values = np.asarray(values, dtype=complex)
    return values[np.lexsort((-values.imag, -np.abs(values)))]


def leading_of(matrix: np.ndarray, n: int) -> np.ndarray:
    """The n eigenvalues of a square matrix of largest modulus."""
    return by_modulus(np.linalg.eigvals(matrix))[:n]


def leading_eigenvalues(step: StepMap, x: Tensor, n: int) -> np.ndarray:
    """The n eigenvalues of the Jacobian at x of largest modulus, from the exact matrix."""
    return leading_of(jacobian(step, x).detach().cpu().numpy(), n)


def leading_eigenvalues_arnoldi(step: StepMap, x: Tensor, n: int, tol: float = 1e-10) -> np.ndarray:
    """The n eigenvalues of the Jacobian at x of largest modulus by implicitly restarted Arnoldi (ARPACK) on
    Jacobian-vector products: memory and work grow with n, not with the width squared (n < width − 1)."""
    width = x.numel()

    def product(v: np.ndarray) -> np.ndarray:
        tangent = torch.as_tensor(np.real_if_close(v).reshape(-1), dtype=x.dtype, device=x.device)
        with sdpa_kernel(COMPOSITE_ATTENTION):
            return torch.func.jvp(step, (x,), (tangent,))[1].detach().cpu().numpy()

    operator = LinearOperator((width, width), matvec=product, dtype=np.float64)
    # a fixed random start (the same eigenvalues on every run); not the all-ones vector, which a normalised state's
    # Jacobian sends to zero (LayerNorm removes the mean)
    start = np.random.default_rng(0).standard_normal(width)
    return by_modulus(eigs(operator, k=n, which="LM", tol=tol, v0=start, return_eigenvectors=False))


def ritz_values(steps: np.ndarray, rank: int | None = None, rcond: float = 1e-6) -> np.ndarray:
    """The eigenvalues of the linear map that best carries each recorded step to the next (exact DMD): `steps` is
    (m, C), rows Δ^(k0), ..., Δ^(k0+m−1). With X the first m−1 rows and Y the last m−1 (as columns), the map
    Y X⁺ restricted to the span of X's leading `rank` singular vectors (those above rcond × the largest: a
    converging token's late steps are nearly one direction, and the directions below that are rounding, whose
    eigenvalues would be noise)."""
    X, Y = steps[:-1].T, steps[1:].T
    U, s, Vh = np.linalg.svd(X, full_matrices=False)
    keep = int((s > rcond * s[0]).sum()) if s.size and s[0] > 0 else 0
    keep = keep if rank is None else min(keep, rank)
    if keep == 0:
        return np.array([], dtype=complex)
    reduced = U[:, :keep].conj().T @ Y @ Vh[:keep].conj().T / s[:keep]
    return by_modulus(np.linalg.eigvals(reduced))


def predicted_cosine(eigenvalue: complex) -> float:
    """The late consecutive-step cosine that a dominant eigenvalue predicts: cos(arg λ)."""
    return float(np.cos(np.angle(eigenvalue)))


def late_dynamics(trajectory: Tensor, first_late_k: int) -> dict[str, float]:
    """A token's measured late dynamics from its iterates x^(0..K) (K+1, C): the mean ratio of consecutive step
    sizes over k >= first_late_k, (s(K) / s(first_late_k))^(1 / (K − first_late_k)) (a geometric mean), and the
    mean cosine between consecutive steps over the same k (the geometry's own `step_size` and `step_cosine`). NaN
    where the late half has too few steps for either (one step: no ratio, no cosine)."""
    sizes = step_size(trajectory)[first_late_k - 1:]  # k = first_late_k..K
    cosines = step_cosine(trajectory)[first_late_k - 1:]  # cos(Δ^(k), Δ^(k−1)) for k = first_late_k + 1..K
    ratio = float((sizes[-1] / sizes[0]) ** (1.0 / (len(sizes) - 1))) if len(sizes) > 1 else math.nan
    return {"step_ratio": ratio, "step_cosine": float(cosines.mean()) if len(cosines) else math.nan}


def window_spectra(model: LoopedGPT, group: int, states: Tensor, group_input: Tensor, n: int,
                   arnoldi: bool = False, workers: int = 1) -> list[np.ndarray]:
    """The n leading eigenvalues of every position's token block J_tt of one window (states and group input
    (T, C) each; `leading_eigenvalues`, or `leading_eigenvalues_arnoldi`). The exact route hands each Jacobian
    to one of `workers` threads for its eigenvalues as soon as it is computed: at width 768 a Jacobian takes
    milliseconds on a GPU and its eigendecomposition half a second on one CPU core (LAPACK's is serial)."""
    held = group_keys_values(model, group, states, group_input)  # once per window: every position's prefix
    token_maps = ((token_step(model, group, states[: t + 1], group_input[: t + 1], held), states[t].clone())
                  for t in range(states.shape[0]))
    if arnoldi:
        return [leading_eigenvalues_arnoldi(step, x, n) for step, x in token_maps]
    pool = ThreadPoolExecutor(workers)
    try:
        # the threads are the parallelism: a BLAS that also starts a thread per core inside each of them is several
        # times slower than one thread alone (8 threads on 2 cores: 45 s against 8 s for 16 eigendecompositions)
        with threadpool_limits(1, user_api="blas"):
            pending = [pool.submit(leading_of, jacobian(step, x).detach().cpu().numpy(), n) for step, x in token_maps]
            return [eigenvalues.result() for eigenvalues in pending]
    finally:
        pool.shutdown(cancel_futures=True)  # a stopped job does not wait for the queued eigendecompositions


def prefix_radii(spectra: list[np.ndarray]) -> np.ndarray:
    """From a window's `window_spectra`, for every position t: the spectral radius of the one-step Jacobian of
    positions 0..t together. It is block lower-triangular, so this is the largest radius of the token blocks J_ss,
    s <= t (a running maximum). Asymptotically a token's steps decay no faster than that: a slower transient of
    an earlier token reaches it through attention. Over a few dozen loops a weak coupling may leave the token's
    own block in charge, so both are reported."""
    return np.maximum.accumulate(np.array([float(np.abs(values[0])) for values in spectra]))


def token_spectra(model: LoopedGPT, idx: Tensor, loops: int, positions: list[int], n_eigenvalues: int,
                  arnoldi: bool = False, progress: str | None = None, workers: int = 1) -> list[dict]:
    """Per looped group, window of `idx` (B, T) and token position of `positions`: the leading eigenvalues of the
    token's one-step Jacobian at its last iterate (every group looped `loops` times, the earlier positions at their
    last iterates and the group input held), beside what the token's own trajectory measured over the late half
    (k > loops / 2, as C3 reads it), the dominant Ritz value of its late steps, and the largest radius over the
    token's prefix (`prefix_radii`). The model runs as given: pass a float64 copy for
    the arithmetic the geometry is measured in. `progress` names a bar over the groups and windows; `workers`
    threads take the exact Jacobians' eigenvalues (`window_spectra`)."""
    with torch.no_grad():
        trajectories = model(idx, [loops] * model.n_groups, record_trajectories=True).trajectories
    first_late_k = loops // 2 + 1
    rows = []
    pairs = [(group, window) for group in range(len(trajectories)) for window in range(idx.shape[0])]
    for group, window in progress_bar(pairs, desc=progress, unit="window", disable=progress is None):
        trajectory = trajectories[group]  # (loops + 1, B, T, C)
        group_input, last = trajectory[0], trajectory[-1]
        prefix = slice(0, max(positions) + 1)  # every position a sampled one attends to
        spectra = window_spectra(model, group, last[window, prefix], group_input[window, prefix],
                                 n_eigenvalues, arnoldi, workers)
        radii = prefix_radii(spectra)
        for position in positions:
            values = spectra[position]
            path = trajectory[:, window, position]
            ritz = ritz_values(steps(path)[first_late_k - 1:].cpu().numpy())  # Δ^(k), k >= first_late_k
            rows.append({
                "group": group, "window": window, "position": position, "token": int(idx[window, position]),
                "eigenvalues": values, "spectral_radius": float(np.abs(values[0])),
                "prefix_radius": float(radii[position]),
                "dominant_angle_deg": float(np.degrees(np.abs(np.angle(values[0])))),
                "predicted_cosine": predicted_cosine(values[0]),
                "ritz_radius": float(np.abs(ritz[0])) if ritz.size else float("nan"),
                "ritz_cosine": predicted_cosine(ritz[0]) if ritz.size else float("nan"),
                **{f"measured_{key}": value for key, value in late_dynamics(path, first_late_k).items()},
            })
    return rows
