"""One claims bundle read against another: each verdict and headline number of a run beside a reference's (the
committed study: the default parameters at three seeds).

A reproduction on another processor or arithmetic (bf16 on other units, float32 where no bf16 units exist) is
another draw, like another seed: its verdicts are placed beside the reference's seeds' ("2/3": two of the
reference's three seeds gave that verdict) and each of its headline numbers beside the reference's range over seeds
(inside it, or how far outside, also in widths of that range). A new draw falls outside the range of three earlier
draws of the same distribution about half the time (2 in 4), so numbers outside it are expected, not a failure.

Inputs are the `summary` of two claims.json files (`by_recipe.summarise`) and their `origins` (what computed them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twoscale.claims.by_recipe import number, table_cell
from twoscale.config.errors import TwoscaleError

# what decides whether two runs computed alike: the processor, the arithmetic and torch of each computation
COMPUTED_BY = ("computation", "precision", "machine", "torch")
UNSEEDED = ("seeds", "explain_seeds")  # runtime's keys that say which draws ran, not how


def read_claims(path: Path) -> dict[str, Any]:
    """A claims stage's claims.json: its summary, what computed its numbers (`origins`, empty where it records
    none) and, where it records one, the key of its parameters."""
    try:
        bundle = json.loads(path.read_text())
        bundle["summary"]
        bundle.setdefault("origins", [])
    except FileNotFoundError:
        raise TwoscaleError(f"{path}: not found") from None
    except (ValueError, KeyError, TypeError):
        raise TwoscaleError(f"{path}: not a claims.json of the claims stage") from None
    return bundle


def parameters_key(raw: Mapping[str, Any]) -> str:
    """A hash of a parameter set (its values as read, every key) but the seeds it runs: two sets with one key are
    the same experiment at other seeds."""
    unseeded = {**raw, "runtime": {key: value for key, value in raw["runtime"].items() if key not in UNSEEDED}}
    return hashlib.sha256(json.dumps(unseeded, sort_keys=True, default=str).encode()).hexdigest()[:16]


def computed_by(origins: Sequence[Mapping[str, Any]]) -> set[tuple[str, ...]]:
    """What computed a bundle's numbers, its runs aside: the (computation, arithmetic, processor, torch) entries."""
    return {tuple(str(origin[key]) for key in COMPUTED_BY) for origin in origins}


def placement(value: float | None, low: float | None, high: float | None) -> str:
    """Where a number lies against a range: 'inside', or '0.12 above' / '0.12 below' with the distance in widths
    of the range where it has one ('0.12 above, 1.5 widths')."""
    if value is None or low is None or high is None:
        return "n/a"
    if low <= value <= high:
        return "inside"
    distance = value - high if value > high else low - value
    side = "above" if value > high else "below"
    widths = f", {distance / (high - low):.1f} widths" if high > low else ""
    return f"{number(distance)} {side}{widths}"


def compare(run: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per claim and recipe that both bundles measured: the run's verdict and, for each verdict its seeds
    gave (one, or several where they split), how many of the reference's seeds gave it (`agreeing`, of
    `reference_seeds`), the reference's verdict, and each headline number both give: the run's mean, the reference's
    min and max, and its placement."""
    by_claim = {row["claim"]: row for row in reference}
    rows = []
    for row in run:
        other = by_claim.get(row["claim"])
        for recipe, entry in row["recipes"].items():
            if other is None or recipe not in other["recipes"]:
                continue
            theirs = other["recipes"][recipe]
            own = sorted(set(entry["verdicts"]), key=lambda verdict: (-entry["verdicts"].count(verdict), verdict))
            numbers = [{"label": label, "value": spread["mean"], "low": theirs["headline"][label]["min"],
                        "high": theirs["headline"][label]["max"],
                        "placement": placement(spread["mean"], theirs["headline"][label]["min"],
                                               theirs["headline"][label]["max"])}
                       for label, spread in entry["headline"].items() if label in theirs["headline"]]
            rows.append({"claim": row["claim"], "recipe": recipe, "verdict": entry["verdict"],
                         "reference_verdict": theirs["verdict"],
                         "agreeing": {verdict: theirs["verdicts"].count(verdict) for verdict in own},
                         "reference_seeds": len(theirs["verdicts"]), "numbers": numbers})
    return rows


def counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many verdicts some reference seed shares (each of a split's), and how many numbers lie inside the
    reference's range."""
    numbers = [n for row in rows for n in row["numbers"] if n["placement"] != "n/a"]
    return {"verdicts": len(rows), "verdicts_shared": sum(1 for row in rows if all(row["agreeing"].values())),
            "numbers": len(numbers), "numbers_inside": sum(1 for n in numbers if n["placement"] == "inside")}


def to_markdown(rows: Sequence[Mapping[str, Any]], run_computed: set[tuple[str, ...]],
                reference_computed: set[tuple[str, ...]], reference_name: str) -> list[str]:
    """The comparison as lines of Markdown: what computed each side, the counts, and a row per claim and recipe."""
    tally = counts(rows)

    def described(computed: set[tuple[str, ...]]) -> str:  # the processor, torch and the training's arithmetic
        return "; ".join(sorted({f"{machine}, torch {torch}, training in {precision}"
                                 for computation, precision, machine, torch in computed if computation == "training"}))

    opening = reference_name[:1].upper() + reference_name[1:]
    lines = [f"This run: {described(run_computed)}. {opening}: {described(reference_computed)}. Each verdict "
             f"stands beside how many of {reference_name}'s seeds gave it, each number beside its range over seeds "
             "(a new draw falls outside the range of three about half the time).", "",
             f"{tally['verdicts_shared']} of {tally['verdicts']} verdicts were given by some seed of "
             f"{reference_name} (where this run's seeds split, each of theirs); {tally['numbers_inside']} of "
             f"{tally['numbers']} headline numbers lie inside its range.", "",
             f"| claim | recipe | this run | seeds of {reference_name} giving it | {reference_name} | numbers "
             f"(this run; {reference_name}'s range; where) |", "|---|---|---|---|---|---|"]
    for row in rows:
        counted = [f"{n}/{row['reference_seeds']}" for n in row["agreeing"].values()]
        agreeing = counted[0] if len(counted) == 1 else ", ".join(
            f"{verdict} {count}" for verdict, count in zip(row["agreeing"], counted, strict=True))
        numbers = "; ".join(f"{n['label']} {number(n['value'])} ({number(n['low'])}–{number(n['high'])}; "
                            f"{n['placement']})" for n in row["numbers"])
        cells = (row["claim"], row["recipe"], row["verdict"], agreeing, row["reference_verdict"], numbers)
        lines.append("| " + " | ".join(table_cell(cell) for cell in cells) + " |")
    return lines
