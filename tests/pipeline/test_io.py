"""What the stages write: strict JSON (a value that is not finite becomes null, never a bare NaN), and nothing at
all, not even a folder, from a write that fails."""

from __future__ import annotations

import errno
import io
import json
import math
import os

import numpy as np
import pytest

from twoscale.pipeline.errors import TwoscaleError
from twoscale.pipeline.io import (
    atomic_path,
    once_landed,
    outputs_land_together,
    read_token_blocks,
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
