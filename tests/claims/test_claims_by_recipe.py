"""Claims read per recipe across seeds: verdicts and the spread of headline numbers on hand-built rows."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
from workspace import ROOT

from twoscale.claims.by_recipe import (
    VERDICTS_MARK,
    near_text,
    near_the_line,
    number,
    recipe_verdict,
    spread,
    spread_text,
    summarise,
    to_json,
    to_markdown,
    verdict_sources,
    verdict_table,
    with_verdict_table,
)
from twoscale.claims.table import REGISTRY
from twoscale.config.errors import TwoscaleError
from twoscale.geometry import claims as geometry_claims
from twoscale.report.claim import Line
from twoscale.report.tables import origins


def row(claim: str, verdict: str, **headline: float | None) -> dict:
    return {"claim": claim, "statement": f"{claim} says | something", "test": f"test of {claim}",
            "measured": f"{claim} measured", "reproduced": None, "verdict": verdict, "headline": headline}


RUNS = {
    ("paper", 1): [row("C1", "not reproduced", ratio=0.62), row("C4", "mixed", dlr=1.8)],
    ("paper", 2): [row("C1", "not reproduced", ratio=0.50), row("C4", "mixed", dlr=2.4)],
    ("paper", 3): [row("C1", "mixed", ratio=0.80), row("C4", "mixed", dlr=None)],
    ("huginn", 1): [row("C1", "reproduced", ratio=0.002), row("C4", "reproduced", dlr=40.0)],
}


def test_spread_is_mean_min_max_of_the_finite_values():
    assert spread([0.62, 0.50, 0.80]) == {"mean": pytest.approx(1.92 / 3), "min": 0.50, "max": 0.80, "n": 3,
                                           "seeds": 3}
    assert spread([1.8, 2.4, None]) == {"mean": pytest.approx(2.1), "min": 1.8, "max": 2.4, "n": 2, "seeds": 3}
    assert spread([None, float("nan")]) == {"mean": None, "min": None, "max": None, "n": 0, "seeds": 2}


def test_verdicts_agree_or_split_with_counts():
    assert recipe_verdict(["reproduced"]) == "reproduced"
    assert recipe_verdict(["mixed", "mixed"]) == "mixed 2/2"
    assert recipe_verdict(["reproduced"] * 3) == "reproduced 3/3"
    assert recipe_verdict(["not reproduced", "not reproduced", "mixed"]) == "split: not reproduced 2/3, mixed 1/3"


def test_summary_per_claim_and_recipe():
    summary = summarise(RUNS)
    assert [r["claim"] for r in summary] == ["C1", "C4"]
    c1, c4 = summary
    assert list(c1["recipes"]) == ["paper", "huginn"]
    paper = c1["recipes"]["paper"]
    assert paper["seeds"] == [1, 2, 3]
    assert paper["verdicts"] == ["not reproduced", "not reproduced", "mixed"]
    assert paper["verdict"] == "split: not reproduced 2/3, mixed 1/3"
    assert paper["headline"]["ratio"]["mean"] == pytest.approx((0.62 + 0.50 + 0.80) / 3)
    assert c4["recipes"]["paper"]["headline"]["dlr"]["n"] == 2
    assert c4["recipes"]["huginn"] == {"seeds": [1], "verdict": "reproduced", "verdicts": ["reproduced"],
                                       "headline": {"dlr": spread([40.0])}, "near": []}


def test_numbers_and_spreads_as_text():
    assert [number(x) for x in (0.001234, 4.7654, 145.25, 12345.6, None, float("inf"))] == [
        "0.001234", "4.765", "145.2", "12,346", "n/a", "n/a"]
    assert spread_text(spread([4.765])) == "4.765"
    assert spread_text(spread([0.5, 0.8, 0.62])) == "0.64 (0.5–0.8)"
    assert spread_text(spread([1.8, 2.4, None])) == "2.1 (1.8–2.4) [2 of 3 seeds]"
    assert spread_text(spread([None])) == "n/a"


def test_markdown_has_a_column_per_recipe_and_a_section_per_run():
    summary = summarise(RUNS)
    md = to_markdown(summary, RUNS)
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| claim | paper says |"))
    assert lines[header] == "| claim | paper says | paper | huginn |"
    table = lines[header + 2: header + 4]
    assert all(len(re.split(r"(?<!\\)\|", line)) == 6 for line in table)  # 4 cells; pipes in text escaped
    assert table[0].startswith("| C1 | C1 says \\| something |")
    assert "**split: not reproduced 2/3, mixed 1/3**<br>ratio 0.64 (0.5–0.8)" in table[0]
    assert "**reproduced**<br>dlr 40" in table[1]
    assert "Seeds: paper 1, 2, 3; huginn 1." in md
    sections = [line for line in lines if line.startswith("## ")]
    assert sections == ["## Seed by seed", "## The tests", "## paper, seed 1", "## paper, seed 2",
                        "## paper, seed 3", "## huginn, seed 1"]


def test_json_is_strict_and_keeps_every_run():
    payload = json.loads(to_json(summarise(RUNS), RUNS))
    assert [(r["recipe"], r["seed"]) for r in payload["runs"]] == list(RUNS)
    assert payload["summary"][1]["recipes"]["paper"]["headline"]["dlr"]["min"] == 1.8


def test_what_computed_the_numbers_is_a_section_of_its_own_from_the_tables_columns():
    geometry = pl.DataFrame({"recipe": ["huginn"] * 2 + ["paper"], "seed": [1, 1, 1], "metric": ["a", "b", "a"],
                             "train_precision": ["bfloat16"] * 3, "train_machine": ["CPU X, 2 CPUs"] * 3,
                             "train_torch": ["2.13.0"] * 3, "precision": ["float64"] * 3,
                             "machine": ["CPU X, 2 CPUs", "CPU X, 2 CPUs", "CPU Y, 8 CPUs"], "torch": ["2.13.0"] * 3})
    trained = origins(geometry, "training", "train_")
    assert trained == [{"recipe": "huginn", "seed": 1, "computation": "training", "precision": "bfloat16",
                        "machine": "CPU X, 2 CPUs", "torch": "2.13.0"},
                       {"recipe": "paper", "seed": 1, "computation": "training", "precision": "bfloat16",
                        "machine": "CPU X, 2 CPUs", "torch": "2.13.0"}]
    measured = origins(geometry, "geometry")
    assert [m["machine"] for m in measured] == ["CPU X, 2 CPUs", "CPU Y, 8 CPUs"]
    untracked = origins(geometry.drop("torch"), "geometry")
    assert untracked[0]["torch"] == "not recorded"
    mixed = origins(geometry.with_columns(pl.Series("precision", ["float64", "float32", "float64"])), "geometry")
    assert mixed[0]["precision"] == "float64 / float32"  # a run measured in two arithmetics says so

    md = to_markdown(summarise(RUNS), RUNS, trained + measured)
    lines = md.splitlines()
    start = lines.index("## What computed these numbers")
    assert lines.index("## The tests") > start
    assert "| huginn, seed 1 | training | bfloat16 | CPU X, 2 CPUs | 2.13.0 |" in lines
    assert "| paper, seed 1 | geometry | float64 | CPU Y, 8 CPUs | 2.13.0 |" in lines
    assert json.loads(to_json(summarise(RUNS), RUNS, measured))["origins"] == measured
    assert "## What computed these numbers" not in to_markdown(summarise(RUNS), RUNS)


def test_every_claim_links_to_its_test_in_the_methods_documents():
    md = to_markdown(summarise(RUNS), RUNS, docs="../docs/claims.md")
    assert "| [C1](../docs/claims.md#c1) | C1 says \\| something |" in md
    assert "| C1 | C1 says" in to_markdown(summarise(RUNS), RUNS)  # no link without the path
    headings = re.findall(r"^## (\S+)$", (ROOT / "docs/claims.md").read_text(), flags=re.MULTILINE)
    anchors = {"#" + heading.lower() for heading in headings}
    assert {c.id: c.section in anchors for c in REGISTRY} == dict.fromkeys((c.id for c in REGISTRY), True)


def test_the_verdict_table_names_each_claim_by_its_title_and_fills_what_was_not_measured():
    summary = [{"claim": "C1", "recipes": {"paper": {"verdict": "mixed"}}},
               {"claim": "C8", "recipes": {"plain": {"verdict": "reproduced"}}}]
    assert verdict_table(summary).splitlines() == [
        "| claim | `paper` | `plain` |", "|---|---|---|",
        "| [C1](docs/claims.md#c1) steps shrink within 5–10 loops | mixed | not measured |",
        "| [C8](docs/claims.md#c8) 2 shared blocks recover ≥ 90% of the teacher | not measured | reproduced |"]


def test_the_verdict_table_replaces_the_lines_after_the_mark_naming_its_source_only():
    readme = (f"intro\n\n{VERDICTS_MARK}results/study/claims.json -->\n| old study |\n|---|\n\nbetween\n\n"
              f"{VERDICTS_MARK}results/claims.json (a note) -->\n| old |\n|---|\n\nafter\n")
    assert verdict_sources(readme) == ["results/study/claims.json", "results/claims.json"]
    assert with_verdict_table(readme, "results/claims.json", "| new |") == (
        f"intro\n\n{VERDICTS_MARK}results/study/claims.json -->\n| old study |\n|---|\n\nbetween\n\n"
        f"{VERDICTS_MARK}results/claims.json (a note) -->\n| new |\n\nafter\n")
    first = f"{VERDICTS_MARK}results/claims.json -->\n\npara one\n\npara two"  # no table yet: nothing else goes
    assert with_verdict_table(first, "results/claims.json", "| new |") == (
        f"{VERDICTS_MARK}results/claims.json -->\n| new |\n\npara one\n\npara two")
    with pytest.raises(TwoscaleError, match="no line starting"):
        with_verdict_table(readme, "results/other/claims.json", "| new |")


def c1_row(s10: float) -> dict:
    """C1's row, read by its own verdict, of a one-group checkpoint whose steps fall from 1 at k = 1 to `s10` at
    k = 10 and to half of that at k = 12 (the fall after k = 10 is always the smaller)."""
    geometry = pl.DataFrame([{"step": 500, "metric": "step_size", "group": 0, "k": k, "mean": s, "median": s,
                              "q10": s, "q90": s} for k, s in {1: 1.0, 10: s10, 12: s10 / 2}.items()])
    return geometry_claims.C1.row(geometry)


def test_three_seeds_with_one_on_the_line_and_one_past_it_split_two_to_one():
    """s(10)/s(1) <= 0.5 passes: a seed at exactly 0.5 reproduces, one at 0.51 does not; the recipe's verdict is the
    split, its headline the mean (min–max) of the three, and the seed-by-seed section shows each seed's number."""
    runs = {("paper", 1): [c1_row(0.5)], ("paper", 2): [c1_row(0.51)], ("paper", 3): [c1_row(0.2)]}
    (c1,) = summarise(runs)
    paper = c1["recipes"]["paper"]
    assert paper["verdicts"] == ["reproduced", "not reproduced", "reproduced"]
    assert paper["verdict"] == "split: reproduced 2/3, not reproduced 1/3"
    assert paper["headline"]["s(10)/s(1) g0"] == spread([0.5, 0.51, 0.2])
    assert spread_text(paper["headline"]["s(10)/s(1) g0"]) == "0.4033 (0.2–0.51)"
    lines = to_markdown([c1], runs).splitlines()
    section = lines.index("## Seed by seed")
    assert lines[section + 4:section + 7] == [
        "| claim | recipe | seed 1 | seed 2 | seed 3 |", "|---|---|---|---|---|",
        ("| C1 | paper | **reproduced**<br>s(10)/s(1) g0 0.5 | **not reproduced**<br>s(10)/s(1) g0 0.51 | "
         "**reproduced**<br>s(10)/s(1) g0 0.2 |")]


def test_seed_by_seed_is_left_out_where_every_recipe_ran_one_seed_and_names_a_seed_a_recipe_lacks():
    assert "## Seed by seed" not in to_markdown(summarise({("huginn", 1): RUNS[("huginn", 1)]}),
                                                {("huginn", 1): RUNS[("huginn", 1)]})
    md = to_markdown(summarise(RUNS), RUNS).splitlines()
    assert "| C4 | huginn | **reproduced**<br>dlr 40 | not run | not run |" in md
    assert "| C4 | paper | **mixed**<br>dlr 1.8 | **mixed**<br>dlr 2.4 | **mixed**<br>dlr n/a |" in md


# --- near the line ---------------------------------------------------------------------------------------------


def test_a_number_is_near_its_line_where_the_seeds_reach_it_or_lie_within_their_spread_of_it():
    lines = (Line(r"s\(10\)/s\(1\) g\d+", (0.5,)),)
    # seeds 0.476-0.629 straddle 0.5: near, by 0.049 from the mean 0.549
    (near,) = near_the_line({"s(10)/s(1) g0": spread([0.476, 0.541, 0.629])}, lines)
    assert (near["label"], near["line"], near["margin"]) == ("s(10)/s(1) g0", 0.5, pytest.approx(0.049, abs=1e-3))
    # all above, mean 0.62 is 0.12 from the line but the seeds span 0.14: near; span 0.02: not
    assert near_the_line({"s(10)/s(1) g1": spread([0.55, 0.62, 0.69])}, lines)
    assert near_the_line({"s(10)/s(1) g1": spread([0.61, 0.62, 0.63])}, lines) == []
    # one seed has no spread: only the line itself is near; a label the line does not name is never read
    assert near_the_line({"s(10)/s(1) g0": spread([0.456])}, lines) == []
    assert near_the_line({"s(10)/s(1) first": spread([0.5])}, lines) == []
    assert near_the_line({"s(10)/s(1) g0": spread([None])}, lines) == []


def test_a_timing_is_near_its_line_within_the_retiming_spread():
    timed = (Line("speed-up", (4.0,), timed=True),)
    # 3.85: 3.8% below 4, inside the 5% retiming moved a ratio by; 3.7 (7.5% below) is not
    assert near_the_line({"speed-up": spread([3.85])}, timed)
    assert near_the_line({"speed-up": spread([3.7])}, timed) == []
    assert near_the_line({"speed-up": spread([3.85])}, (Line("speed-up", (4.0,)),)) == []  # untimed: no widening


def test_a_band_has_two_lines_and_either_can_be_near():
    band = (Line(r"late cosine g\d+", (0.5, 0.65)),)
    (near,) = near_the_line({"late cosine g2": spread([0.60, 0.70, 0.66])}, band)  # 0.153 from 0.5, spread 0.1
    assert near["line"] == 0.65
    both = near_the_line({"late cosine g2": spread([0.62, 0.99, 0.97])}, band)  # mean 0.86, spread 0.37
    assert [n["line"] for n in both] == [0.5, 0.65]
    assert near_text(both) == "near the line: late cosine g2 0.86 (0.62–0.99), 0.36 from 0.5, 0.21 from 0.65"


def test_near_the_line_is_said_in_the_claims_table_and_the_readme_s_cell():
    runs = {("paper", seed): [row("C1", "not reproduced", **{"s(10)/s(1) g0": value})]
            for seed, value in ((1, 0.456), (2, 0.62), (3, 0.60))}
    summary = summarise(runs)
    entry = summary[0]["recipes"]["paper"]
    assert [n["label"] for n in entry["near"]] == ["s(10)/s(1) g0"]
    text = "near the line: s(10)/s(1) g0 0.5587 (0.456–0.62), 0.05867 from 0.5"
    assert text in to_markdown(summary, runs)
    assert f"| not reproduced 3/3; {text} |" in verdict_table(summary)
    far = summarise({("paper", 1): [row("C1", "not reproduced", **{"s(10)/s(1) g0": 0.9})]})
    assert far[0]["recipes"]["paper"]["near"] == [] and "near the line" not in verdict_table(far)


def test_every_claim_s_lines_name_headline_labels_its_rows_give():
    """A line whose pattern names no label the claim writes would never mark anything: each pattern must match a
    headline label of the committed study's rows for that claim."""
    committed = json.loads((ROOT / "results" / "study" / "claims.json").read_text())
    labels: dict[str, set[str]] = {}
    for run in committed["runs"]:
        for r in run["rows"]:
            labels.setdefault(r["claim"], set()).update(r["headline"])
    for record in REGISTRY:
        for line in record.lines:
            assert any(re.fullmatch(line.labels, label) for label in labels[record.id]), (record.id, line.labels)
