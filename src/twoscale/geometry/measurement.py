"""One checkpoint's measurements on held-out text: loop geometry (docs/methods.md#loop-geometry), loss vs
loops, the similarity of the unrolled depth with its phases, and one token's PCA path (Fig. 1).

Every group is looped `measure.max_loops` times on `measure.n_sequences` fixed, evenly spaced validation windows;
per batch only per-token scalars and a (D, D) similarity sum are kept, so memory does not grow with the sample.
Everything is computed on a float64 copy of the model (`MEASURE_DTYPE`), whatever the arithmetic it was trained
in: a converging loop's late steps are ~1e-7 of the state, where float32 rounding would decide their direction.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from twoscale.analysis.phases import SimilarityAccumulator, segment_phases
from twoscale.config.params import MeasureParams
from twoscale.geometry.metrics import MetricAccumulator, measure_trajectories, pca_2d, token_path
from twoscale.models.looped_gpt import DepthPosition, LoopedGPT, ModelOutput, at_least_float32
from twoscale.training.batches import held_out_batches

MEASURE_DTYPE = torch.float64
# the precision question (docs/methods.md#in-which-precision): the arithmetic a checkpoint may be measured in
PRECISIONS = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class CheckpointMeasurement:
    geometry: list[dict]  # {metric, group, k, n, mean, median, q10, q90}
    loss_vs_loops: list[dict]  # {loops, val_loss}
    similarity: np.ndarray  # (D, D) mean cosine similarity between depth positions
    positions: list[DepthPosition]  # what each depth position is
    phases: list[tuple[int, int]]  # detected contiguous phases (inclusive depth ranges)
    layout_phases: list[tuple[int, int]]  # the looped groups' depth ranges (single-pass layers joined)
    trajectory: list[dict]  # {point, group, k, pc1, pc2}: one token's path over all loops of all groups
    explained_variance: tuple[float, float]


def layout_phases(positions: list[DepthPosition], n_groups: int) -> list[tuple[int, int]]:
    """Depth ranges of the looped groups, one per group: a single-pass layer (and the embedding) joins the group
    it feeds, and layers after the last group join the last group."""
    labels, upcoming = [0] * len(positions), n_groups - 1
    for i in reversed(range(len(positions))):
        if positions[i].group is not None:
            upcoming = positions[i].group
        labels[i] = upcoming
    return contiguous_ranges(labels)


def contiguous_ranges(labels: list[int]) -> list[tuple[int, int]]:
    """Inclusive (first, last) index ranges of runs of equal labels."""
    ranges, start = [], 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            ranges.append((start, i - 1))
            start = i
    return ranges


def boundary_offsets(detected: list[tuple[int, int]], layout: list[tuple[int, int]]) -> list[int]:
    """For every boundary of the layout, the distance (in depth positions) to the nearest detected boundary."""
    found = [first for first, _ in detected[1:]]
    return [min(abs(first - b) for b in found) if found else -1 for first, _ in layout[1:]]


def losses_by_loop_count(model: LoopedGPT, recorded: ModelOutput, targets: torch.Tensor, loop_counts: list[int]
                         ) -> list[float]:
    """The batch's mean next-token cross-entropy with every group looped n times, for each n of `loop_counts`, from
    a pass recorded with every group looped the same K times: its logits give n = K, and its first group's n-th
    iterate is that group's output at n loops, from which only the later segments run. The same arithmetic, op for
    op, as a plain forward pass at n loops (`LoopedGPT.forward`), so the values are those of `evaluate_loss`."""
    first_group = model.segment_index(0)
    iterates = recorded.trajectories[0]
    most = iterates.shape[0] - 1
    if any(count != most for count in (len(t) - 1 for t in recorded.trajectories)):
        raise ValueError("the recorded pass must loop every group the same number of times")
    losses = []
    for n in loop_counts:
        if n == most:
            logits = recorded.logits
        elif n < most:
            logits = model.logits_of(model.run_segments(iterates[n], [n] * model.n_groups, first_group + 1))
        else:
            logits = model.logits_of(model.run_segments(iterates[0], [n] * model.n_groups, first_group))
        losses.append(F.cross_entropy(at_least_float32(logits.flatten(0, 1)), targets.flatten()).item())
    return losses


@torch.no_grad()
def geometry_in(model: LoopedGPT, val_ids: np.ndarray, measure: MeasureParams, n_sequences: int,
                device: torch.device, dtype: torch.dtype, loops: int | None = None, floor: float | None = 0.0
                ) -> list[dict]:
    """The loop geometry (`MetricAccumulator.summary` rows) of the model run wholly in `dtype` on the first
    `n_sequences` held-out windows, every group looped `loops` times (measure.max_loops by default). With the
    default floor of 0 it reads as a measurement in that precision would: every step's direction counts, however
    close to rounding it is (a bfloat16 state is upcast to float32 for the metrics, but was rounded at bfloat16's
    epsilon); floor=None marks and leaves out the steps at `precision_floor(dtype)` as the measure stage does."""
    model = copy.deepcopy(model).to(dtype).eval()
    counts = [measure.max_loops if loops is None else loops] * model.n_groups
    metrics = MetricAccumulator()
    for x, _ in held_out_batches(val_ids, n_sequences, measure.batch_size, model.config.block_size):
        out = model(x.to(device), counts, record_trajectories=True)
        metrics.add_measurements(measure_trajectories(out.trajectories, floor=floor))
    return metrics.summary()


@torch.no_grad()
def measure_checkpoint(
    model: LoopedGPT, val_ids: np.ndarray, measure: MeasureParams, device: torch.device, final: bool = False
) -> CheckpointMeasurement:
    """The checkpoint's loop geometry, depth similarity, one token's path and loss vs loops (at the final
    checkpoint also at measure.beyond_loops), in float64."""
    model = copy.deepcopy(model).to(MEASURE_DTYPE).eval()
    loops = [measure.max_loops] * model.n_groups
    loss_loops = measure.loss_loops + (measure.beyond_loops if final else [])
    metrics, similarity = MetricAccumulator(), SimilarityAccumulator()
    path = None
    loss_sums = np.zeros(len(loss_loops))
    for x, y in held_out_batches(val_ids, measure.n_sequences, measure.batch_size, model.config.block_size):
        out = model(x.to(device), loops, record_trajectories=True)
        loss_sums += len(x) * np.array(losses_by_loop_count(model, out, y.to(device), loss_loops))
        metrics.add_measurements(measure_trajectories(out.trajectories))
        similarity.add(torch.stack(out.depth_states))
        if path is None:
            path = token_path(out.trajectories, measure.trajectory_token)
    points, groups = path
    coords, explained = pca_2d(points)
    steps_in_group = torch.cat([torch.arange(int((groups == g).sum())) for g in range(model.n_groups)])
    trajectory = [
        {"point": j, "group": int(groups[j]), "k": int(steps_in_group[j]),
         "pc1": float(coords[j, 0]), "pc2": float(coords[j, 1])}
        for j in range(len(points))
    ]
    matrix = similarity.matrix()
    loss_vs_loops = [{"loops": n, "val_loss": total / measure.n_sequences}
                     for n, total in zip(loss_loops, loss_sums, strict=True)]
    return CheckpointMeasurement(
        geometry=metrics.summary(),
        loss_vs_loops=loss_vs_loops,
        similarity=matrix.numpy(),
        positions=out.depth_positions,
        phases=segment_phases(matrix, min(measure.n_phases, matrix.shape[0])),
        layout_phases=layout_phases(out.depth_positions, model.n_groups),
        trajectory=trajectory,
        explained_variance=(float(explained[0]), float(explained[1])),
    )
