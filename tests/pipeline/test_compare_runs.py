"""scripts/compare_runs.py, the check behind relocking dvc.lock (docs/development.md), on run folders built by hand
whose every difference is known."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
from records import digested

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/compare_runs.py"


def write_output(path: Path, content: bytes, stage: str, inputs: dict[str, str] | None = None) -> None:
    """An output and its build record, as the stages write them (inputs relative to the output's folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    record = path.parent / ".built" / f"{path.name}.json"
    record.parent.mkdir(exist_ok=True)
    fields = {"stage": stage, "job": {}, "params": {}, "sha256": hashlib.sha256(content).hexdigest(),
              "size": len(content), "inputs": inputs or {}}
    record.write_text(json.dumps(digested(fields)))


def parquet(**columns) -> bytes:
    buffer = io.BytesIO()
    pl.DataFrame(columns).write_parquet(buffer)
    return buffer.getvalue()


def build_run(run: Path, seconds: list[float], best: str, weights: bytes) -> None:
    history = parquet(step=[1, 2], loss=[1.0, 0.5], seconds=seconds)
    write_output(run / "results/train/history.parquet", history, "train")
    write_output(run / "results/train/model.pt", weights, "train")
    write_output(run / "results/sweep/summary.csv", f"strategy,best\nfixed,{best}\n".encode(), "tradeoff",
                 {"../train/history.parquet": hashlib.sha256(history).hexdigest()})
    write_output(run / "results/figures/loss.png", b"\x89PNG same", "figures")
    (run / "logs").mkdir()
    (run / "logs/train.log").write_text(f"took {seconds}")  # logs are left out


def compare(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "before"), str(tmp_path / "after")],
                          capture_output=True, text=True, check=False)


def test_clock_readings_explain_what_is_built_from_them_and_nothing_else(tmp_path):
    build_run(tmp_path / "before", [0.1, 0.2], "0.7", b"weights")
    build_run(tmp_path / "after", [0.3, 0.4], "0.9", b"weights, other")
    done = compare(tmp_path)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    # same: the figure and its record; clock: the history and its record; follows: the summary and its record
    assert lines[0] == ("2 files the same byte for byte, 2 different in clock readings only, 2 following inputs "
                        "that differ, 2 different otherwise")
    assert "  clock     results/train/history.parquet: seconds" in lines
    assert "  follows   results/sweep/summary.csv: best" in lines
    assert "  otherwise results/train/model.pt: bytes" in lines
    assert "  otherwise results/train/.built/model.pt.json: digest, sha256, size" in lines
    assert lines[-1].endswith("--forcerun tradeoff --allowed-rules tradeoff")


def test_runs_differing_in_clock_readings_alone_pass(tmp_path):
    build_run(tmp_path / "before", [0.1, 0.2], "0.7", b"weights")
    build_run(tmp_path / "after", [0.3, 0.4], "0.7", b"weights")
    done = compare(tmp_path)
    assert done.returncode == 0, done.stdout
    # the summary is the same, its record not: it holds the history's hash
    assert done.stdout.splitlines()[0] == ("5 files the same byte for byte, 3 different in clock readings only, "
                                           "0 following inputs that differ, 0 different otherwise")


def test_a_file_in_one_run_only_differs_otherwise(tmp_path):
    build_run(tmp_path / "before", [0.1, 0.2], "0.7", b"weights")
    build_run(tmp_path / "after", [0.1, 0.2], "0.7", b"weights")
    (tmp_path / "after/results/figures/loss.png").unlink()
    done = compare(tmp_path)
    assert done.returncode == 1
    assert "  otherwise results/figures/loss.png: only in BEFORE" in done.stdout.splitlines()


def test_a_missing_folder_is_an_error_in_one_line(tmp_path):
    (tmp_path / "before").mkdir()
    done = compare(tmp_path)
    assert done.returncode == 2 and done.stderr == f"error: {tmp_path / 'after'}: no such run folder\n"


def test_rows_chosen_by_a_clock_reading_differ_in_clock_readings(tmp_path):
    """The sampler's speed.csv keeps its fastest setting of equal quality: a slower machine may pick another."""
    for run, (speed, inner_loops) in {"before": (74.1, 1), "after": (221.3, 2)}.items():
        write_output(tmp_path / run / "results/sample/speed.csv",
                     f"method,tokens_per_s,inner_loops\nsampler,{speed},{inner_loops}\n".encode(), "sample")
    done = compare(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "  clock     results/sample/speed.csv: rows chosen by tokens_per_s: inner_loops, tokens_per_s" in (
        done.stdout.splitlines())
