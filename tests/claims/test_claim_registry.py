"""The claim registry: every claim's record is complete and has its section in docs/claims.md, and a new claim added
as docs/extending.md shows (its worked example, C3b, written out here) appears in the claims table, the table
across recipes and its link with no other edit."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest
from test_claims import checkpoint, frame, inverse
from workspace import ROOT

from twoscale.claims import by_recipe, table
from twoscale.claims.by_recipe import summarise, to_markdown
from twoscale.config.errors import TwoscaleError
from twoscale.geometry import claims as geometry_claims
from twoscale.geometry.verdicts import step_cosine_settles
from twoscale.report.claim import Claim, Headline, fmt, times
from twoscale.report.verdicts import Verdict

# --- the worked example of docs/extending.md#a-claim --------------------------------------------------------
C3B_MAX_COSINE = 0.2


def late_steps_orthogonal(geometry: pl.DataFrame) -> Verdict:
    groups = step_cosine_settles(geometry).detail["groups"]
    return Verdict([None if math.isnan(g["late_cosine"]) else abs(g["late_cosine"]) <= C3B_MAX_COSINE
                    for g in groups], {"groups": groups})


def _c3b_measured(verdict: Verdict, geometry: pl.DataFrame) -> tuple[str, Headline]:
    groups = verdict.detail["groups"]
    return (", ".join(f"g{g['group']} {fmt(g['late_cosine'], 3)}" for g in groups),
            {f"late cosine g{g['group']}": g["late_cosine"] for g in groups})


C3B = Claim(id="C3b", system="geometry", title="late steps nearly orthogonal",
            statement="Late consecutive steps are nearly orthogonal (ours).",
            test=f"Last checkpoint, per group: |mean late cosine| <= {C3B_MAX_COSINE}.", reads=("geometry",),
            verdict=late_steps_orthogonal, measured=_c3b_measured)


def test_the_worked_example_joins_the_claims_table_and_the_table_across_recipes(monkeypatch):
    S, C1, C2, C3, C4, C5 = geometry_claims.CLAIMS
    monkeypatch.setattr(table, "REGISTRY", (S, C1, C2, C3, C3B, C4, C5, *table.REGISTRY[6:]))
    geometry = frame(checkpoint(900, {0: inverse(), 1: inverse()}, cosine=0.1))
    rows = table.claims_table({"geometry": geometry})
    assert [r["claim"] for r in rows] == ["C1", "C2", "C3", "C3b", "C4", "C5"]
    c3b = rows[3]
    assert c3b["verdict"] == "reproduced" and c3b["measured"] == "g0 0.100, g1 0.100"  # cosine 0.1 for every k
    assert c3b["headline"] == {"late cosine g0": pytest.approx(0.1), "late cosine g1": pytest.approx(0.1)}
    markdown = to_markdown(summarise({("paper", 1): rows}), {("paper", 1): rows}, docs="docs/claims.md")
    assert ("| [C3b](docs/claims.md#c3) | Late consecutive steps are nearly orthogonal (ours). | **reproduced**"
            in markdown)


def test_every_registered_claim_is_complete_unique_and_has_its_section():
    sections = set(re.findall(r"^## (\S+)$", (ROOT / "docs/claims.md").read_text(), flags=re.MULTILINE))
    ids = [c.id for c in table.REGISTRY]
    assert len(ids) == len(set(ids))
    for claim in table.REGISTRY:
        assert claim.system in ("geometry", "exits", "sampler", "surrogates")
        assert claim.statement and claim.test and claim.reads
        assert "#" + claim.id.removesuffix("b").lower() == claim.section and claim.id.removesuffix("b") in sections


def test_an_unknown_claim_is_a_clear_error():
    with pytest.raises(TwoscaleError, match="no claim 'C9' is registered"):
        table.claim("C9")


def test_a_ratio_reads_as_a_multiple_and_a_missing_one_as_n_a_alone():
    assert times(0.3824) == "0.38×" and times(150.2) == "150×"
    assert times(None) == "n/a" and times(float("nan")) == "n/a"  # not "n/a×"


def test_every_reading_chosen_after_the_numbers_is_said_where_its_test_is_read():
    """The claims report's test table says when each claim's readings were chosen, and docs/claims.md's table of
    readings chosen after the numbers names every claim that has one."""
    doc = (ROOT / "docs/claims.md").read_text()
    after = doc[doc.index("## Readings chosen after the numbers"):]
    named = set(re.findall(r"\b(S|C\d+b?)\b", "\n".join(line.split("|")[1] for line in after.splitlines()
                                                          if line.startswith("| ") and "---" not in line)))
    named |= {f"C{i}" for i in range(1, 6)} if "C1–C5" in after else set()
    revised = [c for c in table.REGISTRY if c.revisions]
    assert {c.id for c in revised} <= named
    assert {"S", "C1", "C2", "C3", "C4", "C5", "C6", "C6b", "C7", "C7b", "C8"} <= {c.id for c in revised}
    for claim in revised:
        assert all(r.reading and r.replaced and r.why and r.when for r in claim.revisions)
    assert by_recipe.chosen_text(table.claim("C8b")) == "before the numbers"
    # the labels of issue 75: C3's and C5's regime rule, C7's and C7b's quality rule, each with dates and commits
    for claim_id in ("C3", "C5"):
        assert "per-token regimes" in by_recipe.chosen_text(table.claim(claim_id))
        assert "b9dc31b" in by_recipe.chosen_text(table.claim(claim_id))
    for claim_id in ("C7", "C7b"):
        c7 = by_recipe.chosen_text(table.claim(claim_id))
        assert "two-sided" in c7 and "ea9d77f" in c7 and "d422333" in c7
    c6b = by_recipe.chosen_text(table.claim("C6b"))
    assert c6b.startswith("after the numbers: (1) the whole claim")
    assert "replacing: K* = the fixed loop count with the lowest perplexity" in c6b and "(4) " in c6b
