"""The scripts under scripts/ are run by hand (on a GPU node, before a commit), not by the workflow: each still
imports what it names from the package and says how it is called, which a refactoring of the package could otherwise
break unseen, and a script given a folder or table that is not there says so as a usage error, not a traceback."""

from __future__ import annotations

import runpy
import sys

import pytest
from workspace import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))
OWN_ENVIRONMENT = {"look_at_report": "playwright"}  # run from a venv of its own (docs/running.md)


def run_script(path, arguments, monkeypatch) -> SystemExit:
    if path.stem in OWN_ENVIRONMENT:
        pytest.importorskip(OWN_ENVIRONMENT[path.stem])
    monkeypatch.syspath_prepend(str(path.parent))  # as when run: a script imports its neighbours
    monkeypatch.setattr(sys, "argv", [str(path), *arguments])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(path), run_name="__main__")
    return ended.value


def test_the_scripts_are_found():
    assert {"decoding_paths", "gpu_kit", "compare_commits"} <= {path.stem for path in SCRIPTS}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_every_script_imports_and_says_how_it_is_called(path, monkeypatch, capsys):
    assert run_script(path, ["--help"], monkeypatch).code in (0, None)
    assert capsys.readouterr().out.startswith("usage: ")


@pytest.mark.parametrize(("name", "arguments", "named"), [
    ("precision_answer", ["EMPTY"], "EMPTY"), ("spectrum_table", ["EMPTY"], "EMPTY"),
    ("decoding_paths_figure", ["MISSING", "x.png"], "MISSING"),
    ("compare_geometry_verdicts", ["EMPTY", "MISSING"], "MISSING")])
def test_a_script_given_nothing_to_read_says_so_as_a_usage_error(name, arguments, named, tmp_path, monkeypatch,
                                                                   capsys):
    paths = {"EMPTY": tmp_path, "MISSING": tmp_path / "missing"}
    ended = run_script(ROOT / "scripts" / f"{name}.py", [str(paths.get(a, a)) for a in arguments], monkeypatch)
    usage, error = capsys.readouterr().err.splitlines()  # argparse's: the usage, then one line of error
    assert ended.code == 2 and usage.startswith("usage: ")
    assert error.startswith(f"{name}.py: error: ") and f"{paths[named]}: no " in error


def test_a_corrupt_table_is_named_as_a_usage_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "huginn").mkdir()
    (tmp_path / "huginn/step_10.parquet").write_bytes(b"not parquet")
    ended = run_script(ROOT / "scripts/spectrum_table.py", [str(tmp_path)], monkeypatch)
    assert ended.code == 2
    assert f"error: argument FOLDER: {tmp_path / 'huginn/step_10.parquet'}: not a readable table (" in \
        capsys.readouterr().err.splitlines()[-1]


def test_a_checkpoint_without_its_data_is_a_usage_error(tmp_path, monkeypatch, capsys):
    ended = run_script(ROOT / "scripts/decoding_paths.py", ["--params", "params.yaml", "--out", str(tmp_path / "t.csv"),
                                                            "--checkpoint", str(tmp_path / "c.pt")], monkeypatch)
    assert ended.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == "decoding_paths.py: error: --checkpoint and --data-dir go together"
    assert not (tmp_path / "t.csv").exists()
