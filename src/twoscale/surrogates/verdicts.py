"""The verdicts on Raptor's surrogates: the paper's C8 and our C8b, pure functions of one teacher run's rows of the
recovery table (`tables.recovery_table`: one row per k, the number of shared blocks). The recovered fraction is
(CE_unigram − CE_model) / (CE_unigram − CE_teacher) in held-out cross-entropy; it is None where the teacher does
not beat the unigram baseline."""

from __future__ import annotations

from typing import Any

import polars as pl

from twoscale.report.tables import finite, require
from twoscale.report.verdicts import Verdict
from twoscale.surrogates.thresholds import C8_BLOCKS, C8_RECOVERY


def _two_block_row(recovery: pl.DataFrame) -> dict[str, Any] | None:
    """The k = 2 row of one teacher run (None where k = 2 was not distilled), its recovered fractions finite or
    None."""
    require(recovery, "recovery", ("blocks", "surrogate_recovered", "control_recovered"), "C8")
    rows = recovery.filter(pl.col("blocks") == C8_BLOCKS)
    if not rows.height:
        return None
    row = rows.row(0, named=True)
    return {**row, **{key: finite(row[key]) for key in ("surrogate_recovered", "control_recovered")}}


def two_blocks_recover(recovery: pl.DataFrame) -> Verdict:
    """C8: the 2-block surrogate recovers >= 90% of the teacher."""
    row = _two_block_row(recovery)
    recovered = None if row is None else row["surrogate_recovered"]
    return Verdict([None if recovered is None else recovered >= C8_RECOVERY], {"k2": row})


def two_blocks_beat_scratch(recovery: pl.DataFrame) -> Verdict:
    """C8b: the 2-block surrogate recovers more than the control, a plain GPT with as many layers as the surrogate
    has blocks trained from scratch (ours)."""
    row = _two_block_row(recovery)
    surrogate, control = (None, None) if row is None else (row["surrogate_recovered"], row["control_recovered"])
    return Verdict([None if surrogate is None or control is None else surrogate > control], {"k2": row})
