"""Snakemake's rule files, written from the pipeline's declaration: committed as written, read as rules, their
commands quoted, and another parameter set's jobs under its own root (test_pipeline_agreement checks that the rules
plan exactly DVC's jobs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest

from twoscale.pipeline.declaration import dependencies, snakemake_rules
from twoscale.pipeline.declaration.dependencies import declaration, output_paths
from twoscale.pipeline.declaration.snakemake_rules import RULES_DIR, path_expression, rule_files, writers

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def rule_text(name: str) -> str:
    """The rule as the committed file holds it, from `rule NAME:` to the next rule."""
    for path in (ROOT / RULES_DIR).glob("*.smk"):
        found = re.search(rf"^rule {name}:\n.*?(?=\n\n\nrule |\Z)", path.read_text(), re.S | re.M)
        if found:
            return found.group(0).rstrip("\n") + "\n"
    raise AssertionError(f"no rule {name}")


def shell_command(name: str) -> str:
    """The rule's shell command: its adjacent string literals joined."""
    return "".join(re.findall(r'^        "(.*)"$', rule_text(name).split("    shell:\n")[1], re.M))


def test_the_committed_rule_files_are_the_generated_ones():
    written = rule_files(declaration())
    for path, text in written.items():
        assert (ROOT / path).read_text() == text, f"{path}: run: python -m twoscale workflow"
    committed = {path.relative_to(ROOT).as_posix() for path in (ROOT / RULES_DIR).glob("*.smk")}
    assert committed == {*written, (RULES_DIR / "common.smk").as_posix()}


def test_a_rule_reads_as_a_rule():
    """The sweep rule, written out by hand from its declaration."""
    assert rule_text("sweep") == '''rule sweep:
    input:
        sources("sweep"),
        f"{DATA}/prepared/stats.json",
        checkpoint=f"{RESULTS}/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{config['train']['steps']}.pt",
        data_dir=f"{DATA}/prepared/val.npy",
    output:
        out=f"{RESULTS}/sweep/strategies/{{recipe}}/seed_{{seed}}/{{strategy}}.parquet",
        depth_out=f"{RESULTS}/sweep/strategies/{{recipe}}/seed_{{seed}}/{{strategy}}.depth.parquet",
    params:
        values=param_values("sweep"),
        file=PARAMS_PATH,
        data_dir=lambda wildcards, input: ancestor(input.data_dir, 1),
    log:
        f"{LOGS}/sweep/{{recipe}}/seed_{{seed}}/{{strategy}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sweep/{{recipe}}/seed_{{seed}}/{{strategy}}.tsv"
    threads: config["sweep"]["threads"]
    resources:
        mem_mb=2500,
        runtime=30,
        gpu=GPU_PER_JOB,
    wildcard_constraints:
        recipe=one_of(config["recipes"]),
        seed=one_of(config["runtime"]["seeds"]),
        strategy=one_of(config["sweep"]["strategies"]),
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale.pipeline.preload sweep --params {params.file:q} --recipe {wildcards.recipe:q}"
        " --seed {wildcards.seed:q} --strategy {wildcards.strategy:q} --checkpoint {input.checkpoint:q}"
        " --data-dir {params.data_dir:q} --out {output.out:q} --depth-out {output.depth_out:q} --log {log:q}"
'''


def test_a_folder_input_is_the_output_of_the_rules_writing_inside_it():
    latency, surrogates = rule_text("latency"), rule_text("surrogates")
    # the job's own recipe and seed kept, every strategy of its run
    assert ('strategies_dir=expand(rules.sweep.output, strategy=config["sweep"]["strategies"], allow_missing=True),'
            in latency)
    assert '''
        train_dir=[
            *expand(rules.train.output, recipe=config["recipes"], seed=config["runtime"]["seeds"]),
            *expand(rules.train_teacher.output, recipe=config["teachers"], seed=config["runtime"]["seeds"]),
        ],''' in surrogates
    assert writers("results/train", declaration()) == ["train", "train_teacher"]


def test_paths_are_f_strings_under_the_run_s_root_with_wildcards_and_parameters():
    assert path_expression("results") == "RESULTS"
    assert path_expression("data/prepared/val.npy") == 'f"{DATA}/prepared/val.npy"'
    assert path_expression("logs/measure/${item.recipe}/step_${item.step}.log") == \
        'f"{LOGS}/measure/{{recipe}}/step_{{step}}.log"'
    assert path_expression("results/train/${item.recipe}/step_${train.steps}.pt") == \
        '''f"{RESULTS}/train/{{recipe}}/step_{config['train']['steps']}.pt"'''
    assert path_expression("results/train/${item.recipe}/step_{step}.pt") == '''expand(
    f"{RESULTS}/train/{{recipe}}/step_{{step}}.pt",
    step=config["train"]["checkpoint_steps"],
    allow_missing=True,
)'''


def test_snakemake_s_linter_asks_for_nothing():
    """`snakemake --lint` on the rules: no remark (the folders a command names are functions of the rule's own
    files, which a storage plugin can map)."""
    result = subprocess.run([SNAKEMAKE, "--lint", "--nolock"], cwd=ROOT, capture_output=True, text=True)
    remarks = re.findall(r"^    \* (.*)$", result.stdout + result.stderr, re.M)
    assert result.returncode == 0 and not remarks, remarks
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_a_folder_a_command_names_is_the_ancestor_of_one_of_the_rule_s_files():
    """The folder params as written out by hand: a file of the stage inside the folder, named after the option where
    the command names no file there; of other rules' outputs, the shallowest, however deep the others lie."""
    tradeoff, surrogates = rule_text("tradeoff"), rule_text("surrogates")
    assert 'out_dir=f"{RESULTS}/sweep/sweep.parquet",' in tradeoff
    assert "out_dir=lambda wildcards, output: ancestor(output.out_dir, 1)," in tradeoff
    # a folder input: the folder itself where the parameter set's jobs write nothing there (configs/gpu-quick.yaml
    # has no teachers, so surrogates reads an empty distill folder)
    assert ('strategies_dir=lambda wildcards, input: ancestor(input.strategies_dir, 3, '
            'empty=f"{RESULTS}/sweep/strategies"),') in tradeoff
    # results/train/<recipe>/seed_<seed>/metrics.json, not the checkpoints/step_<step>.pt one folder deeper
    assert ('train_dir=lambda wildcards, input: ancestor(input.train_dir, 3, empty=f"{RESULTS}/train"),'
            in surrogates)
    assert ('strategies_dir=lambda wildcards, input: ancestor(input.strategies_dir, 1, '
            'empty=f"{RESULTS}/sweep/strategies/{{recipe}}/seed_{{seed}}".format(**wildcards)),'
            in rule_text("latency"))


def test_a_folder_input_stands_for_whole_stages_only():
    declared = {"a": {"outs": ["results/x/one.csv", "results/y.csv"]}}
    with pytest.raises(ValueError, match="writes inside results/x and outside it"):
        writers("results/x", declared)


def test_a_stage_of_no_known_system_is_refused():
    declared = declaration()
    declared["corpus"]["system"] = "telepathy"
    with pytest.raises(ValueError, match="telepathy"):
        rule_files(declared)


def test_every_value_a_command_names_is_shell_quoted():
    for name in declaration():
        placeholders = re.findall(r"\{[^}]*\}", shell_command(name))
        assert placeholders and all(p.endswith(":q}") for p in placeholders), name


def test_a_name_that_reaches_the_shell_runs_nothing(tmp_path):
    """The sweep command formatted as Snakemake formats it, for a strategy named like a command substitution, run
    by bash with the stage replaced by printf: the name arrives as one literal argument and nothing is executed."""
    from snakemake.utils import format as snakemake_format

    hostile = "x$(touch PWNED)`touch PWNED2`;touch PWNED3"
    shell = shell_command("sweep").replace("python -m twoscale.pipeline.preload sweep", "printf '%s\\n'")
    command = snakemake_format(
        shell, wildcards=SimpleNamespace(recipe="paper", seed="1", strategy=hostile),
        params=SimpleNamespace(file=Path("my params.yaml"), data_dir="data/prepared"),
        input=SimpleNamespace(checkpoint="results/train/paper/seed_1/checkpoints/step_40.pt"),
        output=SimpleNamespace(out=f"results/sweep/strategies/paper/seed_1/{hostile}.parquet",
                               depth_out=f"results/sweep/strategies/paper/seed_1/{hostile}.depth.parquet"),
        log="logs/a b.log")
    printed = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert list(tmp_path.iterdir()) == []
    arguments = printed.stdout.splitlines()
    assert arguments[arguments.index("--strategy") + 1] == hostile
    folder = "results/sweep/strategies/paper/seed_1"
    assert arguments[arguments.index("--out") + 1] == f"{folder}/{hostile}.parquet"
    assert arguments[arguments.index("--depth-out") + 1] == f"{folder}/{hostile}.depth.parquet"
    assert arguments[arguments.index("--params") + 1] == "my params.yaml"
    assert arguments[arguments.index("--log") + 1] == "logs/a b.log"


def test_another_parameter_set_reads_and_writes_under_its_root():
    """A forced dry run of configs/smoke.yaml: every file a job reads, writes or logs to, and every path its command
    names, lies under runs/smoke/, but the stages' source files, the run's parameter snapshot and the repository
    file a stage reads for every set (its reference: the committed study)."""
    references = {stage["reference"] for stage in dependencies.declared_stages().values() if "reference" in stage}
    assert references == {"results/study/claims.json"}
    result = subprocess.run([SNAKEMAKE, "--forceall", "--dry-run", "--quiet", "progress", "--printshellcmds",
                             "--nolock", "--cores", "1", "--configfile", "configs/smoke.yaml"],
                            cwd=ROOT, capture_output=True, text=True,
                            check=True)
    blocks = re.split(r"^(?:local)?rule ", result.stdout, flags=re.M)[1:]
    assert len(blocks) > 20
    for block in blocks:
        if block.startswith("all:"):
            continue
        files = [path for field in re.findall(r"^    (?:input|output|log): (.*)$", block, re.M)
                 for path in field.split(", ") if not path.startswith("src/") and path not in references]
        words = re.search(r"^Shell command: (.*)$", block, re.M).group(1).split()
        named = [value for option, value in zip(words, words[1:]) if option.startswith("--")
                 and option not in ("--params", "--recipe", "--seed", "--strategy", "--blocks")]
        assert files and named, block
        assert all(path.startswith("runs/smoke/") for path in [*files, *named]), block


def test_every_output_in_the_report_has_a_caption_of_its_own_and_every_caption_an_output():
    shown = {stage: entry["report"]["files"] for stage, entry in declaration().items() if "report" in entry}
    by_caption = {}  # a caption says what one kind of output shows (train and train_teacher both write history.csv)
    for files in shown.values():
        for name, caption in files.items():
            assert by_caption.setdefault(caption, name) == name, f"{caption} serves {name} and {by_caption[caption]}"
    captions = list(by_caption)
    outputs = {PurePosixPath(path).name for entry in declaration().values() for path in output_paths(entry)}
    for stage, files in shown.items():
        assert set(files) <= outputs, f"{stage}: its report names a file no stage writes"
    report = ROOT / "workflow/report"
    assert {path.name for path in report.glob("*.rst")} == {*captions, "workflow.rst"}
    for caption in captions:  # what it shows, then how to read it: a few sentences, not a page
        words = len((report / caption).read_text().split())
        assert 30 <= words <= 130, f"{caption}: {words} words"
    assert rule_text("geometry_figures").count('caption="../report/') == len(shown["geometry_figures"])


def test_the_report_lists_each_output_by_its_caption_s_title_beside_its_labels():
    assert 'labels={"title": "Figure 1: one token\'s path through every loop of every group"},' in rule_text(
        "geometry_figures")
    assert 'labels={"title": "Loss during training of one run", "recipe": "{recipe}", "seed": "{seed}"},' in (
        rule_text("training_figures"))
    assert 'labels={"title": "The claims"},' in rule_text("claims_page")
    shown = sum(len(entry["report"]["files"]) for entry in declaration().values() if "report" in entry)
    assert sum(text.count("labels={\"title\": ") for text in rule_files(declaration()).values()) == shown


def test_every_data_plot_dvc_draws_names_its_axes():
    """A table declared as a plot without x and y is drawn by `dvc plots show` as a column against the row number;
    images need none."""
    declared = [entry for stage in declaration().values() for entry in stage.get("plots", [])]
    data = [entry for entry in declared
            if not PurePosixPath(entry if isinstance(entry, str) else next(iter(entry))).suffix == ".png"]
    assert data  # the premise: some tables are plots
    assert [entry for entry in data if isinstance(entry, str) or not {"x", "y"} <= set(next(iter(entry.values())))
            ] == []


def test_a_caption_that_does_not_open_with_a_bold_title_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(snakemake_rules, "CAPTIONS", tmp_path)
    (tmp_path / "plain.rst").write_text("A caption without a title. It says what the figure shows.")
    (tmp_path / "titled.rst").write_text("**What it shows.** And how to read it, with **bold** later.")
    assert snakemake_rules.caption_title("titled.rst") == "What it shows"
    with pytest.raises(ValueError, match="workflow/report/plain.rst: a caption opens with its output's title"):
        snakemake_rules.caption_title("plain.rst")
