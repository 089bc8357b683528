"""What built each output, and the check that a stage reads only what the parameters in force would build.

Every output a stage writes gets a build record beside it, `<folder>/.built/<name>.json`, landing with it: the
pipeline stage and job that wrote it (recipe, seed, strategy, blocks), the values of that job's parameter keys
(`dependencies.param_values`, what Snakemake and DVC compare to rerun a job) with their hash, the output's own
content hash, and the content hashes of the inputs the job read.

Before a stage runs, each file it is given to read (its command's input options, `dependencies.input_options`: a
file, or every recorded file in a folder) is checked against its record: it must still be the file the record
describes (its content hash, taken again only when its size or mtime differ), and, when the job that built it is
one of the parameters in force (its recipe, seed, strategy and blocks still among them), that job's parameter values
must be the ones in force. Either mismatch stops the stage in one line before it writes anything. A file without a
record (built before records existed, or put there by hand) is read unchecked, and the stage's log says how many.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twoscale.pipeline.dependencies import STAGES, input_options, param_values
from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import finite_or_null, write_json
from twoscale.pipeline.params import HASH_CHARS, changed_keys, shown_keys

log = logging.getLogger("twoscale.provenance")

RECORDS = ".built"  # the folder, beside the outputs, of their build records
JOB_KEYS = ("recipe", "seed", "strategy", "blocks")  # a stage's options that name its job
STAGE_OF_TEACHER = {"train": "train_teacher"}  # the pipeline stage a stage module runs for a teacher


def record_path(output: Path) -> Path:
    return output.parent / RECORDS / f"{output.name}.json"


def content_hash(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def values_hash(values: dict[str, Any]) -> str:
    """The parameter values' hash (an infinite setting included, which the record's strict JSON writes as null)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:HASH_CHARS]


@dataclass(frozen=True)
class Job:
    """One job of a pipeline stage: what its build records name."""

    stage: str  # the pipeline stage (stages.yaml), not the stage module: train_teacher for a teacher
    keys: dict[str, Any]  # recipe, seed, strategy, blocks: those the stage takes

    def params(self, config: dict[str, Any]) -> dict[str, Any]:
        return param_values(self.stage, config, self.keys.get("recipe"), self.keys.get("strategy"))

    def params_in_force(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The job's parameter values under `config`; None if `config` has no such job any more (a removed recipe,
        seed, strategy or number of blocks: the stages do not read its outputs)."""
        recipe, seed, blocks = self.keys.get("recipe"), self.keys.get("seed"), self.keys.get("blocks")
        if (self.stage not in STAGES
                or (recipe is not None and recipe not in {**config["recipes"], **(config.get("teachers") or {})})
                or (seed is not None and seed not in config["runtime"]["seeds"])
                or (blocks is not None and blocks not in config["distill"]["blocks"])):
            return None
        try:
            return self.params(config)
        except KeyError:  # its strategy
            return None


def job_of(module: str, args: argparse.Namespace, config: dict[str, Any]) -> Job | None:
    """The pipeline job that `python -m twoscale <module> ...` runs; None for a command outside the pipeline."""
    keys = {key: getattr(args, key) for key in JOB_KEYS if getattr(args, key, None) is not None}
    stage = STAGE_OF_TEACHER.get(module, module) if keys.get("recipe") in (config.get("teachers") or {}) else module
    return Job(stage, keys) if stage in STAGES else None


@dataclass(frozen=True)
class Record:
    job: Job
    params: dict[str, Any]  # as strict JSON has them: an infinity is null
    params_hash: str
    sha256: str
    size: int
    mtime_ns: int

    @classmethod
    def read(cls, output: Path) -> Record | None:
        path = record_path(output)
        try:
            raw = json.loads(path.read_text())
            return cls(Job(raw["stage"], raw["job"]), raw["params"], raw["params_hash"], raw["sha256"], raw["size"],
                       raw["mtime_ns"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            raise TwoscaleError(f"{path}: not a readable build record (remove it and rebuild {output})") from None

    def describes(self, output: Path) -> bool:
        """Whether `output` is the file recorded: same size and mtime, or else the same content."""
        found = output.stat()
        if (found.st_size, found.st_mtime_ns) == (self.size, self.mtime_ns):
            return True
        return found.st_size == self.size and content_hash(output) == self.sha256


def _read_files(args: argparse.Namespace, options: tuple[str, ...]) -> Iterator[tuple[Path, bool]]:
    """Each file the stage is given to read, and whether it was named itself (not found in a named folder)."""
    for option in options:
        path = getattr(args, option.removeprefix("--").replace("-", "_"), None)
        if path is None:
            continue
        if path.is_file():
            yield path, True
        elif path.is_dir():  # a folder: the outputs recorded in it
            for record in sorted(path.rglob(f"{RECORDS}/*.json")):
                output = record.parent.parent / record.name.removesuffix(".json")
                if output.is_file():
                    yield output, False


def check_inputs(job: Job, args: argparse.Namespace, config: dict[str, Any], params_file: Path) -> dict[str, str]:
    """TwoscaleError in one line unless every input of the job with a build record is the file recorded and, if its
    job is in force, was built from the parameter values in force. The content hashes of the inputs, for the
    job's own records."""
    hashes, unrecorded = {}, 0
    for path, named in _read_files(args, input_options(job.stage)):
        record = Record.read(path)
        if record is None:
            unrecorded += 1
            if named:
                hashes[str(path)] = content_hash(path)
            continue
        if not record.describes(path):
            raise TwoscaleError(f"{path}: not the file its build record describes (changed or replaced since "
                                f"{record.job.stage} wrote it): rebuild it")
        expected = record.job.params_in_force(config)
        if expected is not None and values_hash(expected) != record.params_hash:
            changed = changed_keys(record.params, finite_or_null(expected)) or ["a value that is not finite"]
            raise TwoscaleError(f"{path}: built from other parameters than {params_file} holds "
                                f"({shown_keys(changed)}): rebuild it (snakemake, or dvc repro)")
        hashes[str(path)] = record.sha256
    if unrecorded:
        log.info("%d input file(s) without a build record, read unchecked", unrecorded)
    return hashes


def write_records(outputs: dict[Path, Path], job: Job, config: dict[str, Any], inputs: dict[str, str]) -> None:
    """A build record for each output (path -> the temporary file holding it until it lands), written to land with
    it."""
    params = job.params(config)
    for output, waiting in outputs.items():
        found = waiting.stat()
        write_json(record_path(output), {
            "stage": job.stage, "job": job.keys, "params": params, "params_hash": values_hash(params),
            "sha256": content_hash(waiting), "size": found.st_size, "mtime_ns": found.st_mtime_ns,
            "inputs": inputs,
        })
