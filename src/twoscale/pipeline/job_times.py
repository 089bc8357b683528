"""Where a pipeline run's time went, from the benchmark file Snakemake writes for every job
(results/benchmarks/<stage>[/<recipe>/seed_<seed>...].tsv: the job's wall seconds `s`; the file's mtime is when the
job ended) and the job's own record of its CPU seconds, the last line of its log (logs/<the same path>.log).

A job records its CPU seconds (its own and its children's, from the kernel) as it ends, because Snakemake's are
neither whole nor the job's: Snakemake samples the processes of the command it started (snakemake/benchmark.py,
Snakemake 9; at the start every 0.5 s for 30 samples, then every 30 s, the file keeping the last sample), and a job
forked from a preloaded interpreter (pipeline.preload) is not among them. For a job whose log has no such line (a
run before the record), the benchmark's sampled CPU seconds stand, covering only its first `sampled_seconds`; a
stage's cores are its CPU seconds over the seconds they cover."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from twoscale.config.errors import TwoscaleError

SHORT_INTERVAL_S, SHORT_SAMPLES, LONG_INTERVAL_S = 0.5, 30, 30.0  # Snakemake's sampling of a job's resources
USAGE_LINE = re.compile(r"resources used: cpu_s=(?P<cpu_s>[0-9.]+) max_rss_mb=(?P<max_rss_mb>[0-9.]+)$")


@dataclass(frozen=True)
class JobTime:
    stage: str  # the first folder of its benchmark file (train: a recipe's or a teacher's training)
    wall_s: float
    cpu_s: float
    end: float  # seconds since the epoch
    covered_s: float  # the seconds of the job its CPU seconds cover: all of them where the job recorded its own

    @property
    def start(self) -> float:
        return self.end - self.wall_s


def recorded_cpu_seconds(log: Path) -> float | None:
    """The CPU seconds a job recorded in its log as it ended; None where it recorded none."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        found = USAGE_LINE.search(line)
        if found:
            return float(found["cpu_s"])
    return None


def sampled_seconds(wall_s: float) -> float:
    """The time of the last of Snakemake's samples of a job that ran `wall_s` seconds: the CPU seconds it records
    are those of the job's first so many seconds."""
    short = SHORT_SAMPLES * SHORT_INTERVAL_S
    if wall_s < short:
        return math.floor(wall_s / SHORT_INTERVAL_S) * SHORT_INTERVAL_S
    return short + math.floor((wall_s - short) / LONG_INTERVAL_S) * LONG_INTERVAL_S


def cores(cpu_s: float, covered_s: float, wall_s: float) -> float:
    """CPU seconds per second over the seconds they cover (over the wall seconds for a job too short for a sample)."""
    return cpu_s / covered_s if covered_s else cpu_s / wall_s if wall_s else 0.0


def read_job_times(folder: Path, logs: Path | None = None) -> list[JobTime]:
    """Every job's times under a benchmarks folder, its CPU seconds from its log under `logs` where it recorded them;
    TwoscaleError in one line if there are none or one is unreadable."""
    paths = sorted(folder.rglob("*.tsv"))
    if not paths:
        raise TwoscaleError(f"{folder}: no benchmark files (a Snakemake run writes one per job)")
    jobs = []
    for path in paths:
        try:
            frame = pl.read_csv(path, separator="\t", null_values=["NA", "-"])
            wall_s, cpu_s = float(frame["s"].sum()), float(frame["cpu_time"].fill_null(0.0).sum())
        except (pl.exceptions.PolarsError, KeyError, ValueError, TypeError):
            raise TwoscaleError(f"{path}: not a Snakemake benchmark file") from None
        name = path.relative_to(folder)
        recorded = None if logs is None else recorded_cpu_seconds(logs / name.with_suffix(".log"))
        cpu_s, covered_s = (cpu_s, sampled_seconds(wall_s)) if recorded is None else (recorded, wall_s)
        jobs.append(JobTime(name.parts[0].removesuffix(".tsv"), wall_s, cpu_s, path.stat().st_mtime, covered_s))
    return jobs


def busy_seconds(jobs: Iterable[JobTime]) -> float:
    """How long at least one job was running: the length of the union of the jobs' intervals."""
    total, reach = 0.0, float("-inf")
    for job in sorted(jobs, key=lambda job: job.start):
        if job.end > reach:
            total += job.end - max(job.start, reach)
            reach = job.end
    return total


def alone_seconds(jobs: Sequence[JobTime]) -> dict[str, float]:
    """Per stage, how long one of its jobs ran with no other job beside it (on a machine of several cores, the
    time the others had nothing to do, unless that one job used them)."""
    bounds = sorted({time for job in jobs for time in (job.start, job.end)})
    alone: dict[str, float] = {}
    for begin, end in zip(bounds, bounds[1:]):
        running = [job for job in jobs if job.start <= begin and job.end >= end]
        if len(running) == 1:
            alone[running[0].stage] = alone.get(running[0].stage, 0.0) + end - begin
    return alone


def stage_rows(jobs: Sequence[JobTime], order: Sequence[str] = ()) -> list[dict]:
    """Per stage (in `order`, then the others by name): jobs, job-seconds, their CPU-seconds and the job-seconds
    those cover, share of all job-seconds (percent), the cores its jobs kept busy on average
    (`cores`), and the seconds one of its jobs ran alone (`alone_seconds`)."""
    total = sum(job.wall_s for job in jobs)
    alone = alone_seconds(jobs)
    stages = sorted({job.stage for job in jobs}, key=lambda stage: (
        order.index(stage) if stage in order else len(order), stage))
    rows = []
    for stage in stages:
        own = [job for job in jobs if job.stage == stage]
        wall, cpu, covered = (sum(job.wall_s for job in own), sum(job.cpu_s for job in own),
                              sum(job.covered_s for job in own))
        rows.append({"stage": stage, "jobs": len(own), "job_s": wall, "cpu_s": cpu, "covered_s": covered,
                     "share_pct": 100 * wall / total if total else 0.0, "cores": cores(cpu, covered, wall),
                     "alone_s": alone.get(stage, 0.0)})
    return rows


def run_summary(jobs: Sequence[JobTime]) -> dict:
    """The whole run: from the first job's start to the last one's end (span), the time some job ran (busy: less
    than the span when the jobs come from runs apart in time), and how many jobs and cores were busy on average
    (the cores: the jobs' CPU rate over the seconds their CPU seconds cover, over all their job-seconds)."""
    span = max(job.end for job in jobs) - min(job.start for job in jobs)
    job_s, cpu_s = sum(job.wall_s for job in jobs), sum(job.cpu_s for job in jobs)
    rate = cores(cpu_s, sum(job.covered_s for job in jobs), job_s)
    return {"jobs": len(jobs), "span_s": span, "busy_s": busy_seconds(jobs), "job_s": job_s, "cpu_s": cpu_s,
            "jobs_at_once": job_s / span if span else 0.0, "cores_busy": rate * job_s / span if span else 0.0}
