"""The README and docs/ are true to the repository: every link resolves inside it, the README's verdicts are those
of the committed claims, and every command they show runs as written (in its dry-run form where running it would
train models)."""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from workspace import ROOT, copy_repository, run

from twoscale.__main__ import main
from twoscale.claims.by_recipe import VERDICTS_MARK, verdict_sources, verdict_table, with_verdict_table

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
BASH_BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
SLURM_TOOLS = {"sacct", "sinfo", "squeue", "scancel", "sbatch"}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@functools.cache
def anchors(document: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)
    return {github_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#+ ", line)}


def links(document: Path) -> list[str]:
    return [target for target in LINK.findall(document.read_text()) if not target.startswith(("http://", "https://"))]


def commands(document: Path) -> list[list[str]]:
    """The commands of a document's bash blocks as argument lists, continuation lines joined, comments dropped."""
    found = []
    for block in BASH_BLOCK.findall(document.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            if words := shlex.split(line, comments=True):
                found.append(words)
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_link_resolves_inside_the_repository(document):
    for target in links(document):
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        assert resolved.is_relative_to(ROOT), f"{document.name} links outside the repository: {target}"
        assert resolved.exists(), f"{document.name} links to a missing file: {target}"
        if anchor:
            assert anchor in anchors(resolved), f"{document.name} links to a missing section: {target}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_nothing_cites_a_document_the_repository_lacks(document):
    assert not re.search(r"SCIENCE|DESIGN\.md|\.\./shared", document.read_text())


def test_the_readme_verdicts_are_those_of_the_committed_claims():
    """The README's tables are what `python -m twoscale readme` writes from the committed claims.json files their
    marks name, the study's first: every registered claim by its title, each recipe's verdict."""
    readme = (ROOT / "README.md").read_text()
    assert verdict_sources(readme) == ["results/study/claims.json", "results/deep/claims.json", "results/claims.json"]
    for source in verdict_sources(readme):
        summary = json.loads((ROOT / source).read_text())["summary"]
        assert with_verdict_table(readme, source, verdict_table(summary)) == readme, "run: python -m twoscale readme"
        # and, read back from the README itself, every cell is the committed verdict (not only what the writer
        # writes)
        table = readme.split(VERDICTS_MARK + source)[1].split("\n\n")[0].splitlines()[1:]
        recipes = [cell.strip(" `") for cell in table[0].strip("|").split("|")][1:]
        committed = {row["claim"]: row["recipes"] for row in summary}
        shown = {re.match(r"\| \[(\w+)\]", row).group(1): [cell.strip() for cell in row.strip("|").split("|")][1:]
                 for row in table[2:]}
        assert shown.keys() == committed.keys()
        for claim, cells in shown.items():
            for recipe, shown_cell in zip(recipes, cells, strict=True):
                entry = committed[claim].get(recipe)
                if entry is None:
                    assert shown_cell == "not measured"
                    continue
                verdict, _, near = shown_cell.partition("; near the line: ")
                assert verdict == entry["verdict"]
                # a number near its line is said with its label, and only then
                assert [n["label"] for n in entry.get("near", [])] == [
                    n["label"] for n in entry.get("near", []) if n["label"] in near]
                assert bool(near) == bool(entry.get("near"))


def test_the_readme_command_rewrites_every_marked_table_and_names_a_missing_source(tmp_path, capsys):
    summary = json.loads((ROOT / "results/claims.json").read_text())["summary"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results/claims.json").write_text(json.dumps({"summary": summary}))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{VERDICTS_MARK}results/claims.json -->\n| old |\n\nend\n")
    assert main(["readme", "--readme", str(readme)]) == 0
    expected = f"# x\n\n{VERDICTS_MARK}results/claims.json -->\n{verdict_table(summary)}\n\nend\n"
    unlinked = functools.partial(re.sub, r"\]\([^)]*\)", "]")  # the links' paths depend on the folder
    assert unlinked(readme.read_text()) == unlinked(expected)
    readme.write_text(f"{VERDICTS_MARK}results/study/claims.json -->\n")
    assert main(["readme", "--readme", str(readme)]) == 2
    assert capsys.readouterr().err.strip().endswith("results/study/claims.json: not found")
    readme.write_text("no mark\n")
    assert main(["readme", "--readme", str(readme)]) == 2
    assert "names a claims.json" in capsys.readouterr().err
    assert readme.read_text() == "no mark\n"


def needs_a_cluster(words: list[str]) -> bool:
    """A command of the cluster path (a Slurm cluster, its executor, the tracking server): tested by the cluster
    tests, `pytest -m cluster`, not on a fresh clone."""
    return (words[0] in SLURM_TOOLS or any("slurm" in word or "mlflow-server" in word for word in words)
            or words[:3] == ["pytest", "-m", "cluster"])


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory) -> Path:
    return copy_repository(tmp_path_factory.mktemp("docs") / "repo", ROOT / "params.yaml")


def as_dry_run(words: list[str]) -> list[str]:
    """The command as a dry run where running it would do the work: Snakemake plans, make prints, DVC reports
    the status of the stages it would reproduce (its own dry run needs the outputs of a finished run), and a GPU kit
    says what it would hold."""
    if words[0] == "snakemake":
        return [*words, "--dry-run", "--quiet", "rules"]
    if words[:2] == ["dvc", "repro"]:
        return ["dvc", "status", *words[2:]]
    if words[0] == "make":
        return ["make", "--dry-run", *words[1:]]
    if words[1:3] == ["scripts/gpu_kit.py", "build"]:
        return [*words, "--dry-run"]
    return words


@pytest.mark.e2e
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_command_of_the_docs_runs_as_written_on_a_fresh_clone(document, fresh_clone):
    for words in commands(document):
        if not needs_a_cluster(words):
            run(as_dry_run(words), fresh_clone)


def test_the_slow_tests_are_those_docs_development_lists():
    """`make test` leaves out the tests marked slow; docs/development.md names each with its time, no more."""
    section = (ROOT / "docs/development.md").read_text().split("### Slow tests")[1].split("\n### ")[0]
    listed = set(re.findall(r"^\| `(tests/[^`]+)` \|", section, re.M))
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow",
                                "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    marked = {line for line in collected.stdout.splitlines() if line.startswith("tests/") and "::" in line}
    assert len(marked) >= 4 and listed == marked  # the premise: some are marked


def test_the_smoke_set_s_job_count_in_the_docs_is_the_workflow_s():
    from twoscale.config.parameter_files import read_raw
    from twoscale.pipeline.declaration.jobs import stages

    jobs = sum(len(stage.jobs()) for stage in stages(read_raw(ROOT / "configs/smoke.yaml")))
    said = [(document.name, int(count)) for document in DOCUMENTS
            for count in re.findall(r"the smoke set's (\d+) jobs", document.read_text().replace("\n", " "))]
    assert said and all(count == jobs for _, count in said), (jobs, said)


def test_what_a_new_recipe_reruns_in_docs_extending_is_what_the_declaration_says():
    import copy

    from planned import declared_reruns, per_stage

    from twoscale.config.parameter_files import read_raw
    from twoscale.pipeline.declaration.dependencies import STAGES

    section = (ROOT / "docs/extending.md").read_text().split("## A recipe", 1)[1].split("\n## ", 1)[0]
    step = section.split("3. **What reruns:**", 1)[1].split("\n4. ", 1)[0]
    named = [name for name in re.findall(r"`(\w+)`", step) if name in STAGES]
    before = read_raw(ROOT / "params.yaml")
    after = copy.deepcopy(before)
    after["recipes"]["mine"] = {"model": {"norm": "sandwich"}, "train": {"learning_rate": 0.001}}
    sampled = copy.deepcopy(after)
    sampled["sample"]["recipes"] = [*after["sample"]["recipes"], "mine"]
    reruns, with_sample = (declared_reruns(before, config) for config in (after, sampled))
    assert set(per_stage(with_sample)) - set(per_stage(reruns)) == {"sample", "sampler_figures"}  # "too if"
    assert set(named) == set(per_stage(with_sample))
    headlines = ("headline", "headline_teacher")
    recipes_rerun = {dict(job).get("recipe") for stage, job in reruns if stage not in headlines} - {None}
    sampled_rerun = {dict(job)["recipe"] for stage, job in with_sample if stage == "sample"}
    assert recipes_rerun == {"mine"} and sampled_rerun == {*before["sample"]["recipes"], "mine"}  # "but for"
    headlines_rerun = {dict(job)["recipe"] for stage, job in reruns if stage in headlines}
    assert headlines_rerun == {*before["recipes"], *before["teachers"], "mine"}  # "every run's"


def test_docs_pipeline_s_stage_table_has_a_row_for_every_declared_stage_and_no_other():
    from twoscale.pipeline.declaration.dependencies import STAGES

    text = (ROOT / "docs/pipeline.md").read_text()
    table = text.split("| stage | command | reads | writes |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.strip().splitlines()[1:]]
    first_column = [name.strip() for name, _ in rows]
    named_beside = {name for _, command in rows for name in re.findall(r"`(\w+)` for", command)}
    assert len(first_column) == len(set(first_column)) and set(first_column) | named_beside == set(STAGES)
