"""The claims report's table: every system's claims, gathered in one registry and read on a run's tables.

`REGISTRY` holds each claim's record (`report.claim.Claim`: id, system, statement, test, the tables it reads, its
verdict and its measured text), in the order of the report: the loop geometry's S and C1-C5 (Pappone et al., arXiv
2509.23314), the exit rules' C6, the parallel sampler's C7 (docs/claims.md#c7) and the surrogates' C8
(docs/claims.md#c8, on every plain GPT under `teachers`). A new claim is a record in its system's `claims` module
and a section of docs/claims.md (docs/extending.md#a-claim); nothing here changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from twoscale.config.errors import TwoscaleError
from twoscale.exits import claims as exits
from twoscale.geometry import claims as geometry
from twoscale.report.claim import Claim
from twoscale.report.tables import origins
from twoscale.sampler import claims as sampler
from twoscale.surrogates import claims as surrogates

REGISTRY: tuple[Claim, ...] = (*geometry.CLAIMS, *exits.CLAIMS, *sampler.CLAIMS, *surrogates.CLAIMS)


def claim(claim_id: str) -> Claim:
    """The record of a claim by its id ("C6b")."""
    found = [c for c in REGISTRY if c.id == claim_id]
    if not found:
        raise TwoscaleError(f"no claim {claim_id!r} is registered (claims: {', '.join(c.id for c in REGISTRY)})")
    return found[0]


def rows(frames: Mapping[str, pl.DataFrame | None]) -> list[dict[str, Any]]:
    """The row of every claim whose first table is given, in the registry's order."""
    return [c.row_of(frames) for c in REGISTRY if c.applies(frames)]


def claims_table(frames: Mapping[str, pl.DataFrame]) -> list[dict[str, Any]]:
    """A looped run's rows: C1-C5 from the geometry stage's frames (needs 'geometry', uses 'depth'/'trajectory' if
    given), led by the precondition S when 'loss_vs_loops' is given, C6 when the early-exit 'sweep' table is given,
    and C7 when the sampler's 'sample' summary (`sampler.tables.sampling_summary`) has rows (its speed verdicts read the
    paired rounds of 'sample_speed'; without them they are inconclusive)."""
    if "geometry" not in frames:
        raise TwoscaleError("claims: no geometry table given")
    looped = {name: frame for name, frame in frames.items() if name != "recovery"}  # the teachers' table: C8
    if looped.get("sample") is not None and looped["sample"].height == 0:  # the sampler did not run on this recipe
        del looped["sample"]
    return rows(looped)


def surrogate_claims(recovery: pl.DataFrame) -> list[dict[str, Any]]:
    """C8 and C8b of one teacher run."""
    return rows({"recovery": recovery})


def computations(tables: dict[str, pl.DataFrame], runs: list[tuple[str, int]]) -> list[dict]:
    """What computed the numbers of every run (`report.tables.origins`), run by run (`runs`: the looped runs, then the
    teacher runs): the training, the geometry (with its precision floor), the early exit's quality and timings,
    the sampler where it ran, and the teachers' training and distillation ('recovery')."""
    found = []
    if "geometry" in tables:  # absent where only teachers ran
        geometry = tables["geometry"]
        floor = ", ".join(geometry["floor"].unique(maintain_order=True)) if "floor" in geometry.columns else "none"
        found += [*origins(geometry, "training", "train_"),
                  *origins(geometry, f"loop geometry, loss vs loops (S, C1–C5); precision floor {floor}")]
    found += [*(origins(tables["spectrum"], "the loop map's spectrum (beside C1, C3)")
                if "spectrum" in tables else []),
              *(origins(tables["sweep"], "early-exit quality (C6)") if "sweep" in tables else []),
              *(origins(tables["latency"], "early-exit timings (C6)") if "latency" in tables else [])]
    if "sample_speed" in tables:
        found += origins(tables["sample_speed"], "sampler timings (C7)")
    if "recovery" in tables:
        teachers = tables["recovery"].rename({"teacher": "recipe"})
        found += [*origins(teachers, "teacher training (C8)", "teacher_"),
                  *origins(teachers, "surrogate and control training (C8)")]
    return sorted(found, key=lambda o: runs.index((o["recipe"], o["seed"])))
