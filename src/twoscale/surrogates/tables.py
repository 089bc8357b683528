"""The surrogates' recovery table from the distill stage's evaluations."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from twoscale.config.io import read_csv
from twoscale.training.device import NUMBERS_ORIGIN


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
                        for key in (prefix + name for name in NUMBERS_ORIGIN)}})
        layers += [{**key, "layer": layer, "r2": r2} for layer, r2 in enumerate(e["layer_r2"], start=1)]
    recovery_schema = {"teacher": pl.String, "seed": pl.Int64, "blocks": pl.Int64}
    return (pl.DataFrame(rows, schema_overrides=recovery_schema) if rows else pl.DataFrame(schema=recovery_schema),
            pl.DataFrame(layers, schema_overrides=recovery_schema) if layers else
            pl.DataFrame(schema={**recovery_schema, "layer": pl.Int64, "r2": pl.Float64}))


# the recovery table's measures: a measure that no run could compute is an empty column in recovery.csv
RECOVERY_MEASURES = ("unigram_cross_entropy", "teacher_cross_entropy", *(
    f"{model}_{measure}" for model in ("surrogate", "control") for measure in ("cross_entropy", "recovered",
                                                                              "kl_to_teacher")))


def read_recovery(path: Path) -> pl.DataFrame:
    """recovery.csv as the surrogates stage wrote it, its measures floats even where every value is missing."""
    recovery = read_csv(path, "the surrogates stage")
    return recovery.with_columns(pl.col(name).cast(pl.Float64) for name in RECOVERY_MEASURES
                                 if name in recovery.columns)
