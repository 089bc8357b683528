"""Checks and selections on the measurement tables shared by the figures and the claims."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from twoscale.pipeline.errors import TwoscaleError
from twoscale.report.thresholds import C4_DLR_LOOPS
from twoscale.training.device import PROVENANCE

RUN_KEYS = ("recipe", "seed")  # every table after train says which training run its rows come from
GEOMETRY_COLUMNS = ("step", "metric", "group", "k", "mean", "median", "q10", "q90")
# the tables the measure stage writes per checkpoint and the geometry stage stacks across training
MEASUREMENT_TABLES = ("geometry", "loss_vs_loops", "depth", "similarity", "trajectory")


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Rows as a Markdown table of these columns, floats to 3 significant digits."""
    def cell(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def require(frame: pl.DataFrame | None, name: str, columns: Sequence[str], user: str) -> pl.DataFrame:
    """The frame, if it has rows and the columns; else a one-line error naming the user (figure or claim)."""
    if frame is None or frame.height == 0:
        raise TwoscaleError(f"{user}: the {name} table is empty")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise TwoscaleError(f"{user}: the {name} table lacks column(s) {', '.join(missing)}")
    return frame


def metric_rows(geometry: pl.DataFrame, metrics: str | Sequence[str], user: str) -> pl.DataFrame:
    """The geometry rows of one or more metrics; each must be present."""
    require(geometry, "geometry", GEOMETRY_COLUMNS, user)
    names = [metrics] if isinstance(metrics, str) else list(metrics)
    rows = geometry.filter(pl.col("metric").is_in(names))
    for name in names:
        if rows.filter(pl.col("metric") == name).height == 0:
            raise TwoscaleError(f"{user}: the geometry table has no {name} rows")
    return rows


def full_depth_rows(sweep: pl.DataFrame) -> pl.DataFrame:
    """The sweep's full-depth rows: the fixed-depth baseline with every group looped max_loops times."""
    full = (pl.col("strategy") == "fixed") & (pl.col("setting") == pl.col("max_loops").cast(pl.Float64))
    return sweep.filter(full)


def with_latency(sweep: pl.DataFrame, latency: pl.DataFrame) -> pl.DataFrame:
    """The sweep table with each setting's latency over the timing rounds: ms_per_token (median), ms_low and
    ms_high (the fastest and slowest round) and generated_mean_loops (mean loops per group while generating)."""
    keys = ["recipe", "seed", "strategy", "setting"]
    summary = latency.group_by(keys).agg(
        pl.col("ms_per_token").median(), pl.col("ms_per_token").min().alias("ms_low"),
        pl.col("ms_per_token").max().alias("ms_high"), pl.col("generated_mean_loops").mean())
    return sweep.join(summary, on=keys, how="left", maintain_order="left")


def dlr_loops(geometry: pl.DataFrame) -> int:
    """The K at which C4, C5 and Fig. 2 read DLR_K: C4_DLR_LOOPS, or the fewest loops any checkpoint measured."""
    rows = metric_rows(geometry, "drift_to_loop_ratio", "dlr_loops")
    return min(C4_DLR_LOOPS, *(int(k) for k in rows.group_by("step").agg(pl.col("k").max())["k"]))




def origins(frame: pl.DataFrame, computation: str, prefix: str = "") -> list[dict[str, Any]]:
    """What computed a stacked table's numbers, one entry per run: {recipe, seed, computation, precision, machine,
    torch} from its columns `prefix` + PROVENANCE (several values joined by ' / '; 'not recorded' if absent)."""
    out = []
    for recipe, seed in runs_in(frame):
        own = of_run(frame, recipe, seed)
        entry: dict[str, Any] = {"recipe": recipe, "seed": seed, "computation": computation}
        for key in PROVENANCE:
            column = prefix + key
            entry[key] = " / ".join(own[column].unique(maintain_order=True).cast(pl.String)) \
                if column in own.columns else "not recorded"
        out.append(entry)
    return out


def training_steps(frame: pl.DataFrame) -> list[int]:
    return sorted(int(s) for s in frame["step"].unique())


def runs_in(frame: pl.DataFrame) -> list[tuple[str, int]]:
    """The (recipe, seed) pairs of a stacked table, in the order they first appear."""
    require(frame, "stacked", RUN_KEYS, "runs_in")
    return [(str(r), int(s)) for r, s in frame.select(RUN_KEYS).unique(maintain_order=True).iter_rows()]


def recipes_in(frame: pl.DataFrame) -> list[str]:
    """The recipes of a stacked table, in the order they first appear."""
    return list(dict.fromkeys(recipe for recipe, _ in runs_in(frame)))


def of_run(frame: pl.DataFrame, recipe: str, seed: int) -> pl.DataFrame:
    """The rows of one training run."""
    return frame.filter((pl.col("recipe") == recipe) & (pl.col("seed") == seed))


# the sample stage's table: one row per prompt and setting, method "sampler" or "autoregressive" (ordinary
# decoding, whose row at loops == full recurrence is the reference)
SAMPLE_SETTING = ("method", "loops", "inner_loops", "tolerance", "freeze")
SAMPLE_COLUMNS = (*SAMPLE_SETTING, "prompt", "new_tokens", "seconds", "forward_passes", "group_iterations",
                  "layers_per_token", "gflops_per_token", "agreement", "distinct_fraction", "cross_entropy")
# its speed table: tokens/s per round of the methods timed side by side ("sampler", "full_recurrence", "matched");
# round i of two methods is a pair
SPEED_COLUMNS = ("method", "round", "tokens_per_s")


def of_equal_quality(summary: pl.DataFrame, method: str) -> pl.DataFrame:
    """The method's settings of about equal quality to ordinary decoding at full recurrence: the cross-entropy gap
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
    """Ordinary decoding of about equal quality at the fewest loops: chosen by loops, not by timing, so that the
    choice does not depend on a noisy clock; full recurrence itself always qualifies."""
    return of_equal_quality(summary, "autoregressive").sort("loops").row(0, named=True)


def _token_weighted(column: str) -> pl.Expr:
    """The mean of a per-prompt column weighted by the prompts' generated tokens."""
    return ((pl.col(column) * pl.col("new_tokens")).sum() / pl.col("new_tokens").sum()).alias(column)


def sampling_summary(rows: pl.DataFrame, full_loops: int) -> pl.DataFrame:
    """One row per setting: tokens/s (all tokens over all seconds), forward passes and group applications per
    token, the token-weighted mean layer applications and GFLOPs per token, the mean greedy agreement and distinct-
    token fraction, the token-weighted mean cross-entropy, and the paired gaps of cross-entropy and of the distinct
    fraction to ordinary decoding at `full_loops` (mean over prompts of the per-prompt difference; the cross-
    entropy's with its standard error)."""
    require(rows, "sample", SAMPLE_COLUMNS, "sampling summary")
    reference = rows.filter((pl.col("method") == "autoregressive") & (pl.col("loops") == full_loops))
    if reference.height == 0:
        raise TwoscaleError(f"sampling summary: no ordinary decoding at {full_loops} loops (the reference)")
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


def recovery_table(evaluations: Sequence[dict]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The distill stage's evaluations as (one row per teacher, seed and k, with what trained the teacher
    (teacher_precision, ...) and the surrogate and control (precision, ...); one row per layer of each surrogate's
    R²)."""
    rows, layers = [], []
    for e in evaluations:
        key = {"teacher": e["teacher_name"], "seed": e["seed"], "blocks": e["blocks"]}
        rows.append({**key, "phases": " ".join(f"{a}-{b}" for a, b in e["phases"]),
                     "teacher_layers": e["teacher_layers"], "unigram_cross_entropy": e["unigram_cross_entropy"],
                     "teacher_cross_entropy": e["teacher"]["cross_entropy"],
                     **{f"{model}_{measure}": e[model][measure] for model in ("surrogate", "control")
                        for measure in ("cross_entropy", "recovered", "kl_to_teacher")},
                     **{f"{model}_parameters": e[f"{model}_parameters"] for model in ("teacher", "surrogate",
                                                                                      "control")},
                     **{key: str(e.get(key, "not recorded")) for prefix in ("teacher_", "")
                        for key in (prefix + name for name in PROVENANCE)}})
        layers += [{**key, "layer": layer, "r2": r2} for layer, r2 in enumerate(e["layer_r2"], start=1)]
    recovery_schema = {"teacher": pl.String, "seed": pl.Int64, "blocks": pl.Int64}
    return (pl.DataFrame(rows, schema_overrides=recovery_schema) if rows else pl.DataFrame(schema=recovery_schema),
            pl.DataFrame(layers, schema_overrides=recovery_schema) if layers else
            pl.DataFrame(schema={**recovery_schema, "layer": pl.Int64, "r2": pl.Float64}))
