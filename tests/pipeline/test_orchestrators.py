"""One orchestrator at a time per checkout: DVC stops while a Snakemake run is under way, and Snakemake refuses to
start while DVC is at work; each names the other's process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from workspace import BIN, ROOT, attempt, copy_repository, environment

from twoscale.config.errors import TwoscaleError
from twoscale.pipeline.orchestrators import override_command, params_snapshot, written_by

HOLD_REPO_LOCK = """
import sys, time
from dvc.repo import Repo
with Repo('.') as repo, repo.lock:
    print('held', flush=True)
    time.sleep(600)
"""

# What DVC holds while a stage's command runs: its repository lock is released, its file lock names the outputs.
HOLD_STAGE_OUTPUT = """
import sys, time
from dvc.repo import Repo
from dvc.rwlock import rwlock
with Repo('.') as repo, rwlock(repo.tmp_dir, repo.fs, 'dvc repro train', [], [repo.root_dir + '/results/train'], False):
    print('held', flush=True)
    time.sleep(600)
"""


@contextlib.contextmanager
def holding(code: str, cwd: Path) -> Iterator[subprocess.Popen]:
    """While open, a process running `code`, once it says it holds its lock; killed as the block ends."""
    process = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def repo(tmp_path) -> Path:
    return copy_repository(tmp_path / "repo", ROOT / "configs/smoke.yaml")


def test_snakemake_refuses_to_start_while_dvc_holds_the_repository(repo):
    with holding(HOLD_REPO_LOCK, repo) as dvc:
        result = attempt(["snakemake", "--cores", "1"], repo)
    assert result.returncode != 0
    assert f"DVC is running in this checkout (pid {dvc.pid}" in result.stdout + result.stderr
    assert not (repo / "data/raw/corpus.txt").exists()


def test_dvc_stops_before_touching_anything_while_snakemake_runs(repo):
    # Its own process group, stopped as Ctrl-C in a terminal stops it: the job under way gets the signal too, so the
    # wait below does not depend on how long that job would take to finish. SIGINT is set back to its default first:
    # a suite started in the background by a non-interactive shell inherits it ignored, and Snakemake would run on.
    snakemake = subprocess.Popen([str(BIN / "snakemake"), "--cores", "1"], cwd=repo, env=environment(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        rwlock = repo / ".dvc/tmp/rwlock"
        for _ in range(600):
            if rwlock.is_file() and "snakemake" in rwlock.read_text():
                break
            time.sleep(0.1)
        claimed = json.loads(rwlock.read_text())["write"]
        assert claimed[str(repo.resolve() / "results")]["pid"] == snakemake.pid
        dvc = attempt(["dvc", "repro"], repo)
    finally:
        os.killpg(snakemake.pid, signal.SIGINT)
        snakemake.wait(timeout=120)
    assert dvc.returncode != 0
    assert f"(PID {snakemake.pid}): snakemake --cores 1" in dvc.stderr + dvc.stdout
    assert "Running stage" not in dvc.stderr + dvc.stdout


def test_a_dvc_stage_at_work_stops_a_claim_naming_its_command(repo):
    with holding(HOLD_STAGE_OUTPUT, repo) as dvc:
        in_the_way = rf"^DVC is running in this checkout \(pid {dvc.pid}: dvc repro train\)"
        with pytest.raises(TwoscaleError, match=in_the_way), written_by(repo, "snakemake"):
            pass


def test_a_claim_left_by_a_dead_process_is_no_obstacle(repo):
    # above Linux's largest pid (2**22): no process has it, whereas a real process's pid, once it exits, may be
    # handed to a new one at once on a busy machine
    dead = 2**22 + 1
    (repo / ".dvc/tmp").mkdir(exist_ok=True)
    (repo / ".dvc/tmp/rwlock").write_text(json.dumps(
        {"write": {str(repo.resolve() / "results"): {"pid": dead, "cmd": "snakemake (killed)"}}}))
    with written_by(repo, "snakemake again"):
        held = json.loads((repo / ".dvc/tmp/rwlock").read_text())["write"]
        assert held[str(repo.resolve() / "results")] == {"pid": os.getpid(), "cmd": "snakemake again"}
    assert json.loads((repo / ".dvc/tmp/rwlock").read_text()).get("write", {}) == {}


def test_a_second_snakemake_run_is_told_snakemake_holds_the_checkout(repo):
    in_the_way = rf"^Snakemake is running in this checkout \(pid {os.getpid()}: snakemake --cores all\): wait for it"
    with (written_by(repo, "snakemake --cores all"), pytest.raises(TwoscaleError, match=in_the_way),
          written_by(repo, "snakemake --cores 1")):
        pass


def test_outside_a_dvc_repository_there_is_nothing_to_claim(tmp_path):
    with written_by(tmp_path, "snakemake"):
        assert not (tmp_path / ".dvc").exists()


def test_a_snapshot_is_named_by_the_content_of_the_file_it_copies(tmp_path):
    (tmp_path / "m.yaml").write_bytes(b"measure: {max_loops: 10}\n")
    first = params_snapshot(tmp_path / "m.yaml", tmp_path / "snapshots")
    assert first.read_bytes() == b"measure: {max_loops: 10}\n"
    assert params_snapshot(tmp_path / "m.yaml", tmp_path / "snapshots") == first
    (tmp_path / "m.yaml").write_bytes(b"measure: {max_loops: 6}\n")  # edited: a new snapshot, the old one kept
    second = params_snapshot(tmp_path / "m.yaml", tmp_path / "snapshots")
    assert second != first and first.read_bytes() == b"measure: {max_loops: 10}\n"
    with pytest.raises(TwoscaleError, match="absent.yaml: cannot read"):
        params_snapshot(tmp_path / "absent.yaml", tmp_path / "snapshots")


def test_the_snapshot_of_an_overlay_is_the_whole_set_it_resolves_to(tmp_path):
    (tmp_path / "base.yaml").write_text("measure: {max_loops: 10, batch_size: 8}\n")
    (tmp_path / "over.yaml").write_text("base: base.yaml\nmeasure: {max_loops: 6}\n")
    snapshot = params_snapshot(tmp_path / "over.yaml", tmp_path / "snapshots")
    assert yaml.safe_load(snapshot.read_text()) == {"measure": {"max_loops": 6, "batch_size": 8}}
    (tmp_path / "base.yaml").write_text("measure: {max_loops: 10, batch_size: 4}\n")  # the base edited: a new set
    assert yaml.safe_load(params_snapshot(tmp_path / "over.yaml", tmp_path / "snapshots").read_text()) == {
        "measure": {"max_loops": 6, "batch_size": 4}}


# four jobs of 1.2 s on one core: three wait at first, then two, then one
WAITING_JOBS = """
from twoscale.pipeline import orchestrators
onstart:
    if config.get("woken_by_jobs"):
        orchestrators.scheduler_woken_by_jobs(workflow.scheduler)
rule all:
    input: expand("done/{i}", i=range(4))
rule one:
    output: "done/{i}"
    shell: "sleep 1.2; touch {output}"
"""


def scheduling_rounds(folder: Path, *options: str) -> int:
    """How many times Snakemake's scheduler selected among ready jobs in a run of WAITING_JOBS (its debug log)."""
    done = attempt(["snakemake", "--cores", "1", "--verbose", "--forceall", *options], folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return (done.stdout + done.stderr).count("Ready jobs")


def test_a_local_run_s_scheduler_is_woken_by_its_jobs_only(tmp_path):
    (tmp_path / "Snakefile").write_text(WAITING_JOBS)
    by_jobs = scheduling_rounds(tmp_path, "--config", "woken_by_jobs=1")
    with_timers = scheduling_rounds(tmp_path)
    assert by_jobs <= 5  # as the run starts and as each job ends
    # the premise: Snakemake's own limit wakes it every second while jobs wait, once more for every job that ended
    assert with_timers >= by_jobs + 4, (with_timers, by_jobs)


def test_config_key_value_is_refused_with_the_command_that_runs_the_same_set(repo):
    """Snakemake's --config would not reach the jobs (they read the parameter file): the refusal is one line whose
    command writes the settings as an overlay of the parameter file and runs it with the user's other arguments (a
    dry run stays one), and that overlay resolves to the parameter file with the settings over it (typed as YAML,
    as Snakemake users type them). Asked again, it names another overlay and never writes over one."""
    asked = ["snakemake", "-n", "--config", "data={max_chars: 300000}", "runtime={seeds: [1337, 7]}"]
    result = attempt(asked, repo)
    assert result.returncode != 0
    line = (result.stdout + result.stderr).strip().splitlines()[-1]
    assert line == ("error: parameters come from a file, not --config KEY=VALUE; the same run, in a folder of its "
                    "own: (set -C; printf '%s\\n' 'base: ../params.yaml' 'data: {max_chars: 300000}' "
                    "'runtime: {seeds: [1337, 7]}' > "
                    "configs/override.yaml) && snakemake -n --configfile configs/override.yaml")
    command = line.split("in a folder of its own: ", 1)[1]
    write, run_it = command.split(" && ")
    subprocess.run(["bash", "-c", write], cwd=repo, check=True)
    resolved = yaml.safe_load(params_snapshot(repo / "configs/override.yaml", repo / "snapshots").read_text())
    expected = yaml.safe_load((repo / "params.yaml").read_text())
    expected["data"]["max_chars"], expected["runtime"]["seeds"] = 300000, [1337, 7]
    assert resolved == expected
    assert attempt(run_it.split(), repo).returncode == 0
    assert subprocess.run(["bash", "-c", write], cwd=repo, capture_output=True).returncode != 0  # never over one
    again = (attempt(asked, repo).stderr).strip().splitlines()[-1]
    assert "> configs/override-2.yaml) && snakemake -n --configfile configs/override-2.yaml" in again


def test_override_commands_nest_and_quote_what_they_are_given_and_keep_the_user_s_arguments():
    command = override_command("configs/smoke.yaml", {"data": {"source": "it's"}, "runtime": {"seeds": "[3]"}},
                               ["--cores", "2", "--configfile", "configs/smoke.yaml", "-C", "a=1", "b=2", "-n",
                                "runs/smoke/results/claims.md"])
    assert command == ("(set -C; printf '%s\\n' 'base: smoke.yaml' 'data: {source: it'\"'\"'s}' "
                       "'runtime: {seeds: [3]}' > configs/smoke-override.yaml) && snakemake --cores 2 -n "
                       "runs/smoke/results/claims.md --configfile configs/smoke-override.yaml")
    assert override_command("params.yaml", {"train": {"steps": 3}}).endswith(
        "snakemake --cores all --configfile configs/override.yaml")


def test_no_report_is_made_while_outputs_are_to_be_rebuilt_or_a_run_is_writing(tmp_path):
    """`snakemake --report` (make report) draws the outputs as they are: it refuses in one line while an output of
    the committed run is to be built again (here a folder where a table belongs) or while another process writes
    the results."""
    repo = copy_repository(tmp_path / "repo", ROOT / "params.yaml")
    with holding(HOLD_STAGE_OUTPUT, repo):
        running = attempt(["snakemake", "--report", "report.html"], repo)
    assert running.returncode != 0 and not (repo / "report.html").exists()
    assert (running.stdout + running.stderr).strip().splitlines()[-1].startswith(
        "error: no report now: DVC is running in this checkout (pid ")
    table = repo / "results/geometry/geometry.parquet"
    table.unlink()
    (table / "part").mkdir(parents=True)
    stale = attempt(["snakemake", "--report", "report.html"], repo)
    assert stale.returncode != 0 and not (repo / "report.html").exists()
    assert (stale.stdout + stale.stderr).strip().splitlines()[-1] == (
        "error: no report while 1 output(s) are to be built again (results/geometry/geometry.parquet ...): run "
        "snakemake --cores all --configfile params.yaml first")


WATCHING_JOB = ("import time; from twoscale.pipeline.orchestrators import watch_orchestrator; "
                "watch_orchestrator(0.1); time.sleep(30)")


@pytest.mark.parametrize("same_machine", [True, False])
def test_a_job_whose_snakemake_run_is_killed_stops_itself(same_machine):
    """Killing Snakemake outright left its job running, unseen, to write beside the next run's jobs: the job now
    watches the run that started it and stops itself (SIGTERM: its outputs do not land). A job started from
    another machine's run (a Slurm node's) cannot see that run and leaves it alone."""
    import socket

    from twoscale.pipeline.orchestrators import ORCHESTRATOR_PID_ENV

    run = subprocess.Popen(["sleep", "60"])
    host = socket.gethostname() if same_machine else "another-machine"
    job = subprocess.Popen([sys.executable, "-c", WATCHING_JOB], stderr=subprocess.PIPE, text=True,
                           env={**environment(), ORCHESTRATOR_PID_ENV: f"{host} {run.pid}"})
    try:
        time.sleep(1.0)
        assert job.poll() is None  # the run is there: the job goes on
        run.kill()
        run.wait()
        if same_machine:
            assert job.wait(timeout=10) == -signal.SIGTERM
            assert f"the Snakemake run that started this job (pid {run.pid}) is gone: stopping" in job.stderr.read()
        else:
            time.sleep(1.0)
            assert job.poll() is None
    finally:
        job.kill()
        job.wait()
