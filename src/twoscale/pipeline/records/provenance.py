"""What built each output, and the check that a stage reads only what the parameters in force would build.

Every output a stage writes gets a build record beside it, `<folder>/.built/<name>.json`, landing with it: the
pipeline stage and job that wrote it (recipe, seed, strategy, blocks), the values of that job's parameter keys
(`dependencies.param_values`, what Snakemake and DVC compare to rerun a job), the output's content
hash and size, the content hashes of the inputs the job read, and a digest of all of these (`record_digest`), so
that a record edited by hand (a parameter value, a hash) no longer matches itself and is refused. The digest is not
a signature: it catches an edit, not a forger who recomputes it. A record holds nothing else, so an output rebuilt
byte for byte from the same inputs gets the same record (DVC hashes the records of the folders it tracks). Beside
it, `<name>.stat` (ignored by git and DVC) caches the file's hash for its size, mtime, inode and ctime, so that a
file is hashed again only when it may have changed on disk; the cache is signed with a key of this user's
(`STAMP_KEY`, never in the checkout), so that a stamp rewritten by hand for an edited file is not believed. Inputs
are recorded relative to the output's folder.

Before a stage runs, the files it reads are checked: those its command's input options name (a file, or in a
folder the inputs the orchestrators would give its job under the parameters in force), and, through the records,
every file those were built from, up to the corpus. A file with a record must be the file recorded, its job must be
one the parameters in force have, with the same parameter values (compared by value, as Snakemake and DVC do), and
what it was built from must be unchanged where it is still there; else the stage stops in one line before it
writes anything. A file without a record (built before
records existed, or put there by hand) is read unchecked, and the stage's log counts them.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import hmac
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import atomic_path, finite_or_null, not_a_file, once_landed, sha256_file, write_json
from twoscale.config.parameter_files import RUNS, changed_keys, shown_keys
from twoscale.pipeline.declaration.dependencies import (
    STAGES,
    declared_stages,
    holds_job,
    input_options,
    inside,
    output_options,
    param_values,
    stage_module,
)
from twoscale.pipeline.declaration.jobs import ITEM, WILDCARD, stages

log = logging.getLogger(__name__)

RECORDS = ".built"  # the folder, beside the outputs, of their build records
JOB_KEYS = ("recipe", "seed", "strategy", "blocks")  # a stage's options that name its job


def record_path(output: Path) -> Path:
    return output.parent / RECORDS / f"{output.name}.json"


def _stat_path(output: Path) -> Path:
    return output.parent / RECORDS / f"{output.name}.stat"


def remove_record(output: Path) -> None:
    """Remove an output's record and hash cache (when the output itself is removed)."""
    record_path(output).unlink(missing_ok=True)
    _stat_path(output).unlink(missing_ok=True)


def _stamp(found: os.stat_result) -> str:
    """What changes when a file's content may have: size, mtime, inode and ctime (a copy that keeps the mtime,
    `cp -p`, is another inode; a rename changes the ctime)."""
    return f"{found.st_size} {found.st_mtime_ns} {found.st_ino} {found.st_ctime_ns}"


STAMP_KEY = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "twoscale/stamp.key"


@functools.cache
def _stamp_key() -> bytes | None:
    """This user's secret for signing hash caches, made at first use (written whole, then linked into place, so
    that jobs starting together read one key); None where it can be neither read nor made: nothing is cached."""
    for _ in range(2):
        try:
            key = STAMP_KEY.read_bytes()
            return key if len(key) == 32 else None
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            STAMP_KEY.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=STAMP_KEY.parent, prefix=".key-") as made:
                made.write(os.urandom(32))
                made.flush()
                os.chmod(made.name, 0o600)
                os.link(made.name, STAMP_KEY)
        except FileExistsError:  # another job made it first
            pass
        except OSError:
            return None
    return None


def _signed(path: Path, stamp: str, digest: str) -> str | None:
    key = _stamp_key()
    message = f"{path.resolve()}\0{stamp}\0{digest}".encode()
    return None if key is None else hmac.new(key, message, hashlib.sha256).hexdigest()


def _cache_hash(path: Path, found: os.stat_result, digest: str) -> None:
    """Keep the hash of `path`, as it was when `found`, in the cache beside it, signed (where the folder can be
    written and the key read: it is only a cache)."""
    stamp = _stamp(found)
    signature = _signed(path, stamp, digest)
    if signature is None:
        return
    try:
        with atomic_path(_stat_path(path), now=True) as tmp:
            tmp.write_text(f"{stamp} {digest} {signature}")
    except (OSError, TwoscaleError):
        pass


def current_hash(path: Path) -> str:
    """The file's content hash, from the cache beside it while its stamp is the one cached and its signature is
    this user's; else hashed, and cached again (where the folder can be written)."""
    found = path.stat()
    try:
        cached_stamp, cached_hash, signature = _stat_path(path).read_text().rsplit(" ", 2)
        expected = _signed(path, cached_stamp, cached_hash)
        if cached_stamp == _stamp(found) and expected is not None and hmac.compare_digest(signature, expected):
            return cached_hash
    except (OSError, ValueError):
        pass
    digest = sha256_file(path)
    _cache_hash(path, found, digest)
    return digest


@dataclass(frozen=True)
class Job:
    """One job of a pipeline stage: what its build records name."""

    stage: str  # the pipeline stage (stages.yaml), not the stage module: train_teacher for a teacher
    keys: dict[str, Any]  # recipe, seed, strategy, blocks: those the stage takes

    def params(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The job's parameter values under `config`; None if `config` has no such job (a recipe, seed, strategy
        or number of blocks it does not list)."""
        if self.stage not in STAGES or not holds_job(self.stage, self.keys, config):
            return None
        try:
            return param_values(self.stage, config, self.keys.get("recipe"), self.keys.get("strategy"))
        except KeyError:  # its strategy
            return None


def job_of(module: str, args: argparse.Namespace, config: dict[str, Any]) -> Job | None:
    """The pipeline job that `python -m twoscale <module> ...` runs; None for a command outside the pipeline."""
    keys = {key: getattr(args, key) for key in JOB_KEYS if getattr(args, key, None) is not None}
    stages = [stage for stage in STAGES if stage_module(stage) == module]  # train and train_teacher for train
    return next((Job(stage, keys) for stage in stages if holds_job(stage, keys, config)),
                Job(stages[0], keys) if stages else None)


def record_digest(fields: dict[str, Any]) -> str:
    """The sha256 of a build record's fields (its digest aside) as canonical JSON, infinities as null."""
    canonical = json.dumps(finite_or_null(fields), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _without_digest(raw: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in raw.items() if key != "digest"}


def with_digest(fields: dict[str, Any]) -> dict[str, Any]:
    """A build record's fields with their digest (one they held replaced): what is written."""
    fields = _without_digest(fields)
    return {**fields, "digest": record_digest(fields)}


def digested_fields(path: Path) -> dict[str, Any]:
    """A build record's fields, its digest taken off once it matches them (TwoscaleError in one line otherwise);
    FileNotFoundError where there is none."""
    return _digest_checked(path, json.loads(path.read_text()))


def _digest_checked(path: Path, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("digest") != record_digest(fields := _without_digest(raw)):
        raise TwoscaleError(f"{path}: a build record that does not match its digest (edited by hand, or written "
                            f"before records carried one): remove it and rebuild what it describes")
    return fields


@dataclass(frozen=True)
class Record:
    job: Job
    params: dict[str, Any]  # as strict JSON has them: an infinity is null
    sha256: str
    size: int
    inputs: dict[str, str]

    @classmethod
    def read(cls, output: Path) -> Record | None:
        path = record_path(output)
        try:
            raw = json.loads(path.read_text())
            record = cls(Job(raw["stage"], raw["job"]), raw["params"], raw["sha256"], raw["size"], raw["inputs"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            record = None
        if record is None or not record._well_formed():
            raise TwoscaleError(f"{path}: not a readable build record (remove it and rebuild {output})")
        _digest_checked(path, raw)
        return record

    def _well_formed(self) -> bool:
        return (isinstance(self.job.stage, str) and isinstance(self.job.keys, dict)
                and all(isinstance(value, (str, int)) for value in self.job.keys.values())
                and isinstance(self.params, dict) and isinstance(self.sha256, str) and isinstance(self.size, int)
                and isinstance(self.inputs, dict)
                and all(isinstance(key, str) and isinstance(value, str) for key, value in self.inputs.items()))

    def describes(self, output: Path) -> bool:
        return output.stat().st_size == self.size and current_hash(output) == self.sha256


def _files_read(job: Job, args: argparse.Namespace, config: dict[str, Any]) -> Iterator[Path]:
    """The files the job reads: each file an input option names, and in a folder an option names, the inputs that
    the orchestrators give the job under `config` (the outputs of the jobs in force there); and its stage's
    reference where the checkout has it (a repository file, stages.yaml's `reference`)."""
    stage = next(stage for stage in stages(config) if stage.name == job.stage)
    yield from _given(job, args, input_options(job.stage), stage.inputs)
    reference = _reference(job, args)
    if reference is not None:
        yield reference


def _reference(job: Job, args: argparse.Namespace) -> Path | None:
    """The job's reference: the file its command's --reference names, else stages.yaml's, if its stage has one."""
    reference = declared_stages()[job.stage].get("reference")
    return None if reference is None else Path(getattr(args, "reference", None) or reference)


def references() -> set[str]:
    """The absolute paths of the stages' declared references (stages.yaml's `reference`)."""
    return {os.path.abspath(stage["reference"]) for stage in declared_stages().values() if "reference" in stage}


def files_written(job: Job, args: argparse.Namespace, config: dict[str, Any]) -> list[Path]:
    """The files the job writes where its command's output options say: its outputs under `config`, their build
    records and hash caches."""
    stage = next(stage for stage in stages(config) if stage.name == job.stage)
    outputs = list(_given(job, args, output_options(job.stage), stage.outputs, folders_only=True))
    return [*outputs, *map(record_path, outputs), *map(_stat_path, outputs)]


def _given(job: Job, args: argparse.Namespace, options: dict[str, str], declared_paths: tuple[str, ...],
           folders_only: bool = False) -> Iterator[Path]:
    """The files of `declared_paths` (the stage's inputs, or outputs) where the job's command line puts them: an
    option naming one of them gives its path, one naming a folder the paths inside it (or, unless `folders_only`,
    the folder itself when the declaration lists no file inside). A folder may hold a wildcard the job's keys do not
    fill (measure's {step}, read from its checkpoint): the paths inside it are found all the same."""

    def of_job(path: str) -> str:  # the job's own wildcards filled in ({recipe}, and ${item.recipe} declared)
        return WILDCARD.sub(lambda match: str(job.keys.get(match.group(1), match.group(0))), ITEM.sub(r"{\1}", path))

    for option, declared in options.items():
        given = getattr(args, option.removeprefix("--").replace("-", "_"), None)
        if given is None:
            continue
        folder = of_job(declared)
        paths = [of_job(path) for path in declared_paths]
        if folder in paths:
            yield Path(given)
            continue
        within = [PurePosixPath(path).relative_to(folder) for path in paths if inside(path, folder)]
        within = [path for path in within if "{" not in str(path)]
        yield from [given / path for path in within] if within or folders_only else [given]


def rebuild(path: Path, config: dict[str, Any]) -> str:
    """How to rebuild a file that a job refuses: Snakemake rebuilds what its build records disown (the Snakefile
    checks them all before it plans); DVC goes by dvc.lock (and restores a removed output from its cache, with the
    record it had), so the stage that writes the file is forced, with every stage after it."""
    stage = dvc_stage(path, config)
    return f"rebuild it (snakemake --cores all; with DVC: dvc repro -f --downstream {stage})" if stage else (
        "rebuild it (snakemake --cores all)")


def dvc_stage(path: Path, config: dict[str, Any]) -> str | None:
    """DVC's name for the job of `config` that writes `path` in the checkout's layout (tokenize, train@paper-1337,
    measure@paper-1337-40: the stage, then its matrix values); None where no job writes it."""
    target = os.path.relpath(path)
    for stage in stages(config):
        for job in stage.jobs():
            if target in (output.format(**job) for output in stage.outputs):
                return stage.dvc_name(job)
    return None


@dataclass(frozen=True)
class Owner:
    """The job that writes an output: its stage, its wildcard values and the files it reads, as the default set's
    layout has them (`in_default_layout`)."""

    stage: str
    job: dict[str, str]
    inputs: frozenset[str]

    def disowns(self, record: Record, sources: list[str]) -> bool:
        """Whether a record, whose job read `sources`, was written by another job than this one: another stage,
        another recipe, seed, strategy or number of blocks, or (for what a record's job does not name: a
        checkpoint's step) a file read that this job does not read."""
        return (record.job.stage != self.stage
                or any(str(value) != self.job[key] for key, value in record.job.keys.items() if key in self.job)
                or any(source not in self.inputs for source in sources))


def in_default_layout(path: str | Path) -> str:
    """A path relative to the checkout with its parameter set's root (runs/<name>/) taken off: where the default set
    keeps the file. Every set lays its files out alike under its root."""
    parts = PurePosixPath(os.path.relpath(os.path.abspath(path))).parts
    return PurePosixPath(*parts[2:]).as_posix() if len(parts) > 2 and parts[0] == RUNS else PurePosixPath(
        *parts).as_posix()


def owners(config: dict[str, Any]) -> dict[str, Owner]:
    """Every output of the set's jobs (in the default set's layout) by the job that writes it."""
    found = {}
    for stage in stages(config):
        for job in stage.jobs():
            inputs = frozenset(os.path.normpath(path.format(**job)) for path in stage.inputs)
            for output in stage.outputs:
                found[os.path.normpath(output.format(**job))] = Owner(stage.name, job, inputs)
    return found


class BuildCheck:
    """Files checked so far (their content hashes), so that what many inputs were built from is read once.

    A reference (stages.yaml's `reference`: the committed study's claims, another parameter set's) is hashed, never
    checked against the parameters in force: its reader decides by the key of its parameters whether it is the same
    experiment (claims.comparison)."""

    def __init__(self, config: dict[str, Any], params_file: Path) -> None:
        self.config, self.params_file = config, params_file
        self.unchecked = references()
        self.hashes: dict[str, str] = {}  # by absolute path
        self.under_way: set[str] = set()
        self.unrecorded = self.missing = 0
        self._owners: dict[str, Owner] | None = None

    def owner(self, path: Path) -> Owner | None:
        """The job of the parameters in force that writes `path`, in any set's folder; None where none does."""
        if self._owners is None:
            self._owners = owners(self.config)
        return self._owners.get(in_default_layout(path))

    def file(self, path: Path, reader: Path | None = None) -> str:
        """The file's content hash, once it and what it was built from are checked (TwoscaleError in one line
        otherwise); `reader`: the checked file built from it, if any."""
        key = os.path.abspath(path)
        if key in self.hashes:
            return self.hashes[key]
        if key in self.unchecked:
            digest = self.hashes[key] = current_hash(path)
            return digest
        if key in self.under_way:
            raise TwoscaleError(f"{path}: its build records say it was built from itself: delete "
                                f"{record_path(path)} and rebuild it")
        through = f" ({reader} was built from it)" if reader else ""
        record = Record.read(path)
        if record is None:
            self.unrecorded += 1
            digest = self.hashes[key] = current_hash(path)
            return digest
        self.under_way.add(key)
        try:
            self._check(path, record, through)
        finally:  # refused or not, it is no longer being checked
            self.under_way.discard(key)
        self.hashes[key] = record.sha256
        return record.sha256

    def _check(self, path: Path, record: Record, through: str) -> None:
        if not record.describes(path):
            raise TwoscaleError(f"{path}: not the file its build record describes (changed, or restored without its "
                                f"record){through}: put the recorded file back, {rebuild(path, self.config)}, or "
                                f"delete {record_path(path)} to read it unchecked")
        sources = [Path(os.path.normpath(path.parent / source)) for source in record.inputs]  # relative to its folder
        owner = self.owner(path)
        if owner is not None and owner.disowns(record, [in_default_layout(source) for source in sources
                                                         if os.path.abspath(source) not in self.unchecked]):
            raise TwoscaleError(f"{path}: its build record is a {record.job.stage} job's ({record.job.keys}), not "
                                f"that of the {owner.stage} job that writes it ({owner.job}): moved or swapped with "
                                f"its record{through}: {rebuild(path, self.config)}")
        expected = record.job.params(self.config)
        if expected is None:
            raise TwoscaleError(f"{path}: built by a {record.job.stage} job ({record.job.keys}) that "
                                f"{self.params_file} does not have{through}: give a file of this parameter set's "
                                f"run, or delete "
                                f"{record_path(path)} to read it unchecked")
        changed = changed_keys(record.params, finite_or_null(expected))  # by value, as the orchestrators compare
        if changed:
            raise TwoscaleError(f"{path}: built from other parameters than {self.params_file} holds "
                                f"({shown_keys(changed)}){through}: {rebuild(path, self.config)}")
        for source_path, built_from in zip(sources, record.inputs.values(), strict=True):
            if not source_path.is_file():
                self.missing += 1
            elif self.file(source_path, path) != built_from:
                raise TwoscaleError(f"{path}: built from another {source_path} than the one there now: "
                                    f"{rebuild(path, self.config)}")


def check_inputs(job: Job, args: argparse.Namespace, config: dict[str, Any], params_file: Path) -> dict[str, str]:
    """TwoscaleError in one line unless every file the job reads, and every file those were built from, is the
    file its record describes and was built by a job of the parameters in force, from their values. The content
    hashes of the files the job reads, for its own records."""
    check = BuildCheck(config, params_file)
    reference = _reference(job, args)
    if reference is not None:
        check.unchecked.add(os.path.abspath(reference))
    given = list(_files_read(job, args, config))
    for path in given:
        if path.exists() and not path.is_file() and check.owner(path) is not None:
            raise TwoscaleError(f"{path}: {not_a_file(path)} where the {check.owner(path).stage} stage writes a "
                                f"file: move it away and {rebuild(path, config)}")
    read = {str(path): check.file(path) for path in given if path.is_file()}
    if check.unrecorded:
        log.info("%d file(s) read, or read through others, without a build record: not checked", check.unrecorded)
    if check.missing:
        log.info("%d file(s) that what it reads was built from are gone: not checked", check.missing)
    return read


def write_records(outputs: dict[Path, Path], job: Job, config: dict[str, Any], inputs: dict[str, str]) -> None:
    """A build record for each output (path -> the temporary file holding it until it lands), written to land with
    it, and its hash cache once it has landed (landing changes its ctime, part of the cache's stamp)."""
    params = job.params(config)
    for output, waiting in outputs.items():
        found, digest = waiting.stat(), sha256_file(waiting)
        # the inputs relative to the output's folder: found again from any working directory
        sources = {os.path.relpath(os.path.abspath(source), output.parent): built_from
                   for source, built_from in inputs.items()}
        fields = {"stage": job.stage, "job": job.keys, "params": params, "sha256": digest, "size": found.st_size,
                  "inputs": sources}
        write_json(record_path(output), with_digest(fields))
        once_landed(lambda output=output, digest=digest: _cache_hash(output, output.stat(), digest))
