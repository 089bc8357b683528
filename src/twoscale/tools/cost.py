"""Print where a pipeline run's time went, per stage, from the benchmark files Snakemake wrote for its jobs."""

from __future__ import annotations

import argparse
from pathlib import Path

from twoscale.config.parameter_files import results_root
from twoscale.pipeline.declaration.dependencies import stage_module_names
from twoscale.pipeline.job_times import read_job_times, run_summary, stage_rows
from twoscale.report.tables import markdown_table
from twoscale.stages.common import add_params_argument

HELP = "print where a Snakemake run's time went, per stage, from its jobs' benchmark files"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--benchmarks", type=Path,
                        help="the folder of benchmark files (default: results/benchmarks of the parameter set)")
    parser.add_argument("--logs", type=Path,
                        help="the folder of the jobs' logs, where each records its CPU seconds (default: the logs "
                             "folder of the run whose results/benchmarks the benchmark files are)")


def run(args: argparse.Namespace) -> None:
    folder = args.benchmarks or results_root(args.params) / "results/benchmarks"
    jobs = read_job_times(folder, args.logs or folder.parent.parent / "logs")
    order = stage_module_names()
    summary = run_summary(jobs)
    print(f"{folder}: {summary['jobs']} jobs; job_s: the jobs' wall seconds, cpu_s: their CPU seconds as each job "
          "recorded them in its log (as Snakemake sampled them where a log has no record), covered_s: the seconds "
          "those cover (all of a job's where it recorded them; Snakemake samples every 0.5 s for the first 15 s of "
          "a job, then every 30 s), cores: cpu_s per covered second, alone_s: seconds one of the stage's jobs ran "
          "with no other job beside it\n")
    print(markdown_table(stage_rows(jobs, order),
                         ["stage", "jobs", "job_s", "cpu_s", "covered_s", "share_pct", "cores", "alone_s"]))
    print(f"\nfirst start to last end {summary['span_s']:.0f} s, of which some job ran {summary['busy_s']:.0f} s "
          "(less when the jobs come from runs apart in time); "
          f"{summary['jobs_at_once']:.2f} jobs and {summary['cores_busy']:.2f} cores busy on average over that span")
