"""The Snakemake rules made from the pipeline's declaration: wildcards, files, command, log and report, checked
against paths written out by hand for a small parameter set."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from twoscale.pipeline import snakemake_rules
from twoscale.pipeline.params import read_raw

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def config() -> dict:
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["runtime"]["seeds"] = [1, 2]
    raw["train"]["steps"], raw["train"]["checkpoint_steps"] = 40, [20, 40]
    raw["runtime"]["threads"] = 3
    return raw


def by_name(config: dict) -> dict[str, snakemake_rules.Rule]:
    return {rule.name: rule for rule in snakemake_rules.rules(config)}


def test_a_per_run_stage_has_one_job_per_recipe_and_seed(config):
    train = by_name(config)["train"]
    recipes = list(config["recipes"])
    assert train.jobs() == [{"recipe": r, "seed": s} for r in recipes for s in ("1", "2")]


def test_a_file_per_checkpoint_step(config):
    outputs = by_name(config)["train"].outputs
    assert "results/train/{recipe}/seed_{seed}/checkpoints/step_20.pt" in outputs
    assert "results/train/{recipe}/seed_{seed}/checkpoints/step_40.pt" in outputs
    assert not any("{step}" in path for path in outputs)


def test_the_command_log_and_benchmark_of_a_job(config):
    sweep = by_name(config)["sweep"]
    assert sweep.shell == (
        "python -m twoscale sweep --params {params.file:q} --recipe {wildcards.recipe:q} --seed {wildcards.seed:q}"
        " --strategy {wildcards.strategy:q}"
        " --checkpoint results/train/{wildcards.recipe:q}/seed_{wildcards.seed:q}/checkpoints/step_{params.step:q}.pt"
        " --data-dir data/prepared --out results/sweep/strategies/{wildcards.recipe:q}/seed_{wildcards.seed:q}/"
        "{wildcards.strategy:q}.parquet --log {log:q}")
    assert sweep.command_params == (("step", 40),)
    assert sweep.inputs[0] == "results/train/{recipe}/seed_{seed}/checkpoints/step_40.pt"
    assert sweep.log == "logs/sweep/{recipe}/seed_{seed}/{strategy}.log"
    assert sweep.benchmark == "results/benchmarks/sweep/{recipe}/seed_{seed}/{strategy}.tsv"


def test_another_parameter_set_s_job_reads_and_writes_under_its_root(config):
    sweep = {rule.name: rule for rule in snakemake_rules.rules(config, "runs/smoke")}["sweep"]
    assert sweep.shell == (
        "python -m twoscale sweep --params {params.file:q} --recipe {wildcards.recipe:q} --seed {wildcards.seed:q}"
        " --strategy {wildcards.strategy:q}"
        " --checkpoint runs/smoke/results/train/{wildcards.recipe:q}/seed_{wildcards.seed:q}/checkpoints/"
        "step_{params.step:q}.pt --data-dir runs/smoke/data/prepared --out runs/smoke/results/sweep/strategies/"
        "{wildcards.recipe:q}/seed_{wildcards.seed:q}/{wildcards.strategy:q}.parquet --log {log:q}")
    assert sweep.inputs[0] == "runs/smoke/results/train/{recipe}/seed_{seed}/checkpoints/step_40.pt"
    assert sweep.log == "runs/smoke/logs/sweep/{recipe}/seed_{seed}/{strategy}.log"
    assert sweep.benchmark == "runs/smoke/results/benchmarks/sweep/{recipe}/seed_{seed}/{strategy}.tsv"


def test_nothing_of_another_parameter_set_lies_outside_its_root(config):
    """Every path of every rule, and every path a command names, under runs/smoke/, but the stages' source files;
    the default set's rules are the same paths without that prefix."""
    default, other = snakemake_rules.rules(config), snakemake_rules.rules(config, "runs/smoke")
    for mine, theirs in zip(default, other, strict=True):
        paths = [*mine.inputs, *mine.outputs, mine.log, mine.benchmark]
        assert [*theirs.inputs, *theirs.outputs, theirs.log, theirs.benchmark] == [f"runs/smoke/{p}" for p in paths]
        arguments = theirs.shell.split()
        named = [arg for flag, arg in zip(arguments, arguments[1:]) if flag.startswith("--")
                 and flag not in ("--params", "--recipe", "--seed", "--strategy", "--blocks", "--log")]
        assert named and all(arg.startswith("runs/smoke/") for arg in named), (theirs.name, named)
        assert theirs.shell.replace("runs/smoke/", "") == mine.shell


def test_threads_and_the_gpu_come_from_the_declaration(config):
    rules = by_name(config)
    assert rules["train"].threads == 3 and rules["train"].gpu
    assert rules["geometry"].threads == 1 and not rules["geometry"].gpu


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


def test_the_report_shows_the_declared_files_with_the_job_s_labels(config):
    figures = by_name(config)["sampler_figures"]
    assert [path for path in figures.outputs if figures.report.shows(path)] == [
        "results/figures/{recipe}/seed_{seed}/sampler_tradeoff.png"]
    assert figures.report.subcategory == "{recipe}"
    assert dict(figures.report.labels) == {"recipe": "{recipe}", "seed": "{seed}"}
    assert by_name(config)["measure"].report is None
    assert by_name(config)["sample"].report is None  # the timed stage draws nothing


def test_a_command_naming_an_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="sweep.max_loops"):
        snakemake_rules._command({"cmd": "python -m twoscale x --params params.yaml --n ${sweep.max_loops}"
                                         " --log logs/x.log"}, "")


def test_every_value_a_command_names_is_shell_quoted(config):
    for rule in snakemake_rules.rules(config):
        placeholders = re.findall(r"\{[^}]*\}", rule.shell)
        assert placeholders and all(p.endswith(":q}") for p in placeholders), rule.name


def test_a_name_that_reaches_the_shell_runs_nothing(config, tmp_path):
    """The sweep command formatted as Snakemake formats it, for a strategy named like a command substitution, run
    by bash with the stage replaced by printf: the name arrives as one literal argument and nothing is executed."""
    from snakemake.utils import format as snakemake_format

    hostile = "x$(touch PWNED)`touch PWNED2`;touch PWNED3"
    shell = by_name(config)["sweep"].shell.replace("python -m twoscale sweep", "printf '%s\\n'")
    command = snakemake_format(shell, wildcards=SimpleNamespace(recipe="paper", seed="1", strategy=hostile),
                               params=SimpleNamespace(file=Path("my params.yaml"), step=40), log="logs/a b.log")
    printed = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert list(tmp_path.iterdir()) == []
    arguments = printed.stdout.splitlines()
    assert arguments[arguments.index("--strategy") + 1] == hostile
    assert arguments[arguments.index("--params") + 1] == "my params.yaml"
    assert arguments[arguments.index("--log") + 1] == "logs/a b.log"
