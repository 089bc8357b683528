"""The preloaded interpreter: a job forked from it gets what a fresh interpreter would (its command's arguments,
working folder, environment, umask, standard streams) and ends as it would (exit code, a signal passed on, stopped
when its command is killed outright); it reads the module it runs from disk as it starts. Each check runs a probe
module (written here, on the server's search path) fresh (TWOSCALE_PRELOAD=0) and forked, the server's log showing
which ran forked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from twoscale.pipeline import preload

PROBE = """
import json, os, signal, sys, time
if sys.argv[1] == "threads":  # as the libraries a job uses count them
    import numpy, scipy.stats, threadpoolctl, torch
    apis = {api: sorted({lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == api})
            for api in ("openmp", "blas")}
    print(json.dumps({"torch": torch.get_num_threads(), **apis}))
    sys.exit(0)
if sys.argv[1] == "pool":  # idle workers left running, as torch.compile leaves its compile threads
    from concurrent.futures import ThreadPoolExecutor
    sys.pool = ThreadPoolExecutor(2)  # held by a module that outlives the job's code, as a library holds its pool
    print(sys.pool.submit(lambda: 6 * 7).result())
    sys.exit(0)
if sys.argv[1] == "wait":  # until a signal: SIGTERM writes a mark first
    signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[2], "w").write("stopped"), sys.exit(143)))
    open(sys.argv[3], "w").write(str(os.getpid()))
    time.sleep(60)
umask = os.umask(0)
print(json.dumps({"version": VERSION, "argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                  "umask": umask, "stdin": sys.stdin.read(), "parent": os.getppid(),
                  "command": os.environ.get("TWOSCALE_COMMAND_PID")}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""

COMMAND = "from twoscale.pipeline.preload import main; import sys; sys.exit(main(sys.argv[1:], module='probe'))"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """An environment of its own (so a server of its own, preloading torch once for the module) and the probe."""
    folder = tmp_path_factory.mktemp("probe")
    (folder / "probe.py").write_text("VERSION = 1\n" + PROBE)
    env = {**os.environ, "PYTHONPATH": str(folder), "PROBE": uuid.uuid4().hex, "TWOSCALE_PRELOAD_IDLE_S": "600"}
    env.pop(preload.OFF_ENV, None)
    address = preload.user_folder() / f"preload-{key_of(env)}.sock"
    yield folder, env, address
    stop_server(address)


def key_of(env: dict[str, str]) -> str:
    key = "import os; from twoscale.pipeline import preload; print(preload.server_key(dict(os.environ)))"
    return subprocess.run([sys.executable, "-c", key], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def stop_server(address: Path) -> None:
    found = subprocess.run(["pgrep", "-f", f"--serve {address}$"], capture_output=True, text=True,
                           check=False).stdout.split()
    for pid in found:
        os.kill(int(pid), signal.SIGTERM)


def probe(server, *args: str, cwd: Path | None = None, stdin: str = "", **extra_env: str):
    """The command's exit code, output, errors and pid."""
    folder, env, _ = server
    command = subprocess.Popen([sys.executable, "-c", COMMAND, *args], cwd=cwd or folder, env={**env, **extra_env},
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = command.communicate(stdin, timeout=120)
    return subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr), command.pid


def forked_jobs(address: Path) -> str:
    log = address.with_suffix(".log")
    return log.read_text() if log.exists() else ""


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def started(server):
    """The first command starts the server, waits for it and runs forked from it; one run fresh beside it."""
    assert not server[2].exists()
    forked, _ = probe(server, "3", "b c", stdin="forked")
    assert server[2].exists() and f"python -m probe 3 b c in {server[0]}" in forked_jobs(server[2])
    return forked


def test_a_forked_job_gets_its_command_s_arguments_folder_environment_umask_and_streams(server, started, tmp_path):
    _, _, address = server
    fresh_run, _ = probe(server, "3", cwd=tmp_path, stdin="fresh", **{preload.OFF_ENV: "0"})
    forked, command = probe(server, "3", "b c", cwd=tmp_path, stdin="forked", PWD=str(tmp_path))  # as a shell sets it
    assert forked_jobs(address).count("python -m probe 3 b c") == 2  # the fixture's and this one; not the fresh one
    fresh, job = json.loads(fresh_run.stdout), json.loads(forked.stdout)
    assert (fresh_run.returncode, forked.returncode, started.returncode) == (3, 3, 3)
    assert (fresh_run.stderr, forked.stderr) == ("to stderr\n", "to stderr\n")
    assert job["argv"] == ["3", "b c"] and job["cwd"] == str(tmp_path) and job["stdin"] == "forked"
    assert job["probe"] == fresh["probe"] == server[1]["PROBE"] and job["umask"] == fresh["umask"]
    assert fresh["parent"] == os.getpid() != job["parent"]  # the fresh one exec'd the command; the other forked
    assert (fresh["command"], job["command"]) == (None, str(command))  # whose parents ran it (tracking reads them)


def test_a_job_that_leaves_a_thread_pool_idle_ends_as_a_fresh_interpreter_does(server, started):
    """The interpreter's shutdown tells a ThreadPoolExecutor's idle workers to stop before it joins the threads;
    a forked job ends the same way, or it would wait for them forever."""
    forked, _ = probe(server, "pool")
    assert (forked.returncode, forked.stdout) == (0, "42\n")
    assert "python -m probe pool" in forked_jobs(server[2])


def test_jobs_of_other_thread_counts_share_the_server_and_each_counts_its_own(server, started):
    """Snakemake sets six variables to each job's threads: one server serves them all, and each job's libraries count
    what a fresh interpreter's count with the same variables."""
    _, _, address = server
    jobs_before, seen = forked_jobs(address).count("python -m probe threads"), set()
    for threads in ("1", "2"):
        counts = dict.fromkeys(preload.THREAD_ENV, threads)
        fresh = json.loads(probe(server, "threads", **counts, **{preload.OFF_ENV: "0"})[0].stdout)
        forked = json.loads(probe(server, "threads", **counts)[0].stdout)
        assert forked == fresh and fresh["torch"] == int(threads) and fresh["blas"] == [int(threads)], (fresh, forked)
        seen.add(json.dumps(fresh))
    assert len(seen) == 2  # the counts differed, and each job had its own
    assert forked_jobs(address).count("python -m probe threads") == jobs_before + 2


def test_an_edit_to_the_module_is_seen_by_the_next_job(server, started):
    folder, _, address = server
    (folder / "probe.py").write_text("VERSION = 2\n" + PROBE)
    jobs_before = forked_jobs(address).count("python -m probe")
    assert json.loads(probe(server, "0")[0].stdout)["version"] == 2
    assert forked_jobs(address).count("python -m probe") == jobs_before + 1


def test_a_signal_to_the_command_reaches_the_job_and_the_command_ends_as_it_did(server, started, tmp_path):
    mark, pid_file = tmp_path / "mark", tmp_path / "pid"
    folder, env, address = server
    command = subprocess.Popen([sys.executable, "-c", COMMAND, "wait", str(mark), str(pid_file)], cwd=folder, env=env)
    wait_for(pid_file.exists)
    assert f"python -m probe wait {mark}" in forked_jobs(address)
    command.send_signal(signal.SIGTERM)
    assert command.wait(timeout=60) == 143 and mark.read_text() == "stopped"


def test_a_command_killed_outright_has_its_job_stopped(server, started, tmp_path):
    mark, pid_file = tmp_path / "mark", tmp_path / "pid"
    folder, env, address = server
    command = subprocess.Popen([sys.executable, "-c", COMMAND, "wait", str(mark), str(pid_file)], cwd=folder, env=env)
    wait_for(pid_file.exists)
    command.kill()
    wait_for(mark.exists, timeout=60)
    assert mark.read_text() == "stopped" and f"job {pid_file.read_text()}: its command ended" in forked_jobs(address)


def test_a_job_ended_by_a_signal_ends_its_command_by_the_same(server, started, tmp_path):
    mark, pid_file = tmp_path / "mark", tmp_path / "pid"
    folder, env, _ = server
    command = subprocess.Popen([sys.executable, "-c", COMMAND, "wait", str(mark), str(pid_file)], cwd=folder, env=env)
    wait_for(pid_file.exists)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert command.wait(timeout=60) == -signal.SIGKILL


def test_switched_off_every_job_is_fresh_and_no_server_starts(server, tmp_path):
    env = {**server[1], preload.OFF_ENV: "0", "PROBE": uuid.uuid4().hex}
    address = preload.user_folder() / f"preload-{key_of(env)}.sock"
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", COMMAND, "0"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        assert done.returncode == 0 and json.loads(done.stdout)["parent"] == os.getpid()
    time.sleep(1)
    assert not address.exists() and not address.with_suffix(".log").exists()


def test_a_server_leaves_when_idle(tmp_path):
    (tmp_path / "probe.py").write_text("VERSION = 1\n" + PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "TWOSCALE_PRELOAD_IDLE_S": "1"}
    env.pop(preload.OFF_ENV, None)
    address = preload.user_folder() / f"preload-{key_of(env)}.sock"
    subprocess.run([sys.executable, "-c", COMMAND, "0"], cwd=tmp_path, env=env, capture_output=True, check=True)
    assert address.exists() and "python -m probe 0" in forked_jobs(address)
    wait_for(lambda: not address.exists(), timeout=30)
