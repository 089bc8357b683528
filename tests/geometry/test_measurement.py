"""One checkpoint's measurement: depth layout, phase bookkeeping, and the shape of what is measured."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from twoscale.config.params import MeasureParams
from twoscale.geometry.measurement import (
    MEASURE_DTYPE,
    PRECISIONS,
    boundary_offsets,
    contiguous_ranges,
    geometry_in,
    layout_phases,
    measure_checkpoint,
)
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.training.batches import evaluate_loss, held_out_batches


def tiny_model() -> LoopedGPT:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=50, n_layer=6, n_head=2, n_embd=16, block_size=8, dropout=0.0, bias=False,
                         groups=((1, 1), (2, 3), (4, 4)))
    return LoopedGPT(config).eval()


def measure_params(**changes) -> MeasureParams:
    fields = dict(threads=1, n_sequences=5, batch_size=2, max_loops=3, loss_loops=[1, 3], beyond_loops=[6],
                  n_phases=3, trajectory_token=2, precisions=["float64", "float32", "bfloat16"], precision_sequences=2)
    return MeasureParams(**{**fields, **changes})


@pytest.mark.parametrize(
    ("labels", "expected"),
    [([0, 0, 1, 1, 1, 2], [(0, 1), (2, 4), (5, 5)]), ([7], [(0, 0)]), ([1, 2, 1], [(0, 0), (1, 1), (2, 2)])],
)
def test_contiguous_ranges(labels, expected):
    assert contiguous_ranges(labels) == expected


def test_boundary_offsets_by_hand():
    layout = [(0, 1), (2, 4), (5, 9)]  # boundaries at 2 and 5
    assert boundary_offsets([(0, 2), (3, 3), (4, 9)], layout) == [1, 1]  # detected boundaries at 3 and 4
    assert boundary_offsets(layout, layout) == [0, 0]


def test_layout_phases_of_the_default_layout():
    model = tiny_model()
    out = model(torch.zeros(1, 4, dtype=torch.long), [3, 2, 2], record_trajectories=True)
    # embedding, layer 0 | (1) x3 | (2, 3) x2 | (4) x2, layer 5: single-pass layers join the group they feed
    assert layout_phases(out.depth_positions, 3) == [(0, 4), (5, 8), (9, 11)]


def test_measure_checkpoint_covers_every_group_step_and_token():
    model, params = tiny_model(), measure_params()
    val = (np.arange(200) * 7 % 50).astype(np.uint16)
    m = measure_checkpoint(model, val, params, torch.device("cpu"))
    tokens = params.n_sequences * model.config.block_size
    step_rows = [r for r in m.geometry if r["metric"] == "step_size"]
    assert sorted((r["group"], r["k"]) for r in step_rows) == [(g, k) for g in range(3) for k in (1, 2, 3)]
    assert all(r["n"] == tokens for r in step_rows)
    dlr = sorted((r["group"], r["k"]) for r in m.geometry if r["metric"] == "drift_to_loop_ratio")
    assert dlr == [(g, K) for g in (0, 1) for K in (1, 2, 3)]  # every hand-off, DLR_K for every K
    assert [r["loops"] for r in m.loss_vs_loops] == [1, 3]
    depth = 1 + 1 + 3 + 2 * 3 + 3 + 1
    assert m.similarity.shape == (depth, depth)
    np.testing.assert_allclose(np.diag(m.similarity), 1.0, atol=1e-12)  # float64: cos(x, x) = 1 to rounding
    assert len(m.phases) == 3 and m.phases[0][0] == 0 and m.phases[-1][1] == depth - 1
    assert [p["group"] for p in m.trajectory] == [0] * 4 + [1] * 4 + [2] * 4  # x^(0..3) of each group
    assert [p["k"] for p in m.trajectory[:4]] == [0, 1, 2, 3]
    assert 0 < sum(m.explained_variance) <= 1 + 1e-6


def test_loss_vs_loops_is_the_plain_forward_loss_at_each_loop_count():
    # below, at and above the recorded pass's loop count: the shared route must give evaluate_loss's values exactly
    model, params = tiny_model(), measure_params(loss_loops=[1, 2, 3, 5])
    val = (np.arange(200) * 7 % 50).astype(np.uint16)
    m = measure_checkpoint(model, val, params, torch.device("cpu"))
    net = copy.deepcopy(model).double()
    expected = [evaluate_loss(net, val, [n] * 3, 5, 2, torch.device("cpu")) for n in (1, 2, 3, 5)]
    assert [r["val_loss"] for r in m.loss_vs_loops] == expected
    assert len(set(expected)) == 4  # the loop counts give different losses: a wrong count could not pass


def test_the_final_checkpoint_also_reads_the_loss_beyond_training_s_loops():
    model, params = tiny_model(), measure_params(loss_loops=[1, 3], beyond_loops=[6])
    val = (np.arange(200) * 7 % 50).astype(np.uint16)
    earlier = measure_checkpoint(model, val, params, torch.device("cpu"))
    final = measure_checkpoint(model, val, params, torch.device("cpu"), final=True)
    assert [r["loops"] for r in earlier.loss_vs_loops] == [1, 3]
    assert [r["loops"] for r in final.loss_vs_loops] == [1, 3, 6]
    net = copy.deepcopy(model).double()
    assert final.loss_vs_loops[-1]["val_loss"] == evaluate_loss(net, val, [6] * 3, 5, 2, torch.device("cpu"))


def test_measure_checkpoint_measures_a_float64_copy_and_leaves_the_model_alone():
    model, params = tiny_model(), measure_params()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    val = (np.arange(200) * 7 % 50).astype(np.uint16)
    m = measure_checkpoint(model, val, params, torch.device("cpu"))
    assert all(p.dtype == torch.float32 and torch.equal(p, before[n]) for n, p in model.state_dict().items())

    def mean_last_step(dtype: torch.dtype) -> float:  # group 2's mean step size at k = 3, recomputed
        net = copy.deepcopy(model).to(dtype)
        sizes = [(t[3] - t[2]).norm(dim=-1).flatten() for x, _ in held_out_batches(val, 5, 2, 8)
                 for t in net(x, [3, 3, 3], record_trajectories=True).trajectories[2:]]
        return torch.cat(sizes).double().mean().item()

    measured = [r["mean"] for r in m.geometry if (r["metric"], r["group"], r["k"]) == ("step_size", 2, 3)][0]
    assert measured == pytest.approx(mean_last_step(torch.float64), rel=1e-13)
    assert abs(measured - mean_last_step(torch.float32)) > 1e-13 * measured  # float32 arithmetic would differ
    assert m.similarity.dtype == np.float64


def test_the_same_checkpoint_read_in_each_precision_with_no_floor():
    """The model run wholly in each dtype, on the first two windows: float32 agrees with float64 to its own
    rounding, bfloat16 to its much coarser one, and no step is left out as at a floor (only an exact zero step
    would be)."""
    model, val = tiny_model(), np.arange(200) % 50
    rows = {name: {(r["metric"], r["group"], r["k"]): r for r in geometry_in(model, val, measure_params(), 2,
                                                                             torch.device("cpu"), dtype)}
            for name, dtype in PRECISIONS.items()}
    assert set(rows["float64"]) == set(rows["float32"]) == set(rows["bfloat16"])
    for key, exact in rows["float64"].items():
        if key[0] == "step_size":
            assert rows["float32"][key]["mean"] == pytest.approx(exact["mean"], rel=1e-4)
            assert rows["bfloat16"][key]["mean"] == pytest.approx(exact["mean"], rel=0.2)
        if key[0] == "at_floor":
            assert rows["bfloat16"][key]["mean"] == 0.0  # no floor: a bfloat16 step of one epsilon still counts
    assert rows["float64"][("step_size", 1, 1)]["n"] == 2 * 8  # two windows of block_size 8 tokens
    assert next(model.parameters()).dtype == torch.float32  # the model itself is left as it was


def test_the_geometry_looped_past_max_loops_extends_the_measure_stages_own():
    """The beyond stage's reading (float64, the measure stage's floor): at measure.max_loops it is the measure
    stage's geometry row for row; looped twice as far, the first group's first max_loops steps are the same steps
    (later groups start from a different input) and every group has rows up to the new count."""
    model, val, measure = tiny_model(), np.arange(200) % 50, measure_params()
    cpu = torch.device("cpu")
    measured = measure_checkpoint(model, val, measure, cpu).geometry
    assert geometry_in(model, val, measure, measure.n_sequences, cpu, MEASURE_DTYPE, floor=None) == measured
    longer = geometry_in(model, val, measure, measure.n_sequences, cpu, MEASURE_DTYPE, loops=6, floor=None)
    by_key = {(r["metric"], r["group"], r["k"]): r for r in longer}
    for row in measured:
        if row["group"] == 0 and row["k"] is not None and row["metric"] in ("step_size", "state_norm"):
            assert by_key[(row["metric"], 0, row["k"])] == row
    assert {g: max(k for (metric, group, k) in by_key if metric == "step_size" and group == g) for g in range(3)} \
        == {0: 6, 1: 6, 2: 6}
