"""The loop map's spectrum: linear maps whose spectra are known by construction, and a tiny model's Jacobian against
finite differences and against the whole sequence's Jacobian."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info
from torch.nn.attention import sdpa_kernel

from twoscale.geometry import spectrum as spectrum_module
from twoscale.geometry.spectrum import (
    COMPOSITE_ATTENTION,
    jacobian,
    late_dynamics,
    leading_eigenvalues,
    leading_eigenvalues_arnoldi,
    predicted_cosine,
    prefix_radii,
    ritz_values,
    token_spectra,
    token_step,
    window_spectra,
)
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig

WIDTH = 8


def orthogonal(width: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(width, width, generator=torch.Generator().manual_seed(seed),
                                       dtype=torch.float64))
    return q


def rotation_block(modulus: float, angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return modulus * torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


def linear(matrix: torch.Tensor):
    return lambda x: matrix @ x


def iterate(matrix: torch.Tensor, loops: int, start: torch.Tensor | None = None) -> torch.Tensor:
    """x^(0..loops) of x -> matrix x from `start` (a fixed random one by default), (loops + 1, width)."""
    x = torch.randn(matrix.shape[0], generator=torch.Generator().manual_seed(1), dtype=torch.float64) \
        if start is None else start
    states = [x]
    for _ in range(loops):
        states.append(matrix @ states[-1])
    return torch.stack(states)


def contraction() -> torch.Tensor:
    """Symmetric, eigenvalues 0.6, 0.3, 0.2, ..., in a random orthonormal basis."""
    q = orthogonal(WIDTH, 0)
    return q @ torch.diag(torch.tensor([0.6, 0.3, 0.2, 0.1, 0.05, 0.04, 0.02, 0.01], dtype=torch.float64)) @ q.T


def contraction_with_rotation(angle: float = math.pi / 4) -> torch.Tensor:
    """0.9 e^(±i angle) on one plane, 0.3 ... on the rest, in a random orthonormal basis (normal: the plane's
    rotation is exact)."""
    q = orthogonal(WIDTH, 1)
    block = torch.block_diag(rotation_block(0.9, angle), torch.diag(torch.linspace(0.3, 0.05, WIDTH - 2,
                                                                                  dtype=torch.float64)))
    return q @ block @ q.T


def test_a_symmetric_contraction_shrinks_by_its_largest_eigenvalue_along_one_direction():
    matrix = contraction()
    x = torch.zeros(WIDTH, dtype=torch.float64)
    exact = leading_eigenvalues(linear(matrix), x, 2)
    assert exact == pytest.approx([0.6, 0.3], abs=1e-12)
    assert leading_eigenvalues_arnoldi(linear(matrix), x, 2) == pytest.approx([0.6, 0.3], abs=1e-10)
    measured = late_dynamics(iterate(matrix, 60), first_late_k=31)
    # (0.3 / 0.6)^30 ~ 1e-9: the second direction is gone by the late half
    assert measured["step_ratio"] == pytest.approx(0.6, abs=1e-8)
    assert measured["step_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert predicted_cosine(exact[0]) == 1.0


def test_a_rotating_contraction_turns_each_step_by_its_eigenvalues_angle():
    matrix = contraction_with_rotation(math.pi / 4)
    x = torch.zeros(WIDTH, dtype=torch.float64)
    exact = leading_eigenvalues(linear(matrix), x, 3)
    assert exact[:2] == pytest.approx([0.9 * np.exp(1j * math.pi / 4), 0.9 * np.exp(-1j * math.pi / 4)], abs=1e-12)
    assert abs(exact[2]) == pytest.approx(0.3, abs=1e-12)
    assert leading_eigenvalues_arnoldi(linear(matrix), x, 3)[:2] == pytest.approx(exact[:2], abs=1e-10)
    measured = late_dynamics(iterate(matrix, 60), first_late_k=31)  # (0.3 / 0.9)^30 ~ 5e-15
    assert measured["step_ratio"] == pytest.approx(0.9, abs=1e-10)
    assert measured["step_cosine"] == pytest.approx(math.cos(math.pi / 4), abs=1e-10)
    assert predicted_cosine(exact[0]) == pytest.approx(math.cos(math.pi / 4), abs=1e-15)


def test_a_non_normal_map_grows_at_first_yet_its_late_steps_shrink_by_the_spectral_radius():
    """[[0.5, 10], [0, 0.4]]: norm above 10, spectral radius 0.5; the steps first grow, then shrink by 0.5."""
    matrix = torch.eye(WIDTH, dtype=torch.float64) * 0.1
    matrix[:2, :2] = torch.tensor([[0.5, 10.0], [0.0, 0.4]], dtype=torch.float64)
    x = torch.zeros(WIDTH, dtype=torch.float64)
    assert leading_eigenvalues(linear(matrix), x, 2) == pytest.approx([0.5, 0.4], abs=1e-12)
    assert torch.linalg.matrix_norm(matrix, ord=2) > 10
    first_step = torch.zeros(WIDTH, dtype=torch.float64)
    first_step[1] = 1.0  # along e2, which the map sends to (10, 0.4)
    states = iterate(matrix, 80, start=torch.linalg.solve(matrix - torch.eye(WIDTH, dtype=torch.float64), first_step))
    sizes = (states[1:] - states[:-1]).norm(dim=-1)
    # transient growth, which the spectrum does not show
    assert float(sizes[1]) == pytest.approx(10 * float(sizes[0]), rel=1e-3)
    assert late_dynamics(states, first_late_k=41)["step_ratio"] == pytest.approx(0.5, abs=1e-3)


def test_the_ritz_values_of_the_recorded_steps_recover_the_leading_eigenvalues():
    matrix = contraction_with_rotation(math.pi / 3)
    states = iterate(matrix, 12)
    steps = (states[1:] - states[:-1]).numpy()
    # 12 steps of an 8-dimensional linear map: the 11 step pairs span it, so the fit is the map itself
    ritz = ritz_values(steps)
    assert ritz[:2] == pytest.approx([0.9 * np.exp(1j * math.pi / 3), 0.9 * np.exp(-1j * math.pi / 3)], abs=1e-8)
    # three steps span a plane: rank 2 is the rotation plane once the rest has decayed (late steps)
    late = (iterate(matrix, 60)[1:] - iterate(matrix, 60)[:-1]).numpy()[-4:]
    assert ritz_values(late, rank=2) == pytest.approx([0.9 * np.exp(1j * math.pi / 3),
                                                       0.9 * np.exp(-1j * math.pi / 3)], abs=1e-6)
    assert ritz_values(np.zeros((4, WIDTH))).size == 0


def test_a_late_half_of_one_step_has_neither_ratio_nor_cosine():
    """Two loops: the late half (k > 1) is the second step alone; a ratio needs two steps, a cosine two too."""
    measured = late_dynamics(iterate(torch.eye(WIDTH, dtype=torch.float64) * 0.5, 2), first_late_k=2)
    assert math.isnan(measured["step_ratio"]) and math.isnan(measured["step_cosine"])
    three = late_dynamics(iterate(torch.eye(WIDTH, dtype=torch.float64) * 0.5, 3), first_late_k=2)
    assert three["step_ratio"] == pytest.approx(0.5, abs=1e-12)  # s(3) / s(2), one step ratio
    assert three["step_cosine"] == pytest.approx(1.0, abs=1e-12)


# --- a tiny looped model --------------------------------------------------------------------------------------

def tiny_model(**changes) -> LoopedGPT:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=50, n_layer=4, n_head=2, n_embd=16, block_size=8, dropout=0.0, bias=False,
                         groups=((1, 2),), **changes)
    return LoopedGPT(config).double().eval()


def group_states(model: LoopedGPT, loops: int, tokens: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's group input and its state after `loops` loop steps, each (tokens, C)."""
    idx = torch.arange(tokens)[None] % 50
    out = model(idx, [loops], record_trajectories=True)
    trajectory = out.trajectories[0][:, 0]
    return trajectory[0], trajectory[-1]


@pytest.mark.parametrize("changes", [{}, {"norm": "sandwich", "injection": "adapter", "scale_embedding": True}])
def test_the_token_jacobian_matches_finite_differences(changes):
    model = tiny_model(**changes)
    with torch.no_grad():
        group_input, states = group_states(model, 6)
    step = token_step(model, 0, states, group_input)
    x = states[-1].clone()
    exact = jacobian(step, x)
    h = 1e-6
    columns = [(step(x + h * e) - step(x - h * e)) / (2 * h) for e in torch.eye(x.numel(), dtype=torch.float64)]
    with torch.no_grad():
        assert torch.allclose(exact, torch.stack(columns, dim=1), rtol=1e-6, atol=1e-8)
    exact_leading, arnoldi = leading_eigenvalues(step, x, 3), leading_eigenvalues_arnoldi(step, x, 3)
    # equal up to which member of a conjugate pair the cut at n = 3 keeps
    assert arnoldi.real == pytest.approx(exact_leading.real, abs=1e-8)
    assert np.abs(arnoldi.imag) == pytest.approx(np.abs(exact_leading.imag), abs=1e-8)


def test_under_causal_attention_the_sequence_jacobian_is_block_triangular_with_the_tokens_blocks_on_its_diagonal():
    """The whole sequence's one-step Jacobian (T C x T C): no block above the diagonal, and its eigenvalues are the
    union of the per-token blocks' (`token_step` on each token's prefix)."""
    model = tiny_model(norm="sandwich", injection="adapter")
    with torch.no_grad():
        group_input, states = group_states(model, 4, tokens=4)
    segment = model.segments[1]
    T, C = states.shape

    def whole(flat: torch.Tensor) -> torch.Tensor:
        return model.apply_group(segment, flat.view(1, T, C), group_input[None]).reshape(-1)

    with sdpa_kernel(COMPOSITE_ATTENTION):
        full = torch.func.jacrev(whole)(states.reshape(-1)).detach()
    blocks = full.view(T, C, T, C)
    for t in range(T):
        assert torch.count_nonzero(blocks[t, :, t + 1:]) == 0
        own = jacobian(token_step(model, 0, states[: t + 1], group_input[: t + 1]), states[t].clone()).detach()
        assert torch.allclose(blocks[t, :, t], own, rtol=1e-10, atol=1e-12)
    union = np.sort_complex(np.concatenate([
        np.linalg.eigvals(blocks[t, :, t].numpy()) for t in range(T)]))
    assert np.sort_complex(np.linalg.eigvals(full.numpy())) == pytest.approx(union, abs=1e-8)


def test_three_routes_agree_on_a_contracting_loop():
    """A looped group that contracts: the adapter reads half state, half group input, so one step's Jacobian has
    spectral radius about 0.5 (0.8 for 0.8 / 0.2). Per token, the Jacobian's spectral radius, the measured late
    step ratio and the late steps' dominant Ritz value agree, and a real dominant eigenvalue predicts cosine 1."""
    for alpha in (0.5, 0.8):
        model = tiny_model(norm="sandwich", injection="adapter")
        with torch.no_grad():
            model.group_steps[0].inject.weight.copy_(torch.cat([alpha * torch.eye(16), (1 - alpha) * torch.eye(16)],
                                                               dim=1))
        idx = (torch.arange(16).view(2, 8) * 7) % 50
        rows = token_spectra(model, idx, loops=40, positions=[0, 3, 7], n_eigenvalues=3)
        assert [(r["group"], r["window"], r["position"]) for r in rows] == [
            (0, w, t) for w in range(2) for t in (0, 3, 7)]
        for row in rows:
            assert row["spectral_radius"] == pytest.approx(alpha, abs=0.01)
            assert row["measured_step_ratio"] == pytest.approx(row["spectral_radius"], abs=0.005)
            assert row["ritz_radius"] == pytest.approx(row["spectral_radius"], abs=0.005)
            assert row["predicted_cosine"] == pytest.approx(1.0, abs=1e-3)
            assert row["measured_step_cosine"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("workers", [1, 3])
def test_the_prefix_radius_is_the_spectral_radius_of_the_prefix_s_whole_jacobian(workers):
    """Also with the eigenvalues taken by several threads: each position's radius lands at its own position."""
    model = tiny_model(norm="sandwich", injection="adapter")
    with torch.no_grad():
        group_input, states = group_states(model, 4, tokens=5)
    segment = model.segments[1]
    radii = prefix_radii(window_spectra(model, 0, states, group_input, n=1, workers=workers))
    for t in range(states.shape[0]):
        T, C = t + 1, states.shape[1]

        def prefix(flat: torch.Tensor, T: int = T, C: int = C) -> torch.Tensor:
            return model.apply_group(segment, flat.view(1, T, C), group_input[None, :T]).reshape(-1)

        with sdpa_kernel(COMPOSITE_ATTENTION):
            whole = torch.func.jacrev(prefix)(states[:T].reshape(-1)).detach().numpy()
        assert radii[t] == pytest.approx(np.abs(np.linalg.eigvals(whole)).max(), rel=1e-9)
    assert np.all(np.diff(radii) >= 0)


def test_the_worker_threads_take_their_eigenvalues_with_one_blas_thread_each(monkeypatch):
    """Several workers each running a BLAS that starts a thread per core is several times slower than one worker: the
    eigendecompositions of a window run while every BLAS library is limited to one thread, and the limit is lifted
    afterwards."""
    before = [library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas"]
    seen = []

    def recording(matrix, n):
        seen.append([library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas"])
        return spectrum_module.by_modulus(np.linalg.eigvals(matrix))[:n]

    monkeypatch.setattr(spectrum_module, "leading_of", recording)
    model = tiny_model()
    with torch.no_grad():
        group_input, states = group_states(model, 3, tokens=4)
    assert len(window_spectra(model, 0, states, group_input, n=2, workers=2)) == 4
    assert len(seen) == 4 and all(threads and set(threads) == {1} for threads in seen)
    assert [library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas"] == before
