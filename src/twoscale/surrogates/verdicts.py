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
    """C8: the 2-block surrogate recovers >= 90% of the teacher; undecided unless the teacher's depth matters: a
    plain GPT of 2 layers trained from scratch (the control) must recover less than that bar, or compressing the
    teacher's depth into 2 blocks is no feat (docs/claims.md#c8)."""
    row = _two_block_row(recovery)
    recovered = None if row is None else row["surrogate_recovered"]
    control = None if row is None else row["control_recovered"]
    detail: dict[str, Any] = {"k2": row, "depth_matters": None if control is None else control < C8_RECOVERY}
    if recovered is None:
        return Verdict([None], detail)
    if control is None:
        return Verdict([None], {**detail, "reason": "no control trained from scratch: whether the teacher's depth "
                                "matters is not known"})
    if control >= C8_RECOVERY:
        return Verdict([None], {**detail, "reason": f"the teacher's depth has nothing to compress: {C8_BLOCKS} "
                                f"layers trained from scratch recover {100 * control:.1f}% of it, at or above the "
                                f"{100 * C8_RECOVERY:g}% the claim reads"})
    return Verdict([recovered >= C8_RECOVERY], detail)


def two_blocks_beat_scratch(recovery: pl.DataFrame) -> Verdict:
    """C8b: the 2-block surrogate recovers more than the control, a plain GPT with as many layers as the surrogate
    has blocks trained from scratch (ours)."""
    row = _two_block_row(recovery)
    surrogate, control = (None, None) if row is None else (row["surrogate_recovered"], row["control_recovered"])
    return Verdict([None if surrogate is None or control is None else surrogate > control], {"k2": row})
