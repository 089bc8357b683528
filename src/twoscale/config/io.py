"""File helpers shared by the stages: atomic writes, so a failed stage leaves no half-written output, and outputs
that land together, so a failed or killed stage leaves no new output beside an old one.

Landing a stage's outputs: each waits in a temporary file beside its path (`.<name>.<8 random>.tmp`); an output
already there is kept aside as a hard link (`.<name>.<same 8>.old`); a journal of the moves (`.<name>.landing.json`,
beside the first output) is written; the temporary files are moved onto their paths; the journal is removed (from
then on the new set is final), then what was kept aside. A failure rolls the moves made back, and so does the next
run of the stage after a kill (`recover`): the outputs are the old set, or the new set, never a mix."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from twoscale.config.errors import TwoscaleError


class _Landing:
    """Outputs written inside `outputs_land_together`: where each waits, and the folders made for them."""

    def __init__(self) -> None:
        self.waiting: dict[Path, Path] = {}  # output path (absolute) -> its temporary file beside it
        self.made: list[Path] = []
        self.then: list[Callable[[], None]] = []


_landings: list[_Landing] = []  # the blocks of `outputs_land_together` under way, innermost last


@contextlib.contextmanager
def outputs_land_together(before_landing: Callable[[dict[Path, Path]], None] | None = None) -> Iterator[None]:
    """Every output written through `atomic_path` inside this block waits in a temporary file beside its path; all
    of them are moved onto their paths when the block succeeds, and none when it fails (their temporary files and
    the folders made for them are removed). Every stage runs inside one, so its outputs appear after its tracking
    has succeeded, all at once or not at all. `before_landing` gets the outputs (path -> the temporary file that
    holds it) when the block has succeeded; what it writes lands with them."""
    landing = _Landing()
    _landings.append(landing)
    try:
        yield
        if before_landing is not None:
            before_landing(dict(landing.waiting))
        _land(landing.waiting)
        landing.waiting.clear()
        landing.made.clear()
        for action in landing.then:
            action()
    finally:
        _landings.remove(landing)
        for tmp in landing.waiting.values():
            tmp.unlink(missing_ok=True)
        _remove_empty(landing.made)


LEFTOVER = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.(?:tmp|old)")  # mkstemp's 8 random characters


def landing_journal(path: Path) -> Path:
    return path.parent / f".{path.name}.landing.json"


def _land(waiting: dict[Path, Path]) -> None:
    """Move the waiting outputs (path -> its temporary file) onto their paths as one set (see the module's doc)."""
    if not waiting:
        return
    moves: list[tuple[Path, Path, Path | None]] = []  # output, its temporary file, the old output kept aside
    journal = landing_journal(min(waiting))
    _roll_back_journal(journal)  # one a kill left, if the stage's start missed it: never replayed over this set
    try:
        for path, tmp in waiting.items():
            aside = None
            if path.exists():
                aside = tmp.with_name(tmp.name.removesuffix(".tmp") + ".old")
                _keep_aside(path, aside)
            moves.append((path, tmp, aside))
        with atomic_path(journal, now=True) as tmp:
            tmp.write_text(json.dumps([[os.path.relpath(p, journal.parent) if p else None for p in move]
                                       for move in moves]))
        for path, tmp, _ in moves:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise TwoscaleError(f"cannot write {path}: {exc.strerror}") from None
        journal.unlink()
    except BaseException:  # a failure, Ctrl-C or SIGTERM: the old set back
        _roll_back(moves)
        journal.unlink(missing_ok=True)
        raise
    for _, _, aside in moves:
        if aside is not None:
            aside.unlink(missing_ok=True)


def _keep_aside(path: Path, aside: Path) -> None:
    """A second name for the output's file (a copy where the file system has no hard links)."""
    try:
        os.link(path, aside)
    except OSError:
        try:
            shutil.copy2(path, aside)
        except OSError as exc:
            raise TwoscaleError(f"cannot write {path}: {exc.strerror}") from None


def _roll_back(moves: list[tuple[Path, Path, Path | None]]) -> None:
    """Undo the moves of a landing: an output moved onto its path gets its old file back (or is removed, if it had
    none); one not moved yet loses its temporary file."""
    for path, tmp, aside in moves:
        if tmp.exists():
            tmp.unlink()
        elif aside is not None and aside.exists():
            os.replace(aside, path)
        elif aside is None:
            path.unlink(missing_ok=True)
        if aside is not None:
            aside.unlink(missing_ok=True)


def recover(paths: Iterable[Path]) -> None:
    """Before a stage writes these outputs again: roll back a landing of them that a kill interrupted (their old
    set back), and remove what an interrupted write left beside them (temporary files, old outputs kept aside)."""
    paths = [Path(path) for path in paths]
    for path in paths:
        _roll_back_journal(landing_journal(path))
    names: dict[Path, set[str]] = {}
    for path in paths:
        names.setdefault(path.parent, set()).update({path.name, landing_journal(path).name})
    for folder, own in names.items():
        for leftover in folder.glob(".*.*"):
            found = LEFTOVER.fullmatch(leftover.name)
            if found and found["name"] in own:
                leftover.unlink(missing_ok=True)


def _roll_back_journal(journal: Path) -> None:
    """Roll back the landing a journal records, if there is one, and remove the journal."""
    moves = _journal_moves(journal)
    if moves is not None:
        _roll_back(moves)
        journal.unlink()


def _journal_moves(journal: Path) -> list[tuple[Path, Path, Path | None]] | None:
    """The moves a landing's journal records; None where there is none; TwoscaleError in one line if unreadable."""
    try:
        moves = json.loads(journal.read_text())
        return [(journal.parent / path, journal.parent / tmp, journal.parent / aside if aside else None)
                for path, tmp, aside in moves]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, TypeError):
        raise TwoscaleError(f"{journal}: an unreadable record of an interrupted write; delete it and rebuild what "
                            "it names") from None


def interrupted(path: Path) -> bool:
    """Whether a landing of `path` (an output, or its build record) was interrupted by a kill and is not rolled back
    yet: the stage's next run will. TwoscaleError in one line if its journal is unreadable."""
    return _journal_moves(landing_journal(path)) is not None


def once_landed(action: Callable[[], None]) -> None:
    """Do `action` once the outputs written so far have landed (at once, outside `outputs_land_together`); never if
    the block fails. For state kept until the outputs are safe, such as an interrupted run's checkpoints."""
    if _landings:
        _landings[-1].then.append(action)
    else:
        action()


def waiting_file(path: str | Path) -> Path:
    """Where an output written inside `outputs_land_together` is until it lands (the path itself otherwise), for
    reading it back meanwhile."""
    path = Path(path)
    for landing in _landings:
        if path.absolute() in landing.waiting:
            return landing.waiting[path.absolute()]
    return path


@contextlib.contextmanager
def atomic_path(path: str | Path, now: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds (inside
    `outputs_land_together`, when that block succeeds, unless `now`: state that must outlive a failure, such as an
    interrupted run's checkpoints). If it fails, the folders made for `path` are removed again (when empty)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise TwoscaleError(f"cannot write {path}: {not_a_file(path)} is there (move it away)")
    made = list(itertools.takewhile(lambda folder: not folder.exists(), [path.parent, *path.parent.parents]))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise TwoscaleError(f"cannot write {path}: {exc.strerror}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    landing = None if now or not _landings else _landings[-1]
    try:
        try:
            yield tmp_path
        except OSError as exc:  # a full disk, a quota, a permission: the output's name, not the temporary file's
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) or exc.filename == str(tmp_path):
                raise TwoscaleError(f"cannot write {path}: {exc.strerror}") from None
            raise
        if tmp_path.exists():  # mkstemp creates 0600; give the output the usual umask-based mode
            os.chmod(tmp_path, 0o666 & ~_umask())
        if landing is None:
            os.replace(tmp_path, path)
        else:
            earlier = landing.waiting.pop(path.absolute(), None)  # written twice: the last one lands
            if earlier is not None:
                earlier.unlink(missing_ok=True)
            landing.waiting[path.absolute()] = tmp_path
            landing.made += made
            tmp_path = None
        made = []
    finally:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)
        _remove_empty(made)


def not_a_file(path: Path) -> str:
    """What is at `path` where a file belongs: a folder, a socket, ..."""
    mode = path.stat().st_mode
    kinds = [(stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a named pipe"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    return next((kind for test, kind in kinds if test(mode)), "something other than a file")


def _remove_empty(folders: list[Path]) -> None:
    for folder in sorted(set(folders), key=lambda folder: len(folder.parts), reverse=True):  # deepest first
        with contextlib.suppress(OSError):  # not empty: something else was written there meanwhile
            folder.rmdir()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's content, hex."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_text(path: str | Path, producer: str) -> str:
    """A text file written by an earlier stage; missing is one line naming the stage to run."""
    return _read_output(Path.read_text, Path(path), producer)


def write_json(path: str | Path, payload: Any) -> None:
    """Strict JSON: a value that is not finite (NaN, an infinity; json would write a bare NaN, which is not JSON)
    is written as null."""
    write_text(path, json.dumps(finite_or_null(payload), indent=2, sort_keys=True, allow_nan=False) + "\n")


def finite_or_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TwoscaleError(f"{path}: not found") from None
    except json.JSONDecodeError as exc:
        raise TwoscaleError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def write_parquet(path: str | Path, frame: pl.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp)


def read_parquet(path: Path, producer: str) -> pl.DataFrame:
    """A table written by an earlier stage; missing or unreadable is one line naming the stage to run."""
    return _read_table(pl.read_parquet, path, producer)


def read_csv(path: Path, producer: str) -> pl.DataFrame:
    """A CSV table written by an earlier stage, as `read_parquet`."""
    return _read_table(pl.read_csv, path, producer)


def _read_output(read: Callable[[Path], Any], path: Path, producer: str) -> Any:
    """What `read` makes of an earlier stage's output; missing is one line naming the stage to run."""
    try:
        return read(path)
    except FileNotFoundError:
        raise TwoscaleError(f"{path}: not found (run {producer} first)") from None


def _read_table(read: Callable[[Path], pl.DataFrame], path: Path, producer: str) -> pl.DataFrame:
    try:
        return _read_output(read, path, producer)
    except pl.exceptions.PolarsError as exc:
        raise TwoscaleError(f"{path}: not a readable table ({type(exc).__name__})") from None


def write_token_array(path: Path, chunks: Iterable[np.ndarray], dtype: type) -> None:
    """Write the concatenated chunks to `path` as one 1-D .npy file, the bytes `np.save` would write, without
    ever holding them all: they go to a temporary file first, then after the header."""
    with tempfile.TemporaryFile(dir=path.parent) as raw:
        length = 0
        for chunk in chunks:
            raw.write(np.ascontiguousarray(chunk, dtype=dtype).tobytes())
            length += len(chunk)
        raw.seek(0)
        with path.open("wb") as out:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                      "shape": (length,)}
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(raw, out)


def read_token_blocks(path: Path, block_size: int = 1 << 22) -> Iterator[np.ndarray]:
    """The ids of a token array in consecutive blocks, read from the file (not mapped into memory, whose pages
    would stay resident and count against a job's memory)."""
    with path.open("rb") as handle:
        version = np.lib.format.read_magic(handle)
        _, _, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                       np.lib.format.read_array_header_2_0)(handle)
        while (block := np.fromfile(handle, dtype=dtype, count=block_size)).size:
            yield block


def load_token_array(path: Path) -> np.ndarray:
    """A token array written by the tokenize stage, memory-mapped."""
    try:
        return np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise TwoscaleError(f"{path}: token array not found (run the tokenize stage first)") from None
    except ValueError as exc:
        raise TwoscaleError(f"{path}: not a token array ({exc})") from None


def run_subdir(recipe: str, seed: int | str) -> str:
    """Where a per-run stage's outputs go under the stage's folder: results/train/<recipe>/seed_<seed>/..."""
    return f"{recipe}/seed_{seed}"
