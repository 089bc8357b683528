"""Stage `sample`: the parallel sampler against cached autoregressive decoding on one run's final checkpoint (one job
per recipe under sample.recipes and seed): tokens/s, forward passes, layer applications and GFLOPs per token, greedy
agreement, distinct-token fraction and re-scored quality for every setting of the grid (drawn by the
`sampler_figures` stage); then the chosen sampler setting (the fastest of about equal quality) timed beside
autoregressive decoding at full recurrence and at the fewest loops of about equal quality in sample.repeats paired
rounds, for the speed verdicts of C7."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import write_parquet, write_text
from twoscale.config.params import SampleParams
from twoscale.config.progress import progress_bar
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.pipeline.observers import tracking
from twoscale.sampler.comparison import (
    measure_prompt,
    sampler_throughput,
    settings_grid,
    settings_of,
    shared_settings,
    speed_rows,
)
from twoscale.sampler.tables import SAMPLER, fastest_of_equal_quality, matched_decoding, sampling_summary
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import load_run, origin_columns, run_columns
from twoscale.training.batches import held_out_prompts
from twoscale.training.device import provenance

HELP = "the parallel sampler against cached autoregressive decoding on one run's final checkpoint"

log = logging.getLogger(__name__)


def paired_rounds(model: LoopedGPT, prompts: list[list[int]], sample: SampleParams, summary: pl.DataFrame
                  ) -> list[dict[str, Any]]:
    """The speed rows after the grid: the fastest sampler setting of about equal quality (none if no setting is)
    timed beside autoregressive decoding at full recurrence and at the fewest loops of about equal quality."""
    chosen = fastest_of_equal_quality(summary, SAMPLER)
    settings = None if chosen is None else settings_of(chosen, sample)
    matched_loops = int(matched_decoding(summary)["loops"])
    log.info("timing %s beside autoregressive decoding at %d and %d loops in %d paired rounds",
             "no sampler setting (none of about equal quality)" if settings is None else "the sampler at "
             f"r' {settings.inner_loops}, eps {settings.tolerance:g}, {settings.freeze}",
             sample.loops, matched_loops, sample.repeats)
    rates = sampler_throughput(model, prompts, sample.new_tokens, sample.loops, matched_loops, settings,
                               sample.repeats)
    return speed_rows(rates, sample.loops, matched_loops, settings)


def run(args: argparse.Namespace) -> None:
    params, run = load_run(args)
    sample = params.sample
    if run.recipe not in sample.recipes:
        raise TwoscaleError(f"--recipe {run.recipe!r} is not under sample.recipes ({', '.join(sample.recipes)})")
    model, meta, val_ids, device = open_checkpoint(args, params, run, sample.threads)
    source = provenance(device, next(model.parameters()).dtype)
    prompts = held_out_prompts(val_ids, sample.n_prompts, sample.prompt_tokens)
    grid = settings_grid(sample.inner_loops, sample.tolerances, sample.freezes, **shared_settings(sample))
    log.info("sampling %s, seed %d, step %d: %d prompts x (%d sampler settings + %d loop counts)", run.recipe,
             run.seed, meta["step"], len(prompts), len(grid), len(sample.baseline_loops))
    # the system-metrics sampler stalls this process a few ms every 10 s, about 0.1% of the timed seconds, falling
    # on the methods alike as they alternate (docs/running.md#tracking)
    with tracking.stage_run(args.stage, {"sample": params.sample}, run.tags, source):
        rows = []
        prompts_bar = progress_bar(prompts, desc=f"sample {run.recipe} seed {run.seed}", unit="prompt")
        for index, prompt in enumerate(prompts_bar):
            rows += measure_prompt(model, index, prompt, sample.new_tokens, sample.loops, sample.baseline_loops,
                                   grid)
        table = pl.DataFrame(rows, infer_schema_length=None).select(
            *run_columns(run), pl.all(), pl.lit(meta["step"]).cast(pl.Int64).alias("train_step"),
            *origin_columns(source))
        summary = sampling_summary(table, sample.loops).with_columns(
            pl.lit(sample.loops).alias("full_loops"), pl.lit(sample.quality_tolerance).alias("quality_tolerance"),
            pl.lit(sample.distinct_tolerance).alias("distinct_tolerance"))
        speed = pl.DataFrame(paired_rounds(model, prompts, sample, summary), infer_schema_length=None).select(
            *run_columns(run), pl.all(), *origin_columns(source))
        write_parquet(args.out_dir / "sample.parquet", table)
        write_text(args.out_dir / "summary.csv", summary.write_csv(float_precision=6))
        write_text(args.out_dir / "speed.csv", speed.write_csv(float_precision=6))
        for name in ("summary.csv", "speed.csv"):
            tracking.log_artifact(args.out_dir / name)
        for index, row in enumerate(summary.iter_rows(named=True)):
            tracking.log_metrics({key: row[key] for key in ("tokens_per_s", "forward_passes_per_token",
                                                            "gflops_per_token", "agreement", "distinct_fraction",
                                                            "cross_entropy_gap")}, step=index)
            log.info("%s loops %d r' %s eps %s %s: %.0f tokens/s, %.4g GFLOPs/token, gap %+.3f nats, distinct "
                     "%.2f, agreement %.2f", row["method"], row["loops"], row["inner_loops"], row["tolerance"],
                     row["freeze"], row["tokens_per_s"], row["gflops_per_token"], row["cross_entropy_gap"],
                     row["distinct_fraction"], row["agreement"])
