"""scripts/gpu_kit.py and scripts/gpu_call.sh: a set's model stages carried to a node without the workflow's tools,
run there side by side where nothing is timed and nothing waits on another, within a deadline, and finished here.
The node is this CPU (PYTHON names this environment's interpreter); what the kit splits is checked against the
declaration's jobs, an independent route to Snakemake's plan it is read from."""

from __future__ import annotations

import sys
import tarfile

import pytest
import yaml
from workspace import ROOT, attempt, copy_repository, load_script, run

from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration import dependencies, jobs

gpu_kit = load_script("gpu_kit")


def command(module: str, *arguments: str) -> str:
    return f"python -m twoscale.pipeline.preload {module} --params .snakemake/twoscale/params/0123abcd.yaml " + \
        " ".join(arguments)


def job(stage: str, module: str | None = None) -> tuple[str, str]:
    return stage, command(module or stage, "--log", f"{stage}.log")


def test_the_model_stages_go_to_the_node_what_scores_first_and_the_rest_stays_here():
    plan = [job("corpus"), job("tokenize"), job("train"), job("lens"), job("sweep"), job("geometry"),
            job("train_teacher", "train"), job("phases"), job("distill_curve", "distill"), job("distill"),
            job("spectrum"), job("latency"), job("surrogates"), job("claims")]
    on_node, here = gpu_kit.node_order(plan, dependencies.declared_stages())
    # lens and spectrum only explain and nothing on the node reads them; distill_curve only explains too, but
    # surrogates reads the whole distillation folder, so it keeps its place before it
    assert [stage for stage, _ in on_node] == ["train", "sweep", "train_teacher", "phases", "distill_curve", "distill",
                                               "latency", "surrogates", "lens", "spectrum"]
    assert [stage for stage, _ in here] == ["geometry", "claims"]


def test_jobs_share_the_node_unless_one_is_timed_a_training_or_reads_another():
    plan = [job("train"), job("sweep"), job("sweep"), job("measure"), job("sample"), job("sweep"), job("phases"),
            job("distill"), job("latency"), job("lens"), job("spectrum")]
    batches = gpu_kit.side_by_side(plan, dependencies.declared_stages())
    # the sweeps read train's checkpoints; sample and latency are timed; distill reads phases' outputs
    assert [[stage for stage, _ in batch] for batch in batches] == [
        ["train"], ["sweep", "sweep", "measure"], ["sample"], ["sweep", "phases"], ["distill"], ["latency"],
        ["lens", "spectrum"]]
    lines = gpu_kit.kit_lines(batches).splitlines()
    assert lines.count("wait") == len(batches) - 1 and lines[1] == "wait" and lines[2].startswith("sweep\t")


def test_the_check_shares_the_first_batch_that_shares_before_any_timed_job():
    declared = dependencies.declared_stages()

    def placed(*batches: list[str]) -> list[list[str]]:
        with_check = gpu_kit.with_check([[job(stage) for stage in batch] for batch in batches], declared)
        return [[stage for stage, _ in batch] for batch in with_check]

    assert placed(["train"], ["train_teacher"], ["sweep", "measure"], ["latency"]) == \
        [["train"], ["train_teacher"], ["sweep", "measure", "check"], ["latency"]]
    # a timed job decodes from the graphs that the check checks: the check goes before it, alone
    assert placed(["train"], ["sample"], ["sweep"]) == [["train"], ["check"], ["sample"], ["sweep"]]
    assert placed(["train"]) == [["train"], ["check"]]


def test_a_command_runs_by_the_package_with_the_kit_s_parameter_file():
    assert gpu_kit.as_kit_command(command("sweep", "--strategy", "fixed", "--log", "x.log")) == \
        '"$PYTHON" -m twoscale sweep --params .gpukit/params/0123abcd.yaml --strategy fixed --log x.log'
    with pytest.raises(gpu_kit.KitError, match="not a stage's command"):
        gpu_kit.as_kit_command("echo hello")


def test_each_job_of_snakemake_s_plan_is_its_rule_and_command_and_a_rule_without_one_is_left_out():
    dry_run = ("Building DAG of jobs...\nrule distill_curve:\n    jobid: 4\n"
               "Shell command: python -m twoscale.pipeline.preload distill --log a\n\n"
               "localrule all:\n    jobid: 0\nShell command: None\n")
    assert gpu_kit.planned_jobs(dry_run) == [("distill_curve", "python -m twoscale.pipeline.preload distill --log a")]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_kit_runs_on_the_node_within_its_deadline_and_is_finished_here(tmp_path):
    repo = copy_repository(tmp_path / "repo", ROOT / "params.yaml")
    (repo / "configs/kit.yaml").write_text(yaml.safe_dump(
        {"base": "smoke.yaml", "recipes": {"paper": None}, "teachers": {"plain": None}}))
    print(run([sys.executable, "scripts/gpu_kit.py", "build", "--params", "configs/kit.yaml", "--no-packages"], repo))
    kit = repo / ".gpukit"
    commands = [line for line in (kit / "commands.txt").read_text().splitlines() if line != "wait"]

    # what goes to the node: every job of every stage that loads a model, by the declaration
    config = read_raw(repo / "configs/kit.yaml")
    declared = dependencies.declared_stages()
    expected = {stage.name: len(stage.jobs()) for stage in jobs.stages(config) if declared[stage.name].get("gpu")}
    stages = [line.split("\t")[0] for line in commands]
    assert {name: stages.count(name) for name in set(stages) - {"check"}} == {k: v for k, v in expected.items() if v}
    assert stages.count("check") == 1
    finishing = [line.split("\t")[0] for line in (kit / "finish.txt").read_text().splitlines()]
    assert {"geometry", "claims"} <= set(finishing) and not set(finishing) & set(stages)

    late = run(["bash", "scripts/gpu_call.sh"], repo, OUT=str(tmp_path / "late"), PYTHON=sys.executable,
               DEADLINE="0")
    assert "skipped train" in late
    assert (tmp_path / "late/skipped.txt").read_text().splitlines() == commands

    out = tmp_path / "back"
    run(["bash", "scripts/gpu_call.sh"], repo, OUT=str(out), PYTHON=sys.executable)
    rows = [row.split("\t") for row in (out / "stages.tsv").read_text().splitlines()[1:]]
    assert sorted(row[0] for row in rows) == sorted(stages) and all(row[3] == "0" for row in rows)
    assert " passed" in (out / "cuda_check.txt").read_text()  # here the CUDA cases skip; the others pass
    spans = [(stage, int(start), int(start) + int(seconds)) for stage, start, seconds, _ in rows]
    for stage, start, end in spans:  # a timed job or a training shares the node with no other
        if stage != "check" and gpu_kit.runs_alone(stage, declared):
            assert all(other_end <= start or other_start >= end for other_stage, other_start, other_end in spans
                       if (other_stage, other_start, other_end) != (stage, start, end)), stage
    assert any(start < other_end and other_start < end for i, (_, start, end) in enumerate(spans)
               for _, other_start, other_end in spans[i + 1:])  # and some jobs did run side by side
    with tarfile.open(out / "results.tgz") as archive:
        names = archive.getnames()
    assert not [name for name in names if name.endswith(".pt")]
    assert any(name.startswith("results/sweep/") for name in names)

    # a second call on the same node runs nothing that ended well, and still brings everything back
    again = run(["bash", "scripts/gpu_call.sh"], repo, OUT=str(tmp_path / "again"), PYTHON=sys.executable)
    assert again.count(" done before") == len(commands)
    assert (tmp_path / "again/stages.tsv").read_text().count("\n") == 1
    with tarfile.open(tmp_path / "again/results.tgz") as archive:
        assert sorted(archive.getnames()) == sorted(names)
    # one cut short before its last batch: the next runs that batch, and only it
    [noted] = (repo / "runs/kit/.gpukit-done").iterdir()
    last_batch = (kit / "commands.txt").read_text().split("wait\n")[-1].splitlines()
    noted.write_text("".join(f"{line}\n" for line in noted.read_text().splitlines() if line not in last_batch))
    rest = tmp_path / "rest"
    run(["bash", "scripts/gpu_call.sh"], repo, OUT=str(rest), PYTHON=sys.executable)
    assert sorted(row.split("\t")[0] for row in (rest / "stages.tsv").read_text().splitlines()[1:]) == \
        sorted(line.split("\t")[0] for line in last_batch)
    # other code is another fingerprint: nothing was done before
    with (repo / "src/twoscale/__init__.py").open("a") as handle:
        handle.write("\n")
    run(["bash", "scripts/gpu_call.sh"], repo, OUT=str(tmp_path / "changed"), PYTHON=sys.executable, DEADLINE="0")
    assert (tmp_path / "changed/skipped.txt").read_text().splitlines() == commands

    root = repo / "runs/kit"
    for made in ("results", "logs"):  # what the node wrote stays there: only what came back is finished
        run(["rm", "-rf", str(root / made)], repo)
    print(run([sys.executable, "scripts/gpu_kit.py", "finish", "--results", str(out / "results.tgz")], repo))
    claims = (root / "results/claims.md").read_text()
    assert "huginn" in claims and (root / "results/claims.json").is_file()


def test_the_kit_says_what_is_missing_in_one_line(tmp_path):
    called = attempt(["bash", str(ROOT / "scripts/gpu_call.sh")], tmp_path, OUT=str(tmp_path / "out"))
    assert called.returncode == 2 and called.stderr.strip().endswith("no kit (scripts/gpu_kit.py build)")
    finished = attempt([sys.executable, str(ROOT / "scripts/gpu_kit.py"), "finish", "--results", "none.tgz"], tmp_path)
    assert finished.returncode == 2 and finished.stderr.count("\n") == 1 and "build the kit first" in finished.stderr
    built = attempt([sys.executable, str(ROOT / "scripts/gpu_kit.py"), "build", "--params", "nothing.yaml"], tmp_path)
    assert built.returncode == 2 and "nothing.yaml: no such parameter file" in built.stderr
    assert not (tmp_path / ".gpukit").exists()


def test_every_package_the_kit_carries_is_pinned_by_the_lock():
    """The kit carries this environment's versions (importlib.metadata), which are the lock's only when it pins them."""
    lock = (ROOT / "requirements.lock").read_text().lower()
    for name in gpu_kit.NODE_PACKAGES:
        assert f"{name}==" in lock.replace("_", "-"), name

