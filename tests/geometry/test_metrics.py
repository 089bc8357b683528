"""Trajectory geometry (docs/methods.md#loop-geometry) on hand-built paths with known answers, the accumulator
against numpy, PCA against numpy's SVD, and the whole measurement on a real tiny looped model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from twoscale.geometry.metrics import (
    FIRST_K,
    LAST_STEP,
    MetricAccumulator,
    acceleration,
    acceleration_by_state,
    acceleration_by_step,
    at_fixed_point,
    at_floor,
    cross_token_cosine,
    drift_to_loop_ratio,
    flatten_tokens,
    loops_to_fixed_point,
    measure_trajectories,
    pca_2d,
    precision_floor,
    radial_fraction,
    radial_step,
    regimes,
    relative_step_size,
    state_norm,
    step_cosine,
    step_size,
    step_size_difference,
    steps,
    tail_step_ratio_fit,
    tangential_step,
    token_path,
    turning_angle,
)
from twoscale.geometry.tables import FLOOR_EPS, REGIMES
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig

torch.set_num_threads(1)

SQRT2 = math.sqrt(2.0)


def path(*points) -> torch.Tensor:
    """One token's 2-D path -> states (K+1, 1, 2)."""
    return torch.tensor(points, dtype=torch.float64)[:, None, :]


def tokens(*paths: torch.Tensor) -> torch.Tensor:
    return torch.cat(paths, dim=1)


def close(actual: torch.Tensor, expected) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected.reshape(actual.shape), equal_nan=True)


# --- hand-built paths ---------------------------------------------------------------------------------------

# x^(k) = (k+1) (3, 4): constant steps of length 5 along one line
LINE = path(*[((k + 1) * 3.0, (k + 1) * 4.0) for k in range(5)])
# the unit square, back to the start: four right-angle turns
SQUARE = path((0, 0), (1, 0), (1, 1), (0, 1), (0, 0))
# out and straight back
REVERSAL = path((0, 0), (2, 0), (0, 0))


def test_flatten_tokens_puts_batch_major():
    traj = torch.arange(3 * 2 * 4 * 5).reshape(3, 2, 4, 5)
    flat = flatten_tokens(traj)
    assert flat.shape == (3, 8, 5)
    assert torch.equal(flat[:, 1 * 4 + 2], traj[:, 1, 2])


def test_straight_line_constant_steps():
    assert steps(LINE).shape == (4, 1, 2)
    close(step_size(LINE), [5.0] * 4)
    close(relative_step_size(LINE), [1.0, 1 / 2, 1 / 3, 1 / 4])  # 5 / ‖x^(k-1)‖ = 5 / (5k)
    close(step_cosine(LINE), [1.0] * 3)
    close(turning_angle(LINE), [0.0] * 3)
    close(acceleration(LINE), [0.0] * 3)
    close(acceleration_by_step(LINE), [0.0] * 3)
    close(acceleration_by_state(LINE), [0.0] * 3)
    close(step_size_difference(LINE), [0.0] * 3)


def test_square_right_angle_turns():
    close(step_size(SQUARE), [1.0] * 4)
    close(relative_step_size(SQUARE), [math.nan, 1.0, 1 / SQRT2, 1.0])  # x^(0) = 0: undefined
    close(step_cosine(SQUARE), [0.0] * 3)
    close(turning_angle(SQUARE), [90.0] * 3)
    close(acceleration(SQUARE), [SQRT2] * 3)  # ‖(0,1) − (1,0)‖ etc.
    close(acceleration_by_step(SQUARE), [SQRT2] * 3)
    close(acceleration_by_state(SQUARE), [SQRT2 / SQRT2, SQRT2 / 1.0, math.nan])  # ‖x^(k)‖ = √2, 1, 0
    close(step_size_difference(SQUARE), [0.0] * 3)


def test_reversal():
    close(step_cosine(REVERSAL), [-1.0])
    close(turning_angle(REVERSAL), [180.0])
    close(acceleration(REVERSAL), [4.0])
    close(acceleration_by_step(REVERSAL), [2.0])
    close(acceleration_by_state(REVERSAL), [math.nan])


def test_zero_step_gives_nan_cosine_and_nan_step_normalised_acceleration():
    x = path((1, 0), (1, 0), (2, 0))  # Δ1 = 0, Δ2 = (1, 0)
    close(step_size(x), [0.0, 1.0])
    close(step_cosine(x), [math.nan])
    close(turning_angle(x), [math.nan])
    close(acceleration(x), [1.0])
    close(acceleration_by_step(x), [math.nan])
    close(step_size_difference(x), [1.0])


def spiral(r: float, theta: float, K: int, start: tuple[float, float]) -> torch.Tensor:
    """x^(k) = r^k R(kθ) x^(0): each step is the previous one scaled by r and turned by θ."""
    z = complex(*start) * (r * complex(math.cos(theta), math.sin(theta))) ** torch.arange(K + 1).numpy()
    return path(*[(p.real, p.imag) for p in z])


def test_spiral_closed_forms_for_several_tokens():
    r, theta, K = 0.8, math.pi / 3, 6
    starts = [(1.0, 0.0), (0.0, -2.5), (3.0, 4.0)]
    x = tokens(*(spiral(r, theta, K, s) for s in starts))
    w = abs(r * complex(math.cos(theta), math.sin(theta)) - 1)  # |r e^{iθ} − 1|
    rho = torch.tensor([math.hypot(*s) for s in starts], dtype=torch.float64)
    k1 = torch.arange(1, K + 1, dtype=torch.float64)[:, None]  # k = 1..K
    k2 = k1[1:]  # k = 2..K
    close(step_size(x), r ** (k1 - 1) * w * rho)
    close(relative_step_size(x), torch.full((K, 3), w, dtype=torch.float64))
    close(step_cosine(x), torch.full((K - 1, 3), math.cos(theta), dtype=torch.float64))
    close(turning_angle(x), torch.full((K - 1, 3), 60.0, dtype=torch.float64))
    close(acceleration(x), r ** (k2 - 2) * w**2 * rho)
    close(acceleration_by_step(x), torch.full((K - 1, 3), w, dtype=torch.float64))
    close(acceleration_by_state(x), (r ** (k2 - 2) * w**2 / r**k2).expand(K - 1, 3))
    close(step_size_difference(x), r ** (k2 - 2) * (1 - r) * w * rho)


def test_rotation_with_constant_step_length_separates_scalar_and_vector_readings():
    theta = 0.3
    x = spiral(1.0, theta, 8, (1.0, 0.0))  # the unit circle
    close(step_size(x), [2 * math.sin(theta / 2)] * 8)
    close(step_size_difference(x), [0.0] * 7)
    close(acceleration(x), [4 * math.sin(theta / 2) ** 2] * 7)
    assert (acceleration(x) > 0.05).all()


def test_drift_to_loop_ratio_two_groups_for_every_k():
    # token 0: steps 1, 1, jump (1,1) -> (4,5) of length 5: DLR_1 = 5/1, DLR_2 = 5/1
    # token 1: steps 2, 4, jump (2,4) -> (2,-2) of length 6: DLR_1 = 6/2, DLR_2 = 6/((2+4)/2)
    g = tokens(path((0, 0), (1, 0), (1, 1)), path((0, 0), (2, 0), (2, 4)))
    h = tokens(path((9, 9), (4, 5)), path((0, 0), (2, -2)))
    close(drift_to_loop_ratio(g[-1], h[1], step_size(g)), [[5.0, 3.0], [5.0, 2.0]])
    still = path((1, 1), (1, 1))
    close(drift_to_loop_ratio(still[-1], h[1][:1], step_size(still)), [[math.nan]])


def test_a_converging_loop_has_a_dlr_growing_with_k():
    # steps halve: 1, 1/2, 1/4, ...: the mean of the first K steps is (2 - 2^(1-K))/K, so DLR_K = jump K/(2 - 2^(1-K))
    x = torch.tensor([[[2.0 - 2.0 ** (1 - k), 0.0]] for k in range(7)], dtype=torch.float64)
    jump_to = x[-1] + torch.tensor([[0.0, 3.0]], dtype=torch.float64)
    expected = [3.0 * K / (2 - 2.0 ** (1 - K)) for K in range(1, 7)]
    close(drift_to_loop_ratio(x[-1], jump_to, step_size(x)), [[e] for e in expected])


def test_at_floor_marks_steps_within_the_floor_of_their_state():
    # state (1e6, 0): steps of 1e-7 (relative 1e-13), 1e-5 (1e-11), 0 and 1: floor 1e-12 marks the first and third
    x = torch.tensor([[[1e6, 0.0]], [[1e6, 1e-7]], [[1e6, 1e-7 + 1e-5]], [[1e6, 1e-7 + 1e-5]], [[1e6 + 1, 0.0]]],
                     dtype=torch.float64)
    close(at_floor(x, 1e-12), [[1.0], [0.0], [1.0], [0.0]])
    assert precision_floor(torch.float64) == pytest.approx(FLOOR_EPS * 2.220446049250313e-16)
    assert precision_floor(torch.float32) == pytest.approx(FLOOR_EPS * 1.1920928955078125e-07)


def test_directional_metrics_leave_out_steps_at_the_floor_and_sizes_keep_them():
    # token 0 walks (1,0), (0,1), (1e-13,0) at norm ~1: its third step is at a floor of 1e-12, its others are not;
    # token 1 walks (1,0), (0,1), (-1,0): nothing at the floor, every turn 90 degrees
    a = path((0, 0), (1, 0), (1, 1), (1 + 1e-13, 1))
    b = path((0, 0), (1, 0), (1, 1), (0, 1))
    traj = tokens(a, b)[:, :, None, :]
    m = measure_trajectories([traj, traj], floor=1e-12)
    close(m["at_floor"][0], [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    close(m["step_size"][0], [[1.0, 1.0], [1.0, 1.0], [1e-13, 1.0]])  # sizes stay
    close(m["step_cosine"][0], [[0.0, 0.0], [math.nan, 0.0]])  # k = 3 reads the floored step
    close(m["turning_angle"][0], [[90.0, 90.0], [math.nan, 90.0]])
    close(m["acceleration_by_step"][0][1], [math.nan, math.sqrt(2)])
    assert math.isnan(m["radial_fraction"][0][2, 0]) and not math.isnan(m["radial_fraction"][0][2, 1])
    unmarked = measure_trajectories([traj, traj], floor=0.0)  # a floor of 0 marks exact fixed points only
    assert not unmarked["step_cosine"][0].isnan().any()


def test_measure_trajectories_on_hand_built_groups():
    # (K+1, B=2, T=1, C)
    g = tokens(path((0, 0), (1, 0), (1, 1)), path((0, 0), (2, 0), (2, 4)))[:, :, None, :]
    h = tokens(path((9, 9), (4, 5), (4, 6)), path((0, 0), (2, -2), (3, -2)))[:, :, None, :]
    m = measure_trajectories([g, h])
    assert set(m) == set(FIRST_K)
    close(m["step_size"][0], [[1.0, 2.0], [1.0, 4.0]])
    close(m["step_cosine"][1], [[-4 / math.sqrt(41), 1 / SQRT2]])  # (-5,-4) then (0,1); (2,-2) then (1,0)
    close(m["drift_to_loop_ratio"][0], [[5.0, 3.0], [5.0, 2.0]])
    assert len(m["drift_to_loop_ratio"]) == 1
    close(m["at_floor"][0], [[0.0, 0.0], [0.0, 0.0]])


# --- the diagnostics of docs/methods.md#the-looped-model-and-its-recipes ------------------------------------


def test_identical_token_states_have_cross_token_cosine_one():
    same = tokens(path((3, 4), (6, 8)), path((3, 4), (6, 8)), path((3, 4), (6, 8)))
    close(cross_token_cosine(same), [[1.0] * 3] * 2)


def test_cross_token_cosine_by_hand_and_against_every_pair():
    # (1,0), (0,1), (1,1): the cosines between them are 0, 1/√2, 1/√2
    x = tokens(path((1, 0)), path((0, 1)), path((1, 1)))
    close(cross_token_cosine(x), [[1 / (2 * SQRT2), 1 / (2 * SQRT2), 1 / SQRT2]])
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pairs = torch.nn.functional.cosine_similarity(x[:, :, None, :], x[:, None, :, :], dim=-1)  # (K+1, N, N)
    others = (pairs.sum(-1) - 1.0) / 6
    close(cross_token_cosine(x), others)
    assert cross_token_cosine(x).mean(1).tolist() == pytest.approx(
        [(pairs[k].sum() - 7).item() / (7 * 6) for k in range(3)])  # the mean over tokens: every pair once


def test_cross_token_cosine_leaves_out_zero_states():
    close(cross_token_cosine(tokens(path((0, 0)), path((1, 0)), path((2, 0)))), [[math.nan, 1.0, 1.0]])
    close(cross_token_cosine(tokens(path((0, 0)), path((1, 0)))), [[math.nan, math.nan]])


def test_radial_walk_has_no_tangential_part_and_a_turn_no_radial_part():
    close(state_norm(LINE), [5.0, 10.0, 15.0, 20.0, 25.0])
    close(radial_step(LINE), [5.0] * 4)
    close(tangential_step(LINE), [0.0] * 4)
    close(radial_fraction(LINE), [1.0] * 4)
    turn = path((1, 0), (1, 1), (0, 1))  # (0,1) across (1,0); then (-1,0) against (1,1): half back, half across
    close(radial_step(turn), [0.0, -1 / SQRT2])
    close(tangential_step(turn), [1.0, 1 / SQRT2])
    close(radial_fraction(turn), [0.0, -1 / SQRT2])
    close(radial_step(SQUARE)[:1], [math.nan])  # from the origin there is no radial direction
    close(tangential_step(SQUARE)[:1], [math.nan])


def test_fixed_points_are_exactly_zero_steps():
    close(at_fixed_point(path((1, 1), (2, 2), (2, 2), (2, 2 + 1e-12))), [0.0, 1.0, 0.0])


# --- accumulator --------------------------------------------------------------------------------------------


def numpy_row(values: np.ndarray) -> dict:
    v = values[~np.isnan(values)]
    return dict(n=v.size, mean=v.mean(), median=np.median(v),
                q10=np.quantile(v, 0.1), q90=np.quantile(v, 0.9))


def test_accumulator_matches_numpy_over_batches_with_nans():
    rng = np.random.default_rng(0)
    acc = MetricAccumulator()
    seen: dict[tuple, list[np.ndarray]] = {}
    for n_tokens in (7, 1, 13):
        for metric, group, first_k, n_k in (("a", 0, 1, 3), ("a", 1, 1, 2), ("b", 0, 2, 2)):
            values = rng.standard_normal((n_k, n_tokens)).astype(np.float32)
            values[rng.random(values.shape) < 0.2] = np.nan
            acc.add(metric, group, torch.from_numpy(values), first_k)
            for i in range(n_k):
                seen.setdefault((metric, group, first_k + i), []).append(values[i])
    rows = acc.summary()
    assert [(r["metric"], r["group"], r["k"]) for r in rows] == [
        ("a", 0, 1), ("a", 0, 2), ("a", 0, 3), ("a", 1, 1), ("a", 1, 2),
        ("b", 0, 2), ("b", 0, 3),
    ]
    for row in rows:
        expected = numpy_row(np.concatenate(seen[(row["metric"], row["group"], row["k"])]).astype(np.float64))
        assert row["n"] == expected.pop("n")
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_accumulator_keeps_float64_values_exactly():
    acc = MetricAccumulator()
    tiny = torch.tensor([[1e-300, 1.0 + 1e-15]], dtype=torch.float64)
    acc.add("a", 0, tiny, 1)
    (row,) = acc.summary()
    assert row["mean"] == (1e-300 + 1.0 + 1e-15) / 2  # float32 storage would give 0.5


def test_accumulator_all_nan_row_and_bad_shapes():
    acc = MetricAccumulator()
    acc.add("c", 0, torch.full((1, 4), math.nan), 2)
    (row,) = acc.summary()
    assert row["n"] == 0 and math.isnan(row["mean"]) and math.isnan(row["q90"])
    with pytest.raises(ValueError):
        acc.add("c", 0, torch.zeros(4), 1)


def test_accumulator_takes_measurements_and_keeps_no_states():
    traj = torch.randn(5, 2, 3, 64, generator=torch.Generator().manual_seed(0))
    acc = MetricAccumulator()
    for _ in range(2):
        acc.add_measurements(measure_trajectories([traj, traj]))
    stored = [c for chunks in acc._chunks.values() for c in chunks]
    assert all(c.dim() == 1 and c.numel() == 6 for c in stored)  # per-token scalars only, no C = 64 axis
    rows = {(r["metric"], r["group"], r["k"]): r for r in acc.summary()}
    assert rows[("step_size", 1, 4)]["n"] == 12
    assert rows[("acceleration", 0, 2)]["n"] == 12 and ("acceleration", 0, 1) not in rows
    assert rows[("drift_to_loop_ratio", 0, 4)]["n"] == 12 and ("drift_to_loop_ratio", 1, 1) not in rows


# --- per-token regimes ----------------------------------------------------------------------------------------

K_REGIMES = 12


def converging() -> torch.Tensor:  # halves its step each time: the last step is 1/2048 of the first
    return path(*[((1 - 0.5 ** k) * 3.0, (1 - 0.5 ** k) * 4.0) for k in range(K_REGIMES + 1)])


def stopped() -> torch.Tensor:  # exactly still from k = 3 on: steps at the floor
    return path(*[(min(k, 3) * 1.0, 0.0) for k in range(K_REGIMES + 1)])


def period(points: list[tuple[float, float]]) -> torch.Tensor:  # from (5, 5) into a cycle through `points`
    return path((5.0, 5.0), *[points[k % len(points)] for k in range(K_REGIMES)])


def sliding() -> torch.Tensor:  # the same step every time
    return path(*[(k * 1.0, k * 1.0) for k in range(K_REGIMES + 1)])


def slow_spiral() -> torch.Tensor:  # turns 60° per step and shrinks 5% per step: converging at k = 12
    return path(*[(0.95 ** k * math.cos(k * math.pi / 3), 0.95 ** k * math.sin(k * math.pi / 3))
                  for k in range(K_REGIMES + 1)])


def widening_spiral() -> torch.Tensor:  # turns 60° per step and grows 5% per step: neither converges nor returns
    return path(*[(1.05 ** k * math.cos(k * math.pi / 3), 1.05 ** k * math.sin(k * math.pi / 3))
                  for k in range(K_REGIMES + 1)])


def geometric(ratio: float, loops: int) -> torch.Tensor:  # straight on, each step `ratio` times the one before
    return path(*[(sum(ratio ** i for i in range(k)), 0.0) for k in range(loops + 1)])


TRIANGLE = [(1.0, 0.0), (-0.5, math.sqrt(3) / 2), (-0.5, -math.sqrt(3) / 2)]


def names(code: torch.Tensor) -> list[str]:
    return [REGIMES[i] for i in code]


def test_each_regime_on_a_hand_built_trajectory():
    x = tokens(converging(), stopped(), period([(1.0, 0.0), (0.0, 1.0)]), period(TRIANGLE), sliding(),
               slow_spiral(), widening_spiral())
    code, periods = regimes(x, precision_floor(torch.float64))
    # the spiral shrinks by 0.95 a step onto the origin: each step stays about as large as the state (the chord of
    # a 60° turn), so its steps shrink but never come within FIXED_POINT_STEP of it
    assert names(code) == ["fixed_point", "fixed_point", "orbit", "orbit", "slider", "slowing_drift", "other"]
    assert periods.tolist() == [0, 0, 2, 3, 0, 0, 0]


def test_a_fast_converger_reaches_its_fixed_point_within_the_loops_measured():
    # ratio 0.7, K = 12: the last step is 0.7^11 = 0.0198 against a state of 3.33(1 - 0.7^11) = 3.27, a relative
    # step of 6.0e-3; at 0.7 a loop it is below 1e-3 after log(1e-3 / 6.0e-3) / log 0.7 = 5.0 more loops <= 12
    walk = geometric(0.7, K_REGIMES)
    last = 0.7 ** 11 / (sum(0.7 ** i for i in range(11)))
    assert last == pytest.approx(6.05e-3, rel=1e-2)
    assert math.log(1e-3 / last) / math.log(0.7) == pytest.approx(5.05, abs=0.01)
    code, _ = regimes(walk, precision_floor(torch.float64))
    assert names(code) == ["fixed_point"]


def test_a_slowly_shrinking_walk_is_a_slowing_drift_not_a_fixed_point():
    # K = 30, ratio 0.97: the last step is 0.97^29 = 0.414 against a state of (1 - 0.97^29) / 0.03 = 19.5, a
    # relative step of 0.021, which needs log(0.047) / log(0.97) = 100 more loops to reach 1e-3 (ratio 0.99: 0.75
    # against 25.3, 340 loops); a zigzag's steps do not shrink and do not align: other
    zigzag = path(*[(k * 1.0, (k % 2) * 1.0) for k in range(K_REGIMES + 1)])
    code, periods = regimes(tokens(geometric(0.97, 30), geometric(0.99, 30)), precision_floor(torch.float64))
    assert names(code) == ["slowing_drift", "slowing_drift"] and periods.tolist() == [0, 0]
    code, _ = regimes(zigzag, precision_floor(torch.float64))
    assert names(code) == ["other"]


def paper_like(shrink: float, loops: int = 64, seed: int = 0) -> torch.Tensor:
    """A token as `paper`'s tokens move: a state of norm 6,415 that takes steps of about 106 (each `shrink` times
    the one before), nearly aligned (a 1% random turn each step), so that the state's norm grows to ~9,000."""
    g = torch.Generator().manual_seed(seed)
    C = 64
    direction = torch.zeros(C, dtype=torch.float64)
    direction[1] = 1.0
    x = [6415.0 * torch.eye(C, dtype=torch.float64)[0]]
    for k in range(loops):
        direction = direction + 0.01 * torch.randn(C, generator=g, dtype=torch.float64)
        direction = direction / direction.norm()
        x.append(x[-1] + 106.0 * shrink ** k * direction)
    return torch.stack(x)[:, None, :]


def huginn_like(ratio: float, loops: int = 30, seed: int = 0) -> torch.Tensor:
    """A token as `huginn`'s tokens move: a state of norm ~100 whose steps, from a relative size of 1e-2, shrink by
    `ratio` a loop in random directions."""
    g = torch.Generator().manual_seed(seed)
    x = [100.0 * torch.nn.functional.normalize(torch.randn(64, generator=g, dtype=torch.float64), dim=0)]
    for k in range(loops):
        x.append(x[-1] + ratio ** k * torch.nn.functional.normalize(
            torch.randn(64, generator=g, dtype=torch.float64), dim=0))
    return torch.stack(x)[:, None, :]


def test_paper_like_tokens_drift_and_huginn_like_tokens_reach_a_fixed_point():
    slowing, steady = paper_like(0.995), paper_like(1.0)
    assert float(slowing[-1].norm()) > 8000  # the state grows while its steps stay ~100: a drift, not an arrival
    code, _ = regimes(torch.cat([slowing, steady], 1), precision_floor(torch.float64))
    assert names(code) == ["slowing_drift", "slider"]
    # ratio 0.7: the last relative step is ~0.7^29 / 100 = 3e-7, arrived; ratio 0.95: ~0.95^29 / 100 = 2.3e-3, not
    # yet, but log(1e-3 / 2.3e-3) / log 0.95 = 16 more loops <= 30 reach the bound
    fast, slow = huginn_like(0.7), huginn_like(0.95)
    assert 1.5e-3 < float((slow[-1] - slow[-2]).norm() / slow[-2].norm()) < 3e-3
    code, _ = regimes(torch.cat([fast, slow], 1), precision_floor(torch.float64))
    assert names(code) == ["fixed_point", "fixed_point"]


def test_a_large_entry_step_does_not_make_a_fixed_point():
    # one step of size 1000√2 into the loop, then a slide of unit steps or a 2-cycle of steps √2: the tail's
    # steps do not shrink and stay large against the state, so neither is a fixed point
    entry_slide = path(*[(-1000.0, -1000.0), *[(k * 1.0, 0.0) for k in range(K_REGIMES)]])
    entry_cycle = path((1000.0, 1000.0), *[[(1.0, 0.0), (0.0, 1.0)][k % 2] for k in range(K_REGIMES)])
    code, periods = regimes(tokens(entry_slide, entry_cycle), precision_floor(torch.float64))
    assert names(code) == ["slider", "orbit"] and periods.tolist() == [0, 2]


def test_a_damped_flip_converges_and_is_no_orbit():
    # x^(k) = c + (−r)^k: each step reverses the last and is r of it. Around c = 10 with r = 0.5 the last step,
    # 1.5·0.5^11 = 7e-4, is 7e-5 of the state: a fixed point. Around c = 0 with r = 0.9 the state is as small as
    # its steps: it slows but never arrives. x^(K) − x^(K−2) is only 0.19·0.9^10 = 0.066, within ORBIT_RETURN of
    # the tail's mean step, so it would pass for a 2-cycle were convergence not tested first
    fast = path(*[(10.0 + (-0.5) ** k, 0.0) for k in range(K_REGIMES + 1)])
    slow = path(*[((-0.9) ** k, 0.0) for k in range(K_REGIMES + 1)])
    code, periods = regimes(tokens(fast, slow), precision_floor(torch.float64))
    assert names(code) == ["fixed_point", "slowing_drift"] and periods.tolist() == [0, 0]


def test_loops_to_a_fixed_point_by_hand():
    relative = torch.tensor([1e-2, 1e-4, 1e-2, 1e-2], dtype=torch.float64)
    b = torch.tensor([math.log(0.5), math.log(0.5), 0.0, math.nan], dtype=torch.float64)
    needed = loops_to_fixed_point(relative, b)
    assert needed[0].item() == pytest.approx(math.log(10) / math.log(2))  # 3.32 halvings from 1e-2 to 1e-3
    assert needed[1].item() == 0.0 and needed[2].item() == math.inf and needed[3].item() == math.inf


def test_the_tail_step_ratio_fit_is_ordinary_least_squares_on_the_usable_steps():
    sizes = torch.rand(9, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.1
    usable = torch.ones(9, 3, dtype=torch.bool)
    usable[[0, 4], 1] = False  # token 1 fits 7 of its steps; token 2 only 2, too few for a standard error
    usable[2:, 2] = False
    b, se = tail_step_ratio_fit(sizes, usable)
    for n in range(2):
        k = np.arange(9)[usable[:, n].numpy()]
        y = np.log(sizes[:, n].numpy()[usable[:, n].numpy()])
        (slope, _), residual, *_ = np.linalg.lstsq(np.stack([k, np.ones_like(k)], 1).astype(float), y, rcond=None)
        assert b[n].item() == pytest.approx(slope)
        assert se[n].item() == pytest.approx(math.sqrt(residual[0] / (len(k) - 2) / ((k - k.mean()) ** 2).sum()))
    assert b[2].isnan() and se[2].isnan()


def test_too_short_a_loop_has_no_regime_but_other():
    code, periods = regimes(sliding()[:4], precision_floor(torch.float64))  # K = 3
    assert [REGIMES[i] for i in code] == ["other"] and periods.tolist() == [0]


def test_regime_shares_and_per_regime_cosines_reach_the_accumulator_at_k_equals_K():
    # tokens: two at a fixed point, one orbit of period 2, one slider, two others (B = 6, T = 1)
    x = tokens(converging(), stopped(), period([(1.0, 0.0), (0.0, 1.0)]), sliding(), widening_spiral(),
               widening_spiral())[:, :, None, :]
    acc = MetricAccumulator()
    acc.add_measurements(measure_trajectories([x]))
    rows = {(r["metric"], r["k"]): r for r in acc.summary()}
    shares = {regime: rows[(f"regime_{regime}", K_REGIMES)]["mean"] for regime in REGIMES}
    assert shares == pytest.approx({"fixed_point": 2 / 6, "slowing_drift": 0, "orbit": 1 / 6, "slider": 1 / 6,
                                    "other": 2 / 6})
    assert (rows[("orbit_period", K_REGIMES)]["n"], rows[("orbit_period", K_REGIMES)]["mean"]) == (1, 2.0)
    # the orbit reverses every step (cos −1), the slider goes straight (cos 1), the spirals turn 60° (cos 0.5)
    assert rows[("step_cosine_orbit", 5)]["mean"] == pytest.approx(-1.0)
    assert rows[("step_cosine_slider", 5)]["mean"] == pytest.approx(1.0)
    assert rows[("step_cosine_other", 5)]["mean"] == pytest.approx(0.5) and rows[("step_cosine_other", 5)]["n"] == 2
    assert rows[("turning_angle_slider", 5)]["mean"] == pytest.approx(0.0, abs=1e-5)  # arccos near 1: ~1e-6°


# --- PCA ----------------------------------------------------------------------------------------------------


def test_pca_recovers_a_planar_trajectory_and_matches_numpy_svd_up_to_sign():
    g = torch.Generator().manual_seed(3)
    basis, _ = torch.linalg.qr(torch.randn(6, 2, generator=g, dtype=torch.float64))  # a plane in R^6
    t = torch.linspace(0, 4 * math.pi, 40, dtype=torch.float64)
    plane = torch.stack([3 * t.cos() * 0.9**t, t.sin() * 0.9**t], 1)
    points = plane @ basis.T + torch.randn(6, generator=g, dtype=torch.float64)
    coords, ratio = pca_2d(points)
    assert coords.shape == (40, 2) and ratio.shape == (2,)
    assert float(ratio.sum()) == pytest.approx(1.0, abs=1e-12)
    # an isometry of the plane: all pairwise distances kept
    torch.testing.assert_close(torch.cdist(coords, coords), torch.cdist(points, points))

    centered = (points - points.mean(0)).numpy()
    u, s, _ = np.linalg.svd(centered, full_matrices=False)
    expected = u[:, :2] * s[:2]
    for i in range(2):
        sign = np.sign(expected[:, i] @ coords[:, i].numpy())
        np.testing.assert_allclose(coords[:, i].numpy(), sign * expected[:, i], atol=1e-10)
    np.testing.assert_allclose(ratio.numpy(), s[:2] ** 2 / (s**2).sum())


def test_pca_3d_shares_and_bad_input():
    points = torch.tensor([[2.0, 0, 0], [-2.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]])
    coords, ratio = pca_2d(points)
    close(ratio, [0.8, 0.2])
    close(coords[:, 0].abs(), [2.0, 2.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        pca_2d(torch.zeros(1, 3))


def test_token_path_follows_groups_in_order():
    a, b = torch.randn(3, 2, 4, 5), torch.randn(4, 2, 4, 5)
    points, groups = token_path([a, b], token=6)  # (b, t) = (1, 2)
    assert torch.equal(points, torch.cat([a[:, 1, 2], b[:, 1, 2]]))
    assert groups.tolist() == [0, 0, 0, 1, 1, 1, 1]


# --- on a real model ----------------------------------------------------------------------------------------


def test_measure_trajectories_on_a_tiny_looped_model():
    cfg = ModelConfig(vocab_size=37, n_layer=6, n_head=2, n_embd=16, block_size=12, dropout=0.0, bias=True,
                      groups=((1, 1), (2, 3), (4, 4)))
    torch.manual_seed(0)
    model = LoopedGPT(cfg).eval()
    idx = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(1))
    loops = (4, 3, 5)
    with torch.no_grad():
        trajectories = model(idx, loops, record_trajectories=True).trajectories
    m = measure_trajectories(trajectories)
    N = 2 * 9
    for name, per_group in m.items():
        measured = loops[:-1] if name == "drift_to_loop_ratio" else loops  # one per hand-off, K_g rows
        rows = [1 if FIRST_K[name] == LAST_STEP else K - FIRST_K[name] + 1 for K in measured]
        assert [tuple(t.shape) for t in per_group] == [(r, N) for r in rows], name
        if name == "orbit_period" or name.endswith(REGIMES):  # NaN for the tokens of other regimes
            continue
        assert all(t.isfinite().all() for t in per_group), name

    for g, traj in enumerate(trajectories):  # step sizes and accelerations by explicit loops over (k, b, t)
        for k in range(1, loops[g] + 1):
            for b in range(2):
                for t in range(9):
                    n = b * 9 + t
                    expected = (traj[k, b, t] - traj[k - 1, b, t]).norm()
                    torch.testing.assert_close(m["step_size"][g][k - 1, n], expected)
                    if k >= 2:
                        second = (traj[k, b, t] - 2 * traj[k - 1, b, t] + traj[k - 2, b, t]).norm()
                        torch.testing.assert_close(
                            m["acceleration"][g][k - 2, n], second, rtol=1e-4, atol=1e-6)
    jump = (trajectories[1][1] - trajectories[0][-1]).norm(dim=-1).flatten()
    for K in range(1, loops[0] + 1):
        mean_step = (trajectories[0][1 : K + 1] - trajectories[0][:K]).norm(dim=-1).mean(0).flatten()
        torch.testing.assert_close(m["drift_to_loop_ratio"][0][K - 1], jump / mean_step)
