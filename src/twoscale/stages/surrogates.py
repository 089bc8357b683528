"""Stage `surrogates`: gather every distill job into one recovery table, and measure the dynamics of depth
(docs/methods.md#block-recurrent-surrogates) of every teacher, every surrogate and every looped recipe's final
checkpoint on the same held-out windows; the `surrogate_figures` stage draws both."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

import polars as pl
import torch

from twoscale.config.io import atomic_path, load_token_array, read_json, run_subdir, write_parquet
from twoscale.config.params import Params
from twoscale.config.progress import progress_bar
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import load_final_model
from twoscale.stages.common import load
from twoscale.surrogates.distillation import load_surrogate
from twoscale.surrogates.dynamics import DepthDynamics
from twoscale.surrogates.tables import recovery_table
from twoscale.training.batches import held_out_batches
from twoscale.training.device import configure_torch, resolve_device

HELP = "gather the surrogates' recovery and compare the dynamics of depth across models"

log = logging.getLogger(__name__)

StatesOf = Callable[[torch.Tensor], list[torch.Tensor]]


@torch.no_grad()
def dynamics_rows(states_of: StatesOf, batches, labels: dict) -> list[dict]:
    """One row per depth position: the three measures of `surrogates.dynamics` (a measure of the step from this
    position to the next is NaN at the last position) and the relative depth position / (D − 1)."""
    dynamics = DepthDynamics()
    for idx, _ in batches:
        dynamics.add(torch.stack(states_of(idx)))
    result = dynamics.result()
    D = len(result["convergence"])
    steps = {name: [*result[name], float("nan")] for name in ("angular_speed", "stable_rank")}
    return [{**labels, "position": layer, "relative_depth": layer / (D - 1),
             "convergence": result["convergence"][layer], "angular_speed": steps["angular_speed"][layer],
             "stable_rank": steps["stable_rank"][layer]}
            for layer in range(D)]


def models_to_measure(params: Params, args: argparse.Namespace, vocab_size: int, device: torch.device
                      ) -> list[tuple[dict, StatesOf]]:
    """(labels, idx -> depth states) for every teacher run, its surrogates, and every looped run."""
    models: list[tuple[dict, StatesOf]] = []
    for name, seed in params.teacher_runs():
        run = params.run(name, seed)
        teacher, _ = load_final_model(args.train_dir, args.data_dir, params, run, vocab_size, device)
        teacher_states = _states_of(teacher, [])
        models.append(({"model": "teacher", "name": name, "seed": seed, "blocks": None}, teacher_states))
        for k in params.distill.blocks_of(params.explains(seed)):
            surrogate, _ = load_surrogate(args.distill_dir / run_subdir(name, seed) / f"k_{k}" / "surrogate.pt",
                                          device)
            models.append(({"model": "surrogate", "name": name, "seed": seed, "blocks": k},
                           _surrogate_states_of(teacher, surrogate)))
    loops = params.distill.dynamics_loops
    for name, seed in params.runs():
        run = params.run(name, seed)
        model, _ = load_final_model(args.train_dir, args.data_dir, params, run, vocab_size, device)
        models.append(({"model": "looped", "name": name, "seed": seed, "blocks": None},
                       _states_of(model, [loops] * model.n_groups)))
    return models


def _states_of(model, loops: list[int]) -> StatesOf:
    return lambda idx: model.depth_states(idx, loops)


def _surrogate_states_of(teacher, surrogate) -> StatesOf:
    def states(idx: torch.Tensor) -> list[torch.Tensor]:
        embedding = teacher.embed(idx)
        return [embedding, *surrogate.rollout(embedding)]
    return states


def run(args: argparse.Namespace) -> None:
    params = load(args)
    settings = params.distill
    stats = read_json(args.data_dir / "stats.json")
    val_ids = load_token_array(args.data_dir / "val.npy")
    configure_torch(settings.threads, params.runtime.seeds[0])
    device = resolve_device(params.runtime.device)
    evaluations = [read_json(args.distill_dir / run_subdir(name, seed) / f"k_{k}" / "evaluation.json")
                   for name, seed in params.teacher_runs() for k in settings.blocks_of(params.explains(seed))]
    recovery, layer_r2 = recovery_table(evaluations)
    with tracking.stage_run(args.stage, {"distill": settings}):
        rows = []
        models = models_to_measure(params, args, stats["vocab_size"], device)
        block_size = min(params.run(name, seed).model.block_size for name, seed in
                         params.teacher_runs() + params.runs())  # the same tokens for every model
        batches = [(idx.to(device), targets) for idx, targets in
                   held_out_batches(val_ids, settings.n_windows, settings.batch_size, block_size)]
        for labels, states_of in progress_bar(models, desc="dynamics of depth", unit="model"):
            rows += dynamics_rows(states_of, batches, labels)
        dynamics = pl.DataFrame(rows, infer_schema_length=None)
        for name, frame in (("recovery.csv", recovery), ("layer_r2.csv", layer_r2)):
            with atomic_path(args.out_dir / name) as tmp:
                frame.write_csv(tmp, float_precision=6)
        write_parquet(args.out_dir / "dynamics.parquet", dynamics)
        tracking.log_artifact(args.out_dir / "recovery.csv")
        if recovery.height:  # each model's cross-entropy and recovered fraction by k, over the teachers' seeds
            tracking.log_curves(recovery.group_by("blocks").agg(pl.col(
                f"{model}_{column}" for model in ("surrogate", "control")
                for column in ("cross_entropy", "recovered", "kl_to_teacher")).mean()).to_dicts(), step_key="blocks")
    if recovery.height:
        log.info("recovered fraction of the teacher by k (mean over seeds):\n%s",
                 recovery.group_by("teacher", "blocks").agg(pl.col("surrogate_recovered").mean(),
                                                             pl.col("control_recovered").mean()).sort("blocks"))
    log.info("dynamics of depth of %d models", len(models))
