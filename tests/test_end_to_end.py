"""The whole workflow on the smoke parameter set (two recipes), in a temporary copy of the repository, as a user
would run it.

Snakemake runs everything; DVC then finds nothing to do; a change to one recipe plans that recipe's jobs and the
stages that gather every run, and nothing else, in both orchestrators (DVC's reruns read from its graph, and checked
against a real `dvc repro` of a teacher's change); MLflow holds a parent run per invocation with a nested run per
job, tagged with its recipe and seed.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mlflow
import polars as pl
import pytest
import yaml
from planned import changed_jobs, declared_reruns, per_stage
from workspace import (
    ROOT,
    attempt,
    copy_repository,
    environment,
    figure_logs,
    figure_stages,
    run,
    stages_writing_only,
)

from twoscale.__main__ import main
from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration import dependencies, jobs
from twoscale.report.figures import UNREADABLE

pytestmark = pytest.mark.e2e


BY_MTIME = ("--max-checksum-file-size", "0")  # Snakemake compares files up to this size by checksum, not mtime


def planned_jobs(repo: Path, *options: str) -> dict[str, int]:
    """How many jobs of each rule Snakemake would run now."""
    out = run(["snakemake", "--dry-run", "--quiet", "rules", "--cores", "1", *options], repo)
    jobs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in {"job", "total", "all"}:
            jobs[parts[0]] = int(parts[1])
    return jobs


def dvc_changed_stages(repo: Path) -> set[str]:
    out = run(["dvc", "status"], repo)
    return {line.rstrip(":") for line in out.splitlines() if line and not line[0].isspace() and line.endswith(":")}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A clean copy of the working tree with the smoke parameters as params.yaml, committed to a fresh git repo."""
    return copy_repository(tmp_path_factory.mktemp("workflow") / "repo", ROOT / "configs/smoke.yaml")


@pytest.fixture(scope="module")
def first_run(repo: Path) -> Path:
    """The smoke run, each of its processes recording the parameter keys it reads (tests/parameter_reads)."""
    reads = repo.parent / "parameter_reads"
    reads.mkdir()
    hook = str(ROOT / "tests/parameter_reads")
    python_path = os.pathsep.join([hook, *filter(None, [os.environ.get("PYTHONPATH")])])
    console = run(["snakemake", "--cores", "2"], repo, PYTHONPATH=python_path, TWOSCALE_PARAMETER_READS=str(reads))
    (repo.parent / "console.txt").write_text(console)
    return repo


def smoke_runs(repo: Path) -> list[tuple[str, int]]:
    smoke = yaml.safe_load((repo / "params.yaml").read_text())
    return [(recipe, seed) for recipe in smoke["recipes"] for seed in smoke["runtime"]["seeds"]]


def teacher_runs(repo: Path) -> list[tuple[str, int]]:
    smoke = yaml.safe_load((repo / "params.yaml").read_text())
    return [(teacher, seed) for teacher in smoke["teachers"] for seed in smoke["runtime"]["seeds"]]


def test_snakemake_writes_every_output_and_benchmark_of_every_run(first_run):
    smoke = yaml.safe_load((first_run / "params.yaml").read_text())
    assert len(smoke_runs(first_run)) == 2
    for name in ("corpus", "tokenize"):
        assert (first_run / f"results/benchmarks/{name}.tsv").is_file()
        assert (first_run / f"logs/{name}.log").is_file()
    for recipe, seed in smoke_runs(first_run):
        run_dir = f"{recipe}/seed_{seed}"
        for step in smoke["train"]["checkpoint_steps"]:
            assert (first_run / f"results/train/{run_dir}/checkpoints/step_{step}.pt").is_file()
            summary = json.loads((first_run / f"results/measure/{run_dir}/step_{step}/summary.json").read_text())
            assert summary["step"] == step
        assert (first_run / f"results/benchmarks/train/{run_dir}.tsv").is_file()
        assert (first_run / f"logs/train/{run_dir}.log").is_file()
        metrics = json.loads((first_run / f"results/train/{run_dir}/metrics.json").read_text())
        assert metrics["step"] == smoke["train"]["steps"]
        assert not (first_run / f"results/.resume/{run_dir}").exists()  # removed once training completes
    geometry = pl.read_parquet(first_run / "results/geometry/geometry.parquet")
    assert geometry.select("recipe", "seed").unique(maintain_order=True).rows() == smoke_runs(first_run)
    assert {"state_norm", "cross_token_cosine", "radial_step", "tangential_step"} <= set(geometry["metric"])


def test_the_console_shows_each_job_start_and_end_and_its_log_the_rest(first_run):
    smoke = yaml.safe_load((first_run / "params.yaml").read_text())
    console = (first_run.parent / "console.txt").read_text().splitlines()
    started = sorted(line.split("(")[1].split(")")[0] for line in console if line.endswith("): started"))
    done = sorted(line.split("(")[1].split(")")[0] for line in console if "): done in " in line)
    assert started == done == sorted(str(path.relative_to(first_run)) for path in (first_run / "logs").rglob("*.log"))
    assert not [line for line in console if line.startswith(("step ", "input:", "    input:"))]  # logs' lines
    evaluations = range(smoke["train"]["eval_every"], smoke["train"]["steps"] + 1, smoke["train"]["eval_every"])
    for recipe, seed in smoke_runs(first_run):
        log = (first_run / f"logs/train/{recipe}/seed_{seed}.log").read_text()
        assert [int(line.split("step ")[1].split(":")[0]) for line in log.splitlines()
                if " step " in line and ": train " in line] == list(evaluations)
        assert f"train {recipe}: 100%" in log  # the progress, as lines
        assert "final: val loss" in log


def test_every_figure_of_the_smoke_run_has_every_text_readable(first_run):
    """save_figure warns of a text that leaves its figure or axes or covers another (report.figures.text_defects):
    no figure stage's log holds such a warning."""
    logs = figure_logs(first_run)
    smoke = read_raw(first_run / "params.yaml")
    drawing = sum(len(stage.jobs()) for stage in jobs.stages(smoke) if stage.name in figure_stages())
    assert len(logs) == drawing  # the premise: every job that draws a figure drew, and logged
    assert [line for log in logs for line in log.read_text().splitlines() if UNREADABLE in line] == []


def test_every_output_lands_with_a_record_of_its_content_parameters_and_inputs(first_run):
    smoke = yaml.safe_load((first_run / "params.yaml").read_text())
    outputs = [path for stage in jobs.stages(smoke) for path in stage.job_outputs()]
    for output in outputs:
        record = json.loads((first_run / Path(output).parent / ".built" / f"{Path(output).name}.json").read_text())
        assert record["sha256"] == hashlib.sha256((first_run / output).read_bytes()).hexdigest(), output
    def read_from(output: str) -> set[str]:  # its inputs, recorded relative to its folder
        record = json.loads((first_run / Path(output).parent / ".built" / f"{Path(output).name}.json").read_text())
        return {os.path.normpath(Path(output).parent / source) for source in record["inputs"]}

    train = json.loads((first_run / "results/train/paper/seed_1337/checkpoints/.built/step_40.pt.json").read_text())
    assert (train["stage"], train["job"]) == ("train", {"recipe": "paper", "seed": 1337})
    assert train["params"]["recipes.paper"] == smoke["recipes"]["paper"] and train["params"]["train"] == smoke["train"]
    assert read_from("results/train/paper/seed_1337/checkpoints/step_40.pt") == {
        f"data/prepared/{name}" for name in ("train.npy", "val.npy", "stats.json", "tokenizer.json")}
    # every file measure wrote for the smoke runs' checkpoints, found on disk (not through the rules that decide
    # what a job is given); the copied checkout also holds the default run's committed measurements
    folders = [first_run / f"results/measure/{recipe}/seed_{seed}/step_{step}" for recipe, seed in smoke_runs(first_run)
               for step in smoke["train"]["checkpoint_steps"]]
    measured = {str(path.relative_to(first_run)) for folder in folders for path in folder.iterdir()
                if path.is_file() and not path.name.startswith(".")}
    assert all(any(folder.iterdir()) for folder in folders)
    assert read_from("results/geometry/geometry.parquet") == measured


JOB_OPTIONS = {"--recipe": ("recipe", str), "--seed": ("seed", int), "--strategy": ("strategy", str),
               "--blocks": ("blocks", int)}


def recorded_jobs(run_dir: Path) -> list[tuple[str, dict, dict]]:
    """Each stage job of the recorded run: its stage (train_teacher for a teacher's training: the one whose matrix
    holds the job), the keys it was run for and what it read (`reads`, `names`: tests/parameter_reads)."""
    config = read_raw(run_dir / "params.yaml")
    stages_of = stages_by_module()
    found = []
    for path in sorted((run_dir.parent / "parameter_reads").glob("*.json")):
        record = json.loads(path.read_text())
        words = record["argv"][1:]
        if not words or words[0] not in stages_of:  # Snakemake's own process, reading the file to plan
            continue
        keys = {name: kind(words[words.index(option) + 1]) for option, (name, kind) in JOB_OPTIONS.items()
                if option in words}
        stage = next(stage for stage in stages_of[words[0]] if dependencies.holds_job(stage, keys, config))
        found.append((stage, keys, record))
    return found


def stages_by_module() -> dict[str, list[str]]:
    """The stages each stage module runs (train: train and train_teacher)."""
    stages_of: dict[str, list[str]] = {}
    for stage in dependencies.STAGES:
        stages_of.setdefault(dependencies.stage_module(stage), []).append(stage)
    return stages_of


def within(key: str, folder: str) -> bool:
    """Whether a dotted key is `folder` or lies inside it."""
    return key == folder or key.startswith(f"{folder}.")


def test_every_job_reads_the_parameter_keys_its_stage_declares_and_every_declared_key_is_read(first_run):
    """stages.yaml's parameter keys against what each job of the smoke run read (tests/parameter_reads says what a
    read is and which are not counted). A key read, or a field whose section names were read, is declared where a
    key of its stage is it or holds it; a key that a matrix of the job's stage module expands over (recipe names,
    seeds, steps; distill checks its --blocks against both distill's and distill_curve's) is the job's identity,
    not its input. A declared key is read where some job of the stage read it, a key inside it or the section
    holding it, or the names of the sections in it."""
    jobs = recorded_jobs(first_run)
    assert {stage for stage, _, _ in jobs} == set(dependencies.STAGES)  # every stage ran and was recorded
    matrix_keys = {module: {value.removeprefix("${").removesuffix("}") for stage in stages
                            for value in dependencies.declared_stages()[stage].get("matrix", {}).values()}
                   for module, stages in stages_by_module().items()}
    undeclared, read = {}, {}
    for stage, keys, record in jobs:
        declared = {template: template.format(**keys) for template in dependencies.STAGES[stage]}
        matrix = matrix_keys[dependencies.stage_module(stage)]
        for key in record["reads"] + record["names"]:
            if key not in matrix and not any(within(key, d) for d in declared.values()):
                undeclared.setdefault(stage, set()).add(key)
        read.setdefault(stage, set()).update(
            template for template, d in declared.items()
            if any(within(key, d) or within(d, key) for key in record["reads"])
            or any(within(names, d) for names in record["names"]))
    assert undeclared == {}, "read but not declared in stages.yaml"
    never_read = {stage: sorted(set(templates) - read.get(stage, set()))
                  for stage, templates in dependencies.STAGES.items() if set(templates) - read.get(stage, set())}
    assert never_read == {}, "declared in stages.yaml but read by no job"


def test_a_checkpoint_copied_over_another_is_refused_by_the_stage_run_by_hand(first_run, tmp_path):
    checkpoints = first_run / "results/train/paper/seed_1337/checkpoints"
    kept = first_run / "step_40.pt.kept"  # the file itself, mtime and all, put back afterwards
    os.replace(checkpoints / "step_40.pt", kept)
    shutil.copy2(checkpoints / "step_10.pt", checkpoints / "step_40.pt")
    try:
        result = attempt([sys.executable, "-m", "twoscale", "sweep", "--params", "params.yaml", "--recipe", "paper",
                          "--seed", "1337", "--strategy", "fixed", "--checkpoint", str(checkpoints / "step_40.pt"),
                          "--data-dir", "data/prepared", "--out", str(tmp_path / "sweep.parquet"),
                          "--depth-out", str(tmp_path / "depth.parquet")], first_run)
    finally:
        os.replace(kept, checkpoints / "step_40.pt")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"twoscale sweep: error: {checkpoints}/step_40.pt: not the file its build record describes (changed, or "
        f"restored without its record): put the recorded file back, rebuild it (snakemake --cores all; with DVC: dvc "
        f"repro -f --downstream train@paper-1337), or delete {checkpoints}/.built/step_40.pt.json to read it "
        "unchecked"]
    assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def swapped(path: Path, by: Path) -> Iterator[None]:
    """`path` replaced by a copy of `by`, modification time and all (cp -p), for the block; then the file itself
    put back."""
    kept = path.with_name(path.name + ".kept")
    os.replace(path, kept)
    shutil.copy2(by, path)
    try:
        yield
    finally:
        os.replace(kept, path)


def test_a_checkpoint_copied_over_another_is_trained_again_with_all_built_from_it_and_once_back_is_current(
        first_run):
    """Its time kept, Snakemake alone would call the swapped checkpoint current (and every job reading it would
    refuse it): the workflow checks what the build records say before it plans, and plans its training again."""
    checkpoints = first_run / "results/train/paper/seed_1337/checkpoints"
    with swapped(checkpoints / "step_40.pt", by=checkpoints / "step_10.pt"):
        result = attempt(["snakemake", "--dry-run", "--quiet", "rules", "--cores", "1"], first_run)
        plan = planned_jobs(first_run)
    assert "output(s) are not what their build records and params.yaml say, so they are built again: " \
           "results/train/paper/seed_1337/checkpoints/step_40.pt" in result.stderr
    assert plan["train"] == 1 and plan["sweep"] == len(yaml.safe_load((first_run / "params.yaml").read_text())[
        "sweep"]["strategies"])  # the paper run's; the huginn run's training is its own
    assert planned_jobs(first_run) == {}


def test_an_output_removed_beside_what_was_built_from_it_is_built_again(first_run):
    """Snakemake builds a missing file only where a job it must run reads it: the default target asks for every
    output, so one removed (by a failed job, or by hand) is planned although what was built from it is there."""
    strategy = first_run / "results/sweep/strategies/paper/seed_1337/fixed.parquet"
    kept = first_run / "fixed.parquet.kept"
    os.replace(strategy, kept)
    try:
        plan = planned_jobs(first_run)
    finally:
        os.replace(kept, strategy)
    assert plan["sweep"] == 1
    assert planned_jobs(first_run) == {}


def test_sweep_covers_every_strategy_and_setting_from_exit_at_once_to_full_depth(first_run):
    sweep_params = yaml.safe_load((first_run / "params.yaml").read_text())["sweep"]
    stacked = pl.read_parquet(first_run / "results/sweep/sweep.parquet")
    assert stacked.select("recipe", "seed").unique(maintain_order=True).rows() == smoke_runs(first_run)
    for recipe, seed in smoke_runs(first_run):
        combined = stacked.filter((pl.col("recipe") == recipe) & (pl.col("seed") == seed))
        for name, strategy in sweep_params["strategies"].items():
            own = pl.read_parquet(first_run / f"results/sweep/strategies/{recipe}/seed_{seed}/{name}.parquet")
            assert own["setting"].to_list() == [float(s) for s in strategy["settings"]], name
            assert own.equals(combined.filter(pl.col("strategy") == name).select(own.columns)), name
            depth = pl.read_parquet(first_run / f"results/sweep/strategies/{recipe}/seed_{seed}/{name}.depth.parquet")
            groups = sorted(depth["group"].unique())
            means = depth.group_by("setting").agg(pl.col("exit_step").filter(pl.col("group") == g).mean()
                                                  .alias(f"mean_loops_group{g}") for g in groups).sort("setting")
            sweep_means = own.sort("setting").select(means.columns)  # each token's exit steps average to the
            assert means.to_numpy() == pytest.approx(sweep_means.to_numpy(), rel=1e-12), name  # sweep's mean loops
    recipe, seed = smoke_runs(first_run)[0]
    combined = stacked.filter((pl.col("recipe") == recipe) & (pl.col("seed") == seed))
    fixed = combined.filter(pl.col("strategy") == "fixed").sort("setting")
    assert fixed["mean_loops"].to_list() == fixed["setting"].to_list()  # a fixed depth runs exactly that many loops
    full = fixed.filter(pl.col("setting") == sweep_params["max_loops"])
    for name in sweep_params["strategies"]:  # threshold 0 never exits: full depth, same logits
        never = combined.filter((pl.col("strategy") == name) & (pl.col("setting") == 0))
        if never.height:
            assert never["cross_entropy"].item() == pytest.approx(full["cross_entropy"].item(), rel=1e-6), name
            assert never["compute_fraction"].item() == 1.0, name
    assert combined.filter(pl.col("setting") == float("inf"))["mean_loops"].max() < sweep_params["max_loops"]
    rounds = pl.read_parquet(first_run / "results/sweep/latency.parquet")
    untimed = [name for name, strategy in sweep_params["strategies"].items() if strategy.get("timed") is False]
    assert untimed, "the smoke set should keep one strategy untimed"
    timed = stacked.filter(~pl.col("strategy").is_in(untimed))
    per_point = rounds.group_by("recipe", "seed", "strategy", "setting").agg(pl.col("round").sort())
    assert per_point.height == timed.height
    assert {tuple(r) for r in per_point["round"]} == {tuple(range(sweep_params[key]))
                                                      for key in ("rounds", "figure_rounds")}
    compared = per_point.filter(pl.col("round").list.len() == sweep_params["rounds"])
    full_depth_and_kstar = {("fixed", float(sweep_params["max_loops"])), ("fixed", float(fixed.sort(
        "perplexity", "setting")["setting"][0]))}  # K*: the lowest perplexity
    assert full_depth_and_kstar <= set(zip(compared.filter(pl.col("recipe") == recipe)["strategy"],
                                           compared.filter(pl.col("recipe") == recipe)["setting"], strict=True))
    assert timed["ms_low"].le(timed["ms_per_token"]).all() and timed["ms_per_token"].le(timed["ms_high"]).all()
    assert stacked.filter(pl.col("strategy").is_in(untimed))["ms_per_token"].is_null().all()
    summary = pl.read_csv(first_run / "results/sweep/summary.csv")
    assert summary["strategy"].to_list() == list(sweep_params["strategies"]) * len(smoke_runs(first_run))
    best_fixed = fixed["perplexity"].min()  # K*: the fixed depth with the lowest perplexity
    within = fixed.filter(pl.col("perplexity") <= 1.01 * best_fixed).sort("gflops_per_token")
    own_summary = summary.filter((pl.col("recipe") == recipe) & (pl.col("strategy") == "fixed"))
    assert own_summary["kstar_setting"].item() == within["setting"][0]
    for name in ("fig4_exit_sweep.png", "exit_tradeoff.png", "exit_depth.png", "diagnostics.png"):
        assert (first_run / "results/figures" / name).stat().st_size > 10_000


def test_claims_have_a_verdict_per_recipe_and_every_run_s_rows(first_run, tmp_path_factory):
    claims = json.loads((first_run / "results/claims.json").read_text())
    names, sampler_claims, raptor_claims = ["S", "C1", "C2", "C3", "C4", "C5", "C6", "C6b"], ["C7", "C7b"], ["C8",
                                                                                                         "C8b"]
    assert [row["claim"] for row in claims["summary"]] == names + sampler_claims + raptor_claims
    recipes = list(dict.fromkeys(recipe for recipe, _ in smoke_runs(first_run)))
    teachers = list(dict.fromkeys(teacher for teacher, _ in teacher_runs(first_run)))
    sampled = yaml.safe_load((first_run / "params.yaml").read_text())["sample"]["recipes"]
    for row in claims["summary"]:
        expected = (sampled if row["claim"] in sampler_claims else teachers if row["claim"] in raptor_claims
                    else recipes)
        assert list(row["recipes"]) == expected
    assert [(r["recipe"], r["seed"]) for r in claims["runs"]] == smoke_runs(first_run) + teacher_runs(first_run)
    for r in claims["runs"]:
        expected = (raptor_claims if r["recipe"] in teachers else
                    names + (sampler_claims if r["recipe"] in sampled else []))
        assert [row["claim"] for row in r["rows"]] == expected
    table = (first_run / "results/claims.md").read_text()
    assert "| claim | paper says | " + " | ".join(recipes + teachers) + " |" in table
    assert "not measured" in table.split("| [C7](../docs/claims.md#c7) |")[1].splitlines()[0]  # no injection
    origin = table.split("## What computed these numbers")[1].split("## The tests")[0]
    for recipe, seed in smoke_runs(first_run):
        trained = json.loads((first_run / f"results/train/{recipe}/seed_{seed}/metrics.json").read_text())
        assert f"| {recipe}, seed {seed} | training | {trained['precision']} | {trained['machine']} |" in origin
        assert f"| {recipe}, seed {seed} | loop geometry" in origin and "| float64 |" in origin
    assert [o["computation"] for o in claims["origins"]].count("early-exit timings (C6)") == len(smoke_runs(first_run))
    for teacher, seed in teacher_runs(first_run):
        trained = json.loads((first_run / f"results/train/{teacher}/seed_{seed}/metrics.json").read_text())
        assert f"| {teacher}, seed {seed} | teacher training (C8) | {trained['precision']} | {trained['machine']} |" \
            in origin
        assert f"| {teacher}, seed {seed} | surrogate and control training (C8) | {trained['precision']} |" in origin
    # every table the verdicts read lands beside the report, and the report recomputes from them alone
    recomputed = tmp_path_factory.mktemp("claims")
    tables = first_run / "results/claims_tables"
    assert main(["claims", "--from-tables", str(tables), "--out-dir", str(recomputed)]) == 0
    assert (recomputed / "claims.json").read_bytes() == (first_run / "results/claims.json").read_bytes()


def test_the_distill_stages_write_phases_surrogates_and_their_recovery(first_run):
    """Phases tile the teacher's layers for every k; the recovered fraction in the evaluation is what the saved
    surrogate gives when recomputed here, through the teacher's head, against the unigram baseline counted here."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from twoscale.surrogates.distillation import load_surrogate
    from twoscale.training.batches import held_out_batches
    from twoscale.training.trainer import load_model

    smoke = yaml.safe_load((first_run / "params.yaml").read_text())
    distill, steps = smoke["distill"], smoke["train"]["steps"]
    train_ids = np.load(first_run / "data/prepared/train.npy")
    val_ids = np.load(first_run / "data/prepared/val.npy")
    recovery = pl.read_csv(first_run / "results/surrogates/recovery.csv")
    assert recovery.select("teacher", "seed").unique(maintain_order=True).rows() == teacher_runs(first_run)
    for teacher_name, seed in teacher_runs(first_run):
        out = first_run / f"results/distill/{teacher_name}/seed_{seed}"
        teacher, _ = load_model(first_run / f"results/train/{teacher_name}/seed_{seed}/checkpoints/step_{steps}.pt")
        phases = json.loads((out / "phases.json").read_text())["phases"]
        every_k = sorted(distill["blocks"] + distill["curve_blocks"])  # the smoke set's one seed is explained
        assert sorted(map(int, phases)) == every_k
        for k in every_k:
            assert len(phases[str(k)]) == k and phases[str(k)][0][0] == 0
            assert phases[str(k)][-1][1] == teacher.config.n_layer - 1
            surrogate, _ = load_surrogate(out / f"k_{k}/surrogate.pt")
            losses, targets = [], []
            with torch.no_grad():
                for idx, y in held_out_batches(val_ids, distill["n_windows"], distill["batch_size"],
                                               teacher.config.block_size):
                    state = teacher.embed(idx)
                    for layer in range(teacher.config.n_layer):
                        state = surrogate.step(state, layer)
                    logits = teacher.lm_head(teacher.ln_f(state))
                    losses.append(F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction="none"))
                    targets.append(y.flatten().numpy())
            counts = np.bincount(train_ids, minlength=teacher.config.vocab_size) + 1.0
            unigram = -np.log(counts / counts.sum())[np.concatenate(targets)].mean()
            evaluation = json.loads((out / f"k_{k}/evaluation.json").read_text())
            surrogate_ce = torch.cat(losses).mean().item()
            assert evaluation["surrogate"]["cross_entropy"] == pytest.approx(surrogate_ce, rel=1e-5)
            assert evaluation["unigram_cross_entropy"] == pytest.approx(unigram, rel=1e-9)
            teacher_ce = evaluation["teacher"]["cross_entropy"]
            if unigram > teacher_ce:
                assert evaluation["surrogate"]["recovered"] == pytest.approx(
                    (unigram - surrogate_ce) / (unigram - teacher_ce), rel=1e-5)
            assert len(evaluation["layer_r2"]) == teacher.config.n_layer
            assert (out / f"k_{k}/control.pt").is_file()
    dynamics = pl.read_parquet(first_run / "results/surrogates/dynamics.parquet")
    models = dynamics.select("model", "name", "seed", "blocks").unique(maintain_order=True).rows()
    assert models == [row for name, seed in teacher_runs(first_run) for row in
                      [("teacher", name, seed, None), *[("surrogate", name, seed, k) for k in every_k]]
                      ] + [("looped", recipe, seed, None) for recipe, seed in smoke_runs(first_run)]
    for name in ("surrogate_recovery.png", "depth_dynamics.png"):
        assert (first_run / "results/figures" / name).stat().st_size > 10_000


def test_the_sample_stage_measures_every_setting_on_every_prompt(first_run):
    sample = yaml.safe_load((first_run / "params.yaml").read_text())["sample"]
    settings = len(sample["inner_loops"]) * len(sample["tolerances"]) * len(sample["freezes"])
    for recipe, seed in smoke_runs(first_run):
        out = first_run / f"results/sample/{recipe}/seed_{seed}"
        if recipe not in sample["recipes"]:
            assert not out.exists()
            continue
        rows = pl.read_parquet(out / "sample.parquet")
        assert rows.height == sample["n_prompts"] * (settings + len(sample["baseline_loops"]))
        assert (rows["new_tokens"] == sample["new_tokens"]).all()
        summary = pl.read_csv(out / "summary.csv")
        reference = summary.filter((pl.col("method") == "autoregressive") & (pl.col("loops") == sample["loops"]))
        assert reference["agreement"].to_list() == [1.0] and reference["cross_entropy_gap"].to_list() == [0.0]
        assert reference["distinct_fraction_gap"].to_list() == [0.0] and (summary["gflops_per_token"] > 0).all()
        assert summary.filter(pl.col("method") == "sampler").height == settings
        speed = pl.read_csv(out / "speed.csv")
        timed = speed.group_by("method").agg(pl.col("round").sort()).sort("method")
        assert set(timed["method"]) <= {"full_recurrence", "matched", "sampler"} and timed.height >= 2
        assert all(rounds == list(range(sample["repeats"])) for rounds in timed["round"].to_list())
        assert (first_run / f"results/figures/{recipe}/seed_{seed}/sampler_tradeoff.png").stat().st_size > 10_000


def test_benchmark_prints_a_row_per_strategy_in_both_tables(first_run):
    out = run([sys.executable, "-m", "twoscale", "benchmark", "--repeats", "1", "--training-steps", "2",
               "--out", "bench.json"], first_run)
    report = json.loads((first_run / "bench.json").read_text())
    strategies = list(yaml.safe_load((first_run / "params.yaml").read_text())["sweep"]["strategies"])
    recipes = [recipe for recipe, _ in smoke_runs(first_run)]
    assert [(row["recipe"], row["strategy"]) for row in report["step_costs"]] == [
        (recipe, strategy) for recipe in recipes for strategy in strategies]
    assert [(row["recipe"], row["strategy"]) for row in report["latency"]] == [
        (recipe, strategy) for recipe in recipes for strategy in strategies]
    assert [(row["recipe"], row["precision"]) for row in report["training"]] == [
        (recipe, precision) for recipe in recipes for precision in ("fp32", "bf16")]
    sampled = yaml.safe_load((first_run / "params.yaml").read_text())["sample"]["recipes"]
    methods = ["full_recurrence", "matched", "sampler"]
    threads = sorted({1, os.cpu_count() or 1})
    assert [(row["recipe"], row["threads"], row["method"]) for row in report["sampler"]] == [
        (recipe, n, method) for recipe in sampled for n in threads for method in methods]
    assert all(row["vs_full_recurrence"] == 1 for row in report["sampler"] if row["method"] == methods[0])
    assert "1 thread(s)" in out and sum(line.startswith("| paper | fixed |") for line in out.splitlines()) == 2
    (first_run / "bench.json").unlink()


def test_claims_without_the_sweeps_leave_the_exit_claims_out(first_run, tmp_path):
    """A run whose sweeps did not run (the first GPU run's) draws its claims without C6; --sweep and --latency go
    together."""
    results = first_run / "results"
    claims = [sys.executable, "-m", "twoscale", "claims", "--geometry-dir", str(results / "geometry"),
              "--sample-dir", str(results / "sample"), "--beyond-dir", str(results / "beyond"),
              "--spectrum-dir", str(results / "spectrum"), "--recovery", str(results / "surrogates/recovery.csv")]
    env = environment() | {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}  # not the run's store

    def claims_run(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([*claims, *arguments], cwd=first_run, env=env, capture_output=True, text=True)

    drawn_by = claims_run("--out-dir", str(tmp_path / "out"))
    assert drawn_by.returncode == 0, drawn_by.stderr[-3000:]
    drawn = [row["claim"] for row in json.loads((tmp_path / "out/claims.json").read_text())["summary"]]
    everything = [row["claim"] for row in json.loads((results / "claims.json").read_text())["summary"]]
    assert drawn == [claim for claim in everything if not claim.startswith("C6")] and "C6" in everything
    alone = claims_run("--sweep", str(results / "sweep/sweep.parquet"), "--out-dir", str(tmp_path / "x"))
    assert alone.returncode == 2 and alone.stderr.strip().splitlines()[-1] == (
        "twoscale claims: error: --sweep and --latency go together: give both, or neither (C6 not measured)")
    assert not (tmp_path / "x").exists()


def test_dvc_sees_the_snakemake_results_as_current(first_run):
    assert dvc_changed_stages(first_run) == set()
    assert "Data and pipelines are up to date" in run(["dvc", "status"], first_run)
    assert planned_jobs(first_run) == {}


@pytest.fixture(scope="module")
def committed_run(first_run: Path, tmp_path_factory) -> Path:
    """The smoke run committed to git (what git keeps of it) and pushed to a DVC remote of its own (the rest: model
    weights, token arrays, the corpus), as `make push DVC_REMOTE=<folder>` does; that remote's folder. The root
    .gitignore ignores what DVC's cache keeps, so DVC has written no .gitignore of its own beside the outputs."""
    assert run(["git", "ls-files", "--others", "--exclude-standard", "--", "*.gitignore"], first_run) == ""
    run(["git", "add", "-A"], first_run)
    run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "the smoke run"],
        first_run)
    remote = tmp_path_factory.mktemp("dvc-remote")
    run(["dvc", "remote", "modify", "--local", "store", "url", str(remote)], first_run)
    run(["dvc", "push"], first_run)
    return remote


def dvc_status_stages(repo: Path) -> set[str]:
    """The stages `dvc status` lists (none when it finds the tree clean)."""
    return {line.rstrip(":") for line in run(["dvc", "status"], repo).splitlines() if line.endswith(":")
            and not line[0].isspace()}


def test_a_clone_pulls_the_run_from_a_remote_and_then_plans_nothing_but_what_an_edit_changes(
        first_run, committed_run, tmp_path):
    """A fresh clone lists, before a pull, the stages whose outputs DVC's cache keeps and those that read them;
    `make pull` (dvc pull, then snakemake --touch) gives a tree both orchestrators call current; an edit of the lens
    section then plans the lens jobs, the figure drawn from them and the claims (which record every key), in both."""
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(first_run), str(clone)], tmp_path)
    smoke = read_raw(clone / "params.yaml")
    before = dvc_status_stages(clone)
    assert {"corpus", "tokenize", "train@paper-1337", "distill@plain-1337-2"} <= before  # outputs in the cache
    assert not before & {"claims", "geometry", "tradeoff", "exit_figures"}  # reading tables alone: current
    run(["dvc", "remote", "modify", "--local", "store", "url", str(committed_run)], clone)  # make pull DVC_REMOTE=...
    run(["dvc", "pull"], clone)
    run(["snakemake", "--touch", "--cores", "1", "--quiet", "all"], clone)
    assert dvc_status_stages(clone) == set() and planned_jobs(clone) == {} and plans(clone) == ({}, set())
    raw = yaml.safe_load((clone / "params.yaml").read_text())
    raw["lens"]["n_windows"] += 1
    (clone / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    lens_jobs = len(smoke["runtime"]["explain_seeds"]) * len(smoke["recipes"]) * len(smoke["train"]["checkpoint_steps"])
    assert planned_jobs(clone) == per_stage(declared_reruns(smoke, raw))  # lens, then what reads it
    assert planned_jobs(clone)["lens"] == lens_jobs  # the premise: the edit reaches every lens job
    assert plans(clone)[1] == {"lens", "claims"}  # DVC: the stages whose own parameters changed


def test_a_clone_without_the_dvc_cache_redraws_every_figure_and_the_claims_from_git_alone(first_run, committed_run,
                                                                                         tmp_path):
    """Git keeps every output but model weights, token arrays and the raw corpus (dependencies.IN_DVC_CACHE): the
    smoke run committed, a clone, which has neither DVC's cache nor any output it keeps, reruns every figure stage
    and the claims from what git holds, and they come out byte for byte as committed."""
    smoke = read_raw(first_run / "params.yaml")
    drawn = [stage for stage in jobs.stages(smoke) if stage.name.endswith("_figures") or stage.name == "claims"]
    targets = [path for stage in drawn for path in stage.job_outputs()]
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(first_run), str(clone)], tmp_path)
    assert not (clone / ".dvc/cache").exists()
    outputs = [path for stage in jobs.stages(smoke) for path in stage.job_outputs()]
    assert {path for path in outputs if not (clone / path).is_file()} == {
        path for path in outputs if dependencies.in_dvc_cache(path)}  # git keeps the rest (.gitignore agrees)
    for target in targets:
        (clone / target).unlink()
    rules = sorted({stage.name for stage in drawn})
    run(["snakemake", "--cores", "2", *targets, "--allowed-rules", *rules], clone, TWOSCALE_TRACKING="off")
    assert len(targets) > 20 and all((clone / target).read_bytes() == (first_run / target).read_bytes()
                                     for target in targets)


@contextlib.contextmanager
def source_edited(repo: Path, module: str) -> Iterator[Path]:
    """A comment appended to a source file for a while, then its own bytes and mtime again."""
    path = repo / "src/twoscale" / module
    original, stat = path.read_text(), path.stat()
    path.write_text(original + "\n# edited\n")
    try:
        yield path
    finally:
        path.write_text(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def plans(repo: Path) -> tuple[dict[str, int], set[str]]:
    """What each orchestrator would run now: Snakemake's jobs per rule, and the stages `dvc repro` starts with
    (those whose own dependencies changed; what follows reruns only if their outputs change)."""
    dvc_plan = run(["dvc", "repro", "--dry"], repo)
    return planned_jobs(repo), {line.split("'")[1].split("@")[0] for line in dvc_plan.splitlines()
                                if line.startswith("Running stage '")}


def test_editing_a_module_of_one_stage_reruns_that_stage_and_what_follows_only(first_run):
    """surrogates/recovery.py is imported by the distill stage alone: Snakemake plans the distill jobs and the
    stages after them (surrogates, its figures, the teachers' headline numbers, claims and its page); DVC the
    distill jobs, whose changed outputs, if any, then rerun the stages after them in repro. Nothing else in
    either."""
    with source_edited(first_run, "surrogates/recovery.py"):
        snakemake_plan, dvc_plan = plans(first_run)
    distill = yaml.safe_load((first_run / "params.yaml").read_text())["distill"]
    assert snakemake_plan == {"distill": len(distill["blocks"]), "distill_curve": len(distill["curve_blocks"]),
                              "surrogates": 1, "surrogate_figures": 1, "claims": 1, "claims_page": 1,
                              "headline_teacher": len(teacher_runs(first_run))}
    assert dvc_plan == {"distill", "distill_curve"}
    assert planned_jobs(first_run) == {}


@pytest.mark.parametrize("module, stages", [
    ("exits/figures.py", {"exit_figures"}),  # a figure: the stage that draws it, nothing timed
    ("sampler/figures.py", {"sampler_figures"}),  # the sampler's figure: not the timed sampler
    ("surrogates/figures.py", {"phase_figures", "surrogate_figures"}),  # neither the phases nor the distillations
    ("exits/thresholds.py", {"claims"}),  # a claim's threshold: the claims (and its page), no latency rounds
    ("sampler/thresholds.py", {"claims"}),
    ("exits/claims.py", {"claims"}),  # a claim's wording
    ("config/params.py", set()),  # the plumbing that runs every stage: nothing (scripts/compare_commits.py guards it)
    ("pipeline/records/provenance.py", set()),
])
def test_an_edit_reruns_what_it_changes_in_both_orchestrators(first_run, module, stages):
    """DVC starts with the stages whose sources changed (what follows reruns if their outputs change); Snakemake
    plans them and every job reading what they write (`declared_reruns`)."""
    with source_edited(first_run, module):
        snakemake_plan, dvc_plan = plans(first_run)
    smoke = read_raw(first_run / "params.yaml")
    written = frozenset(path for stage in jobs.stages(smoke) if stage.name in stages for path in stage.job_outputs())
    following = set(per_stage(declared_reruns(smoke, smoke, written)))
    assert set(snakemake_plan) == stages | following and dvc_plan == stages
    assert planned_jobs(first_run) == {}


def test_a_new_stage_module_reruns_nothing(first_run):
    """The entry point finds the stages by their modules: a new one leaves every job's sources as they were."""
    new = first_run / "src/twoscale/stages/hello.py"
    new.write_text('"""Stage `hello`."""\n\nHELP = "say hello"\n\n\n'
                   'def run(args):\n    print("hello")\n')
    try:
        assert plans(first_run) == ({}, set())
    finally:
        new.unlink()


def test_a_newer_checkpoint_plans_what_reads_it_by_mtime(first_run):
    """Snakemake judges files under 1 MB by checksum, so the smoke files show what a newer input reruns with mtimes
    alone, as full-size checkpoints do."""
    smoke = yaml.safe_load((first_run / "params.yaml").read_text())
    first_step = smoke["train"]["checkpoint_steps"][0]
    checkpoint = first_run / f"results/train/paper/seed_1337/checkpoints/step_{first_step}.pt"
    stat = checkpoint.stat()
    os.utime(checkpoint)
    try:
        # surrogates reads the teachers' and recipes' checkpoints; like DVC, its rule names their whole folder
        expected = per_stage(declared_reruns(smoke, smoke, frozenset({str(checkpoint.relative_to(first_run))})))
        assert expected["measure"] == 1 and "train" not in expected  # the premise: a checkpoint's readers only
        assert planned_jobs(first_run, *BY_MTIME) == expected
    finally:
        os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert planned_jobs(first_run, *BY_MTIME) == {}


def test_outputs_rebuilt_byte_for_byte_are_current_after_the_dvc_commit(first_run):
    """A newer input reruns a job whose outputs come out identical to what the DVC cache holds; the commit at the
    end links them to the cache, and they must not look older than their input afterwards."""
    step = read_raw(first_run / "params.yaml")["train"]["checkpoint_steps"][0]  # the smoke run's, not a committed one
    table = f"results/measure/paper/seed_1337/step_{step}/geometry.parquet"
    os.utime(first_run / table)
    smoke = read_raw(first_run / "params.yaml")
    assert planned_jobs(first_run, *BY_MTIME) == per_stage(declared_reruns(smoke, smoke, frozenset({table})))
    before = (first_run / "results/geometry/geometry.parquet").read_bytes()
    run(["snakemake", "--cores", "2", *BY_MTIME], first_run)
    assert (first_run / "results/geometry/geometry.parquet").read_bytes() == before
    assert planned_jobs(first_run, *BY_MTIME) == {}
    assert dvc_changed_stages(first_run) == set()


@contextlib.contextmanager
def params_edited(repo: Path, raw: dict) -> Iterator[None]:
    """params.yaml holding `raw` for a while, then its own bytes again."""
    params = repo / "params.yaml"
    original = params.read_bytes()
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    try:
        yield
    finally:
        params.write_bytes(original)


def planned_with(repo: Path, raw: dict) -> dict[str, int]:
    """What Snakemake would run if params.yaml held `raw`."""
    with params_edited(repo, raw):
        return planned_jobs(repo)


def test_a_parameter_set_with_one_more_seed_runs_only_what_is_new(first_run):
    """How a run grows: one more seed and one strategy's grid changed plan the new seed's jobs, that strategy's jobs
    and the latency rounds (which time every setting of it) for the runs already done, and the stages that gather
    every run; nothing else of the runs already done. The new seed is not among runtime.explain_seeds: it gets the
    stages the verdicts read (distill at distill.blocks only), none that only explain."""
    before = yaml.safe_load((first_run / "params.yaml").read_text())
    raw = copy.deepcopy(before)
    raw["runtime"]["seeds"] = [*raw["runtime"]["seeds"], 99]
    raw["sweep"]["strategies"]["acceleration"]["settings"].insert(1, 1.0e-4)
    plan = planned_with(first_run, raw)
    assert plan == per_stage(declared_reruns(before, raw))
    done = len(before["runtime"]["seeds"])  # the premise: the runs done are planned where the grid changed only
    assert plan["sweep"] == len(raw["recipes"]) * (len(raw["sweep"]["strategies"]) + done)
    assert "spectrum" not in plan and "lens" not in plan  # the new seed explains nothing


def test_a_set_at_more_seeds_takes_the_finished_run_s_jobs_and_plans_only_the_new_seed_s(first_run):
    """`make study`'s way: another parameter set, params.yaml at one more seed (writing under runs/<name>/), takes
    every job the default run built as it would (`twoscale reuse`), so Snakemake plans the new seed's jobs and the
    stages that gather runs; nothing of the first seed runs again. A second reuse takes nothing more."""
    before = yaml.safe_load((first_run / "params.yaml").read_text())
    raw = copy.deepcopy(before)
    raw["runtime"]["seeds"] = [*raw["runtime"]["seeds"], 99]
    (first_run / "configs/more.yaml").write_text(yaml.safe_dump(raw))
    taken = run(["python", "-m", "twoscale", "reuse", "--params", "configs/more.yaml"], first_run)
    assert "took" in taken and "train 2" in taken and "latency 2" in taken and "claims" not in taken
    assert (first_run / "runs/more/results/train/paper/seed_1337/.built").is_dir()
    plan = planned_jobs(first_run, "--configfile", "configs/more.yaml")
    assert plan == per_stage(declared_reruns(before, raw))
    assert plan["train"] == len(raw["recipes"])  # the premise: the new seed's, nothing of the first seed's
    assert "took 0 jobs" in run(["python", "-m", "twoscale", "reuse", "--params", "configs/more.yaml"], first_run)


def test_timing_one_strategy_no_more_reruns_the_latency_rounds_alone(first_run):
    """`timed` is not part of a strategy's quality sweep: flipping it plans the latency rounds and what gathers them."""
    before = yaml.safe_load((first_run / "params.yaml").read_text())
    raw = copy.deepcopy(before)
    raw["sweep"]["strategies"]["kl_rest"]["timed"] = False
    plan = planned_with(first_run, raw)
    assert plan == per_stage(declared_reruns(before, raw))
    assert "sweep" not in plan and plan["latency"] == len(smoke_runs(first_run))


def dvc_graph(repo: Path) -> dict[str, set[str]]:
    """Each DVC stage and the stages that read its outputs, from `dvc dag --dot`."""
    following: dict[str, set[str]] = {}
    for line in run(["dvc", "dag", "--dot"], repo).splitlines():
        if " -> " in line:
            before, after = (name.strip(' ";') for name in line.split(" -> "))
            following.setdefault(before, set()).add(after)
    return following


def dvc_reruns(graph: dict[str, set[str]], changed: set[str]) -> set[str]:
    """What `dvc repro` runs when the stages `changed` (those whose own dependencies changed) and every stage after
    them write new outputs: the changed stages and everything that follows them in the graph."""
    reached, waiting = set(changed), list(changed)
    while waiting:
        for after in graph.get(waiting.pop(), set()) - reached:
            reached.add(after)
            waiting.append(after)
    return reached


def reran_by_dvc(out: str) -> set[str]:
    return {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")}


@pytest.fixture(scope="module")
def after_recipe_change(first_run) -> dict:
    """What each orchestrator plans for a change of one recipe's learning rate (the file then restored): Snakemake
    its jobs, DVC the stages whose own parameters changed and, from its graph, what `dvc repro` reruns after them.
    Then a change of the teacher's learning rate, which DVC reruns (a training and what follows it, far fewer jobs
    than a recipe's change reruns) and Snakemake catches up with."""
    raw = yaml.safe_load((first_run / "params.yaml").read_text())
    recipe_changed = copy.deepcopy(raw)
    recipe_changed["recipes"]["huginn"]["train"]["learning_rate"] = 0.002
    with params_edited(first_run, recipe_changed):
        seen = {"snakemake_plan": planned_jobs(first_run), "dvc_plan": dvc_changed_stages(first_run)}
    seen["dvc_graph"] = dvc_graph(first_run)
    seen["before"], seen["recipe_changed"] = copy.deepcopy(raw), recipe_changed
    raw["teachers"]["plain"]["train"] = {"learning_rate": 0.002}
    seen["teacher_changed"] = copy.deepcopy(raw)
    (first_run / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    seen["teacher_dvc_plan"] = dvc_changed_stages(first_run)
    seen["teacher_dvc_repro"] = run(["dvc", "repro"], first_run)
    run(["snakemake", "--touch", "--cores", "1"], first_run)
    seen["snakemake_after"] = planned_jobs(first_run)
    seen["dvc_after"] = dvc_changed_stages(first_run)
    return seen


@pytest.mark.slow
def test_a_recipe_change_reruns_that_recipe_and_the_gathering_stages_only(after_recipe_change):
    seen = after_recipe_change
    reruns = declared_reruns(seen["before"], seen["recipe_changed"])
    assert seen["snakemake_plan"] == per_stage(reruns)
    assert seen["snakemake_plan"]["train"] == 1 and "train_teacher" not in seen["snakemake_plan"]  # the premise
    # DVC lists the stages whose own parameters changed; those after them follow in repro
    assert seen["dvc_plan"] == set(changed_jobs(seen["before"], seen["recipe_changed"]).values())
    assert dvc_reruns(seen["dvc_graph"], seen["dvc_plan"]) == set(reruns.values())


@pytest.mark.slow
def test_dvc_reruns_a_teacher_s_change_as_its_graph_says_and_snakemake_then_has_nothing_to_do(after_recipe_change):
    """The graph read above, checked against a real `dvc repro`: the teacher's training and what follows it."""
    reran = reran_by_dvc(after_recipe_change["teacher_dvc_repro"])
    assert reran == set(declared_reruns(after_recipe_change["before"], after_recipe_change["teacher_changed"]).values())
    assert "train_teacher@plain-1337" in reran and not any(name.startswith("train@") for name in reran)
    assert reran == dvc_reruns(after_recipe_change["dvc_graph"], after_recipe_change["teacher_dvc_plan"])
    assert after_recipe_change["snakemake_after"] == {}
    assert after_recipe_change["dvc_after"] == set()


@pytest.mark.slow
def test_mlflow_holds_dvc_s_parent_run_with_a_nested_run_per_stage_it_reran(first_run, after_recipe_change):
    """The teacher's change that DVC reran (after_recipe_change): its training, what follows it, and the stages
    gathering every teacher, each a nested run of DVC's parent run, tagged as the workflow's are."""
    client = mlflow.MlflowClient(f"sqlite:///{first_run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("twoscale").experiment_id])
    parent = min((r for r in runs if "mlflow.parentRunId" not in r.data.tags and r.data.tags["orchestrator"] == "dvc"),
                 key=lambda r: r.info.start_time)
    children = jobs_of(runs, parent.info.run_id)
    distill = read_raw(ROOT / "configs/smoke.yaml")["distill"]
    per_teacher = ["train", "training_figures", "phases", "phase_figures", "headline_teacher",
                   *["distill"] * len(distill["blocks"] + distill["curve_blocks"])]
    assert sorted(r.data.tags["stage"] for r in children) == sorted(
        [*per_teacher, "surrogates", "surrogate_figures", "claims", "claims_page"])
    assert {r.data.tags["recipe"] for r in children if r.data.tags["stage"] in per_teacher} == {"plain"}
    assert parent.info.status == "FINISHED"
    assert all(r.info.status == "FINISHED" and {"stage", "git_commit", "params_hash"} <= set(r.data.tags)
               for r in children)


def jobs_of(runs: list, invocation: str) -> list:
    """The stage jobs' runs of one invocation, each nested under the invocation's run of its stage, which is named
    by the stage and ended with the invocation."""
    groups = {r.info.run_id: r for r in runs if r.data.tags.get("mlflow.parentRunId") == invocation}
    assert all(r.info.status == "FINISHED" and "stage" not in r.data.tags for r in groups.values())
    jobs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in groups]
    assert all(groups[r.data.tags["mlflow.parentRunId"]].info.run_name == r.data.tags["stage"] for r in jobs)
    assert {r.data.tags["stage"] for r in jobs} == {r.info.run_name for r in groups.values()}  # none left empty
    return jobs


def test_mlflow_holds_parent_and_nested_runs(first_run):
    mlflow.set_tracking_uri(f"sqlite:///{first_run / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("twoscale")
    runs = client.search_runs([experiment.experiment_id])
    parents = {r.info.run_id: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    children = [r for r in runs if "stage" in r.data.tags]  # the jobs' runs, not their stages' runs
    # each orchestrator's first invocation (Snakemake ran again to rebuild outputs byte for byte)
    by_orchestrator = {r.data.tags["orchestrator"]: r
                       for r in sorted(parents.values(), key=lambda r: r.info.start_time, reverse=True)}
    assert "snakemake" in by_orchestrator
    assert all(r.info.status == "FINISHED" for r in runs)

    snakemake_run = by_orchestrator["snakemake"].info.run_id
    snakemake_children = jobs_of(runs, snakemake_run)
    smoke = read_raw(ROOT / "configs/smoke.yaml")  # the copy's own overlay would read the resolved set as its base
    n_checkpoints = len(smoke["train"]["checkpoint_steps"])
    n_strategies = len(smoke["sweep"]["strategies"])
    per_run = ["train", "training_figures", *["measure", "precision", "spectrum", "lens"] * n_checkpoints, "beyond",
               *["sweep"] * n_strategies, "latency", "headline"]
    gathering = ["geometry", "geometry_figures", "precision_figures", "mechanism_figures", "tradeoff", "exit_figures",
                 "surrogates", "surrogate_figures", "claims", "claims_page"]
    sampled = [run for run in smoke_runs(first_run) if run[0] in smoke["sample"]["recipes"]]
    distilled = len(smoke["distill"]["blocks"]) + len(smoke["distill"]["curve_blocks"])  # distill_curve's tag: distill
    per_teacher = ["train", "training_figures", "phases", "phase_figures", "headline_teacher",
                   *["distill"] * distilled]
    stages = sorted(r.data.tags["stage"] for r in snakemake_children)
    assert stages == sorted(["corpus", "tokenize", *per_run * len(smoke_runs(first_run)), *gathering,
                             *["sample", "sampler_figures"] * len(sampled),
                             *per_teacher * len(teacher_runs(first_run))])
    for child in children:
        assert {"stage", "git_commit", "params_hash", "orchestrator"} <= set(child.data.tags)
        assert child.data.tags["git_commit"] != "unknown"
        if child.data.tags["stage"] in {*per_run, "sample", "sampler_figures", *per_teacher}:
            assert {"recipe", "seed"} <= set(child.data.tags)

    train = next(r for r in snakemake_children
                 if r.data.tags["stage"] == "train" and r.data.tags["recipe"] == "paper")
    curve = client.get_metric_history(train.info.run_id, "train/loss")
    assert [m.step for m in curve] == list(range(1, smoke["train"]["steps"] + 1))
    sent = {m.step: m.timestamp for m in curve}  # while training: the first evaluation's points before the last
    assert sent[smoke["train"]["eval_every"]] < sent[smoke["train"]["steps"]]
    drawing = set(stages_writing_only(".png", ".html"))  # figures and pages, no numbers
    assert {"geometry_figures", "claims_page"} <= drawing and "claims" not in drawing  # the premise
    for child in snakemake_children:  # every stage but those drawing logs the parameter sections it reads
        assert bool(child.data.params) != (child.data.tags["stage"] in drawing), child.data.tags["stage"]
    assert train.data.params["train.learning_rate"] == "0.003"
    assert "final/val_loss" in train.data.metrics
    artifacts = {a.path for a in client.list_artifacts(train.info.run_id)}
    assert "history.csv" in artifacts
    assert client.search_logged_models([experiment.experiment_id],
                                       filter_string=f"source_run_id = '{train.info.run_id}'")

    geometry = next(r for r in snakemake_children if r.data.tags["stage"] == "geometry")
    dlr = client.get_metric_history(geometry.info.run_id, "paper/seed_1337/dlr_median_0_to_1_K10")
    assert sorted(m.step for m in dlr) == smoke["train"]["checkpoint_steps"]  # MLflow step = training step
    drawn = next(r for r in snakemake_children if r.data.tags["stage"] == "geometry_figures")
    figures = {a.path for a in client.list_artifacts(drawn.info.run_id, "figures")}
    assert "figures/fig3a_step_size.png" in figures

    sweeps = {r.data.tags["strategy"]: r for r in snakemake_children
              if r.data.tags["stage"] == "sweep" and r.data.tags["recipe"] == "paper"}
    assert set(sweeps) == set(smoke["sweep"]["strategies"])
    history = client.get_metric_history(sweeps["fixed"].info.run_id, "cross_entropy")
    assert [m.step for m in history] == list(range(len(smoke["sweep"]["strategies"]["fixed"]["settings"])))
    drawn = next(r for r in snakemake_children if r.data.tags["stage"] == "exit_figures")
    figures = {a.path for a in client.list_artifacts(drawn.info.run_id, "figures")}
    assert figures == {"figures/fig4_exit_sweep.png", "figures/exit_tradeoff.png", "figures/exit_depth.png"}


def files_written(repo: Path) -> dict[str, tuple[int, int]]:
    """Every file the default parameter set's run wrote, with its size and mtime."""
    return {str(path.relative_to(repo)): (path.stat().st_size, path.stat().st_mtime_ns)
            for top in ("data", "results", "logs") for path in (repo / top).rglob("*") if path.is_file()}


def test_another_parameter_set_writes_under_its_own_root_and_leaves_the_default_s_alone(first_run):
    """A second parameter file (another validation split) builds its data under runs/<its name>/; every file of the
    default run stays as it was, and neither orchestrator plans anything new for params.yaml afterwards."""
    raw = yaml.safe_load((first_run / "params.yaml").read_text())
    raw["data"]["val_fraction"] = 0.2
    (first_run / "other-split.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    before = files_written(first_run), planned_jobs(first_run), dvc_changed_stages(first_run)
    run(["snakemake", "runs/other-split/data/prepared/stats.json", "--cores", "1", "--configfile", "other-split.yaml"],
        first_run)
    assert json.loads((first_run / "runs/other-split/data/prepared/stats.json").read_text()) != json.loads(
        (first_run / "data/prepared/stats.json").read_text())  # the other split, built where it belongs
    assert (first_run / "runs/other-split/logs/tokenize.log").is_file()
    assert (files_written(first_run), planned_jobs(first_run), dvc_changed_stages(first_run)) == before


def test_data_built_from_other_values_of_params_yaml_is_never_current(first_run):
    """Snakemake builds the data for an edited params.yaml (a different validation split), and only that target, so
    it leaves dvc.lock alone; with the file back as it was, both orchestrators see that data as stale and plan it
    again, with everything trained on it (Snakemake also the corpus, whose recorded parameters differ)."""
    raw = yaml.safe_load((first_run / "params.yaml").read_text())
    raw["data"]["val_fraction"] = 0.2
    with params_edited(first_run, raw):
        out = run(["snakemake", "data/prepared/stats.json", "--cores", "1"], first_run)
    assert "dvc commit skipped: the run built some targets only" in out
    plan = planned_jobs(first_run)
    assert plan["corpus"] == plan["tokenize"] == 1 and plan["train"] == len(smoke_runs(first_run))
    # DVC compares contents: the corpus itself came out the same, the split did not
    assert {"tokenize", "train@huginn-1337"} <= dvc_changed_stages(first_run)


def test_a_failed_corpus_job_fails_again_when_run_again(first_run):
    """params.yaml edited to an empty corpus: the corpus job fails and removes the corpus. Run again, it fails again
    rather than report the previous corpus's results as current, and with the file back as it was the corpus is
    rebuilt first, under both orchestrators."""
    raw = yaml.safe_load((first_run / "params.yaml").read_text())
    raw["data"] |= {"source": "text", "text_files": ["empty.txt"]}
    (first_run / "empty.txt").write_text("")
    with params_edited(first_run, raw):
        for _ in range(2):
            result = attempt(["snakemake", "--cores", "1"], first_run)
            assert result.returncode != 0
            assert "corpus is empty" in result.stdout + result.stderr
            assert not any((first_run / "data/raw" / name).exists() for name in ("corpus.txt", "manifest.json"))
    assert planned_jobs(first_run).get("corpus") == 1
    assert "corpus" in dvc_changed_stages(first_run)


def test_a_training_dvc_runs_that_refuses_its_inputs_leaves_the_files_git_keeps(first_run):
    """DVC removes a stage's outputs before it runs, except those that persist: a training refusing a token array
    that is not the one its record describes leaves its history and metrics (kept in git) as they were, says how to
    rebuild the array, and is planned again. (Last: the checkpoints, in DVC's cache, are gone.)"""
    kept_in_git = [first_run / "results/train/paper/seed_1337" / name for name in ("metrics.json", "history.csv")]
    before = {path: path.read_bytes() for path in kept_in_git}
    prepared = first_run / "data/prepared"
    with swapped(prepared / "train.npy", by=prepared / "val.npy"):
        result = attempt(["dvc", "repro", "--single-item", "train@paper-1337"], first_run)
    assert result.returncode != 0
    assert ("data/prepared/train.npy: not the file its build record describes (changed, or restored without its "
            "record): put the recorded file back, rebuild it (snakemake --cores all; with DVC: dvc repro -f "
            "--downstream tokenize)") in result.stdout + result.stderr
    assert {path: path.read_bytes() for path in kept_in_git} == before
    assert "train@paper-1337" in dvc_changed_stages(first_run)
