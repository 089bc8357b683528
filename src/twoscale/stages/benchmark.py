"""`benchmark`: print the per-step cost of every exit criterion and ms per generated token of every strategy at its
best setting (the fastest within 1% of the perplexity of the best fixed depth, or of full depth, from the tradeoff
stage's summary), on this machine."""

from __future__ import annotations

import argparse
import logging
import os
import platform
from pathlib import Path

import polars as pl
import torch
from tqdm import tqdm

from twoscale.benchmark import step_costs, strategy_latency
from twoscale.errors import TwoscaleError
from twoscale.io import load_token_array, read_json, write_json
from twoscale.stages.common import add_params_argument, load
from twoscale.sweep import held_out_prompts, never_exit_setting
from twoscale.training import configure_torch, load_model_matching, resolve_device

log = logging.getLogger("twoscale.benchmark")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--checkpoint", type=Path, help="default: the final checkpoint under results/train")
    parser.add_argument("--data-dir", type=Path, default=Path("data/prepared"), help="reads val.npy and stats.json")
    parser.add_argument("--summary", type=Path, default=Path("results/sweep/summary.csv"),
                        help="the tradeoff stage's per-strategy summary (best settings)")
    parser.add_argument("--reference", choices=REFERENCES, default="best_fixed",
                        help="best settings within 1%% of the best fixed depth K* (default) or of full depth")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; medians are reported")
    parser.add_argument("--out", type=Path, help="also write the tables as JSON here")


REFERENCES = {"best_fixed": "kstar", "full_depth": "best"}  # --reference: its column prefix in summary.csv


def best_settings(summary_path: Path, reference: str, strategies: dict, max_loops: int
                  ) -> dict[str, tuple[float, str]]:
    """Each strategy's best setting from the summary; where none kept perplexity within 1% of the reference, the
    setting that never exits (full depth)."""
    try:
        summary = pl.read_csv(summary_path)
    except FileNotFoundError:
        raise TwoscaleError(f"{summary_path}: not found (run the pipeline's tradeoff stage first)") from None
    column = f"{REFERENCES[reference]}_setting"
    if column not in summary.columns:
        raise TwoscaleError(f"{summary_path}: no {column} column (rerun the tradeoff stage)")
    best = {row["strategy"]: row[column] for row in summary.iter_rows(named=True)}
    fallback = {name: (never_exit_setting(spec["criterion"], max_loops), "none within 1%: full depth")
                for name, spec in strategies.items()}
    return {name: (float(best[name]), f"best within 1% of {reference}") if best.get(name) is not None
            else fallback[name] for name in strategies}


def markdown(rows: list[dict], columns: list[str]) -> str:
    def cell(value) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def machine(threads: int, device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
            f"{threads} thread(s), device {device}")


def run(args: argparse.Namespace) -> None:
    if args.repeats < 1:
        raise TwoscaleError(f"--repeats must be at least 1, got {args.repeats}")
    params = load(args)
    sweep = params.sweep
    checkpoint = args.checkpoint or Path(f"results/train/checkpoints/step_{params.train.steps}.pt")
    configure_torch(sweep.threads, params.runtime.seed)
    device = resolve_device(params.runtime.device)
    stats = read_json(args.data_dir / "stats.json")
    model, _ = load_model_matching(checkpoint, params.model, stats["vocab_size"], device)
    val_ids = load_token_array(args.data_dir / "val.npy")
    prompts = held_out_prompts(val_ids, sweep.n_prompts, sweep.prompt_tokens)
    specs = {name: strategy.spec for name, strategy in sweep.strategies.items()}
    chosen = best_settings(args.summary, args.reference, specs, sweep.max_loops)

    costs = step_costs(model, prompts[0], specs, sweep.max_loops, args.repeats)
    latency = []
    full = strategy_latency(model, prompts, sweep.new_tokens, specs["fixed"], sweep.max_loops, sweep.max_loops,
                            args.repeats)
    for name in tqdm(specs, desc="benchmark", unit="strategy"):
        setting, note = chosen[name]
        timing = strategy_latency(model, prompts, sweep.new_tokens, specs[name], setting, sweep.max_loops,
                                  args.repeats)
        latency.append({"strategy": name, "setting": setting, "chosen": note, **timing,
                        "vs_full_depth": timing["ms_per_token"] / full["ms_per_token"]})
    host = machine(sweep.threads, device)
    print(f"machine: {host}; medians of {args.repeats} repeats")
    print("\nper-step cost of each exit decision (first looped group, batch 1, KV cache)\n")
    print(markdown(costs, ["strategy", "criterion_ms_per_step", "group_step_ms"]))
    print(f"\nms per generated token ({sweep.n_prompts} prompts x {sweep.new_tokens} tokens; full depth "
          f"{full['ms_per_token']:.3g} ms)\n")
    print(markdown(latency, ["strategy", "setting", "chosen", "ms_per_token", "spread_ms", "generated_mean_loops",
                             "vs_full_depth"]))
    if args.out:
        write_json(args.out, {"machine": host, "repeats": args.repeats,
                              "step_costs": costs, "latency": latency, "full_depth": full})
