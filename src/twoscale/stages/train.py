"""Stage `train`: train the looped GPT on the token arrays, saving checkpoints at train.checkpoint_steps.

Rerunning after a kill resumes from the newest checkpoint of the interrupted run when model, training and data are
unchanged: its checkpoints are kept until training completes in --resume-dir, in a folder of their own per recipe,
seed and fingerprint of everything the run depends on, so a run of other parameters neither resumes from nor
removes them.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

import polars as pl
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import (
    atomic_path,
    load_token_array,
    once_landed,
    read_json,
    recover,
    run_subdir,
    write_json,
    write_parquet,
)
from twoscale.config.parameter_files import parameter_set_of
from twoscale.config.params import RunParams
from twoscale.config.progress import progress_bar
from twoscale.pipeline.observers import tracking
from twoscale.pipeline.records.provenance import remove_record
from twoscale.stages.common import load_run
from twoscale.training.device import (
    configure_torch,
    datasheet_tflops,
    describe,
    matmul_tflops,
    provenance,
    resolve_device,
    training_dtype,
)
from twoscale.training.memory import check_fits
from twoscale.training.trainer import (
    build_state,
    checkpoint_name,
    checkpoint_step,
    compile_blocks,
    latest_resumable,
    model_config,
    publish,
    restore_state,
    run_fingerprint,
    train,
)

HELP = "train a looped GPT (a recipe) or a plain one (a teacher), saving checkpoints across training"

log = logging.getLogger(__name__)

WARMUP_STEPS = 10  # left out of the throughput: the first steps compile and fill the allocator
MODEL_NAME = "twoscale-{recipe}"  # a recipe's final models in the MLflow model registry, a version per training


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resume-dir", type=Path, default=Path("results/.resume"),
                        help="keeps unfinished runs' checkpoints, in <recipe>/seed_<seed>/<fingerprint of "
                        "everything the run depends on>/ (default: results/.resume)")


def remove_other_checkpoints(checkpoint_dir: Path, steps: list[int]) -> None:
    """Remove the checkpoints an earlier training left of other steps than this run's, with their build records,
    so that no output of another run stays beside this one's (once this run's outputs have landed: until then, the
    earlier run's outputs stay whole)."""
    for path in checkpoint_dir.glob("step_*.pt"):
        if path.name not in {checkpoint_name(step) for step in steps}:
            path.unlink(missing_ok=True)
            remove_record(path)


def other_interrupted_runs(run_resume_dir: Path) -> list[Path]:
    """The folders of interrupted runs of the same recipe and seed with other parameters or data, kept beside
    this run's."""
    return sorted(path for path in run_resume_dir.parent.glob("*/") if path != run_resume_dir)


def check_context_fits(run: RunParams, train_tokens: int, val_tokens: int) -> None:
    shortest = min(train_tokens, val_tokens)
    if run.model.block_size + 1 > shortest:
        raise TwoscaleError(
            f"model.block_size = {run.model.block_size} is longer than the corpus allows "
            f"(train {train_tokens} / validation {val_tokens} tokens)"
        )


def corpus_sha256(stats: dict, path: Path) -> str:
    """The sha256 of the corpus the token arrays were made of, as the tokenize stage recorded it in `path`."""
    if "corpus_sha256" not in stats:
        raise TwoscaleError(f"{path} does not name the corpus its tokens were made of (it was written before the "
                            "tokenize stage recorded it): rerun the tokenize stage")
    return stats["corpus_sha256"]


def write_history(out_dir: Path, history: list[dict]) -> pl.DataFrame:
    frame = pl.DataFrame(history, infer_schema_length=None).with_columns(pl.col("val_loss").fill_nan(None))
    write_parquet(out_dir / "history.parquet", frame)
    with atomic_path(out_dir / "history.csv") as tmp:
        frame.write_csv(tmp)
    return frame


def utilisation(rows: list[dict], peak_tflops: float, datasheet: dict[str, float] | None, dtype: torch.dtype,
                device: torch.device) -> dict[str, float | None]:
    """Model TFLOP/s over the training steps of `rows` past the first WARMUP_STEPS (compilation, allocator), and
    the model FLOPs utilisation against the measured matmul peak and, for a known GPU, the datasheet's."""
    timed = rows[WARMUP_STEPS:] or rows
    achieved = (sum(row["model_tflop"] for row in timed) / sum(row["seconds"] for row in timed)) if timed else None
    sheet = None if datasheet is None else datasheet["bf16" if dtype == torch.bfloat16 else "tf32"]
    return {"model_tflops_per_s": achieved, "peak_tflops": peak_tflops,
            "mfu": None if achieved is None else achieved / peak_tflops,
            "datasheet_tflops": sheet, "mfu_datasheet": None if sheet is None or achieved is None else achieved / sheet,
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}


class LiveCurves:
    """The training curves, logged to MLflow as training goes (at each evaluation), so that the UI draws them live:
    each `log` sends the rows of `history` that earlier calls did not."""

    def __init__(self, history: list[dict]) -> None:
        self.history, self.sent = history, 0

    def log(self) -> None:
        rows, self.sent = self.history[self.sent:], len(self.history)
        if rows:
            tracking.log_curves(rows)


def log_result(run: RunParams, metrics: dict, model, out_dir: Path) -> None:
    """Final metrics, the history, and the final model, registered as a version of the recipe's model
    (`registered_name`) tagged with seed and step."""
    tracking.log_metrics({f"final_{k}": v for k, v in metrics.items()})
    tracking.log_artifact(out_dir / "history.csv")
    tracking.log_model(model.cpu(), registered_name(run.recipe, tracking.orchestrator(), out_dir),
                       {**run.tags, "step": str(metrics["step"])}, pip_requirements=["torch==2.13.0"])


def registered_name(recipe: str, orchestrator: str, out_dir: Path) -> str:
    """The registered model a training's final model is a version of: the recipe's (twoscale-paper) for a training
    of params.yaml that the workflow runs (Snakemake, DVC), with its parameter set's name for another set's
    (twoscale-smoke-paper for runs/smoke/...), and one of its own for one run by hand (twoscale-paper-by-hand), so
    that a trial with other parameters or data never stands among the workflow's versions."""
    parameter_set = parameter_set_of(out_dir)
    name = MODEL_NAME.format(recipe=recipe if parameter_set is None else f"{parameter_set}-{recipe}")
    return name if orchestrator in ("snakemake", "dvc") else f"{name}-by-hand"


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    stats = read_json(args.data_dir / "stats.json")
    corpus = corpus_sha256(stats, args.data_dir / "stats.json")
    train_ids, val_ids = load_token_array(args.data_dir / "train.npy"), load_token_array(args.data_dir / "val.npy")
    check_context_fits(run, len(train_ids), len(val_ids))
    configure_torch(params.runtime.threads, run.seed, tf32=True)
    device = resolve_device(params.runtime.device)
    dtype = training_dtype(params.runtime.precision, device)
    config = model_config(run.model, vocab_size=stats["vocab_size"])
    fingerprint = run_fingerprint(params.runtime, run, args.data_dir)
    # Keyed by everything the run depends on: an interrupted run of other parameters or data is never touched.
    resume_dir = args.resume_dir / run_subdir(run.recipe, run.seed) / fingerprint
    for other in other_interrupted_runs(resume_dir):
        log.info("kept: %s, an interrupted run of other parameters or data (delete it to free its space)", other)

    check_fits(config, run.train, device)
    state = build_state(config, run.train, run.seed, device)
    checkpoint_dir = args.out_dir / "checkpoints"
    recover(resume_dir / checkpoint_name(step) for step in run.train.checkpoint_steps)  # a kill's leftovers
    resumable = latest_resumable(resume_dir, fingerprint)
    if resumable is not None:
        restore_state(state, resumable)
        earlier = [resume_dir / checkpoint_name(step) for step in run.train.checkpoint_steps if step <= state.step]
        missing = [path.name for path in earlier if not path.is_file()]
        if missing:
            raise TwoscaleError(f"{resume_dir}: the interrupted run lacks {', '.join(missing)}; delete {resume_dir} "
                                "to train from the start")
        for path in earlier:  # outputs the orchestrator may have removed, landing with the rest
            publish(path, checkpoint_dir / path.name, last=checkpoint_step(path) == max(run.train.checkpoint_steps))
        log.info("resuming from step %d of an interrupted run", state.step)
    else:
        shutil.rmtree(resume_dir, ignore_errors=True)  # this run's own folder, holding nothing it can resume from
    if params.runtime.compile:
        compile_blocks(state.model, device)
    peak = matmul_tflops(device, dtype, repeats=10)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # the probe's matrices are not the run's memory
    log.info("%s, seed %d: %d parameters, groups %s, device %s, %d threads, %s (matmul peak %.1f TFLOP/s)",
             run.recipe, run.seed, state.model.num_parameters(), list(config.groups), describe(device),
             params.runtime.threads, dtype, peak)

    with tracking.stage_run(args.stage, {"runtime": params.runtime, "model": run.model, "train": run.train}, run.tags,
                            provenance(device, dtype)):
        tracking.log_training_corpus(params.data, corpus, args.data_dir)
        started = time.perf_counter()
        start_step = state.step
        curves = LiveCurves(state.history)  # a resumed run's earlier steps first
        with progress_bar(total=run.train.steps, initial=state.step, desc=f"train {run.recipe}", unit="step") as bar:
            def step_done(step: int, row: dict) -> None:
                bar.update(1)
                bar.set_postfix(loss=f"{row['train_loss']:.3f}", refresh=False)
                if row["val_loss"] == row["val_loss"]:  # not NaN
                    bar.write(f"step {step}: train {row['train_loss']:.3f}, val {row['val_loss']:.3f}",
                              file=bar.fp)  # the bar's stream: the job's log for a workflow's job
                    curves.log()

            train(state, train_ids, val_ids, run.train, device, checkpoint_dir, resume_dir, fingerprint,
                  step_done, dtype)
        curves.log()
        elapsed = time.perf_counter() - started
        frame = write_history(args.out_dir, state.history)
        speed = utilisation(state.history[start_step:], peak, datasheet_tflops(device), dtype, device)
        final = state.history[-1]
        metrics = {
            "step": state.step,
            "val_loss": final["val_loss"],
            "train_loss": float(frame["train_loss"].tail(run.train.eval_every).mean()),
            "unigram_val_loss": stats["unigram_val_loss"],
            "tokens_per_s": None if state.step == start_step  # resumed after its last step: nothing timed
            else (state.step - start_step) * run.train.batch_size * config.block_size / elapsed,
            "parameters": state.model.num_parameters(),
            "eval_loops": run.train.eval_loops,
            "device": describe(device),
            **provenance(device, dtype),
            **speed,
        }
        shown = {key: "n/a" if metrics[key] is None else format(metrics[key], spec)  # nothing timed: n/a
                 for key, spec in (("tokens_per_s", ",.0f"), ("model_tflops_per_s", ".3g"), ("mfu", ".1%"))}
        log.info("final: val loss %.3f (unigram baseline %.3f), %s tokens/s, %s model TFLOP/s, MFU %s",
                 metrics["val_loss"], metrics["unigram_val_loss"], *shown.values())
        write_json(args.out_dir / "metrics.json", metrics)
        log_result(run, metrics, state.model, args.out_dir)
    once_landed(lambda: remove_other_checkpoints(checkpoint_dir, run.train.checkpoint_steps))
    once_landed(lambda: remove_resume_state(resume_dir, args.resume_dir))


def remove_resume_state(run_resume_dir: Path, root: Path) -> None:
    """The interrupted run's state, no longer needed once the run's outputs are in place."""
    shutil.rmtree(run_resume_dir, ignore_errors=True)
    remove_empty_parents(run_resume_dir.parent, root)


def remove_empty_parents(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents up to and including `root` while they are empty."""
    for path in [folder, *folder.parents]:
        if not path.is_relative_to(root):
            return
        try:
            path.rmdir()
        except OSError:  # not empty, or already gone
            return
