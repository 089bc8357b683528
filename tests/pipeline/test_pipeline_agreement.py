"""Snakemake and DVC describe the same pipeline: same stages, commands, inputs, outputs and parameter keys."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dvc.repo import Repo

from twoscale.config.parameter_files import load_params, read_raw
from twoscale.config.params import SweepParams, SweepStrategy
from twoscale.pipeline.declaration import dependencies

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
FORCED_DRY_RUN = [SNAKEMAKE, "--forceall", "--dry-run", "--quiet", "progress", "--nolock"]


@pytest.fixture(scope="module")
def snakemake_jobs() -> dict[str, dict]:
    """Every job of a forced dry run, keyed by its shell command: rule, inputs and outputs as Snakemake plans them."""
    result = subprocess.run(
        [SNAKEMAKE, "--forceall", "--dry-run", "--quiet", "progress", "--printshellcmds", "--cores", "1"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    jobs: dict[str, dict] = {}
    for block in re.split(r"^(?:local)?rule ", result.stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        fields = dict(re.findall(r"^    (input|output): (.*)$", block, re.M))
        cmd = re.search(r"^Shell command: (.*)$", block, re.M).group(1)
        # Snakemake's jobs read the run's snapshot of the parameter file; DVC's read the file
        snapshot = re.search(r"--params (\S+)", cmd)
        if snapshot:
            assert re.fullmatch(r"\.snakemake/twoscale/params/[0-9a-f]{16}\.yaml", snapshot.group(1)), cmd
            cmd = cmd.replace(snapshot.group(0), "--params params.yaml")
        if rule != "all":
            jobs[cmd] = {
                "rule": rule,
                "inputs": set(fields.get("input", "").split(", ")) - {""},
                "outputs": set(fields["output"].split(", ")),
            }
    return jobs


@pytest.fixture(scope="module")
def dvc_stages() -> dict[str, dict]:
    """Every DVC stage (matrix expanded), keyed by its command."""
    stages = {}
    with Repo(str(ROOT)) as repo:
        for stage in repo.index.stages:
            file_deps = [d for d in stage.deps if not hasattr(d, "params")]
            param_deps = [d for d in stage.deps if hasattr(d, "params")]
            stages[stage.cmd] = {
                "name": stage.name.split("@")[0],
                "inputs": {d.def_path for d in file_deps},
                "outputs": {o.def_path for o in stage.outs},
                "params": [key for d in param_deps for key in d.params],
            }
    return stages


def covered(path: str, outs: set[str]) -> bool:
    return any(path == out or path.startswith(out.rstrip("/") + "/") for out in outs)


def test_same_commands_and_stages(snakemake_jobs, dvc_stages):
    assert set(snakemake_jobs) == set(dvc_stages)
    for cmd, stage in dvc_stages.items():
        assert snakemake_jobs[cmd]["rule"] == stage["name"], cmd
    assert {stage["name"] for stage in dvc_stages.values()} == set(dependencies.STAGES)


def same_files(snakemake_paths: set[str], dvc_paths: set[str]) -> bool:
    """Equal, where a DVC directory stands for the Snakemake files inside it."""
    return all(covered(path, dvc_paths) for path in snakemake_paths) and all(
        any(covered(path, {dvc_path}) for path in snakemake_paths) for dvc_path in dvc_paths
    )


def test_same_inputs(snakemake_jobs, dvc_stages):
    for cmd, stage in dvc_stages.items():
        assert same_files(snakemake_jobs[cmd]["inputs"], stage["inputs"]), stage["name"]
        assert set(dependencies.sources(stage["name"])) <= stage["inputs"], stage["name"]


def test_same_outputs(snakemake_jobs, dvc_stages):
    for cmd, stage in dvc_stages.items():
        assert same_files(snakemake_jobs[cmd]["outputs"], stage["outputs"]), stage["name"]


def test_every_run_of_every_per_run_stage(dvc_stages):
    params = load_params(ROOT / "params.yaml")
    runs = {(recipe, str(seed)) for recipe, seed in params.runs()}
    per_stage = {"train": 1, "measure": len(params.train.checkpoint_steps), "sweep": len(params.sweep.strategies)}
    for name, jobs_per_run in per_stage.items():
        commands = [cmd for cmd, stage in dvc_stages.items() if stage["name"] == name]
        found = [tuple(re.search(r"--recipe (\S+) --seed (\S+)", cmd).groups()) for cmd in commands]
        assert set(found) == runs and len(found) == len(runs) * jobs_per_run, name


def test_same_parameter_keys(dvc_stages):
    """DVC's keys per job are the declared ones (Snakemake's rules pass the same declared keys to every job, and
    test_end_to_end checks that a changed parameter reruns what it should)."""
    for cmd, stage in dvc_stages.items():
        name = stage["name"]
        recipe, strategy = (re.search(rf"--{flag} (\S+)", cmd) for flag in ("recipe", "strategy"))
        expected = [key.format(recipe=recipe and recipe.group(1), strategy=strategy and strategy.group(1))
                    for key in dependencies.STAGES[name]]
        assert stage["params"] == expected, name


def test_the_sweep_and_latency_jobs_together_depend_on_every_sweep_setting():
    quality, latency = dependencies.STAGES["sweep"], dependencies.STAGES["latency"]
    settings = {key for key in [*quality, *latency] if key.startswith("sweep.") and "{" not in key}
    assert settings == {f"sweep.{name}" for name in SweepParams.model_fields}
    # its own strategy's rule and grid only; whether it is timed matters to the latency rounds alone
    own = {f"sweep.strategies.{{strategy}}.{field}" for field in SweepStrategy.model_fields if field != "timed"}
    assert own == {key for key in quality if key.startswith("sweep.strategies")} and "sweep.strategies" in latency
    assert {"sweep.n_prompts", "sweep.new_tokens", "sweep.rounds"} <= set(latency) and "sweep.n_windows" not in latency


def planned_resources(*options: str) -> dict[str, set[str]]:
    """Per rule, the resources of its jobs in a forced dry run."""
    result = subprocess.run([*FORCED_DRY_RUN, "--cores", "1", *options],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    found: dict[str, set[str]] = {}
    for block in re.split(r"^(?:local)?rule ", result.stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        resources = re.search(r"^    resources: (.*)$", block, re.M)
        found.setdefault(rule, set()).update(resources.group(1).split(", ") if resources else [])
    return found


MODEL_RULES = {"train", "train_teacher", "measure", "precision", "spectrum", "lens", "beyond", "sweep", "latency",
               "sample", "phases", "distill", "distill_curve", "surrogates"}


def test_every_job_that_loads_a_model_asks_for_the_gpu_of_a_cuda_run():
    resources = planned_resources("--configfile", "configs/gpu.yaml", "--profile", "profiles/gpu")
    assert {rule for rule, found in resources.items() if "gpu=1" in found} == MODEL_RULES


def test_timed_jobs_take_every_core_so_that_nothing_runs_beside_them():
    result = subprocess.run([*FORCED_DRY_RUN, "--cores", "3"], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    threads = {}
    for block in re.split(r"^(?:local)?rule ", result.stdout, flags=re.M)[1:]:
        found = re.search(r"^    threads: (\d+)$", block, re.M)
        threads.setdefault(block.split(":", 1)[0], set()).add(int(found.group(1)) if found else 1)
    assert threads["latency"] == threads["sample"] == {3}
    assert threads["sweep"] == {1}  # sweep.threads: the quality jobs share the machine
    resources = planned_resources()
    assert {rule for rule, found in resources.items() if "timed=1" in found} == {"latency", "sample"}


def test_a_cpu_run_asks_for_no_gpu(tmp_path):
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["runtime"]["device"] = "cpu"
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(raw))
    resources = planned_resources("--configfile", str(tmp_path / "cpu.yaml"))
    assert not any(value.startswith("gpu=") and value != "gpu=0" for found in resources.values() for value in found)


def test_the_text_files_a_glob_names_are_the_corpus_job_s_inputs(tmp_path):
    for name in ("a.txt", "b.txt", "notes.md"):
        (tmp_path / name).write_text("text\n")
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["data"] |= {"source": "text", "text_files": [str(tmp_path / "*.txt"), str(tmp_path / "none-*.txt")]}
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(raw))
    result = subprocess.run([*FORCED_DRY_RUN, "runs/text/data/raw/corpus.txt", "--cores", "1",
                             "--configfile", str(tmp_path / "text.yaml")],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    inputs = set(re.search(r"^    input: (.*)$", result.stdout, re.M).group(1).split(", "))
    assert {path for path in inputs if not path.startswith("src/")} == {str(tmp_path / "a.txt"),
                                                                         str(tmp_path / "b.txt")}
