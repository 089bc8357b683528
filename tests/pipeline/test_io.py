"""What the stages write: strict JSON (a value that is not finite becomes null, never a bare NaN), and nothing at
all, not even a folder, from a write that fails."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import (
    atomic_path,
    interrupted,
    once_landed,
    outputs_land_together,
    read_token_blocks,
    recover,
    waiting_file,
    write_json,
    write_text,
    write_token_array,
)


def test_json_is_written_sorted_and_readable_by_a_strict_parser(tmp_path):
    write_json(tmp_path / "m.json", {"b": 1.5, "a": [1, None]})
    text = (tmp_path / "m.json").read_text()
    assert text == '{\n  "a": [\n    1,\n    null\n  ],\n  "b": 1.5\n}\n'
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}")) == {"a": [1, None], "b": 1.5}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_value_that_is_not_finite_is_written_as_null(tmp_path, value):
    write_json(tmp_path / "m.json", {"loss": value, "rows": [1.0, value, {"r2": value}], "pair": (value, 2)})
    text = (tmp_path / "m.json").read_text()
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert strict == {"loss": None, "rows": [1.0, None, {"r2": None}], "pair": [None, 2]}


def test_a_failed_write_leaves_neither_the_file_nor_the_folders_made_for_it(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept/new/deeper/out.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("the stage failed")
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")] == ["kept"]


def test_a_failed_write_keeps_a_folder_that_something_else_wrote_into(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "new/out.txt") as tmp:
        tmp.write_text("half")
        (tmp_path / "new/other.txt").write_text("finished")
        raise RuntimeError("the stage failed")
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")] == ["new", "new/other.txt"]


def test_a_write_that_succeeds_is_in_place_with_its_folders(tmp_path):
    with atomic_path(tmp_path / "new/deeper/out.txt") as tmp:
        tmp.write_text("whole")
    assert (tmp_path / "new/deeper/out.txt").read_text() == "whole"
    assert not list((tmp_path / "new/deeper").glob(".*"))


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
@pytest.mark.parametrize("sizes", [[3, 0, 5], [], [0]])
def test_a_token_array_written_in_chunks_is_byte_for_byte_what_np_save_writes(tmp_path, dtype, sizes):
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 60000, size=n).astype(np.int64) for n in sizes]  # cast on the way out
    write_token_array(tmp_path / "ids.npy", iter(chunks), dtype)
    expected = io.BytesIO()
    np.save(expected, np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype=dtype))
    assert (tmp_path / "ids.npy").read_bytes() == expected.getvalue()


def test_a_token_array_is_read_back_in_blocks(tmp_path):
    ids = np.arange(10, dtype=np.uint32)
    np.save(tmp_path / "ids.npy", ids)
    blocks = list(read_token_blocks(tmp_path / "ids.npy", block_size=4))
    assert [block.tolist() for block in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(block.dtype == np.uint32 for block in blocks)


# --- outputs that land together ------------------------------------------------------------------------------


class Failure(Exception):
    pass


def test_outputs_land_together_when_the_block_succeeds(tmp_path):
    (tmp_path / "b.json").write_text("old")
    with outputs_land_together():
        write_text(tmp_path / "a.md", "new a")
        write_text(tmp_path / "out/b.json", "new b")
        write_text(tmp_path / "b.json", "new b")
        assert not (tmp_path / "a.md").exists() and (tmp_path / "b.json").read_text() == "old"  # waiting
        assert waiting_file(tmp_path / "a.md").read_text() == "new a"  # readable meanwhile
        assert waiting_file(tmp_path / "elsewhere.txt") == tmp_path / "elsewhere.txt"
    assert (tmp_path / "a.md").read_text() == "new a" and (tmp_path / "b.json").read_text() == "new b"
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["a.md", "b.json", "b.json", "out"]  # no temp left


def test_no_output_lands_when_the_block_fails_and_the_old_ones_stay(tmp_path):
    (tmp_path / "claims.json").write_text("old")
    with pytest.raises(Failure), outputs_land_together():
        write_text(tmp_path / "claims.md", "new")
        write_text(tmp_path / "claims.json", "new")
        write_text(tmp_path / "made/deeper/x.txt", "new")
        write_text(tmp_path / "made/y.txt", "new")
        raise Failure  # e.g. the tracking store, after the tables were written
    assert [path.name for path in tmp_path.iterdir()] == ["claims.json"]  # neither temps nor folders made
    assert (tmp_path / "claims.json").read_text() == "old"


def test_a_file_written_twice_lands_once_with_its_last_content(tmp_path):
    with outputs_land_together():
        write_text(tmp_path / "a.txt", "first")
        write_text(tmp_path / "a.txt", "second")
    assert [path.name for path in tmp_path.iterdir()] == ["a.txt"] and (tmp_path / "a.txt").read_text() == "second"


def test_state_written_now_lands_at_once_and_outlives_a_failed_block(tmp_path):
    with pytest.raises(Failure), outputs_land_together():
        with atomic_path(tmp_path / "resume/step_5.pt", now=True) as tmp:
            tmp.write_text("checkpoint")
        assert (tmp_path / "resume/step_5.pt").read_text() == "checkpoint"
        raise Failure
    assert (tmp_path / "resume/step_5.pt").read_text() == "checkpoint"


def test_a_block_inside_another_lands_its_own_outputs_at_its_end(tmp_path):
    with pytest.raises(Failure), outputs_land_together():
        with outputs_land_together():
            write_text(tmp_path / "inner.txt", "in")
        assert (tmp_path / "inner.txt").exists()
        write_text(tmp_path / "outer.txt", "out")
        raise Failure
    assert [path.name for path in tmp_path.iterdir()] == ["inner.txt"]


def test_an_action_waits_for_the_outputs_to_land_and_is_dropped_if_they_do_not(tmp_path):
    done = []
    with outputs_land_together():
        write_text(tmp_path / "a.txt", "a")
        once_landed(lambda: done.append((tmp_path / "a.txt").exists()))
        assert done == []
    assert done == [True]
    with pytest.raises(Failure), outputs_land_together():
        once_landed(lambda: done.append("again"))
        raise Failure
    assert done == [True]
    once_landed(lambda: done.append("at once"))  # outside a block: nothing waits
    assert done == [True, "at once"]


def test_a_full_disk_is_named_by_the_output_it_was_writing(tmp_path):
    with pytest.raises(TwoscaleError) as info, atomic_path(tmp_path / "out/metrics.json") as tmp:
        tmp.write_text("{")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a write to a full disk raises
    assert str(info.value) == f"cannot write {tmp_path / 'out/metrics.json'}: No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_a_permission_error_on_the_temporary_file_is_named_by_the_output(tmp_path):
    with pytest.raises(TwoscaleError) as info, atomic_path(tmp_path / "metrics.json") as tmp:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp))
    assert str(info.value) == f"cannot write {tmp_path / 'metrics.json'}: Permission denied"


# --- outputs land as one set: on a failure while they are moved into place, and after a kill at any point ---------

OLD = {"a.parquet": "old a", "b/c.json": "old c", ".built/a.parquet.json": "old record"}  # d.txt: new
NEW = {"a.parquet": "new a", "b/c.json": "new c", ".built/a.parquet.json": "new record", "d.txt": "new d"}


def outputs_now(folder) -> dict[str, str]:
    """Every file under the folder (leftovers included), by path relative to it."""
    return {path.relative_to(folder).as_posix(): path.read_text() for path in folder.rglob("*") if path.is_file()}


def write_old_set(folder) -> None:
    for name, text in OLD.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def test_a_move_that_fails_half_way_puts_the_old_set_back_and_names_the_output(tmp_path, monkeypatch):
    write_old_set(tmp_path)
    real_replace, moved = os.replace, []

    def replace(src, dst):
        if str(dst).endswith("c.json"):  # the second output: as an immutable file refuses it
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(src), str(dst))
        moved.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(TwoscaleError) as info, outputs_land_together():
        for name, text in NEW.items():
            write_text(tmp_path / name, text)
    assert str(info.value) == f"cannot write {tmp_path / 'b/c.json'}: Operation not permitted"
    assert any(str(dst).endswith("a.parquet") for dst in moved)  # one output had been moved before the failure
    assert outputs_now(tmp_path) == OLD  # all old again, nothing left beside them


LANDING_SCRIPT = """
import os, signal, sys
from pathlib import Path
from twoscale.config.io import outputs_land_together, write_text

folder, kill_at = Path(sys.argv[1]), int(sys.argv[2])
new = {new!r}
calls = 0

def killing(real):
    def call(*args, **kwargs):
        global calls
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call

with outputs_land_together():
    for name, text in new.items():
        write_text(folder / name, text)
    # from here on, every change to the file system the landing makes is a point to be killed at
    for name in ("replace", "link", "unlink", "rename"):
        setattr(os, name, killing(getattr(os, name)))
print(calls)
"""


def test_a_kill_at_any_point_of_the_landing_leaves_the_old_set_or_the_new_one_after_recovery(tmp_path):
    script = LANDING_SCRIPT.format(new=NEW)
    outputs = [tmp_path / "run" / name for name in NEW]
    seen = set()
    kill_at = 1
    while True:
        folder = tmp_path / "run"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        write_old_set(folder)
        done = subprocess.run([sys.executable, "-c", script, str(folder), str(kill_at)], capture_output=True,
                              text=True, check=False)
        recover(outputs)
        found = outputs_now(folder)
        assert found in (OLD, NEW), (kill_at, found)
        seen.add("old" if found == OLD else "new")
        if done.returncode == 0:  # no longer killed: every point was tried
            break
        assert done.returncode == -9, done.stderr
        kill_at += 1
    assert kill_at > len(NEW) * 2 and seen == {"old", "new"}  # killed before the journal went, and after


def test_a_landing_over_one_a_kill_interrupted_rolls_that_one_back_first_and_is_never_undone_later(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_old_set(folder)
    killed = subprocess.run([sys.executable, "-c", LANDING_SCRIPT.format(new=NEW), str(folder), "6"],
                            capture_output=True, text=True, check=False)
    assert killed.returncode == -9 and list(folder.glob("**/.*.landing.json"))  # killed half-way: a journal left
    again = {name: text.replace("new", "newer") for name, text in NEW.items()}
    with outputs_land_together():  # the next landing of the same outputs, its stage's start having missed the kill
        for name, text in again.items():
            write_text(folder / name, text)
    recover([folder / name for name in NEW])  # a later recovery finds nothing to roll back
    assert outputs_now(folder) == again


def test_an_interrupted_landing_is_seen_before_its_rollback_and_an_unreadable_journal_is_one_line(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_old_set(folder)
    subprocess.run([sys.executable, "-c", LANDING_SCRIPT.format(new=NEW), str(folder), "6"], check=False)
    outputs = [folder / name for name in NEW]
    assert any(map(interrupted, outputs))  # what the workflow checks before it plans: that job runs again
    recover(outputs)
    assert not any(map(interrupted, outputs)) and outputs_now(folder) == OLD
    journal = folder / ".a.parquet.landing.json"
    journal.write_text("[[garbage")
    with pytest.raises(TwoscaleError, match=r"\.a\.parquet\.landing\.json: an unreadable record of an interrupted "
                                            "write; delete it and rebuild what it names$"):
        interrupted(folder / "a.parquet")


@pytest.mark.parametrize("make", ["folder", "socket"])
def test_nothing_lands_over_a_folder_or_socket_and_the_refusal_is_one_line(tmp_path, make):
    target = tmp_path / "summary.json"
    if make == "folder":
        (target / "inside").mkdir(parents=True)
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    kind = "a folder" if make == "folder" else "a socket"
    with pytest.raises(TwoscaleError, match=f"^cannot write {target}: {kind} is there \\(move it away\\)$"):
        write_json(target, {"a": 1})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["summary.json"]  # nothing left beside it
