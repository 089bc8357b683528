"""`benchmark`: print, on this machine, the matmul peak in fp32 and bf16, the training throughput of every recipe in
both precisions against that peak, for each recipe the per-step cost of every exit criterion and ms per
generated token of every strategy at its best setting (the fastest within 1% of the perplexity of the best fixed
depth, or of full depth, from the tradeoff stage's summary), and for each sampled recipe the parallel sampler's
tokens/s beside autoregressive decoding at full recurrence and at the fewest loops of about equal quality (the settings
from the sample stage's summary), on one thread and on every core (on a GPU: at sample.threads only)."""

from __future__ import annotations

import argparse
import logging
import os
import platform
from pathlib import Path

import polars as pl
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import load_token_array, read_json, run_subdir, write_json
from twoscale.config.parameter_files import results_root
from twoscale.config.params import Params, RunParams
from twoscale.config.progress import progress_bar
from twoscale.exits.sweep import never_exit_setting
from twoscale.report.tables import markdown_table
from twoscale.sampler.comparison import settings_of
from twoscale.sampler.tables import FULL_RECURRENCE, MATCHED, SAMPLER, fastest_of_equal_quality, matched_decoding
from twoscale.stages.checkpoints import load_final_model
from twoscale.stages.common import add_params_argument
from twoscale.stages.validation import read_params
from twoscale.tools.timings import sampler_medians, step_costs, strategy_latency, training_throughput
from twoscale.training.batches import held_out_prompts
from twoscale.training.device import (
    configure_torch,
    datasheet_tflops,
    describe,
    matmul_size,
    matmul_tflops,
    resolve_device,
)
from twoscale.training.trainer import model_config

HELP = "print per-step criterion costs and ms per token of each strategy at its best setting"

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
REFERENCES = {"best_fixed": "kstar", "full_depth": "best"}  # --reference: its column prefix in summary.csv


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--recipes", nargs="+", help="the recipes to time (default: every recipe)")
    parser.add_argument("--seed", type=int, help="the run of each recipe to time (default: the first seed)")
    # each folder defaults to the parameter set's own (results/train of params.yaml, runs/gpu/results/train of
    # configs/gpu.yaml)
    parser.add_argument("--train-dir", type=Path,
                        help="reads <recipe>/seed_<seed>/checkpoints/ (the final checkpoint of each run)")
    parser.add_argument("--data-dir", type=Path, help="reads train.npy, val.npy and stats.json")
    parser.add_argument("--summary", type=Path,
                        help="the tradeoff stage's per-run, per-strategy summary (best settings)")
    parser.add_argument("--sample-dir", type=Path,
                        help="reads <recipe>/seed_<seed>/summary.csv of the sample stage (the settings to time)")
    parser.add_argument("--reference", choices=REFERENCES, default="best_fixed",
                        help="best settings within 1%% of the best fixed depth K* (default) or of full depth")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; medians are reported")
    parser.add_argument("--training-steps", type=int, default=8,
                        help="timed training steps per recipe and precision, after one untimed step")
    parser.add_argument("--out", type=Path, help="also write the tables as JSON here")
    parser.add_argument("--training-only", action="store_true",
                        help="only the matmul peak and the training throughput (needs the token arrays alone, no "
                        "trained checkpoint or pipeline result)")


def best_settings(summary: pl.DataFrame, reference: str, run: RunParams, strategies: dict, max_loops: int
                  ) -> dict[str, tuple[float, str]]:
    """Each strategy's best setting in the run's summary rows; where none kept perplexity within 1% of the
    reference, the setting that never exits (full depth)."""
    column = f"{REFERENCES[reference]}_setting"
    if column not in summary.columns:
        raise TwoscaleError(f"the tradeoff summary has no {column} column (rerun the tradeoff stage)")
    own = summary.filter((pl.col("recipe") == run.recipe) & (pl.col("seed") == run.seed))
    best = {row["strategy"]: row[column] for row in own.iter_rows(named=True)}
    fallback = {name: (never_exit_setting(spec["criterion"], max_loops), "none within 1%: full depth")
                for name, spec in strategies.items()}
    return {name: (float(best[name]), f"best within 1% of {reference}") if best.get(name) is not None
            else fallback[name] for name in strategies}


def read_summary(path: Path, stage: str = "tradeoff") -> pl.DataFrame:
    try:
        return pl.read_csv(path)
    except FileNotFoundError:
        raise TwoscaleError(f"{path}: not found (run the pipeline's {stage} stage first)") from None


def machine(device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    return f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, torch {torch.__version__}, device {describe(device)}"


def training_rows(runs: list[RunParams], data_dir: Path, device: torch.device, steps: int,
                  peaks: dict[str, float]) -> list[dict]:
    """Per recipe and precision (and on CUDA, eager and with compiled layers): training throughput at
    runtime.threads, against the measured matmul peak of that precision."""
    stats = read_json(data_dir / "stats.json")
    ids = load_token_array(data_dir / "train.npy")
    variants = [False, True] if device.type == "cuda" else [False]
    warmup = 3 if device.type == "cuda" else 1  # compilation, cuBLAS and allocator warm-up on the GPU
    rows = []
    for run in progress_bar(runs, desc="benchmark training", unit="recipe"):
        config = model_config(run.model, stats["vocab_size"])
        fp32 = {}  # per variant: bf16 is compared with fp32 run the same way (eager or compiled)
        for precision, dtype in PRECISIONS.items():
            for compiled in variants:
                timing = training_throughput(config, run.train, ids, run.seed, device, dtype, steps, compiled,
                                             warmup)
                fp32.setdefault(compiled, timing)
                rows.append({"recipe": run.recipe, "precision": precision, "compiled": compiled, **timing,
                             "mfu": timing["tflops"] / peaks[precision],
                             "speedup_vs_fp32": timing["tokens_per_s"] / fp32[compiled]["tokens_per_s"]})
    return rows


def exit_rows(params: Params, runs: list[RunParams], args: argparse.Namespace, device: torch.device
              ) -> tuple[list[dict], list[dict]]:
    """Per recipe: the cost of each exit decision, and ms per generated token of each strategy at its best
    setting, on the run's final checkpoint."""
    sweep = params.sweep
    stats = read_json(args.data_dir / "stats.json")
    prompts = held_out_prompts(load_token_array(args.data_dir / "val.npy"), sweep.n_prompts, sweep.prompt_tokens)
    specs = {name: strategy.spec for name, strategy in sweep.strategies.items()}
    summary = read_summary(args.summary)
    costs, latency = [], []
    for run in runs:
        model, _ = load_final_model(args.train_dir, args.data_dir, params, run, stats["vocab_size"], device)
        chosen = best_settings(summary, args.reference, run, specs, sweep.max_loops)
        costs += [{"recipe": run.recipe, **row}
                  for row in step_costs(model, prompts[0], specs, sweep.max_loops, args.repeats)]
        full = strategy_latency(model, prompts, sweep.new_tokens, specs["fixed"], sweep.max_loops,
                                sweep.max_loops, args.repeats)
        for name in progress_bar(specs, desc=f"benchmark {run.recipe}", unit="strategy"):
            setting, note = chosen[name]
            timing = strategy_latency(model, prompts, sweep.new_tokens, specs[name], setting, sweep.max_loops,
                                      args.repeats)
            latency.append({"recipe": run.recipe, "strategy": name, "setting": setting, "chosen": note, **timing,
                            "vs_full_depth": timing["ms_per_token"] / full["ms_per_token"]})
    return costs, latency


def sampler_rows(params: Params, runs: list[RunParams], args: argparse.Namespace, device: torch.device
                 ) -> list[dict]:
    """Per sampled recipe and thread count: tokens/s of the sampler at its fastest setting of about equal quality
    (else the paper's defaults), of autoregressive decoding at full recurrence, and of autoregressive decoding at the
    fewest loops of about equal quality, timed side by side."""
    sample = params.sample
    stats = read_json(args.data_dir / "stats.json")
    prompts = held_out_prompts(load_token_array(args.data_dir / "val.npy"), sample.n_prompts, sample.prompt_tokens)
    rows = []
    for run in (r for r in runs if r.recipe in sample.recipes):
        summary = read_summary(args.sample_dir / run_subdir(run.recipe, run.seed) / "summary.csv", "sample")
        chosen = fastest_of_equal_quality(summary, SAMPLER)
        settings = settings_of({"inner_loops": 4, "tolerance": 0.03, "freeze": "latent_difference"} if chosen is None
                               else chosen, sample)
        matched_loops = int(matched_decoding(summary)["loops"])
        model, _ = load_final_model(args.train_dir, args.data_dir, params, run, stats["vocab_size"], device)
        labels = {FULL_RECURRENCE: f"{sample.loops} loops", MATCHED: f"{matched_loops} loops",
                  SAMPLER: f"r' {settings.inner_loops}, eps {settings.tolerance:g}, {settings.freeze}"
                  + ("" if chosen else " (none within the tolerance: the paper's defaults)")}
        thread_counts = [sample.threads] if device.type == "cuda" else sorted({sample.threads, os.cpu_count() or 1})
        for threads in progress_bar(thread_counts, desc=f"benchmark sampler {run.recipe}", unit="thread count"):
            torch.set_num_threads(threads)
            timing = sampler_medians(model, prompts, sample.new_tokens, sample.loops, matched_loops, settings,
                                     args.repeats)
            full, same = timing[FULL_RECURRENCE], timing[MATCHED]
            for method, numbers in timing.items():
                rows.append({
                    "recipe": run.recipe, "threads": threads, "method": method, "setting": labels[method],
                    **numbers,
                    "vs_full_recurrence": numbers["tokens_per_s"] / full["tokens_per_s"],
                    "vs_matched_quality": numbers["tokens_per_s"] / same["tokens_per_s"],
                })
    return rows


DEFAULT_INPUTS = {"train_dir": "results/train", "data_dir": "data/prepared", "summary": "results/sweep/summary.csv",
                  "sample_dir": "results/sample"}  # under the parameter set's results root


def run(args: argparse.Namespace) -> None:
    root = results_root(args.params)
    for name, path in DEFAULT_INPUTS.items():
        if getattr(args, name) is None:
            setattr(args, name, root / path)
    for flag, value in (("--repeats", args.repeats), ("--training-steps", args.training_steps)):
        if value < 1:
            raise TwoscaleError(f"{flag} must be at least 1, got {value}")
    params = read_params(args.params)  # every strategy's grid builds
    seed = params.runtime.seeds[0] if args.seed is None else args.seed
    runs = [params.run(recipe, seed) for recipe in (args.recipes or params.recipes)]
    device = resolve_device(params.runtime.device)

    configure_torch(params.runtime.threads, seed, tf32=True)  # as training runs: float32 matmuls may use TF32
    sides = {precision: matmul_size(device, dtype) for precision, dtype in PRECISIONS.items()}
    peaks = {precision: matmul_tflops(device, dtype, args.repeats, sides[precision])
             for precision, dtype in PRECISIONS.items()}
    datasheet = datasheet_tflops(device)
    training = training_rows(runs, args.data_dir, device, args.training_steps, peaks)
    costs, latency, sampling = [], [], []
    if not args.training_only:
        configure_torch(params.sweep.threads, seed)
        costs, latency = exit_rows(params, runs, args, device)
        sampling = sampler_rows(params, runs, args, device)

    print(f"machine: {machine(device)}; medians of {args.repeats} repeats")
    print(f"\nmatmul peak, measured ({params.runtime.threads} thread(s), random data; fp32 as TF32 where the "
          "device has it): " + ", ".join(f"{precision} {tflops:.3g} TFLOP/s ({sides[precision]}^3)"
                                         for precision, tflops in peaks.items()))
    if datasheet:
        print("datasheet peak (dense): " + ", ".join(f"{k} {v:g} TFLOP/s" for k, v in datasheet.items()))
    print(f"\ntraining throughput ({params.runtime.threads} thread(s), {args.training_steps} steps of batch "
          f"{runs[0].train.batch_size}; model FLOPs of the matmuls, attention's included; MFU against the "
          "measured peak)\n")
    print(markdown_table(training, ["recipe", "precision", "compiled", "s_per_step", "tokens_per_s", "tflops",
                                    "mfu", "speedup_vs_fp32"]))
    if args.out:
        write_json(args.out, {"machine": machine(device), "repeats": args.repeats, "matmul_tflops": peaks,
                              "matmul_sides": sides, "datasheet_tflops": datasheet,
                              "training": training, "step_costs": costs, "latency": latency,
                              "sampler": sampling})
    if args.training_only:
        return
    print(f"\nper-step cost of each exit decision ({params.sweep.threads} thread(s); first looped group, batch 1, "
          "KV cache)\n")
    print(markdown_table(costs, ["recipe", "strategy", "criterion_ms_per_step", "group_step_ms"]))
    print(f"\nms per generated token ({params.sweep.threads} thread(s); {params.sweep.n_prompts} prompts x "
          f"{params.sweep.new_tokens} tokens), split into criterion work (the exit decisions: decode and "
          "arithmetic) and layer work by the share of the tokens' time the exit decisions took\n")
    print(markdown_table(latency, ["recipe", "strategy", "setting", "chosen", "ms_per_token", "spread_ms",
                                   "layer_ms", "criterion_ms", "generated_mean_loops", "vs_full_depth"]))
    if sampling:
        print(f"\nparallel sampler vs cached autoregressive decoding, tokens/s after the prefill "
              f"({params.sample.n_prompts} prompts x {params.sample.new_tokens} tokens, greedy, batch 1)\n")
        print(markdown_table(sampling, ["recipe", "threads", "method", "setting", "tokens_per_s", "spread",
                                        "vs_full_recurrence", "vs_matched_quality"]))
