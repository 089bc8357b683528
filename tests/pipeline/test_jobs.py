"""The jobs of the pipeline's declaration under a parameter set: wildcards and files, checked against paths written
out by hand for a small parameter set."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration import jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def config() -> dict:
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["runtime"]["seeds"], raw["runtime"]["explain_seeds"] = [1, 2], [1]
    raw["train"]["steps"], raw["train"]["checkpoint_steps"] = 40, [20, 40]
    raw["runtime"]["threads"] = 3
    return raw


def by_name(config: dict) -> dict[str, jobs.Stage]:
    return {stage.name: stage for stage in jobs.stages(config)}


def test_a_per_run_stage_has_one_job_per_recipe_and_seed(config):
    train = by_name(config)["train"]
    recipes = list(config["recipes"])
    assert train.jobs() == [{"recipe": r, "seed": s} for r in recipes for s in ("1", "2")]


def test_a_file_per_checkpoint_step(config):
    outputs = by_name(config)["train"].outputs
    assert "results/train/{recipe}/seed_{seed}/checkpoints/step_20.pt" in outputs
    assert "results/train/{recipe}/seed_{seed}/checkpoints/step_40.pt" in outputs
    assert not any("{step}" in path for path in outputs)


def test_the_final_checkpoint_is_the_one_of_train_steps(config):
    sweep = by_name(config)["sweep"]
    assert sweep.inputs[0] == "results/train/{recipe}/seed_{seed}/checkpoints/step_40.pt"
    assert sweep.outputs == ("results/sweep/strategies/{recipe}/seed_{seed}/{strategy}.parquet",
                             "results/sweep/strategies/{recipe}/seed_{seed}/{strategy}.depth.parquet")


def test_another_parameter_set_s_files_lie_under_its_root(config):
    """Every file of every stage under runs/smoke/: the default set's files with that prefix."""
    default, other = jobs.stages(config), jobs.stages(config, "runs/smoke")
    for mine, theirs in zip(default, other, strict=True):
        assert [*theirs.inputs, *theirs.outputs] == [f"runs/smoke/{path}" for path in [*mine.inputs, *mine.outputs]]


def test_a_folder_input_is_every_output_of_every_job_inside_it(config):
    geometry = by_name(config)["geometry"]
    names = ["geometry.parquet", "loss_vs_loops.parquet", "depth.parquet", "similarity.parquet",
             "trajectory.parquet", "summary.json"]
    expected = {f"results/measure/{recipe}/seed_{seed}/step_{step}/{name}"
                for recipe in config["recipes"] for seed in (1, 2) for step in (20, 40) for name in names}
    assert set(geometry.inputs) == expected


def test_a_folder_no_job_writes_to_is_no_input(config):
    without_teachers = copy.deepcopy(config)
    without_teachers["teachers"] = {}
    surrogates = by_name(without_teachers)["surrogates"]
    assert not any(path.startswith("results/distill") for path in surrogates.inputs)
    assert "results/train/huginn/seed_1/checkpoints/step_40.pt" in surrogates.inputs
