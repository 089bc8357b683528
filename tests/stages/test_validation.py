"""The parameter file's check before a workflow starts: the exit specs are built once per sweep section and code
(building them loads torch, longer than the rest of a Snakemake call that plans), and never marked when they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workspace import ROOT

from twoscale.config.parameter_files import load_params, read_raw
from twoscale.config.params import ParamsError
from twoscale.exits import sweep
from twoscale.pipeline import orchestrators
from twoscale.pipeline.declaration import dependencies
from twoscale.stages.validation import CHECKER, read_params, strategies_key
from twoscale.training.gpu import GPU_DEVICE_FILES


def smoke_file(folder: Path, change=None) -> Path:
    raw = read_raw(ROOT / "configs/smoke.yaml")
    if change:
        change(raw)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def checked_again(section):
    raise ParamsError("checked again")


def test_a_sweep_section_checked_once_is_checked_again_only_when_it_or_its_checker_changes(tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    read_params(smoke_file(tmp_path), marks=marks)
    assert len(list(marks.iterdir())) == 1
    monkeypatch.setattr(sweep, "check_strategies", checked_again)
    read_params(smoke_file(tmp_path), marks=marks)  # the mark stands for the check
    read_params(smoke_file(tmp_path, lambda raw: raw["train"].update(eval_batches=3)), marks=marks)  # not the sweep's

    def other_setting(raw):
        raw["sweep"]["strategies"]["acceleration"]["settings"].insert(1, 1.0e-4)

    with pytest.raises(ParamsError, match="checked again"):
        read_params(smoke_file(tmp_path, other_setting), marks=marks)

    copy = tmp_path / "checkout"  # the same package, one byte of the checker's code changed
    shutil.copytree(dependencies.SOURCE_ROOT, copy / "src")
    checker = copy / dependencies.module_path(CHECKER)
    checker.write_text(checker.read_text() + "\n")
    monkeypatch.setattr(dependencies, "SOURCE_ROOT", copy / "src")
    with pytest.raises(ParamsError, match="checked again"):
        read_params(smoke_file(tmp_path), marks=marks)


def test_a_sweep_section_that_fails_is_not_marked(tmp_path):
    def bad_setting(raw):
        raw["sweep"]["strategies"]["fixed"]["settings"] = [1.5, 4]

    marks = tmp_path / "marks"
    with pytest.raises(ParamsError, match="sweep.strategies.fixed: loops must be whole numbers"):
        read_params(smoke_file(tmp_path, bad_setting), marks=marks)
    assert not marks.exists() or not list(marks.iterdir())


@pytest.mark.skipif(any(os.path.exists(path) for path in GPU_DEVICE_FILES),
                    reason="a machine with a GPU asks torch whether runtime.device auto runs on it")
def test_a_snakemake_call_planning_a_checked_set_does_not_load_torch(tmp_path):
    def own_setting(raw):  # a sweep section no other test plans, whose mark no other test makes meanwhile
        raw["sweep"]["strategies"]["acceleration"]["settings"].insert(1, 1.2345e-4)

    params = smoke_file(tmp_path, own_setting).rename(tmp_path / "validation-marks.yaml")
    command = [sys.executable, "-X", "importtime", str(Path(sys.executable).with_name("snakemake")), "--dry-run",
               "--cores", "1", "--configfile", str(params), "--quiet", "rules"]
    mark = ROOT / orchestrators.SNAPSHOTS.parent / "checked" / strategies_key(load_params(params).sweep)
    mark.unlink(missing_ok=True)  # made by this test's last run in this checkout
    imported = []
    for _ in range(2):  # the first checks the set and marks it
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        imported.append({line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                         if line.startswith("import time:")})
    assert mark.is_file()
    assert "torch" in imported[0] and "torch" not in imported[1]
    assert "twoscale.config.params" in imported[1]
