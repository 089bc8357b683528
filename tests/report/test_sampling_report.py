"""The sampler's summary, claims C7/C7b and figure on hand-built per-prompt tables whose numbers and verdicts are
known by construction."""

from __future__ import annotations

import math

import polars as pl
import pytest
from PIL import Image

from twoscale.pipeline.errors import TwoscaleError
from twoscale.report.claims import c7_against_matched_decoding, c7_parallel_sampler
from twoscale.report.plots import fig_sampler_tradeoff
from twoscale.report.tables import sampling_summary

FULL = 8


def prompt_rows(method: str, loops: int, seconds: tuple[float, float], cross_entropy: tuple[float, float],
                agreement: float = 1.0, inner_loops: int | None = None, tolerance: float | None = None,
                freeze: str | None = None, forward_passes: int = 10, group_iterations: int = 80) -> list[dict]:
    """Two prompts of 10 new tokens each."""
    return [{"recipe": "huginn", "seed": 1, "method": method, "loops": loops, "inner_loops": inner_loops,
             "tolerance": tolerance, "freeze": freeze, "prompt": p, "new_tokens": 10, "seconds": seconds[p],
             "forward_passes": forward_passes, "group_iterations": group_iterations, "agreement": agreement,
             "cross_entropy": cross_entropy[p]} for p in (0, 1)]


def table(sampler_seconds: float, sampler_gap: float, ordinary_fast_gap: float = 0.01) -> pl.DataFrame:
    """Ordinary decoding at 8 loops (reference: 1 s per prompt) and 2 loops (0.25 s), the sampler at two
    settings: a fast one whose quality is `sampler_gap` off, and a slow one of equal quality."""
    rows = prompt_rows("autoregressive", FULL, (1.0, 1.0), (2.0, 3.0))
    rows += prompt_rows("autoregressive", 2, (0.25, 0.25), (2.0 + ordinary_fast_gap, 3.0 + ordinary_fast_gap),
                        agreement=0.5, group_iterations=20)
    rows += prompt_rows("sampler", FULL, (sampler_seconds, sampler_seconds), (2.0 + sampler_gap, 3.0 + sampler_gap),
                        agreement=0.8, inner_loops=4, tolerance=0.03, freeze="latent_diff", forward_passes=12,
                        group_iterations=30)
    rows += prompt_rows("sampler", FULL, (0.9, 0.9), (2.0, 3.0), inner_loops=8, tolerance=0.01,
                        freeze="latent_diff")
    return pl.DataFrame(rows)


def summary_of(frame: pl.DataFrame, tolerance: float = 0.05) -> pl.DataFrame:
    return sampling_summary(frame, FULL).with_columns(pl.lit(FULL).alias("full_loops"),
                                                      pl.lit(tolerance).alias("quality_tolerance"))


def test_summary_against_hand_values():
    frame = table(sampler_seconds=0.2, sampler_gap=0.02)
    frame = frame.with_columns(  # one prompt of the fast sampler 0.04 nats worse: gaps 0.0 and 0.04
        pl.when((pl.col("method") == "sampler") & (pl.col("inner_loops") == 4) & (pl.col("prompt") == 1))
        .then(pl.col("cross_entropy") + 0.02).otherwise(pl.col("cross_entropy")).alias("cross_entropy"))
    summary = sampling_summary(frame, FULL)
    fast = summary.filter(pl.col("inner_loops") == 4).row(0, named=True)
    assert fast["tokens_per_s"] == pytest.approx(20 / 0.4)
    assert fast["forward_passes_per_token"] == pytest.approx(24 / 20)
    assert fast["group_iterations_per_token"] == pytest.approx(60 / 20)
    assert fast["cross_entropy"] == pytest.approx((2.02 * 10 + 3.04 * 10) / 20)
    assert fast["cross_entropy_gap"] == pytest.approx(0.03)
    assert fast["cross_entropy_gap_sem"] == pytest.approx(math.sqrt(2 * 0.01**2) / math.sqrt(2))
    reference = summary.filter((pl.col("method") == "autoregressive") & (pl.col("loops") == FULL)).row(0, named=True)
    assert reference["cross_entropy_gap"] == 0 and reference["tokens_per_s"] == pytest.approx(10)
    assert summary.height == 4


def test_summary_needs_the_full_recurrence_reference():
    frame = table(0.2, 0.0).filter(pl.col("loops") != FULL)
    with pytest.raises(TwoscaleError, match="no ordinary decoding at 8 loops"):
        sampling_summary(frame, FULL)


@pytest.mark.parametrize(("seconds", "gap", "speedup", "verdict"), [
    (0.2, 0.02, 5.0, "reproduced"),  # 50 tokens/s against 10: 5x, quality within 0.05 nats
    (0.4, 0.02, 2.5, "not reproduced"),  # 2.5x
    (0.2, 0.2, 1 / 0.9, "not reproduced"),  # the fast setting is too poor: the slow one (1.1x) is the best
])
def test_c7_reads_the_fastest_setting_of_about_equal_quality(seconds, gap, speedup, verdict):
    row = c7_parallel_sampler(summary_of(table(seconds, gap)))
    assert row["verdict"] == verdict
    assert row["headline"]["speed-up vs full recurrence"] == pytest.approx(speedup)


def test_c7_without_any_sampler_setting_of_equal_quality_is_not_reproduced():
    frame = table(0.2, 0.2).filter(~((pl.col("method") == "sampler") & (pl.col("inner_loops") == 8)))
    row = c7_parallel_sampler(summary_of(frame))
    assert row["verdict"] == "not reproduced" and row["headline"]["speed-up vs full recurrence"] is None
    assert "No sampler setting" in row["measured"]


@pytest.mark.parametrize(("seconds", "fast_gap", "speedup", "matched", "verdict"), [
    (0.2, 0.01, 50 / 40, 2, "not reproduced"),  # 2 loops are as good and 40 tokens/s: the sampler is 1.25x
    (0.2, 0.3, 50 / 10, FULL, "reproduced"),  # 2 loops are too poor: matched = full recurrence, 5x
])
def test_c7b_compares_with_the_fastest_ordinary_decoding_of_equal_quality(seconds, fast_gap, speedup, matched,
                                                                          verdict):
    row = c7_against_matched_decoding(summary_of(table(seconds, 0.02, ordinary_fast_gap=fast_gap)))
    assert row["verdict"] == verdict
    assert row["headline"]["speed-up vs matched decoding"] == pytest.approx(speedup)
    assert row["headline"]["matched loops"] == matched


def test_sampler_figure_is_a_readable_png(tmp_path):
    path = tmp_path / "tradeoff.png"
    fig_sampler_tradeoff(summary_of(table(0.2, 0.02)), path)
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 800
    assert [p.name for p in tmp_path.iterdir()] == ["tradeoff.png"]
