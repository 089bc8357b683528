"""The claims of every training run read per recipe across seeds: one verdict per recipe and claim,
and each headline number of a claim as its mean and min–max over the recipe's seeds.

Input: the rows of `table.claims_table` for every run, {(recipe, seed): rows}, in run order. A recipe's verdict
on a claim is the verdict of its seeds with how many agree ("reproduced 3/3"), else "split" with the count of each
verdict. A headline
number that a seed could not compute (None) is left out of that number's spread and counted in `n`.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from twoscale.claims.table import claim as claim_record
from twoscale.config.errors import TwoscaleError
from twoscale.report.claim import Claim, Line
from twoscale.report.verdicts import RETIMING_SPREAD

Runs = Mapping[tuple[str, int], Sequence[Mapping[str, Any]]]


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean, min and max of the finite values; `n` counts them, `seeds` counts all."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"mean": None, "min": None, "max": None, "n": 0, "seeds": len(values)}
    return {"mean": sum(finite) / len(finite), "min": min(finite), "max": max(finite), "n": len(finite),
            "seeds": len(values)}


def recipe_verdict(verdicts: Sequence[str]) -> str:
    """The seeds' verdict with its count: one seed's alone ('reproduced'), the seeds' common one ('reproduced 3/3'),
    or how they split ('split: reproduced 2/3, mixed 1/3', most frequent first; 'split', not 'mixed', which is a
    single run's word for checks that disagree)."""
    if len(verdicts) == 1:
        return verdicts[0]
    if len(set(verdicts)) == 1:
        return f"{verdicts[0]} {len(verdicts)}/{len(verdicts)}"
    counts = Counter(verdicts).most_common()
    return "split: " + ", ".join(f"{verdict} {n}/{len(verdicts)}" for verdict, n in counts)


def recipes_of(runs: Runs) -> dict[str, list[int]]:
    """Each recipe's seeds, in run order."""
    seeds: dict[str, list[int]] = {}
    for recipe, seed in runs:
        seeds.setdefault(recipe, []).append(seed)
    return seeds


def near_the_line(headline: Mapping[str, Mapping[str, Any]], lines: Sequence[Line]) -> list[dict[str, Any]]:
    """The headline numbers (each a `spread` over seeds) that lie within their own uncertainty of a line they are
    decided against: the seeds' range (a timing's widened by RETIMING_SPREAD each way) reaches the line, or the mean
    is no farther from it than the seeds' range is wide. Each with its line and margin |mean - line|."""
    near = []
    for label, s in headline.items():
        for line in lines:
            if s["n"] == 0 or not re.fullmatch(line.labels, label):
                continue
            widen = RETIMING_SPREAD if line.timed else 0.0
            low, high = s["min"] - widen * abs(s["min"]), s["max"] + widen * abs(s["max"])
            for value in line.values:
                margin = abs(s["mean"] - value)
                if low <= value <= high or margin <= s["max"] - s["min"]:
                    near.append({"label": label, "line": value, "margin": margin, "timed": line.timed, **s})
    return near


def near_text(near: Sequence[Mapping[str, Any]]) -> str:
    """'near the line: s(10)/s(1) g0 0.549 (0.476–0.629), 0.049 from 0.5', each number near a line once, with its
    margin to every line it is near."""
    labels = list(dict.fromkeys(n["label"] for n in near))

    def one(label: str) -> str:
        own = [n for n in near if n["label"] == label]
        retimed = f" (retimed ±{RETIMING_SPREAD:.0%})" if own[0]["timed"] else ""
        margins = ", ".join(f"{number(n['margin'])} from {number(n['line'])}" for n in own)
        return f"{label} {spread_text(own[0])}{retimed}, {margins}"

    return "near the line: " + "; ".join(map(one, labels))


def summarise(runs: Runs) -> list[dict[str, Any]]:
    """One row per claim: {claim, statement, test, recipes: {recipe: {seeds, verdict, verdicts, headline}}}, where
    headline maps each label to its `spread` over the recipe's seeds (labels in the order the runs give them)."""
    by_run = {run: {row["claim"]: row for row in rows} for run, rows in runs.items()}
    claims = list(dict.fromkeys(claim for rows in by_run.values() for claim in rows))
    summary = []
    for claim in claims:
        present = [rows[claim] for rows in by_run.values() if claim in rows]
        out: dict[str, Any] = {"claim": claim, "statement": present[0]["statement"], "test": present[0]["test"],
                               "recipes": {}}
        for recipe, seeds in recipes_of(runs).items():
            rows = [by_run[(recipe, seed)][claim] for seed in seeds if claim in by_run[(recipe, seed)]]
            if not rows:
                continue
            labels = list(dict.fromkeys(label for row in rows for label in row["headline"]))
            headline = {label: spread([row["headline"].get(label) for row in rows]) for label in labels}
            out["recipes"][recipe] = {
                "seeds": [seed for seed in seeds if claim in by_run[(recipe, seed)]],
                "verdict": recipe_verdict([row["verdict"] for row in rows]),
                "verdicts": [row["verdict"] for row in rows],
                "headline": headline,
                "near": near_the_line(headline, claim_record(claim).lines),
            }
        summary.append(out)
    return summary


def number(x: float | None) -> str:
    """Four significant digits (0.001234, 4.765, 145.2), whole numbers from 1000 on; n/a for none."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def spread_text(s: Mapping[str, Any]) -> str:
    """'4.765' for one seed, '4.77 (4.70–4.80)' = mean (min–max) for several; '[n of m seeds]' if some lack it."""
    if s["n"] == 0:
        return "n/a"
    mean, low, high = (number(s[key]) for key in ("mean", "min", "max"))
    text = mean if s["seeds"] == 1 else f"{mean} ({low}–{high})"
    return text if s["n"] == s["seeds"] else f"{text} [{s['n']} of {s['seeds']} seeds]"


def table_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(summary: Sequence[Mapping[str, Any]], runs: Runs, origins: Sequence[Mapping[str, Any]] = (),
                docs: str | None = None, opening: Sequence[str] = ()) -> str:
    """The claims per recipe (verdict and headline numbers with their spread over seeds), what computed them
    (`report.tables.origins` entries), the tests, and every run's own measurements. With `docs` (the path of
    docs/claims.md from where the table is written) every claim's name links to its test there; `opening`, lines
    that come first (the run read against a reference: `comparison`)."""
    recipes = recipes_of(runs)
    lines = [
        "# Claims per recipe",
        "",
        *([*opening, ""] if opening else []),
        "Each cell: the recipe's verdict (the seeds' common verdict, or how they split) and the numbers behind it, "
        "as mean (min–max) over seeds when more than one seed ran. Seeds: "
        + "; ".join(f"{recipe} {', '.join(map(str, seeds))}" for recipe, seeds in recipes.items()) + ".",
        "",
        "| claim | paper says | " + " | ".join(recipes) + " |",
        "|---|---|" + "---|" * len(recipes),
    ]
    for row in summary:
        name = row["claim"]
        cells = [f"[{name}]({docs}{claim_record(name).section})" if docs else name, row["statement"]]
        for recipe in recipes:
            entry = row["recipes"].get(recipe)
            if entry is None:
                cells.append("not measured")
                continue
            numbers = "; ".join(f"{label} {spread_text(s)}" for label, s in entry["headline"].items())
            near = f"<br>{near_text(entry['near'])}" if entry.get("near") else ""
            cells.append(f"**{entry['verdict']}**{near}<br>{numbers}")
        lines.append("| " + " | ".join(table_cell(c) for c in cells) + " |")
    if any(len(seeds) > 1 for seeds in recipes.values()):
        lines += ["", *seed_by_seed(summary, runs)]
    if origins:
        lines += ["", "## What computed these numbers", "",
                  "The arithmetic, processor and torch version of each computation the claims read (from the "
                  "columns its tables carry).", "",
                  "| run | computation | arithmetic | processor | torch |", "|---|---|---|---|---|"]
        lines += [f"| {o['recipe']}, seed {o['seed']} | {o['computation']} | {table_cell(o['precision'])} | "
                  f"{table_cell(o['machine'])} | {table_cell(o['torch'])} |" for o in origins]
    lines += ["", "## The tests", "",
              ("Each test as it reads now, and when its readings were chosen: before the numbers, or after them "
               "(with the reading each replaced and why; docs/claims.md#readings-chosen-after-the-numbers). How "
               "checks add up to a verdict changed for every claim on 2026-11-28: a verdict now says what its "
               "decided checks decided (docs/claims.md#how-checks-add-up)."), "",
              "| claim | test | chosen |", "|---|---|---|"]
    lines += [f"| {row['claim']} | {table_cell(row['test'])} | {table_cell(chosen_text(claim_record(row['claim'])))} |"
              for row in summary]
    for (recipe, seed), rows in runs.items():
        lines += ["", f"## {recipe}, seed {seed}", "", "| claim | measured | verdict |", "|---|---|---|"]
        lines += [f"| {row['claim']} | {table_cell(row['measured'])} | **{row['verdict']}** |" for row in rows]
    return "\n".join(lines) + "\n"


def seed_by_seed(summary: Sequence[Mapping[str, Any]], runs: Runs) -> list[str]:
    """The section of claims.md that sets each recipe's seeds side by side: per claim and recipe, every seed's
    verdict and headline numbers ('not run' for a seed the recipe lacks)."""
    seeds = list(dict.fromkeys(seed for _, seed in runs))
    by_run = {run: {row["claim"]: row for row in rows} for run, rows in runs.items()}
    lines = ["## Seed by seed", "",
             "Each seed's verdict and the numbers behind it, where the table above gives their mean (min–max).", "",
             "| claim | recipe | " + " | ".join(f"seed {seed}" for seed in seeds) + " |",
             "|---|---|" + "---|" * len(seeds)]
    for row in summary:
        for recipe in row["recipes"]:
            cells = []
            for seed in seeds:
                found = by_run.get((recipe, seed), {}).get(row["claim"])
                cells.append("not run" if found is None else f"**{found['verdict']}**<br>" + "; ".join(
                    f"{label} {number(value)}" for label, value in found["headline"].items()))
            lines.append(f"| {row['claim']} | {recipe} | " + " | ".join(table_cell(c) for c in cells) + " |")
    return lines


def chosen_text(record: Claim) -> str:
    """When a claim's readings were chosen: 'before the numbers', or each reading chosen after them with what it
    replaced and why."""
    if not record.revisions:
        return "before the numbers"
    return "after the numbers: " + " ".join(
        f"({i}) {r.reading}, replacing: {r.replaced}; why: {r.why} ({r.when})."
        for i, r in enumerate(record.revisions, 1))


def to_json(summary: Sequence[Mapping[str, Any]], runs: Runs, origins: Sequence[Mapping[str, Any]] = (),
            more: Mapping[str, Any] | None = None) -> str:
    """{summary: per claim and recipe, runs: [{recipe, seed, rows}], origins, and `more`'s entries} as strict
    JSON."""
    payload = {"summary": list(summary),
               "runs": [{"recipe": recipe, "seed": seed, "rows": list(rows)}
                        for (recipe, seed), rows in runs.items()],
               "origins": list(origins), **(more or {})}
    return json.dumps(payload, indent=2, allow_nan=False) + "\n"


VERDICTS_MARK = "<!-- verdicts: "  # then a claims.json's path: the README's table of its verdicts follows the line


def verdict_table(summary: Sequence[Mapping[str, Any]], docs: str = "docs/claims.md") -> str:
    """The README's table: every claim of the summary, named by its id (linked to its section of `docs`) and its
    registered title, with each recipe's verdict ('not measured' where the claim was not read on it)."""
    recipes = list(dict.fromkeys(recipe for row in summary for recipe in row["recipes"]))
    lines = ["| claim | " + " | ".join(f"`{recipe}`" for recipe in recipes) + " |", "|---|" + "---|" * len(recipes)]
    for row in summary:
        record = claim_record(row["claim"])
        verdicts = [_verdict_cell(row["recipes"].get(recipe)) for recipe in recipes]
        lines.append(f"| [{record.id}]({docs}{record.section}) {record.title} | " + " | ".join(verdicts) + " |")
    return "\n".join(lines)


def _verdict_cell(entry: Mapping[str, Any] | None) -> str:
    """A recipe's verdict in the README's table, and the numbers near their line with their margins."""
    if entry is None:
        return "not measured"
    return entry["verdict"] + (f"; {near_text(entry['near'])}" if entry.get("near") else "")


def verdict_sources(readme: str) -> list[str]:
    """The claims.json paths that the README's marks name, in order ("<!-- verdicts: results/claims.json ...")."""
    return [line.removeprefix(VERDICTS_MARK).split()[0] for line in readme.split("\n")
            if line.startswith(VERDICTS_MARK)]


def with_verdict_table(readme: str, source: str, table: str) -> str:
    """The README with the table right after the mark naming `source` (its lines starting with "|", none if there
    is no table yet) replaced by `table`."""
    lines = readme.split("\n")
    marks = [i for i, line in enumerate(lines) if line.startswith(VERDICTS_MARK)
             and line.removeprefix(VERDICTS_MARK).split()[:1] == [source]]
    if not marks:
        raise TwoscaleError(f"no line starting {VERDICTS_MARK + source!r} to put the table of verdicts after")
    end = start = marks[0] + 1
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join([*lines[:start], table, *lines[end:]])
