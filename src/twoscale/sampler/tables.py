"""The sample stage's tables (one row per prompt and setting; paired speed rounds) and their summary per setting,
with the selections of equal quality its verdicts and figure read."""

from __future__ import annotations

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.report.tables import RUN_KEYS, require

# the methods of its tables: the parallel sampler, and autoregressive decoding, in the speed table at two
# settings timed beside the sampler's chosen one: full recurrence, and the fewest loops of about equal quality
SAMPLER, AUTOREGRESSIVE = "sampler", "autoregressive"
FULL_RECURRENCE, MATCHED = "full_recurrence", "matched"

# the sample stage's table: one row per prompt and setting, method SAMPLER or AUTOREGRESSIVE (whose row at loops ==
# full recurrence is the reference)
SAMPLE_SETTING = ("method", "loops", "inner_loops", "tolerance", "freeze")


SAMPLE_COLUMNS = (*SAMPLE_SETTING, "prompt", "new_tokens", "seconds", "forward_passes", "group_iterations",
                  "layers_per_token", "gflops_per_token", "agreement", "distinct_fraction", "cross_entropy")


# its speed table: tokens/s per round of the methods timed side by side (SAMPLER, FULL_RECURRENCE, MATCHED); round i
# of two methods is a pair
SPEED_COLUMNS = ("method", "round", "tokens_per_s")


def of_equal_quality(summary: pl.DataFrame, method: str) -> pl.DataFrame:
    """The method's settings of about equal quality to autoregressive decoding at full recurrence: the cross-entropy gap
    within ± the summary's quality_tolerance, and the distinct-token fraction at most its distinct_tolerance below
    the reference's (a repetitive continuation can score a lower cross-entropy)."""
    quality, distinct = float(summary["quality_tolerance"][0]), float(summary["distinct_tolerance"][0])
    return summary.filter((pl.col("method") == method) & (pl.col("cross_entropy_gap").abs() <= quality)
                          & (pl.col("distinct_fraction_gap") >= -distinct))


def fastest_of_equal_quality(summary: pl.DataFrame, method: str) -> dict | None:
    """The method's setting of about equal quality with the most tokens/s in the grid, or None."""
    rows = of_equal_quality(summary, method)
    return None if rows.height == 0 else rows.sort("tokens_per_s", descending=True).row(0, named=True)


def matched_decoding(summary: pl.DataFrame) -> dict:
    """Autoregressive decoding of about equal quality at the fewest loops: chosen by loops, not by timing, so that the
    choice does not depend on a noisy clock; full recurrence itself always qualifies."""
    return of_equal_quality(summary, AUTOREGRESSIVE).sort("loops").row(0, named=True)


def _token_weighted(column: str) -> pl.Expr:
    """The mean of a per-prompt column weighted by the prompts' generated tokens."""
    return ((pl.col(column) * pl.col("new_tokens")).sum() / pl.col("new_tokens").sum()).alias(column)


def sampling_summary(rows: pl.DataFrame, full_loops: int) -> pl.DataFrame:
    """One row per setting: tokens/s (all tokens over all seconds), forward passes and group applications per
    token, the token-weighted mean layer applications and GFLOPs per token, the mean greedy agreement and distinct-
    token fraction, the token-weighted mean cross-entropy, and the paired gaps of cross-entropy and of the distinct
    fraction to autoregressive decoding at `full_loops` (mean over prompts of the per-prompt difference; the cross-
    entropy's with its standard error)."""
    require(rows, "sample", SAMPLE_COLUMNS, "sampling summary")
    reference = rows.filter((pl.col("method") == AUTOREGRESSIVE) & (pl.col("loops") == full_loops))
    if reference.height == 0:
        raise TwoscaleError(f"sampling summary: no autoregressive decoding at {full_loops} loops (the reference)")
    keys = [c for c in rows.columns if c in (*RUN_KEYS, *SAMPLE_SETTING)]
    paired = rows.join(reference.select("prompt", pl.col("cross_entropy").alias("reference_cross_entropy"),
                                        pl.col("distinct_fraction").alias("reference_distinct_fraction")),
                       on="prompt", how="left")
    gap = pl.col("cross_entropy") - pl.col("reference_cross_entropy")
    return (
        paired.group_by(keys, maintain_order=True)
        .agg(
            (pl.col("new_tokens").sum() / pl.col("seconds").sum()).alias("tokens_per_s"),
            (pl.col("forward_passes").sum() / pl.col("new_tokens").sum()).alias("forward_passes_per_token"),
            (pl.col("group_iterations").sum() / pl.col("new_tokens").sum()).alias("group_iterations_per_token"),
            _token_weighted("layers_per_token"),
            _token_weighted("gflops_per_token"),
            pl.col("agreement").mean().alias("agreement"),
            pl.col("distinct_fraction").mean().alias("distinct_fraction"),
            (pl.col("distinct_fraction") - pl.col("reference_distinct_fraction")).mean()
            .alias("distinct_fraction_gap"),
            _token_weighted("cross_entropy"),
            gap.mean().alias("cross_entropy_gap"),
            (gap.std() / pl.len().sqrt()).alias("cross_entropy_gap_sem"),
            pl.len().alias("n_prompts"),
        )
    )
