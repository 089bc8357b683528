"""The sampler's summary, claims C7/C7b and figure on hand-built per-prompt tables whose numbers and verdicts are
known by construction."""

from __future__ import annotations

import math

import polars as pl
import pytest
from PIL import Image

from twoscale.config.errors import TwoscaleError
from twoscale.sampler.claims import C7, C7B
from twoscale.sampler.figures import fig_sampler_tradeoff
from twoscale.sampler.tables import matched_decoding, sampling_summary

FULL = 8


def prompt_rows(method: str, loops: int, seconds: tuple[float, float], cross_entropy: tuple[float, float],
                agreement: float = 1.0, inner_loops: int | None = None, tolerance: float | None = None,
                freeze: str | None = None, forward_passes: int = 10, group_iterations: int = 80,
                distinct: tuple[float, float] = (0.9, 0.7), layers: tuple[float, float] = (26.0, 26.0),
                gflops: tuple[float, float] = (8.0, 8.0)) -> list[dict]:
    """Two prompts of 10 new tokens each."""
    return [{"recipe": "huginn", "seed": 1, "method": method, "loops": loops, "inner_loops": inner_loops,
             "tolerance": tolerance, "freeze": freeze, "prompt": p, "new_tokens": 10, "seconds": seconds[p],
             "forward_passes": forward_passes, "group_iterations": group_iterations, "layers_per_token": layers[p],
             "gflops_per_token": gflops[p], "agreement": agreement, "distinct_fraction": distinct[p],
             "cross_entropy": cross_entropy[p]} for p in (0, 1)]


def table(sampler_seconds: float, sampler_gap: float, fast_gap: float = 0.01,
          sampler_distinct: tuple[float, float] = (0.9, 0.7)) -> pl.DataFrame:
    """Autoregressive decoding at 8 loops (reference: 1 s per prompt, 8 GFLOPs per token) and 2 loops (0.25 s, 2
    GFLOPs), the sampler at two settings: a fast one whose quality is `sampler_gap` off (20 GFLOPs per token), and a
    slow one of equal quality."""
    rows = prompt_rows("autoregressive", FULL, (1.0, 1.0), (2.0, 3.0))
    rows += prompt_rows("autoregressive", 2, (0.25, 0.25), (2.0 + fast_gap, 3.0 + fast_gap),
                        agreement=0.5, group_iterations=20, layers=(8.0, 8.0), gflops=(2.0, 2.0))
    rows += prompt_rows("sampler", FULL, (sampler_seconds, sampler_seconds), (2.0 + sampler_gap, 3.0 + sampler_gap),
                        agreement=0.8, inner_loops=4, tolerance=0.03, freeze="latent_difference", forward_passes=12,
                        group_iterations=30, distinct=sampler_distinct, layers=(50.0, 70.0), gflops=(16.0, 24.0))
    rows += prompt_rows("sampler", FULL, (0.9, 0.9), (2.0, 3.0), inner_loops=8, tolerance=0.01,
                        freeze="latent_difference")
    return pl.DataFrame(rows)


def summary_of(frame: pl.DataFrame, tolerance: float = 0.05) -> pl.DataFrame:
    return sampling_summary(frame, FULL).with_columns(pl.lit(FULL).alias("full_loops"),
                                                      pl.lit(tolerance).alias("quality_tolerance"),
                                                      pl.lit(0.05).alias("distinct_tolerance"))


def speed(sampler: list[float], full: list[float], matched: list[float]) -> pl.DataFrame:
    """The sample stage's paired rounds: tokens/s of each timed method per round."""
    return pl.DataFrame([{"recipe": "huginn", "seed": 1, "method": method, "round": i, "tokens_per_s": value}
                         for method, values in (("full_recurrence", full), ("matched", matched), ("sampler", sampler))
                         for i, value in enumerate(values)])


def test_summary_against_hand_values():
    frame = table(sampler_seconds=0.2, sampler_gap=0.02, sampler_distinct=(0.8, 0.6))
    frame = frame.with_columns(  # one prompt of the fast sampler 0.04 nats worse: gaps 0.0 and 0.04
        pl.when((pl.col("method") == "sampler") & (pl.col("inner_loops") == 4) & (pl.col("prompt") == 1))
        .then(pl.col("cross_entropy") + 0.02).otherwise(pl.col("cross_entropy")).alias("cross_entropy"))
    summary = sampling_summary(frame, FULL)
    fast = summary.filter(pl.col("inner_loops") == 4).row(0, named=True)
    assert fast["tokens_per_s"] == pytest.approx(20 / 0.4)
    assert fast["forward_passes_per_token"] == pytest.approx(24 / 20)
    assert fast["group_iterations_per_token"] == pytest.approx(60 / 20)
    assert fast["layers_per_token"] == pytest.approx((50 * 10 + 70 * 10) / 20)
    assert fast["gflops_per_token"] == pytest.approx((16 * 10 + 24 * 10) / 20)
    assert fast["cross_entropy"] == pytest.approx((2.02 * 10 + 3.04 * 10) / 20)
    assert fast["cross_entropy_gap"] == pytest.approx(0.03)
    assert fast["cross_entropy_gap_sem"] == pytest.approx(math.sqrt(2 * 0.01**2) / math.sqrt(2))
    assert fast["distinct_fraction"] == pytest.approx(0.7)  # mean of 0.8 and 0.6
    assert fast["distinct_fraction_gap"] == pytest.approx(-0.1)  # against 0.9 and 0.7, prompt by prompt
    reference = summary.filter((pl.col("method") == "autoregressive") & (pl.col("loops") == FULL)).row(0, named=True)
    assert reference["cross_entropy_gap"] == 0 and reference["tokens_per_s"] == pytest.approx(10)
    assert reference["distinct_fraction_gap"] == 0 and reference["gflops_per_token"] == pytest.approx(8)
    assert summary.height == 4


def test_summary_needs_the_full_recurrence_reference():
    frame = table(0.2, 0.0).filter(pl.col("loops") != FULL)
    with pytest.raises(TwoscaleError, match="no autoregressive decoding at 8 loops"):
        sampling_summary(frame, FULL)


def test_matched_decoding_is_the_fewest_loops_of_equal_quality():
    assert matched_decoding(summary_of(table(0.2, 0.02)))["loops"] == 2
    assert matched_decoding(summary_of(table(0.2, 0.02, fast_gap=-0.3)))["loops"] == FULL  # far below


def test_c7_reads_the_paired_rounds_and_prints_both_ratios():
    """The grid's fastest setting of equal quality (r′ 4) timed at 5x full recurrence in three rounds; it costs
    20 GFLOPs per token against 8."""
    row = C7.row(summary_of(table(0.2, 0.02)), speed([50.0, 60.0, 40.0], [10.0, 12.0, 8.0], [40.0] * 3))
    assert row["verdict"] == "reproduced"
    assert row["headline"]["speed-up vs full recurrence"] == pytest.approx(5.0)
    assert row["headline"]["FLOP ratio vs full recurrence"] == pytest.approx(0.4)
    assert "5.00× (5.00–5.00) in tokens/s over 3 paired rounds; 0.40× in FLOPs per token" in row["measured"]
    assert "r′ 4, ε 0.03, latent_difference" in row["measured"] and "inconclusive if it straddles 4×" in row["test"]
    assert row["detail"]["speedup"] == {"ratio": pytest.approx(5.0), "low": pytest.approx(5.0),
                                        "high": pytest.approx(5.0), "repeats": 3}


def test_c7_whose_interval_straddles_the_threshold_is_inconclusive():
    row = C7.row(summary_of(table(0.2, 0.02)), speed([30.0, 40.0, 55.0], [10.0] * 3, [40.0] * 3))
    assert row["verdict"] == "inconclusive" and row["reproduced"] is None


@pytest.mark.parametrize(("gap", "distinct"), [(0.2, (0.9, 0.7)), (-0.2, (0.9, 0.7)), (-0.03, (0.5, 0.3))])
def test_c7_without_any_sampler_setting_of_equal_quality_is_not_reproduced(gap, distinct):
    """Too poor, far better than full recurrence, or repetitive (distinct fraction 0.4 below): no setting left."""
    frame = table(0.2, gap, sampler_distinct=distinct).filter(
        ~((pl.col("method") == "sampler") & (pl.col("inner_loops") == 8)))
    row = C7.row(summary_of(frame), speed([50.0] * 3, [10.0] * 3, [40.0] * 3))
    assert row["verdict"] == "not reproduced" and row["headline"]["speed-up vs full recurrence"] is None
    assert "No sampler setting" in row["measured"]


@pytest.mark.parametrize(("fast_gap", "matched", "reproduced"), [
    (0.01, 2, False),  # 2 loops are as good, timed at 40 tokens/s: the sampler's 50 are 1.25x
    (0.3, FULL, True),  # 2 loops are too poor: matched = full recurrence, 5x
])
def test_c7b_compares_with_autoregressive_decoding_at_the_fewest_loops_of_equal_quality(fast_gap, matched, reproduced):
    rounds = speed([50.0] * 3, [10.0] * 3, [40.0 if matched == 2 else 10.0] * 3)
    row = C7B.row(summary_of(table(0.2, 0.02, fast_gap=fast_gap)), rounds)
    assert row["reproduced"] is reproduced
    assert row["headline"]["speed-up vs matched decoding"] == pytest.approx(1.25 if matched == 2 else 5.0)
    assert row["headline"]["FLOP ratio vs matched decoding"] == pytest.approx((2.0 if matched == 2 else 8.0) / 20)
    assert row["headline"]["matched loops"] == matched


def test_sampler_figure_is_a_readable_png(tmp_path):
    path = tmp_path / "tradeoff.png"
    fig_sampler_tradeoff(summary_of(table(0.2, 0.02)), path)
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 800
    assert [p.name for p in tmp_path.iterdir()] == ["tradeoff.png"]
