"""A preloaded interpreter for the workflow's jobs: `python -m twoscale.pipeline.preload <stage> ...` runs what
`python -m twoscale <stage> ...` runs, in a process forked from a server that has already imported the libraries the
stages use.

Each job was a fresh interpreter, and importing torch, polars, pydantic and the plotting libraries costs it about
3.5 CPU-s before its work starts: most of a smoke job's CPU. The first job of a run finds no server: it starts one,
which imports the libraries of PRELOADED once and nothing of twoscale, and waits for it (as do the jobs that come
while it imports); every job is then forked from it, and reads twoscale's modules from disk as it starts, so an edit
is seen by the next job. A job that finds no server answering within START_TIMEOUT_S runs as a fresh interpreter. A
forked job gets the command's arguments, working folder, environment, umask and standard streams; its exit status is
the command's, a signal sent to the command is passed on to it, and a command killed outright has its job stopped
(SIGTERM). The server leaves when no job has run for IDLE_S seconds.

One server per interpreter, module search path, environment and installed libraries (their files' times): a job is
never forked from a process that imported its libraries differently. Under Slurm (SLURM_JOB_ID set) or with
TWOSCALE_PRELOAD=0, every job is a fresh interpreter: a forked job would run outside the cgroup that Slurm gives the
job. Snakemake's benchmark files measure the command's own process, which under a server is the small one that
waits for the job: a job's CPU seconds and peak memory are in its log (`twoscale.__main__`).

Only this module's standard-library imports are paid by the command itself (about 30 ms)."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import hashlib
import importlib
import importlib.util
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

OFF_ENV = "TWOSCALE_PRELOAD"
IDLE_ENV = "TWOSCALE_PRELOAD_IDLE_S"
IDLE_S = float(os.environ.get(IDLE_ENV, "120"))  # read by the server as it starts
START_TIMEOUT_S = 60.0
PRELOADED = ("numpy", "yaml", "pydantic", "psutil", "tqdm", "polars", "pyarrow", "torch", "tokenizers", "pandas",
             "scipy.stats", "matplotlib.pyplot", "seaborn")
COMMAND_PID_ENV = "TWOSCALE_COMMAND_PID"  # in a forked job: the command it stands for, whose parents ran it
RUN_TIME_ENV = ("TWOSCALE_", "MLFLOW_", "DVC_")  # read by what a job runs, never by what the server imports
# set by Snakemake to each job's thread count: the server imports with none of them, each job takes its own counts
# (take_thread_counts), so that the workflow's one-thread and two-thread jobs share a server
THREAD_ENV = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
SHELL_ENV = ("PWD", "OLDPWD", "SHLVL", "_")  # the shell's own bookkeeping: the folder a job runs in is its request's
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
LENGTH = struct.Struct("!I")


def user_folder() -> Path:
    """The user's own folder under the temporary directory, for the workflow's local servers' sockets and logs."""
    import tempfile

    folder = Path(tempfile.gettempdir()) / f"twoscale-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def server_key(environment: dict[str, str]) -> str:
    """What a forked job's libraries depend on: the interpreter, the search path beyond the working folder, the
    environment that a preloaded library could read (all of it but the variables of twoscale, MLflow and DVC, none of
    them preloaded: a run's own, such as its MLflow parent run, or DVC's name of the stage it runs, would otherwise
    start a server per run or per stage; nor the thread counts of THREAD_ENV, nor the shell's PWD and the like, which
    would start one per checkout), and this module's and the preloaded libraries' files (an upgrade is a new
    server)."""
    files = [__file__]
    for name in PRELOADED:
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name.split(".")[0])
            if spec is not None and spec.origin:
                files.append(spec.origin)
    stamps = [(path, os.stat(path).st_mtime_ns) for path in files if os.path.exists(path)]
    read = sorted((name, value) for name, value in environment.items() if name not in THREAD_ENV + SHELL_ENV
                  and (name.startswith(OFF_ENV) or not name.startswith(RUN_TIME_ENV)))
    described = json.dumps([sys.executable, sys.path[1:], read, stamps, os.uname().nodename])
    return hashlib.sha256(described.encode()).hexdigest()[:20]


def main(argv: list[str], module: str = "twoscale") -> int:
    """Run `python -m <module> <argv>` in a forked job; as a fresh interpreter if no server answers."""
    if argv[:1] == ["--serve"]:
        job = serve(Path(argv[1]))
        if job is None:
            return 0
        end_job(run_job(*job))
    if os.environ.get(OFF_ENV) == "0" or "SLURM_JOB_ID" in os.environ:
        run_fresh(module, argv)
    address = user_folder() / f"preload-{server_key(dict(os.environ))}.sock"
    connection = connected(address)
    if connection is None:
        server = start_server(address)
        connection = connected(address, START_TIMEOUT_S, lambda: server.poll() is None or starting(address))
    if connection is None:
        run_fresh(module, argv)
    return run_forked(connection, module, argv)


# --- the command ---------------------------------------------------------------------------------------------------


def connected(address: Path, wait_s: float = 0.0, coming=lambda: False) -> socket.socket | None:
    """A connection to the server at `address`, waiting up to `wait_s` seconds while `coming()` says one is on its
    way; None if none answers."""
    deadline = time.monotonic() + wait_s
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(address))
            return connection
        except OSError:
            connection.close()
        if time.monotonic() > deadline or not coming():
            return None
        time.sleep(0.05)


def starting(address: Path) -> bool:
    """Whether a server holds the address's lock (importing, or about to answer)."""
    try:
        with open(address.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def run_fresh(module: str, argv: list[str]):
    os.execv(sys.executable, [sys.executable, "-m", module, *argv])


def start_server(address: Path) -> subprocess.Popen:
    """A server in a session of its own, holding none of the command's files and started in a folder of its own (a
    job's folder is first on the search path as the libraries are imported); it leaves at once if another holds the
    address's lock (starting or serving)."""
    environment = {name: value for name, value in os.environ.items() if name not in THREAD_ENV}
    with open(address.with_suffix(".log"), "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "twoscale.pipeline.preload", "--serve", str(address)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                start_new_session=True, close_fds=True, cwd=address.parent)


def run_forked(connection: socket.socket, module: str, argv: list[str]) -> int:
    """Send the job to the server with this process's standard streams; pass signals on; exit as the job did."""
    umask = os.umask(0)
    os.umask(umask)
    request = json.dumps({"module": module, "argv": argv, "cwd": os.getcwd(), "umask": umask,
                          "env": {**os.environ, COMMAND_PID_ENV: str(os.getpid())}}).encode()
    pending: list[int] = []
    job: list[int] = []

    def relay(signum, frame):
        if job:
            with contextlib.suppress(ProcessLookupError):
                os.kill(job[0], signum)
        else:
            pending.append(signum)

    for signum in RELAYED:
        signal.signal(signum, relay)
    socket.send_fds(connection, [LENGTH.pack(len(request)) + request], [0, 1, 2])
    replies = connection.makefile("rb")
    started = replies.readline()
    if not started:  # the server left as this command came: nothing ran
        run_fresh(module, argv)
    job.append(json.loads(started)["pid"])
    for signum in pending:
        relay(signum, None)
    ended = replies.readline()
    if not ended:
        with contextlib.suppress(ProcessLookupError):
            os.kill(job[0], signal.SIGTERM)
        print("twoscale: the preloaded interpreter ended while the job ran; the job was stopped", file=sys.stderr)
        return 1
    status = json.loads(ended)["status"]
    if os.WIFSIGNALED(status):  # end as the job ended, for the caller to see the same
        with contextlib.suppress(OSError):  # SIGKILL's and SIGSTOP's cannot be changed
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


# --- the server ----------------------------------------------------------------------------------------------------


def serve(address: Path, idle_s: float = IDLE_S) -> tuple[dict, list[int]] | None:
    """Preload, then fork a job for each request until no job has run for `idle_s` seconds. Returns in a forked
    job only, with its request and standard streams; None when the server leaves."""
    lock = open(address.with_suffix(".lock"), "a")  # noqa: SIM115 (held for the server's life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    for name in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    gc.freeze()  # a forked job's collections leave the preloaded objects, and their pages, alone
    address.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(address))
    listener.listen(64)
    bound = os.stat(address).st_ino
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    leaving: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: leaving.append(signum))
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(wake_read, selectors.EVENT_READ)
    jobs: dict[int, socket.socket] = {}
    last = time.monotonic()
    while not leaving and (jobs or time.monotonic() - last < idle_s):
        for key, _ in events.select(timeout=min(idle_s, 5.0)):
            if key.fileobj is listener:
                connection, _ = listener.accept()
                request, streams = receive(connection)
                if request is None:
                    connection.close()
                    continue
                pid = os.fork()
                if pid == 0:  # the job: none of the server's files or handlers
                    events.close()
                    for held in (listener, lock, *jobs.values()):
                        held.close()
                    for fd in (wake_read, wake_write):
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    for signum in (signal.SIGCHLD, signal.SIGTERM):
                        signal.signal(signum, signal.SIG_DFL)
                    connection.close()
                    return request, streams
                for fd in streams:
                    os.close(fd)
                jobs[pid] = connection
                events.register(connection, selectors.EVENT_READ, pid)
                send(connection, {"pid": pid})
                say(f"job {pid}: python -m {request['module']} {' '.join(request['argv'])} in {request['cwd']}")
            elif key.fileobj is wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 512)
            elif not received(key.fileobj):  # its command ended before its job: killed outright
                with contextlib.suppress(ProcessLookupError):
                    os.kill(key.data, signal.SIGTERM)
                    say(f"job {key.data}: its command ended; stopped (SIGTERM)")
                events.unregister(key.fileobj)
        reap(jobs, events)
        if jobs:
            last = time.monotonic()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(address).st_ino != bound:  # another server took the address
                break
    with contextlib.suppress(FileNotFoundError):
        if os.stat(address).st_ino == bound:
            address.unlink()
    return None


def receive(connection: socket.socket) -> tuple[dict | None, list[int]]:
    connection.settimeout(10)
    try:
        data, streams, _, _ = socket.recv_fds(connection, 1 << 16, 3)
        while len(data) < LENGTH.size or len(data) < LENGTH.size + LENGTH.unpack_from(data)[0]:
            more = connection.recv(1 << 16)
            if not more:
                raise OSError("the command left before sending its job")
            data += more
    except OSError:
        return None, []
    finally:
        connection.settimeout(None)
    if len(streams) != 3:
        for fd in streams:
            os.close(fd)
        return None, []
    return json.loads(data[LENGTH.size:]), streams


def received(connection: socket.socket) -> bytes:
    try:
        return connection.recv(1)
    except OSError:
        return b""


def reap(jobs: dict[int, socket.socket], events: selectors.BaseSelector) -> None:
    """Tell each ended job's command its exit status."""
    while jobs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = jobs.pop(pid, None)
        say(f"job {pid}: ended, status {status}")
        if connection is not None:
            with contextlib.suppress(KeyError):
                events.unregister(connection)
            with contextlib.suppress(OSError):
                send(connection, {"status": status})
            connection.close()


def say(message: str) -> None:
    print(time.strftime("%Y-%m-%d %H:%M:%S"), message, flush=True)


def send(connection: socket.socket, message: dict) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def run_job(request: dict, streams: list[int]) -> int | str | None:
    """In the forked job: take the command's place (its streams, folder, environment, umask) and run the stage."""
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    os.setsid()
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    take_thread_counts(request["env"])
    sys.path[0] = request["cwd"]
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 (as an interpreter opens them)
    sys.stdout = sys.__stdout__ = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    for name in [name for name in sys.modules if name == "twoscale" or name.startswith("twoscale.")]:
        del sys.modules[name]  # the server's own; the job imports twoscale from its search path, as a fresh one would
    sys.argv = [request["module"], *request["argv"]]  # as `python -m` gives it, the module's path in its place
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:
        return exc.code


def take_thread_counts(environment: dict[str, str]) -> None:
    """The thread counts a fresh interpreter would take from the job's variables as its libraries load, applied to
    the libraries the server loaded without them (with their defaults, as a fresh interpreter without them): OpenMP's
    and torch's from OMP_NUM_THREADS, the BLAS libraries' (NumPy's and SciPy's OpenBLAS) from OPENBLAS_NUM_THREADS
    or GOTO_NUM_THREADS. torch sets the MKL inside it to its own count (Snakemake sets MKL_NUM_THREADS to the same);
    VECLIB is macOS's and numexpr is not preloaded."""
    def count(*names: str) -> int | None:
        values = [environment.get(name, "") for name in names]
        return next((int(value) for value in values if value.isdigit() and int(value) > 0), None)

    counts = {api: n for api, n in [("openmp", count("OMP_NUM_THREADS")),
                                    ("blas", count("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"))] if n is not None}
    if not counts:
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(counts)  # one walk of the loaded libraries
    if "openmp" in counts and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(counts["openmp"])


def end_job(code: int | str | None):
    """End the forked job as an interpreter ends (its threads joined, atexit's functions run, its streams flushed)
    but without freeing every object: that would touch, and so copy, every page it shares with the server (about
    2 s for torch's)."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    # what the interpreter's own shutdown runs first: the threading module's exit hooks (a ThreadPoolExecutor's
    # tells its idle workers to stop, as torch.compile's need), then a join of every non-daemon thread
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
