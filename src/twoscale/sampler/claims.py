"""The parallel sampler's claims in words: C7 (Geiping et al.'s speed-up at full recurrence) and C7b (ours: against
autoregressive decoding at the fewest loops of about equal quality), each a `Claim` record with its verdict
(`sampler.verdicts`) and its measured text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from twoscale.report.claim import Claim, Headline, Line, Revision, fmt, ratio_value, speed_text, times
from twoscale.sampler.tables import FULL_RECURRENCE, MATCHED, SAMPLER
from twoscale.sampler.thresholds import C7_MIN_SPEEDUP, C7B_MIN_SPEEDUP
from twoscale.sampler.verdicts import Speedup, speedup_over_full_recurrence, speedup_over_matched_decoding


def _sampler_setting(row: Mapping[str, Any]) -> str:
    return f"r′ {row['inner_loops']}, ε {row['tolerance']:g}, {row['freeze']}"


_NO_SAMPLER = "No sampler setting of about equal quality."


def _cost_text(row: Mapping[str, Any]) -> str:
    """A setting's cost per generated token: layer applications and MFLOPs."""
    return f"{fmt(row['layers_per_token'])} layer applications and {fmt(row['gflops_per_token'] * 1e3)} MFLOPs"


def _speedup_text(verdict: Speedup, reference: str) -> str:
    """The sampler over a reference: paired tokens/s ratio with its 95% interval, and the FLOP ratio."""
    rounds = "" if verdict.speedup is None else f" over {verdict.speedup.repeats} paired rounds"
    return (f"sampler vs {reference}: {speed_text(verdict.speedup)} in tokens/s{rounds}; "
            f"{times(verdict.flop_ratio)} in FLOPs per token")


# the quality rule both claims read was made two-sided, with its distinct-fraction part, after C7 had been read
EQUAL_QUALITY_AFTER = Revision(
    reading="about equal quality is two-sided (the cross-entropy gap within ± sample.quality_tolerance) and asks a "
    "distinct-token fraction at most sample.distinct_tolerance below full recurrence's",
    replaced="a gap of at most sample.quality_tolerance above full recurrence's, with no check on repetition",
    why="a degenerate, repetitive continuation is easy for the model to predict and scores a low cross-entropy, so a "
    "one-sided rule admits it",
    when="2026-11-24 (ea9d77f), after C7 had been read 'reproduced' at 4.494× on 2026-11-23 (d422333)")

# "about equal quality", as both claims' tests say it (the tolerances are parameters of the sample section)
_EQUAL_QUALITY = (
    "the mean over prompts of the sampler's re-scored cross-entropy minus that of autoregressive decoding at full "
    "recurrence is within ± sample.quality_tolerance ({quality:g} nats), and its distinct-token fraction (distinct "
    "generated tokens over generated tokens, mean over prompts) is at most sample.distinct_tolerance ({distinct:g}) "
    "below full recurrence's")


def _c7_measured(verdict: Speedup, summary: pl.DataFrame, speed: pl.DataFrame | None) -> tuple[str, Headline]:
    full, sampler = verdict.detail[FULL_RECURRENCE], verdict.detail[SAMPLER]
    measured = (
        f"autoregressive decoding at {full['loops']} loops: {fmt(full['tokens_per_s'])} tokens/s in the grid, "
        f"{_cost_text(full)} per token, re-scored cross-entropy {fmt(full['cross_entropy'], 3)}, distinct "
        f"fraction {fmt(full['distinct_fraction'])}. "
        + (_NO_SAMPLER if sampler is None else
           f"Fastest sampler setting of about equal quality ({_sampler_setting(sampler)}): "
           f"{fmt(sampler['tokens_per_s'])} tokens/s in the grid, gap {sampler['cross_entropy_gap']:+.3f} "
           f"± {fmt(sampler['cross_entropy_gap_sem'], 3)} nats, distinct fraction "
           f"{fmt(sampler['distinct_fraction'])} ({sampler['distinct_fraction_gap']:+.3f}), agreement "
           f"{100 * sampler['agreement']:.0f}%, {fmt(sampler['forward_passes_per_token'])} forward passes, "
           f"{fmt(sampler['group_iterations_per_token'])} group applications (autoregressive: "
           f"{fmt(full['group_iterations_per_token'])}) and {_cost_text(sampler)} per token; "
           f"{_speedup_text(verdict, 'autoregressive')}.")
    )
    return measured, {
        "speed-up vs full recurrence": ratio_value(verdict.speedup), "FLOP ratio vs full recurrence":
        verdict.flop_ratio, "quality gap (nats)": (sampler or {}).get("cross_entropy_gap"),
        "distinct fraction gap": (sampler or {}).get("distinct_fraction_gap"),
        "agreement": (sampler or {}).get("agreement")}


def _c7_test(verdict: Speedup) -> str:
    quality = _EQUAL_QUALITY.format(quality=verdict.quality_tolerance, distinct=verdict.distinct_tolerance)
    return (f"Greedy, batch size 1, the same held-out prompts. About equal quality: {quality}. "
            f"The fastest such setting of the grid is timed beside autoregressive decoding at full recurrence in "
            f"paired rounds (sample.repeats); the speed-up is their ratio of tokens/s with a 95% interval. Reproduced "
            f"if the interval lies at or above {C7_MIN_SPEEDUP:g}×; not reproduced if it lies below (or if no setting "
            f"is of about equal quality); inconclusive if it straddles {C7_MIN_SPEEDUP:g}×.")


C7 = Claim(
    id="C7",
    system="sampler",
    title="the parallel sampler: 4–5× tokens/s at equal quality",
    statement="The parallel (diffusion-forcing) sampler gives 4–5× more tokens/s than static autoregressive sampling "
    "at 32 recurrences, with about equal accuracy (Geiping et al., arXiv 2510.14961; docs/claims.md#c7).",
    test=_c7_test,
    reads=("sample", "sample_speed"),
    verdict=speedup_over_full_recurrence,
    measured=_c7_measured,
    revisions=(EQUAL_QUALITY_AFTER,),
    lines=(Line("speed-up vs full recurrence", (C7_MIN_SPEEDUP,), timed=True),),
)


def _c7b_measured(verdict: Speedup, summary: pl.DataFrame, speed: pl.DataFrame | None) -> tuple[str, Headline]:
    matched, sampler = verdict.detail[MATCHED], verdict.detail[SAMPLER]
    measured = (
        f"autoregressive decoding at the fewest loops of about equal quality: {matched['loops']} loops, "
        f"{fmt(matched['tokens_per_s'])} tokens/s in the grid, gap {matched['cross_entropy_gap']:+.3f} nats, "
        f"{_cost_text(matched)} per token. "
        + (_NO_SAMPLER if sampler is None else
           f"Sampler ({_sampler_setting(sampler)}): {fmt(sampler['tokens_per_s'])} tokens/s in the grid; "
           f"{_speedup_text(verdict, str(matched['loops']) + ' loops')}.")
    )
    return measured, {"speed-up vs matched decoding": ratio_value(verdict.speedup),
                      "FLOP ratio vs matched decoding": verdict.flop_ratio, "matched loops": matched["loops"]}


C7B = Claim(
    id="C7b",
    system="sampler",
    title="the sampler against decoding at the fewest loops of equal quality",
    statement="The same sampler against autoregressive decoding at the fewest loops of about equal quality (ours).",
    test=f"The fastest sampler setting of about equal quality (as in C7) against autoregressive decoding at the fewest "
    f"loops of about equal quality (any loop count of sample.baseline_loops; chosen by loops, not by timing), "
    f"timed beside it in the same paired rounds: reproduced if the 95% interval of the ratio of tokens/s lies "
    f"at or above {C7B_MIN_SPEEDUP:g}×, not reproduced if it lies below (or if no setting is of about equal "
    f"quality), inconclusive if it straddles {C7B_MIN_SPEEDUP:g}×. Fixed with C7, before any number (its quality "
    f"rule revised with C7's after them): a loop that converges early makes fewer loops the fair baseline.",
    reads=("sample", "sample_speed"),
    verdict=speedup_over_matched_decoding,
    measured=_c7b_measured,
    revisions=(EQUAL_QUALITY_AFTER,),
    lines=(Line("speed-up vs matched decoding", (C7B_MIN_SPEEDUP,), timed=True),),
)

CLAIMS = (C7, C7B)
