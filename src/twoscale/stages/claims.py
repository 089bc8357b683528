"""Stage `claims`: the paper's findings (and the sampler's and Raptor's) beside our numbers for every training run,
read per recipe (and per teacher) with the spread over seeds, with a verdict for each (Markdown and JSON)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from twoscale.claims import comparison
from twoscale.claims.by_recipe import summarise, to_json, to_markdown
from twoscale.claims.table import claim, claims_table, computations, surrogate_claims
from twoscale.config.errors import TwoscaleError
from twoscale.config.io import read_csv, read_parquet, run_subdir, write_parquet, write_text
from twoscale.config.params import Params
from twoscale.geometry.tables import MEASUREMENT_TABLES
from twoscale.pipeline.declaration.dependencies import declared_stages
from twoscale.pipeline.observers import tracking
from twoscale.report.claim import CLAIMS_DOC
from twoscale.report.tables import of_run
from twoscale.stages.common import load, per_checkpoint_tables
from twoscale.surrogates.tables import read_recovery

HELP = "put the paper's findings beside our numbers, with verdicts"

log = logging.getLogger(__name__)


# the tables every verdict reads, written beside the report (results/claims_tables/<name>.parquet, committed) so that
# a reader recomputes every verdict from the repository alone (`--from-tables`); "runs" lists the runs in report
# order with what each claim reads of its schedule. A table no run produced is written empty (recipe, seed only;
# `recovery` names its runs by teacher).
BUNDLE = (*MEASUREMENT_TABLES, "sweep", "latency", "beyond", "spectrum", "sample", "sample_speed", "recovery", "runs")
BUNDLE_DIR = "claims_tables"
INPUTS = ("geometry_dir", "sweep", "latency", "sample_dir", "beyond_dir", "spectrum_dir", "recovery")  # the flags
OPTIONAL_INPUTS = ("sweep", "latency")  # left out together: the exit claims are not measured
# the committed study a run is read against, where the checkout has it (a repository file, not an output of the
# parameter set: stages.yaml's `reference`)
REFERENCE = Path(declared_stages()["claims"]["reference"])
REFERENCE_NAME = "the committed study"


# every input optional: a run without sweeps (or samples, ...) reports those claims as not measured, and
# --from-tables reads none of them
WHEN_INPUTS_LEFT_OUT = "left out, the claims it feeds are reported as not measured"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reference", type=Path, default=REFERENCE,
                        help="a claims.json this run is read against where its parameters are the same but for "
                        "the seeds and what computed its numbers is not (another processor or arithmetic): "
                        f"claims.md then opens with its verdicts and numbers beside those (default: {REFERENCE}, "
                        f"{REFERENCE_NAME}; docs/results.md#a-reproduction-elsewhere)")
    parser.add_argument("--from-tables", type=Path,
                        help=f"recompute the report from a {BUNDLE_DIR} folder that this stage wrote (no parameter "
                        "file, no other input: what a reader of the repository can check)")


def read_tables(directory: Path, sweep: Path | None, latency: Path | None) -> dict[str, pl.DataFrame]:
    """The geometry stage's tables, and the sweep table and its latency rounds unless both are left out."""
    if (sweep is None) != (latency is None):
        raise TwoscaleError("--sweep and --latency go together: give both, or neither (C6 not measured)")
    tables = {name: read_parquet(directory / f"{name}.parquet", "the geometry stage")
              for name in MEASUREMENT_TABLES}
    if sweep is None:
        return tables
    return tables | {"sweep": read_parquet(sweep, "the tradeoff stage"),
                     "latency": read_parquet(latency, "the tradeoff stage")}


# the claims' tables from the sample stage, by file: the summary per setting and the paired speed rounds
SAMPLE_TABLES = {"sample": "summary.csv", "sample_speed": "speed.csv"}


def read_run_tables(directory: Path, runs: list[tuple[str, int]], name: str, stage: str) -> pl.DataFrame:
    """One table (a CSV or Parquet file `name`) that a per-run stage writes under <recipe>/seed_<seed>/, of these
    runs, stacked."""
    read = read_parquet if name.endswith(".parquet") else read_csv
    frames = [read(directory / run_subdir(recipe, seed) / name, stage) for recipe, seed in runs]
    return pl.concat(frames, how="diagonal_relaxed")


RUNS_SCHEMA = {"recipe": pl.String, "seed": pl.Int64, "teacher": pl.Boolean, "explained": pl.Boolean,
               "warmup_steps": pl.Int64, "most_trained_loops": pl.Int64, "parameters": pl.String}

# the tables that the explaining stages write for the seeds of runtime.explain_seeds alone, in words
EXPLAINING_TABLES = {"beyond": "the geometry looped past the trained range",
                     "spectrum": "the loop map's spectrum"}


def runs_table(params: Params) -> pl.DataFrame:
    """The runs in report order, looped then teachers, with the schedule the claims read of each looped run (C2
    compares checkpoints after the warm-up, S reads loops beyond the most training drew), whether its seed gets
    the explaining stages (runtime.explain_seeds), and the key of the parameters but the seeds
    (`comparison.parameters_key`: whether a reference is the same experiment)."""
    key = comparison.parameters_key(params.model_dump(mode="json"))
    looped = [{"recipe": recipe, "seed": seed, "teacher": False, "explained": params.explains(seed),
               "warmup_steps": train.warmup_steps, "most_trained_loops": train.loops.max, "parameters": key}
              for recipe, seed in params.runs() for train in [params.run(recipe, seed).train]]
    teachers = [{"recipe": teacher, "seed": seed, "teacher": True, "explained": params.explains(seed),
                 "warmup_steps": None, "most_trained_loops": None, "parameters": key}
                for teacher, seed in params.teacher_runs()]
    return pl.DataFrame([*looped, *teachers], schema=RUNS_SCHEMA)


def explained_elsewhere(row: dict[str, Any], explained_seeds: list[int]) -> dict[str, Any]:
    """A claim row of a seed outside runtime.explain_seeds, with a sentence naming what it reads of the explaining
    stages and the seeds those ran on (the row as given where the claim reads none of them)."""
    missing = [words for name, words in EXPLAINING_TABLES.items() if name in claim(row["claim"]).reads]
    if not missing:
        return row
    seeds = ("seed " if len(explained_seeds) == 1 else "seeds ") + ", ".join(map(str, explained_seeds))
    return {**row, "measured": f"{row['measured']} Not measured on this seed: {' and '.join(missing)} (run on "
            f"{seeds} alone, runtime.explain_seeds)."}


def gather(args: argparse.Namespace, params: Params) -> dict[str, pl.DataFrame]:
    """Every table of BUNDLE from the stages' outputs (an empty one where no run produced it)."""
    missing = [flag for flag in INPUTS if flag not in OPTIONAL_INPUTS and getattr(args, flag) is None]
    if missing:
        raise TwoscaleError("claims: give --from-tables, or every input: missing "
                            + ", ".join("--" + flag.replace("_", "-") for flag in missing))
    tables = read_tables(args.geometry_dir, args.sweep, args.latency)
    tables["beyond"] = read_run_tables(args.beyond_dir, params.explained_runs(), "geometry.parquet",
                                       "the beyond stage")
    tables["spectrum"] = per_checkpoint_tables(params, args.spectrum_dir, "the spectrum stage")
    if params.sample_runs():
        tables |= {key: read_run_tables(args.sample_dir, params.sample_runs(), name, "the sample stage")
                   for key, name in SAMPLE_TABLES.items()}
    if params.teachers:
        tables["recovery"] = read_recovery(args.recovery)
    tables["runs"] = runs_table(params)
    empty = pl.DataFrame(schema={"recipe": pl.String, "seed": pl.Int64})
    return {name: tables.get(name, empty) for name in BUNDLE}


def read_bundle(directory: Path) -> dict[str, pl.DataFrame]:
    """The tables of BUNDLE as the stage wrote them to `directory` (a bundle written before runtime.explain_seeds
    existed ran every stage on every seed: its runs are all explained; one written before the key of its parameters
    was kept has none)."""
    tables = {name: read_parquet(directory / f"{name}.parquet", "the claims stage") for name in BUNDLE}
    if "explained" not in tables["runs"].columns:
        tables["runs"] = tables["runs"].with_columns(explained=pl.lit(True))
    if "parameters" not in tables["runs"].columns:
        tables["runs"] = tables["runs"].with_columns(parameters=pl.lit(None, pl.String))
    tables["runs"] = tables["runs"].select(list(RUNS_SCHEMA))
    return tables


def claims_of(tables: Mapping[str, pl.DataFrame]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every run's claim rows, in the order of the "runs" table, from the tables of BUNDLE (empty ones: not
    measured)."""
    given = {name: frame for name, frame in tables.items() if frame.height and name not in ("runs", "recovery")}
    explained = tables["runs"].filter(pl.col("explained") & ~pl.col("teacher"))
    out = {}
    for run in tables["runs"].iter_rows(named=True):
        recipe, seed = run["recipe"], run["seed"]
        if run["teacher"]:
            recovery = tables["recovery"]
            out[(recipe, seed)] = surrogate_claims(recovery.filter((pl.col("teacher") == recipe)
                                                                   & (pl.col("seed") == seed)))
        else:
            schedule = pl.DataFrame({"warmup_steps": [run["warmup_steps"]],
                                     "most_trained_loops": [run["most_trained_loops"]]})
            rows = claims_table({**{name: of_run(frame, recipe, seed) for name, frame in given.items()},
                                 "schedule": schedule})
            if not run["explained"]:
                seeds = explained.filter(pl.col("recipe") == recipe)["seed"].to_list()
                rows = [explained_elsewhere(row, seeds) for row in rows]
            out[(recipe, seed)] = rows
    return out


def read_against(reference: Path, parameters: str, summary: list[dict[str, Any]], origins: list[dict]
                 ) -> tuple[list[str], dict[str, Any]] | None:
    """Where `reference` is a claims.json of the same parameters but the seeds (`comparison.parameters_key`) whose
    numbers were computed otherwise: claims.md's opening section and claims.json's `compared_with` entry. None
    where there is no such file, its parameters differ (another experiment) or it was computed alike."""
    if not reference.is_file():
        return None
    bundle = comparison.read_claims(reference)
    ours, theirs = comparison.computed_by(origins), comparison.computed_by(bundle["origins"])
    if bundle.get("parameters") != parameters or ours == theirs:
        return None
    rows = comparison.compare(summary, bundle["summary"])
    lines = [f"## Another draw of {REFERENCE_NAME}", "",
             f"This run has the parameters of {REFERENCE_NAME} ({reference.as_posix()}) but the seeds, and its numbers "
             "were computed otherwise: another processor or arithmetic (bf16 on other units, float32 without them) "
             "is another draw, like another seed, and is read as one (docs/results.md#a-reproduction-elsewhere).",
             "", *comparison.to_markdown(rows, ours, theirs, REFERENCE_NAME)]
    return lines, {"reference": reference.as_posix(), **comparison.counts(rows), "rows": rows}


def write_report(tables: Mapping[str, pl.DataFrame], out_dir: Path, reference: Path | None = None
                 ) -> list[dict[str, Any]]:
    """claims.md and claims.json from the tables of BUNDLE, read against `reference` where that applies (by the key
    of the run's parameters that the "runs" table holds, which claims.json records); returns the summary across
    seeds."""
    keys = tables["runs"]["parameters"].drop_nulls().unique().to_list()
    parameters = keys[0] if keys else None
    runs = claims_of(tables)
    summary = summarise(runs)
    origin = computations({name: frame for name, frame in tables.items() if frame.height and name != "runs"},
                          list(runs))
    against = read_against(reference, parameters, summary, origin) if reference and parameters else None
    docs = Path(os.path.relpath(CLAIMS_DOC, out_dir)).as_posix()
    write_text(out_dir / "claims.md", to_markdown(summary, runs, origin, docs, against[0] if against else ()))
    more = {**({"parameters": parameters} if parameters else {}), **({"compared_with": against[1]} if against else {})}
    write_text(out_dir / "claims.json", to_json(summary, runs, origin, more))
    return summary


def run(args: argparse.Namespace) -> None:
    if args.from_tables is not None:
        given = [flag for flag in INPUTS if getattr(args, flag) is not None]
        if given:
            raise TwoscaleError("claims: --from-tables reads nothing else: drop "
                                + ", ".join("--" + flag.replace("_", "-") for flag in given))
        summary = write_report(read_bundle(args.from_tables), args.out_dir, args.reference)
    else:
        params = load(args)
        tables = gather(args, params)
        sections = {name: getattr(params, name) for name in ("measure", "sweep", "sample", "distill")}
        with tracking.stage_run(args.stage, sections):
            for name, frame in tables.items():
                write_parquet(args.out_dir / BUNDLE_DIR / f"{name}.parquet", frame)
            summary = write_report(tables, args.out_dir, args.reference)
            tracking.log_artifact(args.out_dir / "claims.md")
            tracking.log_artifact(args.out_dir / "claims.json")
            tracking.set_tags({f"verdict_{recipe}_{row['claim']}": entry["verdict"]
                               for row in summary for recipe, entry in row["recipes"].items()})
            verdicts = [verdict.split(" (")[0] for row in summary for entry in row["recipes"].values()
                        for verdict in entry["verdicts"]]  # a run's, its reason left out
            tracking.log_metrics({f"verdicts_{verdict.replace(' ', '_')}": verdicts.count(verdict)
                                  for verdict in set(verdicts)})
    for row in summary:
        log.info("%s: %s", row["claim"], "; ".join(f"{recipe} {entry['verdict']}"
                                                   for recipe, entry in row["recipes"].items()))
