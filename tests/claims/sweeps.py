"""Hand-built latency rounds for the early-exit verdicts' tests."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

DRIFT = (1.0, 1.1, 0.9, 1.05, 0.95)  # the machine's speed per round: it cancels in every paired ratio


def latency_rounds(sweep: pl.DataFrame, drift: Sequence[float] = DRIFT,
                   jitter: dict[tuple[str, float], Sequence[float]] | None = None) -> pl.DataFrame:
    """Every row of a sweep table timed once per round: its ms_per_token times the round's drift, times its own
    per-round factors where `jitter` gives some (strategy, setting) -> factors."""
    jitter = jitter or {}
    rows = []
    for row in sweep.iter_rows(named=True):
        own = jitter.get((row["strategy"], row["setting"]), [1.0] * len(drift))
        rows += [{"strategy": row["strategy"], "setting": row["setting"], "round": r,
                  "ms_per_token": row["ms_per_token"] * d * f}
                 for r, (d, f) in enumerate(zip(drift, own, strict=True))]
    return pl.DataFrame(rows)
