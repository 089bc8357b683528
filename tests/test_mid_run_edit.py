"""A parameter file edited while Snakemake runs: the run goes on with the values it started with, and the next run
reruns what the edit changed, or nothing once the file is restored; never "Nothing to be done" over results built
from other values than Snakemake recorded."""

from __future__ import annotations

import subprocess
import time

import polars as pl
import pytest
import yaml
from workspace import BIN, ROOT, copy_repository, environment, run

MEASURED = "runs/m/results/measure/paper/seed_1337/step_40/geometry.parquet"  # m.yaml writes under runs/m/


def planned(repo, *options: str) -> str:
    return run([str(BIN / "snakemake"), MEASURED, "--dry-run", "--cores", "1", *options, "--configfile", "m.yaml"],
               repo)


@pytest.mark.e2e
def test_a_parameter_file_edited_while_snakemake_runs_changes_nothing_of_the_run(tmp_path):
    repo = copy_repository(tmp_path / "repo", ROOT / "configs/smoke.yaml")
    original = (repo / "params.yaml").read_bytes()
    (repo / "m.yaml").write_bytes(original)
    workflow = subprocess.Popen([str(BIN / "snakemake"), MEASURED, "--cores", "2", "--configfile", "m.yaml"],
                                cwd=repo, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while not (repo / "runs/m/logs/train/paper/seed_1337.log").exists():  # training started: measure comes after
            assert workflow.poll() is None, "the workflow ended before training"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        edited = yaml.safe_load(original)
        edited["measure"]["max_loops"] = 6
        (repo / "m.yaml").write_text(yaml.safe_dump(edited))
        assert workflow.wait(timeout=900) == 0
    finally:
        if workflow.poll() is None:
            workflow.kill()
            workflow.wait()

    assert pl.read_parquet(repo / MEASURED)["k"].max() == 10  # the value the run started with
    assert "measure" in planned(repo, "--quiet", "rules")  # the edit, still in the file, reruns what it changed
    (repo / "m.yaml").write_bytes(original)
    assert "Nothing to be done" in planned(repo)
