"""The workflow on a real Slurm cluster (scripts/local-slurm.sh starts one on this machine; root needed): the smoke
parameter set through `--profile profiles/slurm` gives the tables of a local run, and every job reaches `sbatch`
with its rule's cores, memory, wall time and GPU, as read back from Slurm's accounting.

Run with `pytest -m cluster` (after `make setup-cluster`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import polars as pl
import polars.selectors as cs
import pytest
import yaml
from workspace import ROOT, attempt, copy_repository, environment, run

from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration import jobs
from twoscale.pipeline.declaration.dependencies import declaration, lookup

pytestmark = pytest.mark.cluster

SCRIPT = ROOT / "scripts/local-slurm.sh"
TIMED_CLAIMS = {"C6", "C6b", "C7", "C7b"}  # read wall-clock timings, which differ between any two runs


@pytest.fixture(scope="module")
def cluster() -> None:
    if subprocess.run([SCRIPT, "status"], capture_output=True).returncode != 0:
        subprocess.run([SCRIPT, "start"], check=True)


def accounting(since: str) -> list[dict[str, str]]:
    """Every job Slurm accounted since `since`: its rule (the executor's comment), cores, memory, time limit,
    trackable resources and state."""
    fields = ["Comment", "ReqCPUS", "ReqMem", "Timelimit", "ReqTRES", "State"]
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-S", since, "-o", ",".join(fields)],
                         capture_output=True, text=True, check=True).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines()]


def now() -> str:
    """This moment as sacct's --starttime reads it (local time)."""
    return datetime.now().strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture(scope="module")
def through_slurm(cluster, tmp_path_factory) -> tuple[Path, list[dict[str, str]]]:
    repo = copy_repository(tmp_path_factory.mktemp("slurm") / "repo", ROOT / "configs/smoke.yaml")
    started = now()
    run(["snakemake", "--profile", "profiles/slurm"], repo)
    return repo, accounting(started)


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    repo = copy_repository(tmp_path_factory.mktemp("local") / "repo", ROOT / "configs/smoke.yaml")
    run(["snakemake", "--cores", "2"], repo)
    return repo


def digests(repo: Path, pattern: str) -> dict[str, str]:
    return {str(path.relative_to(repo)): hashlib.md5(path.read_bytes()).hexdigest()
            for path in sorted((repo / "results").glob(pattern))}


def untimed(table: Path) -> pl.DataFrame:
    """A table without its wall-clock columns (ms_per_token and its interval), which differ between any two runs."""
    return pl.read_parquet(table).drop(cs.starts_with("ms_"))


def untimed_verdicts(repo: Path) -> dict[tuple[str, str], str]:
    summary = json.loads((repo / "results/claims.json").read_text())["summary"]
    return {(row["claim"], recipe): entry["verdict"] for row in summary if row["claim"] not in TIMED_CLAIMS
            for recipe, entry in row["recipes"].items()}


def test_the_smoke_workflow_through_slurm_gives_the_tables_of_a_local_run(through_slurm, local):
    slurm, _ = through_slurm
    for pattern in ["train/*/seed_*/checkpoints/*.pt", "distill/*/seed_*/k_*/*.pt"]:
        assert digests(slurm, pattern) == digests(local, pattern) != {}
    for table in ["geometry/geometry.parquet", "geometry/loss_vs_loops.parquet", "sweep/sweep.parquet"]:
        assert untimed(slurm / "results" / table).equals(untimed(local / "results" / table)), table
    recovery = "results/surrogates/recovery.csv"
    assert (slurm / recovery).read_text() == (local / recovery).read_text()
    assert untimed_verdicts(slurm) == untimed_verdicts(local)


def test_every_job_reaches_sbatch_with_its_rules_resources(through_slurm):
    repo, submitted = through_slurm
    config = yaml.safe_load((repo / "params.yaml").read_text())
    planned = sum(len(stage.jobs()) for stage in jobs.stages(config))
    assert len(submitted) == planned and {job["State"] for job in submitted} == {"COMPLETED"}
    profile = yaml.safe_load((ROOT / "profiles/slurm/profile.yaml").read_text())
    declared = declaration()
    for job in submitted:
        name = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        stage = declared[name]
        threads = stage.get("threads", 1)
        threads = lookup(config, jobs.parameter_key(threads)) if isinstance(threads, str) else threads
        assert int(job["ReqCPUS"]) == profile["set-threads"].get(name, threads), job
        assert int(job["ReqMem"].removesuffix("M")) >= stage["memory_mb"], job  # the executor adds its own share
        hours, minutes, _ = job["Timelimit"].split(":")
        assert int(hours) * 60 + int(minutes) == stage["runtime_min"], job
        assert "gres/gpu" not in job["ReqTRES"], job  # a CPU run asks for no GPU


def first_training_target(repo: Path) -> tuple[Path, str]:
    """The outputs folder and first checkpoint of the first recipe's first seed: a short job (corpus and tokenize
    run before it). Not its metrics.json: the default run's is committed, so a copy of the repository has it."""
    smoke = yaml.safe_load((repo / "params.yaml").read_text())
    folder = f"results/train/{next(iter(smoke['recipes']))}/seed_{smoke['runtime']['seeds'][0]}"
    return repo / folder, f"{folder}/checkpoints/step_{smoke['train']['checkpoint_steps'][0]}.pt"


def test_a_cuda_run_asks_slurm_for_a_gpu_for_every_job_that_loads_a_model(cluster, tmp_path):
    cuda = read_raw(ROOT / "configs/smoke.yaml")
    cuda["runtime"]["device"] = "cuda"
    (tmp_path / "cuda.yaml").write_text(yaml.safe_dump(cuda))
    repo = copy_repository(tmp_path / "repo", tmp_path / "cuda.yaml")
    _, target = first_training_target(repo)
    started = now()
    # this machine has no CUDA: the training job is scheduled on the fake GPU, then fails in one line
    result = attempt(["snakemake", "--profile", "profiles/slurm", target], repo)
    assert result.returncode != 0
    by_rule = {job["Comment"].removeprefix("rule_").split("_wildcards_")[0]: job for job in accounting(started)}
    assert "gres/gpu=1" in by_rule["train"]["ReqTRES"] and by_rule["train"]["State"] == "FAILED"
    assert "gres/gpu" not in by_rule["corpus"]["ReqTRES"] and by_rule["tokenize"]["State"] == "COMPLETED"


def running_job(rule: str, seconds: float) -> str:
    """The Slurm id of a running job of `rule`, waiting for one at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i %k"], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            job, comment = line.split(maxsplit=1)
            if comment.startswith(f"rule_{rule}_"):
                return job
        time.sleep(0.5)
    raise AssertionError(f"no {rule} job ran within {seconds} s")


def long_training(tmp_path: Path) -> Path:
    """The smoke parameters with a training run of a few minutes (6000 steps), written to `tmp_path`."""
    smoke = read_raw(ROOT / "configs/smoke.yaml")
    smoke["train"]["steps"], smoke["train"]["checkpoint_steps"] = 6000, [5, 10, 20, 6000]
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(smoke))
    return tmp_path / "long.yaml"


def test_a_job_past_its_time_limit_fails_keeps_no_partial_outputs_and_a_rerun_finishes(cluster, tmp_path):
    repo = copy_repository(tmp_path / "repo", long_training(tmp_path))
    outputs, target = first_training_target(repo)
    result = attempt(["snakemake", "--profile", "profiles/slurm", target, "--set-resources", "train:runtime=1"], repo)
    assert result.returncode != 0 and "SLURM status is: 'TIMEOUT'" in result.stdout + result.stderr
    assert not (outputs / "metrics.json").exists() and not list(outputs.glob("checkpoints/*.pt"))
    run(["snakemake", "--profile", "profiles/slurm", target], repo)  # resumes from its last checkpoint
    assert (outputs / "metrics.json").exists() and len(list(outputs.glob("checkpoints/*.pt"))) == 4


def test_a_job_cancelled_with_scancel_fails_and_a_rerun_finishes(cluster, tmp_path):
    repo = copy_repository(tmp_path / "repo", long_training(tmp_path))
    outputs, target = first_training_target(repo)
    workflow = subprocess.Popen(["snakemake", "--profile", "profiles/slurm", target], cwd=repo, env=environment(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        subprocess.run(["scancel", running_job("train", seconds=300)], check=True)
        output, _ = workflow.communicate(timeout=240)
    finally:
        workflow.kill()
    assert workflow.returncode != 0 and "SLURM status is: 'CANCELLED'" in output, output[-2000:]
    assert not (outputs / "metrics.json").exists()
    run(["snakemake", "--profile", "profiles/slurm", target], repo)


def test_a_job_past_its_memory_is_killed_and_slurms_reason_is_in_the_log_snakemake_names(cluster, tmp_path):
    repo = copy_repository(tmp_path / "repo", ROOT / "configs/smoke.yaml")
    _, target = first_training_target(repo)
    # training imports torch: past 200 MB before its first step
    result = attempt(["snakemake", "--profile", "profiles/slurm", target, "--set-resources", "train:mem_mb=200"], repo)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "SLURM status is: 'FAILED'" in output
    slurm_log = Path(re.search(r"(\S+/slurm_logs/rule_train/\S+?\.log)", output).group(1))
    assert "exceeded memory limit" in slurm_log.read_text()


DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


def running_daemons() -> dict[str, str]:
    """The cluster's daemons that run on this machine, each with its pids."""
    pids = {name: subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
            for name in DAEMONS}
    return {name: " ".join(found) for name, found in pids.items() if found}


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {seconds} s"
        time.sleep(0.25)


def test_stop_ends_the_daemons_start_started_and_no_other():
    """A munge daemon of the machine's own, up before `start`, serves the cluster and outlives `stop`, which ends
    every daemon `start` launched. The cluster is left as it was found (up again if it was up)."""
    was_up = subprocess.run([SCRIPT, "status"], capture_output=True).returncode == 0
    subprocess.run([SCRIPT, "stop"], check=True, capture_output=True)
    own_munge = "munged" not in running_daemons()
    if own_munge:  # the machine's own munge daemon, started as its service would be
        subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "/run/munge"], check=True)
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
        # one pid: munged forks to go to the background, and its parent exits
        wait_until(lambda: running_daemons().get("munged", "").isdigit(), 10, "munged did not start")
    before = running_daemons()
    try:
        subprocess.run([SCRIPT, "start"], check=True, capture_output=True)
        launched = {line.split()[0] for line in Path("/var/lib/twoscale-slurm/started").read_text().splitlines()}
        assert launched == set(DAEMONS) - set(before)
        stopped = subprocess.run([SCRIPT, "stop"], check=True, capture_output=True, text=True).stdout
        time.sleep(5)  # a daemon sent SIGTERM may take seconds to go (munged does): one stopped by mistake is gone
        assert running_daemons() == before, stopped
        left = stopped.partition("left running, not started by start:")[2].split()
        assert sorted(left) == sorted(before), stopped
    finally:
        if own_munge:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(before["munged"]), signal.SIGTERM)  # the one this test started
            wait_until(lambda: "munged" not in running_daemons(), 30, "munged did not stop")
        if was_up:
            subprocess.run([SCRIPT, "start"], check=True, capture_output=True)
