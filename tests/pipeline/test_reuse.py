"""Taking another parameter set's jobs (`pipeline.records.reuse`): a job is taken only when every output there was
built as the target set would build it, and a taken job keeps its records and modification times. The jobs here are
the data stages', written by hand with their records, as a stage writes them."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from twoscale.config.io import outputs_land_together, write_text
from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.records.provenance import Job, record_path, write_records
from twoscale.pipeline.records.reuse import copy_jobs, shared_jobs

ROOT = Path(__file__).resolve().parents[2]
SOURCE, TARGET = Path("runs/one"), Path("runs/more")


@pytest.fixture
def config() -> dict:
    return read_raw(ROOT / "configs/smoke.yaml")


@pytest.fixture
def corpus(tmp_path, monkeypatch, config) -> list[Path]:
    """The source run's corpus job: its two outputs with their records, its log, an hour old."""
    monkeypatch.chdir(tmp_path)
    outputs = [SOURCE / "data/raw/corpus.txt", SOURCE / "data/raw/manifest.json"]
    with outputs_land_together(lambda landing: write_records(landing, Job("corpus", {}), config, {})):
        for path in outputs:
            write_text(path, f"{path.name}\n")
    write_text(SOURCE / "logs/corpus.log", "log\n")
    for path in [*outputs, SOURCE / "logs/corpus.log"]:
        os.utime(path, (1_000_000_000, 1_000_000_000))
    return outputs


def test_a_job_built_as_the_target_would_is_copied_with_its_records_log_and_times(corpus, config):
    more = copy.deepcopy(config)
    more["runtime"]["seeds"] = [*more["runtime"]["seeds"], 99]  # the corpus job does not read the seeds
    taken = shared_jobs(config, SOURCE, more, TARGET, Path("more.yaml"))
    assert [(job.stage, job.job) for job in taken] == [("corpus", {})]
    copy_jobs(taken)
    for source in [*corpus, SOURCE / "logs/corpus.log"]:
        target = TARGET / source.relative_to(SOURCE)
        assert target.read_bytes() == source.read_bytes() and target.stat().st_mtime == 1_000_000_000
    for source in corpus:
        assert record_path(TARGET / source.relative_to(SOURCE)).read_bytes() == record_path(source).read_bytes()
    assert shared_jobs(config, SOURCE, more, TARGET, Path("more.yaml")) == []  # the target has it now


def test_a_job_of_other_parameter_values_is_not_taken(corpus, config):
    other = copy.deepcopy(config)
    other["data"]["max_chars"] += 1
    assert shared_jobs(config, SOURCE, other, TARGET, Path("other.yaml")) == []


@pytest.mark.parametrize("damage", ["missing", "changed", "changed, its hash cache rewritten", "unrecorded"])
def test_a_job_is_taken_whole_or_not_at_all(corpus, config, damage):
    if damage == "missing":
        corpus[1].unlink()
    elif damage.startswith("changed"):
        cache = record_path(corpus[1]).with_suffix(".stat")
        cached = cache.read_text().split()
        corpus[1].write_text("edited after it was built\n")
        if damage.endswith("rewritten"):  # the new file's stamp with the old hash and signature: not this user's
            found = corpus[1].stat()
            stamp = [found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns]
            cache.write_text(" ".join(map(str, [*stamp, *cached[-2:]])))
    else:
        record_path(corpus[1]).unlink()
    assert shared_jobs(config, SOURCE, config, TARGET, Path("more.yaml")) == []


def test_a_job_whose_records_were_edited_to_the_target_s_values_is_not_taken(corpus, config):
    """A job built with one value whose records are edited by hand to say the target set's (their digests left as
    they were): reuse would take it for the target's job, but the records no longer match their digests."""
    other = copy.deepcopy(config)
    other["data"]["max_chars"] += 1
    for output in corpus:
        record = json.loads(record_path(output).read_text())
        record["params"]["data"]["max_chars"] += 1
        record_path(output).write_text(json.dumps(record))
    assert shared_jobs(config, SOURCE, other, TARGET, Path("other.yaml")) == []
