"""Stage `distill`: a k-block surrogate of one teacher run and its control (one job per teacher, seed and k).

The surrogate gets one shared block per phase of the phases stage's max-cut for this k and is distilled in two
stages (`surrogates.distillation`); the control is a plain GPT of k layers trained from scratch on the same tokens
with the teacher's training parameters. Both are evaluated beside the teacher on held-out windows: cross-entropy,
the recovered fraction of the teacher's improvement over the unigram baseline, KL to the teacher, and the
surrogate's per-layer R².
"""

from __future__ import annotations

import argparse
import logging

import polars as pl
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import load_token_array, read_json, write_json, write_parquet
from twoscale.config.progress import progress_bar
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import load_teacher_run
from twoscale.surrogates.distillation import distill, save_surrogate, train_plain_gpt
from twoscale.surrogates.model import RaptorSurrogate, SurrogateConfig
from twoscale.surrogates.recovery import evaluate_recovery
from twoscale.training.batches import held_out_batches
from twoscale.training.device import provenance, recorded_provenance, training_dtype
from twoscale.training.trainer import model_config

HELP = "distil a k-block surrogate of one plain GPT and train its k-layer control"

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> None:
    params, run = load_teacher_run(args)
    settings, k = params.distill, args.blocks
    distilled = settings.blocks_of(params.explains(run.seed))
    if k not in distilled:
        raise TwoscaleError(f"--blocks {k} is not distilled for seed {run.seed} (distill.blocks"
                            f"{', curve_blocks' if params.explains(run.seed) else ''}: {distilled})")
    phases = read_json(args.phases)["phases"].get(str(k))
    if phases is None:
        raise TwoscaleError(f"{args.phases}: no phases for k = {k} (rerun the phases stage)")
    teacher_trained = recorded_provenance(read_json(args.train_metrics), "teacher_")
    teacher, meta, val_ids, device = open_checkpoint(args, params, run, settings.threads)
    teacher.requires_grad_(False)
    train_ids = load_token_array(args.data_dir / "train.npy")
    dtype = training_dtype(params.runtime.precision, device)
    source = {**teacher_trained, **provenance(device, dtype)}
    surrogate = RaptorSurrogate(SurrogateConfig(teacher.config, tuple(tuple(p) for p in phases),
                                                settings.depth_hidden, settings.layerscale_init)).to(device)
    control_config = model_config(run.model.model_copy(update={"n_layer": k}),
                                             teacher.config.vocab_size)
    tags = {**run.tags, "blocks": str(k)}
    log.info("%s seed %d: %d-block surrogate (%d parameters) of %d layers, phases %s; control: %d layers",
             run.recipe, run.seed, k, surrogate.num_parameters(), teacher.config.n_layer, phases, k)
    with tracking.stage_run(args.stage, {"distill": settings, "model": run.model, "train": run.train}, tags, source):
        steps = settings.phase_steps + settings.rollout_steps
        with progress_bar(total=steps, desc=f"distill {run.recipe} k={k}", unit="step") as bar:
            def step_done(row: dict) -> None:
                bar.update(1)
                bar.set_postfix(stage=row["stage"], loss=f"{row['loss']:.4f}", refresh=False)

            history = distill(surrogate, teacher, train_ids, settings.phase_steps, settings.rollout_steps,
                              settings.train_batch_size, settings.learning_rate, settings.anneal_fraction,
                              torch.Generator().manual_seed(run.seed), device, dtype, step_done)
        with progress_bar(total=run.train.steps, desc=f"control {k} layers", unit="step") as bar:
            control = train_plain_gpt(control_config, run.train, run.seed, train_ids, val_ids, device, dtype,
                                      args.out_dir / "control.pt", lambda step, row: bar.update(1))
        batches = held_out_batches(val_ids, settings.n_windows, settings.batch_size, teacher.config.block_size)
        evaluation = evaluate_recovery(teacher, surrogate, control, train_ids, batches, device)
        evaluation = {"teacher_name": run.recipe, "seed": run.seed, "blocks": k, "phases": phases,
                      "teacher_layers": teacher.config.n_layer, "train_step": meta["step"],
                      "surrogate_parameters": surrogate.num_parameters(),
                      "control_parameters": control.num_parameters(),
                      "teacher_parameters": teacher.num_parameters(), **evaluation, **source}
        save_surrogate(args.out_dir / "surrogate.pt", surrogate, {"teacher": run.recipe, "seed": run.seed})
        write_parquet(args.out_dir / "history.parquet", pl.DataFrame(history))
        write_json(args.out_dir / "evaluation.json", evaluation)
        tracking.log_metrics({f"{model}_{key}": evaluation[model][key] for model in ("surrogate", "control")
                              for key in ("cross_entropy", "recovered", "kl_to_teacher")})
        for layer, r2 in enumerate(evaluation["layer_r2"], start=1):
            tracking.log_metrics({"surrogate_layer_r2": r2}, step=layer)
        tracking.log_artifact(args.out_dir / "evaluation.json")
    log.info("k = %d: teacher %.3f, surrogate %.3f (recovers %.1f%%, KL %.3f), control %.3f (%.1f%%) nats; "
             "unigram %.3f; last-layer R² %.3f", k, evaluation["teacher"]["cross_entropy"],
             evaluation["surrogate"]["cross_entropy"], 100 * evaluation["surrogate"]["recovered"],
             evaluation["surrogate"]["kl_to_teacher"], evaluation["control"]["cross_entropy"],
             100 * evaluation["control"]["recovered"], evaluation["unigram_cross_entropy"],
             evaluation["layer_r2"][-1])
