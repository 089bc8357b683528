"""The pipeline's cost per stage from Snakemake's benchmark files and the jobs' own records in their logs, against
sums and an interval union done by hand, and a job's record against the kernel's account of it read by its parent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from twoscale.config.errors import TwoscaleError
from twoscale.pipeline.job_times import (
    USAGE_LINE,
    JobTime,
    alone_seconds,
    busy_seconds,
    read_job_times,
    run_summary,
    sampled_seconds,
    stage_rows,
)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def benchmark(folder: Path, name: str, wall_s: float, cpu_s: float, end: float) -> None:
    """A benchmark file as Snakemake writes it for one job, ending at `end`."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{wall_s}\t0:00:00\t1\t1\t1\t1\t0\t0\t50\t{cpu_s}\n")
    os.utime(path, (end, end))


@pytest.fixture
def folder(tmp_path) -> Path:
    # corpus 0-10 s; two trainings side by side 10-110 s and 20-100 s; a measure job 200-230 s, after a pause
    benchmark(tmp_path, "corpus.tsv", 10, 9, 1_000_010)
    benchmark(tmp_path, "train/paper/seed_1.tsv", 100, 190, 1_000_110)
    benchmark(tmp_path, "train/plain/seed_1.tsv", 80, 70, 1_000_100)
    benchmark(tmp_path, "measure/paper/seed_1/step_5.tsv", 30, 30, 1_000_230)
    return tmp_path


def test_each_stage_s_jobs_seconds_share_and_cores(folder):
    rows = stage_rows(read_job_times(folder), order=["corpus", "train", "measure"])
    assert [(r["stage"], r["jobs"], r["job_s"], r["cpu_s"]) for r in rows] == [
        ("corpus", 1, 10, 9), ("train", 2, 180, 260), ("measure", 1, 30, 30)]
    assert [round(r["share_pct"], 6) for r in rows] == [round(100 * 10 / 220, 6), round(100 * 180 / 220, 6),
                                                       round(100 * 30 / 220, 6)]
    # Snakemake's samples covered the first 75 s of each training (100 s and 80 s: samples at 15, 45, 75 s)
    assert [r["covered_s"] for r in rows] == [10, 150, 15] and rows[1]["cores"] == pytest.approx(260 / 150)
    # alone: corpus 0-10; the paper training 10-20 and 100-110 (the plain one beside it in between); measure 200-230
    assert [r["alone_s"] for r in rows] == [pytest.approx(10), pytest.approx(20), pytest.approx(30)]


def test_time_alone_counts_only_stretches_with_one_job_running():
    jobs = [JobTime("a", 10, 0, 10, 10), JobTime("b", 10, 0, 15, 10),
            JobTime("a", 2, 0, 30, 2), JobTime("c", 2, 0, 29, 2)]
    # a 0-10 and b 5-15 overlap for 5 s; a alone 0-5, b alone 10-15; then a 28-30 with c 27-29: c alone 27-28,
    # a alone 29-30
    assert alone_seconds(jobs) == {"a": 5 + 1, "b": 5, "c": 1}


def test_the_run_s_span_and_the_time_some_job_ran(folder):
    summary = run_summary(read_job_times(folder))
    assert summary["span_s"] == pytest.approx(230)
    assert summary["busy_s"] == pytest.approx(110 + 30)  # 0-110 and 200-230
    assert summary["jobs_at_once"] == pytest.approx(220 / 230)
    assert summary["cores_busy"] == pytest.approx(299 / (10 + 75 + 75 + 15) * 220 / 230)


def test_intervals_nested_touching_and_apart():
    jobs = [JobTime("a", 10, 0, 10, 10), JobTime("b", 2, 0, 5, 2), JobTime("c", 5, 0, 15, 5), JobTime("d", 1, 0, 30, 1)]
    assert busy_seconds(jobs) == 15 + 1  # 0-10 holds 3-5, 10-15 touches it, 29-30 apart


def test_no_benchmark_files_or_an_unreadable_one_is_one_line(tmp_path):
    with pytest.raises(TwoscaleError, match="no benchmark files"):
        read_job_times(tmp_path)
    (tmp_path / "x.tsv").write_text("not\ta benchmark\n")
    with pytest.raises(TwoscaleError, match=r"x\.tsv: not a Snakemake benchmark file"):
        read_job_times(tmp_path)


def test_the_command_prints_the_table(folder):
    result = subprocess.run([sys.executable, "-m", "twoscale", "cost", "--benchmarks", str(folder)],
                            capture_output=True, text=True, check=True)
    assert "| train | 2 | 180 | 260 | 150 | 81.8 | 1.73 | 20 |" in result.stdout
    assert "first start to last end 230 s, of which some job ran 140 s" in result.stdout


def test_the_cpu_seconds_cover_the_time_of_snakemake_s_last_sample():
    """Samples at 0, 0.5, ..., 15 s, then 45, 75, ... s (Snakemake 9's benchmark timer)."""
    assert [sampled_seconds(w) for w in (0.3, 10.2, 14.9, 15.0, 44.7, 45.0, 100.0)] == [0, 10, 14.5, 15, 15, 45, 75]
    jobs = [JobTime("a", 0.3, 0.2, 1.0, sampled_seconds(0.3))]  # no sample after the start: over its wall seconds
    assert stage_rows(jobs)[0]["cores"] == pytest.approx(0.2 / 0.3)


def test_a_job_s_own_record_in_its_log_stands_for_the_sampled_cpu_seconds(folder, tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    (logs / "train/paper").mkdir(parents=True)
    (logs / "train/paper/seed_1.log").write_text("2026-11-28 twoscale.stages.train trained\n"
                                                 "resources used: cpu_s=230.500 max_rss_mb=812.0\n")
    (logs / "corpus.log").write_text("a log without a record\n")
    rows = stage_rows(read_job_times(folder, logs), order=["corpus", "train", "measure"])
    # the paper training's 230.5 recorded CPU-s cover its 100 s; the plain one's 70 sampled ones its first 75 s
    assert rows[1]["cpu_s"] == 230.5 + 70 and rows[1]["covered_s"] == 100 + 75
    assert [(r["cpu_s"], r["covered_s"]) for r in (rows[0], rows[2])] == [(9, 10), (30, 15)]


CHILD = """
import os, sys, time
from twoscale.__main__ import usage_line
held = bytearray(300 * 2**20)  # touched: resident
held[::4096] = b"x" * len(held[::4096])
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
print(usage_line(), flush=True)
os._exit(0)  # without the interpreter's teardown, which a job's record, written before it, leaves out
"""


def test_a_job_s_record_is_what_the_kernel_accounts_to_it():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    line = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    found = USAGE_LINE.search(line.strip())
    # the kernel's account adds what the process spent after its record: the print, and unmapping its memory
    kernel_s = usage.ru_utime + usage.ru_stime
    assert kernel_s - 0.2 <= float(found["cpu_s"]) <= kernel_s + 0.001 and float(found["cpu_s"]) >= 1.0
    assert float(found["max_rss_mb"]) == pytest.approx(usage.ru_maxrss / 1024, abs=2) and usage.ru_maxrss > 300 * 1024
