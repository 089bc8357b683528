"""One MLflow writer per store and machine, shared by every job that logs to it.

Importing MLflow and opening its SQL store take a job about 5 s of CPU, more than most stages' work on the smoke
set. So the first job (or Snakemake's `onstart`) that logs to a store starts a writer process, which loads MLflow
once and runs the jobs' calls (`mlflow_store.Store`'s methods, by name) on a local socket, one at a time; the jobs
that follow find it there. A job whose connection ends while one of its runs is open (killed outright) has that
run ended KILLED at once. The writer leaves when no job has been connected for IDLE_S seconds; the next job starts
another.

The socket lives in a folder of the user's own under the temporary directory, named by the store and this host,
so that jobs of another store, user or node never meet; the writer's messages go to a log file beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from twoscale.config.errors import TwoscaleError, first_line
from twoscale.pipeline.observers.run_names import store_name
from twoscale.pipeline.preload import user_folder

IDLE_ENV = "TWOSCALE_MLFLOW_WRITER_IDLE_S"
IDLE_S = float(os.environ.get(IDLE_ENV, "60"))  # read by the writer as it starts
START_TIMEOUT_S = 60.0
CONNECT_ATTEMPTS = 3
OPERATIONS = frozenset({"experiment_id", "close_abandoned_runs", "start_pipeline_run", "find_pipeline_run",
                        "stage_group_run", "end_stage_groups", "start_run", "end_run", "log_metrics", "log_points",
                        "log_params", "set_tags", "log_artifact", "log_dataset", "log_model"})


def writer_files(uri: str, root: Path) -> tuple[Path, Path, Path]:
    """The writer's socket, start lock and log for the store at `uri` (artifacts under `root`) on this host."""
    key = hashlib.sha256(f"{uri}\n{root}\n{socket.gethostname()}".encode()).hexdigest()[:16]
    stem = user_folder() / f"mlflow-{key}"
    return stem.with_suffix(".sock"), stem.with_suffix(".lock"), stem.with_suffix(".log")


@contextlib.contextmanager
def held(lock_file: Path) -> Iterator[None]:
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


class Writer:
    """This process's connection to the writer of a store: each Store method is a call by the same name. A writer
    lost while the job runs (killed with another job's processes, as Slurm does with a job's whole cgroup) is
    replaced by another, which is told the job's open runs, and the call is made again."""

    def __init__(self, uri: str, root: Path, server_timeout: float):
        self.store = (uri, root, server_timeout)
        self.lock = threading.Lock()
        self.open_runs: set[str] = set()
        self.connection = _connect(*self.store)

    def call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            try:
                status, value = _exchange(self.connection, operation, args, kwargs)
            except (OSError, EOFError):
                self.connection = _connect(*self.store)
                if self.open_runs:
                    _exchange(self.connection, "adopt", (sorted(self.open_runs),), {})
                status, value = _exchange(self.connection, operation, args, kwargs)
        if status == "error":
            raise TwoscaleError(value)
        if operation == "start_run":
            self.open_runs.add(value)
        elif operation == "end_run":
            self.open_runs.discard(args[0] if args else kwargs["run_id"])
        return value

    def __getattr__(self, operation: str):
        if operation not in OPERATIONS:
            raise AttributeError(operation)
        return lambda *args, **kwargs: self.call(operation, *args, **kwargs)


def _exchange(connection: Connection, operation: str, args: tuple, kwargs: dict) -> tuple[str, Any]:
    connection.send((operation, args, kwargs))
    return connection.recv()


_WRITERS: dict[tuple[str, Path], Writer] = {}


def connect(uri: str, root: Path, server_timeout: float) -> Writer:
    """This process's connection to the writer of `uri`, starting the writer if none runs."""
    if (uri, root) not in _WRITERS:
        _WRITERS[uri, root] = Writer(uri, root, server_timeout)
    return _WRITERS[uri, root]


def _connect(uri: str, root: Path, server_timeout: float) -> Connection:
    address, lock_file, log_file = writer_files(uri, root)
    for _ in range(CONNECT_ATTEMPTS):
        try:
            connection = Client(str(address), family="AF_UNIX")
            _exchange(connection, "ping", (), {})  # a writer leaving as this job came ends the connection here
            return connection
        except (OSError, EOFError):
            with held(lock_file):
                if not _answers(address):
                    _start(address, log_file, uri, root, server_timeout)
    raise TwoscaleError(f"the MLflow writer of {uri} did not take calls (its log: {log_file})")


def _answers(address: Path) -> bool:
    try:
        Client(str(address), family="AF_UNIX").close()
        return True
    except OSError:
        return False


def _start(address: Path, log_file: Path, uri: str, root: Path, server_timeout: float) -> None:
    """Start a writer in a session of its own (a job's Ctrl-C or kill is not its end), holding none of the job's
    files (a job's caller waits for its output pipes to close), and wait for its socket."""
    address.unlink(missing_ok=True)  # a writer's that died without removing it
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(address), uri, str(root), str(server_timeout)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            cwd=tempfile.gettempdir())
    deadline = time.monotonic() + START_TIMEOUT_S
    while not address.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise TwoscaleError(f"the MLflow writer of {uri} did not start (its log: {log_file})")
        time.sleep(0.02)
    threading.Thread(target=process.wait, daemon=True).start()  # reaped when it leaves before this process


# --- the writer ----------------------------------------------------------------------------------------------------


def serve(address: Path, uri: str, root: Path, server_timeout: float, idle_s: float = IDLE_S) -> None:
    """Take calls on `address` until no job has been connected for `idle_s` seconds."""
    listener = Listener(str(address), family="AF_UNIX")  # first: a job waits on the socket, not on MLflow's import
    store = _StoreOnce(uri, root, server_timeout)
    threading.Thread(target=store.get, daemon=True).start()  # load MLflow while the first job connects
    connected = _Connected()
    threading.Thread(target=_leave_when_idle, args=(connected, address, idle_s), daemon=True).start()
    while True:
        connection = listener.accept()
        connected.change(+1)
        threading.Thread(target=_take_calls, args=(connection, store, connected), daemon=True).start()


class _StoreOnce:
    """The Store, made on first use; its lock runs one call at a time."""

    def __init__(self, uri: str, root: Path, server_timeout: float):
        self.arguments = (uri, root, server_timeout)
        self.lock = threading.Lock()
        self._store = None

    def get(self):
        with self.lock:
            if self._store is None:
                from twoscale.pipeline.observers.mlflow_store import Store

                self._store = Store(*self.arguments)
            return self._store


class _Connected:
    def __init__(self):
        self.count, self.since = 0, time.monotonic()
        self.lock = threading.Lock()

    def change(self, by: int) -> None:
        with self.lock:
            self.count += by
            self.since = time.monotonic()

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.count else time.monotonic() - self.since


def _leave_when_idle(connected: _Connected, address: Path, idle_s: float) -> None:
    lock_file = address.with_suffix(".lock")
    while True:
        time.sleep(min(idle_s, 1.0))
        if connected.idle_for() >= idle_s:
            with held(lock_file):  # no job starts a writer while this one's socket goes
                if connected.idle_for() >= idle_s:
                    address.unlink(missing_ok=True)
                    os._exit(0)


def _take_calls(connection: Connection, store: _StoreOnce, connected: _Connected) -> None:
    opened: set[str] = set()  # the job's runs not yet ended
    try:
        while True:
            try:
                operation, args, kwargs = connection.recv()
            except (EOFError, OSError):
                break
            connection.send(_answer(store, operation, args, kwargs, opened))
    finally:
        for run_id in opened:  # the job is gone with its runs open: killed outright
            with contextlib.suppress(Exception), store.lock:
                store._store.end_run(run_id, "KILLED")
        connection.close()
        connected.change(-1)


def _answer(store: _StoreOnce, operation: str, args: tuple, kwargs: dict, opened: set[str]) -> tuple[str, Any]:
    if operation == "ping":
        return "ok", os.getpid()
    if operation == "adopt":  # runs a lost writer opened for this job, to end KILLED if its connection drops
        opened.update(args[0])
        return "ok", None
    if operation not in OPERATIONS:
        return "error", f"the MLflow writer has no operation {operation!r}"
    try:
        target = store.get()
        with store.lock:
            value = getattr(target, operation)(*args, **kwargs)
    except TwoscaleError as exc:
        return "error", str(exc)
    except Exception as exc:  # noqa: BLE001 (MLflow raises many types; the job is told which, in one line)
        said = first_line(exc)  # the type's name alone when the exception has no text
        where = f"the MLflow store {store_name(store.arguments[0])}"
        return "error", f"{where}: {said}" if said == type(exc).__name__ else f"{where}: {type(exc).__name__}: {said}"
    if operation == "start_run":
        opened.add(value)
    elif operation == "end_run":
        opened.discard(args[0] if args else kwargs["run_id"])
    return "ok", value


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]))
