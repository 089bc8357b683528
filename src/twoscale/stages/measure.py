"""Stage `measure`: the geometry of the loop iterates of one checkpoint on held-out text (one job per checkpoint)."""

from __future__ import annotations

import argparse
import logging

import numpy as np
import polars as pl

from twoscale.config.io import read_json, write_json, write_parquet
from twoscale.config.params import RunParams
from twoscale.geometry.measurement import (
    MEASURE_DTYPE,
    CheckpointMeasurement,
    boundary_offsets,
    measure_checkpoint,
)
from twoscale.geometry.metrics import precision_floor
from twoscale.geometry.tables import DLR_SHOWN_LOOPS, FLOOR_EPS
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import (
    load_run,
    origin_columns,
    run_columns,
)
from twoscale.training.device import provenance, recorded_provenance

HELP = "measure the geometry of the loop iterates of one checkpoint"

log = logging.getLogger(__name__)


AT_THE_LAST_LOOP = ("step_size", "step_cosine", "state_norm", "cross_token_cosine", "radial_fraction",
                    "at_fixed_point", "at_floor")


def summarise(step: int, m: CheckpointMeasurement, max_loops: int) -> dict:
    """A few scalars per checkpoint for MLflow and `dvc metrics`: the headline numbers behind C1-C5 and the
    diagnostics of the loop dynamics at the last loop step."""
    geometry = pl.DataFrame(m.geometry)
    out: dict[str, float] = {"step": step}
    shown = {*DLR_SHOWN_LOOPS, max_loops}  # the tables hold DLR_K for every K
    dlr = geometry.filter((pl.col("metric") == "drift_to_loop_ratio") & pl.col("k").is_in(shown))
    for row in dlr.iter_rows(named=True):
        out[f"dlr_median_{row['group']}_to_{row['group'] + 1}_K{row['k']}"] = row["median"]
    headline = {("step_size", 1), ("step_size", 10)} | {(metric, max_loops) for metric in AT_THE_LAST_LOOP}
    for (metric, group, k), value in _means(geometry).items():
        if (metric, k) in headline:
            out[f"{metric}_k{k}_group{group}"] = value
    for row in m.loss_vs_loops:
        out[f"val_loss_loops{row['loops']}"] = row["val_loss"]
    offsets = boundary_offsets(m.phases, m.layout_phases)
    out["phases_match_layout"] = float(m.phases == m.layout_phases)
    out["phase_boundary_max_offset"] = float(max(offsets)) if offsets else 0.0
    return out


def _means(geometry: pl.DataFrame) -> dict[tuple[str, int, int], float]:
    rows = geometry.filter(pl.col("k").is_not_null()).iter_rows(named=True)
    return {(r["metric"], r["group"], r["k"]): r["mean"] for r in rows}


def origin(train_metrics: dict, measured: dict[str, str]) -> dict[str, str]:
    """Where a checkpoint's measurements come from: the training's arithmetic, machine and torch (train_*), and
    the measurement's (`provenance`), with its precision floor."""
    floor = f"{FLOOR_EPS} eps = {precision_floor(MEASURE_DTYPE):.1e} of the state"
    return {**recorded_provenance(train_metrics, "train_"), **measured, "floor": floor}


def tables(run: RunParams, step: int, m: CheckpointMeasurement, source: dict[str, str]) -> dict[str, pl.DataFrame]:
    """The measurement tables of one checkpoint, each led by the run (recipe, seed) and training step and closed
    by where the numbers come from (`origin`)."""
    keys = [*run_columns(run), pl.lit(step).alias("step")]
    origin = origin_columns(source)
    phase_of = np.empty(len(m.positions), dtype=np.int64)
    layout_of = np.empty(len(m.positions), dtype=np.int64)
    for labels, ranges in ((phase_of, m.phases), (layout_of, m.layout_phases)):
        for phase, (first, last) in enumerate(ranges):
            labels[first : last + 1] = phase
    depth = pl.DataFrame(
        {
            "position": range(len(m.positions)),
            "layer": [p.layer for p in m.positions],
            "group": [p.group for p in m.positions],
            "loop": [p.loop for p in m.positions],
            "phase": phase_of,
            "layout_phase": layout_of,
        },
        schema_overrides={"layer": pl.Int64, "group": pl.Int64, "loop": pl.Int64},
    )
    D = len(m.positions)
    similarity = pl.DataFrame(
        {"i": np.repeat(np.arange(D), D), "j": np.tile(np.arange(D), D), "similarity": m.similarity.ravel()}
    )
    trajectory = pl.DataFrame(m.trajectory).with_columns(
        pl.lit(m.explained_variance[0]).alias("explained_pc1"), pl.lit(m.explained_variance[1]).alias("explained_pc2")
    )
    frames = {
        "geometry": pl.DataFrame(m.geometry, schema_overrides={"k": pl.Int64}),
        "loss_vs_loops": pl.DataFrame(m.loss_vs_loops),
        "depth": depth,
        "similarity": similarity,
        "trajectory": trajectory,
    }
    return {name: frame.select(*keys, pl.all(), *origin) for name, frame in frames.items()}


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    model, meta, val_ids, device = open_checkpoint(args, params, run, params.measure.threads)
    train_metrics = read_json(args.train_metrics)
    step = meta["step"]
    source = origin(train_metrics, provenance(device, MEASURE_DTYPE))
    log.info("measuring %s, seed %d, step %d in %s: %d windows, every group looped %d times",
             run.recipe, run.seed, step, source["precision"], params.measure.n_sequences, params.measure.max_loops)
    with tracking.stage_run(args.stage, {"measure": params.measure},
                            {**run.tags, "checkpoint": f"step_{step}"}, source):
        m = measure_checkpoint(model, val_ids, params.measure, device, final=step == run.train.steps)
        summary = summarise(step, m, params.measure.max_loops)
        tracking.log_metrics(summary, step=step)
        for name, frame in tables(run, step, m, source).items():
            write_parquet(args.out_dir / f"{name}.parquet", frame)
        write_json(args.out_dir / "summary.json", summary)
        log.info("phases %s (layout %s); DLR_K medians %s", m.phases, m.layout_phases,
                 {k: round(v, 2) for k, v in summary.items() if k.startswith("dlr")})
