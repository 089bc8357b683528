"""Build records: each output lands with a record of the job and parameter values that built it and of its content;
a stage refuses, in one line, an input that is not the file its record describes or was built from parameters other
than those in force. Hashes are recomputed here with hashlib; parameter values are picked from the file by hand."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from records import digest_by_hand, digested

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import outputs_land_together, write_text
from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration.dependencies import declaration, input_options
from twoscale.pipeline.records import provenance
from twoscale.pipeline.records.provenance import Job, check_inputs, job_of, record_path, write_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config() -> dict:
    return read_raw(ROOT / "configs/smoke.yaml")


MEASURE = Job("measure", {"recipe": "paper", "seed": 1337})


def measured(folder: Path, config: dict, job: Job = MEASURE, text: str = "rows\n") -> Path:
    """A measure output written as a stage writes it: landing with its record."""
    output = folder / "measure/paper/seed_1337/step_40/geometry.parquet"
    with outputs_land_together(lambda outputs: write_records(outputs, job, config,
                                                             {str(folder / "in.pt"): "ab" * 32})):
        write_text(output, text)
    return output


def geometry_args(folder: Path) -> SimpleNamespace:
    return SimpleNamespace(measure_dir=folder / "measure")


@pytest.mark.parametrize(("stage", "options"), [
    ("corpus", ()),
    ("tokenize", ("--corpus-dir",)),
    ("train", ("--data-dir",)),
    ("measure", ("--checkpoint", "--train-metrics", "--data-dir")),
    ("geometry", ("--measure-dir",)),
    ("latency", ("--checkpoint", "--data-dir", "--strategies-dir")),
    ("tradeoff", ("--strategies-dir", "--latency-dir")),
    ("claims", ("--geometry-dir", "--sweep", "--latency", "--sample-dir", "--beyond-dir", "--spectrum-dir",
                "--recovery")),
    ("beyond", ("--checkpoint", "--data-dir")),
])
def test_the_options_that_name_what_a_stage_reads(stage, options):
    assert tuple(input_options(stage)) == options


def test_every_declared_input_lies_under_an_input_option_of_its_command():
    for name, stage in declaration().items():
        words = stage["cmd"].split()
        values = [value for option, value in zip(words, words[1:]) if option in input_options(name)]
        for path in stage["inputs"]:
            assert any(path == value or path.startswith(value + "/") for value in values), (name, path)


def test_an_output_lands_with_its_record(tmp_path, config):
    output = measured(tmp_path, config)
    record = json.loads(record_path(output).read_text())
    assert record_path(output) == output.parent / ".built" / "geometry.parquet.json"
    digest = hashlib.sha256(b"rows\n").hexdigest()
    assert (record["sha256"], record["size"]) == (digest, 5)
    cache = output.parent / ".built" / "geometry.parquet.stat"  # the hash for this size and mtime, outside the record
    assert cache.read_text().startswith(f"5 {output.stat().st_mtime_ns} {output.stat().st_ino} ")
    assert cache.read_text().split()[-2] == digest  # then this user's signature of it
    assert record["stage"] == "measure" and record["job"] == {"recipe": "paper", "seed": 1337}
    measure = ("threads", "n_sequences", "batch_size", "max_loops", "loss_loops", "beyond_loops", "n_phases",
               "trajectory_token")
    assert record["params"] == {"runtime.device": config["runtime"]["device"], "train.steps": config["train"]["steps"],
                                **{f"measure.{key}": config["measure"][key] for key in measure}}
    assert record["inputs"] == {"../../../../in.pt": "ab" * 32}  # from the output's folder, whatever the cwd
    assert record["digest"] == digest_by_hand(record)


def test_a_landed_output_is_not_hashed_again_when_read(tmp_path, config, monkeypatch):
    output = measured(tmp_path, config)
    hashed = []
    monkeypatch.setattr(provenance, "sha256_file", lambda path: hashed.append(path) or "")
    assert check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml")) == {
        str(output): hashlib.sha256(b"rows\n").hexdigest()}
    assert hashed == []  # the hash cache written when it landed still holds


def test_a_failed_stage_leaves_neither_output_nor_record(tmp_path, config):
    output = tmp_path / "out.json"
    with pytest.raises(RuntimeError), outputs_land_together(lambda outputs: write_records(outputs, MEASURE, config,
                                                                                          {})):
        write_text(output, "x")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []


def test_an_input_built_from_the_parameters_in_force_is_read(tmp_path, config):
    output = measured(tmp_path, config)
    assert check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml")) == {
        str(output): hashlib.sha256(b"rows\n").hexdigest()}


def test_an_input_built_from_other_parameters_is_refused_naming_the_keys(tmp_path, config):
    measured(tmp_path, config)
    edited = copy.deepcopy(config)
    edited["measure"]["max_loops"] += 1
    with pytest.raises(TwoscaleError) as refused:
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), edited, Path("p.yaml"))
    assert str(refused.value) == (f"{tmp_path}/measure/paper/seed_1337/step_40/geometry.parquet: built from other "
                                  "parameters than p.yaml holds (measure.max_loops): rebuild it (snakemake --cores "
                                  "all)")  # outside the checkout's layout: no DVC stage writes it


def test_an_infinite_setting_is_compared_as_written(tmp_path, config):
    """The record's strict JSON holds an infinite setting as null; the check still tells inf from another value."""
    config["sweep"]["strategies"]["kl_rest"]["settings"][-1] = float("inf")
    job = Job("sweep", {"recipe": "paper", "seed": 1337, "strategy": "kl_rest"})
    output = tmp_path / "paper/seed_1337/kl_rest.parquet"
    with outputs_land_together(lambda outputs: write_records(outputs, job, config, {})):
        write_text(output, "rows")
    args = SimpleNamespace(strategies_dir=tmp_path, latency_dir=None)
    assert check_inputs(Job("tradeoff", {}), args, config, Path("p.yaml"))
    config["sweep"]["strategies"]["kl_rest"]["settings"][-1] = 1e300
    with pytest.raises(TwoscaleError, match=r"\(sweep.strategies.kl_rest.settings\)"):
        check_inputs(Job("tradeoff", {}), args, config, Path("p.yaml"))


def test_an_input_replaced_since_it_was_built_is_refused(tmp_path, config):
    output = measured(tmp_path, config)
    output.write_text("ROWS\n")  # same size, other content
    with pytest.raises(TwoscaleError, match=r"geometry.parquet: not the file its build record describes \(changed, "
                                            r"or restored without its record\): put the recorded file back, rebuild it "
                                            r"\(snakemake --cores all\), "
                                            r"or delete .*/\.built/"
                                            r"geometry\.parquet\.json to read it unchecked"):
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


def test_an_input_only_touched_is_still_the_file_recorded(tmp_path, config):
    output = measured(tmp_path, config)
    os.utime(output, ns=(1, 1))  # a checkout or `snakemake --touch`: the content is hashed again, and matches
    assert check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))
    assert (output.parent / ".built/geometry.parquet.stat").read_text().startswith("5 1 ")  # cached again


def test_a_hash_cache_rewritten_by_hand_for_an_edited_file_is_not_believed(tmp_path, config):
    """A byte changed in a table, its hash cache rewritten with the file's new stamp and the old hash: the cache is
    signed with this user's key, so the file is hashed again and refused; a cache that is not signed is as none."""
    output = measured(tmp_path, config)
    cache = output.parent / ".built/geometry.parquet.stat"
    old_hash = cache.read_text().split()[-2]
    output.write_text("ROWS\n")
    found = output.stat()
    forged = f"{found.st_size} {found.st_mtime_ns} {found.st_ino} {found.st_ctime_ns} {old_hash}"
    for signature in ("", " " + "0" * 64):
        cache.write_text(forged + signature)
        assert provenance.current_hash(output) == hashlib.sha256(b"ROWS\n").hexdigest()
        with pytest.raises(TwoscaleError, match="not the file its build record describes"):
            check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


def test_a_record_is_the_same_for_an_output_rebuilt_byte_for_byte(tmp_path, config):
    """DVC hashes the records in the folders it tracks: a rebuild of the same bytes must not change them."""
    first = record_path(measured(tmp_path, config)).read_bytes()
    os.utime(tmp_path / "measure/paper/seed_1337/step_40/geometry.parquet", ns=(1, 1))
    assert record_path(measured(tmp_path, config)).read_bytes() == first


def test_outputs_of_jobs_the_parameters_no_longer_have_are_not_read(tmp_path, config):
    """A gathering stage reads the outputs of the jobs in force only: those of a seed or recipe taken out (or of
    a step no longer among the checkpoints) are left alone, whatever they were built from."""
    measured(tmp_path, config)
    edited = copy.deepcopy(config)
    edited["measure"]["max_loops"] += 1
    for change in ({"runtime": {**edited["runtime"], "seeds": [7], "explain_seeds": [7]}},
                   {"recipes": {"huginn": edited["recipes"]["huginn"]}, "sample": {**edited["sample"],
                                                                                     "recipes": ["huginn"]}},
                   {"train": {**edited["train"], "checkpoint_steps": [5, 10, 20]}}):
        assert check_inputs(Job("geometry", {}), geometry_args(tmp_path), edited | change, Path("p.yaml")) == {}


def test_a_folder_of_the_job_s_own_run_is_checked_file_by_file(tmp_path, config):
    """latency reads its run's sweep tables through a folder named with the run's recipe and seed: a table built
    from a strategy's other settings is refused, and another run's folder is not this job's to read."""
    table = tmp_path / "strategies/paper/seed_1337/fixed.parquet"
    sweep = Job("sweep", {"recipe": "paper", "seed": 1337, "strategy": "fixed"})
    with outputs_land_together(lambda outputs: write_records(outputs, sweep, config, {})):
        write_text(table, "rows\n")
    args = SimpleNamespace(checkpoint=None, data_dir=None, strategies_dir=table.parent)
    latency = Job("latency", {"recipe": "paper", "seed": 1337})
    assert check_inputs(latency, args, config, Path("p.yaml")) == {
        str(table): hashlib.sha256(b"rows\n").hexdigest()}
    config["sweep"]["strategies"]["fixed"]["settings"] = [1, 2]
    with pytest.raises(TwoscaleError, match=r"fixed.parquet: built from other parameters than p.yaml holds "
                                            r"\(sweep.strategies.fixed.settings\)"):
        check_inputs(latency, args, config, Path("p.yaml"))


def test_a_file_named_that_a_job_of_other_parameters_built_is_refused(tmp_path, config):
    checkpoint = tmp_path / "step_40.pt"
    train = Job("train", {"recipe": "paper", "seed": 1337})
    with outputs_land_together(lambda outputs: write_records(outputs, train, config, {})):
        write_text(checkpoint, "weights")
    args = SimpleNamespace(checkpoint=checkpoint, train_metrics=None, data_dir=None)
    config["runtime"]["seeds"] = config["runtime"]["explain_seeds"] = [7]
    with pytest.raises(TwoscaleError, match=r"step_40.pt: built by a train job \({'recipe': 'paper', 'seed': 1337}\) "
                                            "that p.yaml does not have: give a file of this parameter set's run, or "
                                            r"delete .*step_40.pt.json to read it unchecked"):
        check_inputs(Job("measure", {"recipe": "paper", "seed": 7}), args, config, Path("p.yaml"))


def upstream(folder: Path, config: dict) -> tuple[Path, Path]:
    """A checkpoint as train lands it, and a measure output built from it."""
    checkpoint = folder / "step_40.pt"
    train = Job("train", {"recipe": "paper", "seed": 1337})
    with outputs_land_together(lambda outputs: write_records(outputs, train, config, {})):
        write_text(checkpoint, "weights")
    output = folder / "measure/paper/seed_1337/step_40/geometry.parquet"
    built_from = {str(checkpoint): hashlib.sha256(b"weights").hexdigest()}
    with outputs_land_together(lambda outputs: write_records(outputs, MEASURE, config, built_from)):
        write_text(output, "rows\n")
    return checkpoint, output


def test_what_an_input_was_built_from_is_checked_too(tmp_path, config):
    """The measurements were built from a checkpoint trained with another model: measure's own keys did not
    change, its checkpoint's did, so the gathering stage refuses, naming the checkpoint."""
    checkpoint, output = upstream(tmp_path, config)
    edited = copy.deepcopy(config)
    edited["model"]["dropout"] = 0.5
    with pytest.raises(TwoscaleError) as refused:
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), edited, Path("p.yaml"))
    assert str(refused.value) == (f"{checkpoint}: built from other parameters than p.yaml holds (model.dropout) "
                                  f"({output} was built from it): rebuild it (snakemake --cores all)")


def test_an_input_built_from_a_file_since_rebuilt_is_refused(tmp_path, config):
    checkpoint, output = upstream(tmp_path, config)
    train = Job("train", {"recipe": "paper", "seed": 1337})
    with outputs_land_together(lambda outputs: write_records(outputs, train, config, {})):
        write_text(checkpoint, "weights, trained again")  # its record is right; the measurement is not
    with pytest.raises(TwoscaleError, match=f"{output}: built from another {checkpoint} than the one there now"):
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


def test_a_file_without_a_record_is_read_unchecked(tmp_path, config):
    checkpoint = tmp_path / "step_40.pt"
    checkpoint.write_bytes(b"weights")
    args = SimpleNamespace(checkpoint=checkpoint, train_metrics=None, data_dir=tmp_path / "no-such-folder")
    assert check_inputs(MEASURE, args, config, Path("p.yaml")) == {
        str(checkpoint): hashlib.sha256(b"weights").hexdigest()}


@pytest.mark.parametrize("corrupt", ["{", '"text"', {"inputs": ["a"]}, {"job": "paper"}, {"stage": ["measure"]},
                                     {"job": {"recipe": ["paper"]}}, {"inputs": {"a": 1}}])
def test_a_corrupt_record_is_one_line_naming_it(tmp_path, config, corrupt):
    output = measured(tmp_path, config)
    if isinstance(corrupt, dict):
        corrupt = json.dumps(json.loads(record_path(output).read_text()) | corrupt)
    record_path(output).write_text(corrupt)
    with pytest.raises(TwoscaleError, match=r"\.built/geometry\.parquet\.json: not a readable build record"):
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


def test_records_that_say_a_file_was_built_from_itself_are_one_line(tmp_path, config):
    output = measured(tmp_path, config)
    record = json.loads(record_path(output).read_text())
    record["inputs"] = {"geometry.parquet": record["sha256"]}
    record_path(output).write_text(json.dumps(digested(record)))
    with pytest.raises(TwoscaleError, match="built from itself"):
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


@pytest.mark.parametrize("edit", ["parameter", "hash", "digest removed"])
def test_a_record_edited_by_hand_is_refused_in_one_line(tmp_path, config, edit):
    """The issue's probe: measure.n_sequences edited in a record, so that a job built with other values passes for
    one of the parameters in force; likewise a hash put in to match an edited file, or the digest taken out."""
    output = measured(tmp_path, config)
    record = json.loads(record_path(output).read_text())
    if edit == "parameter":
        record["params"]["measure.n_sequences"] += 1
    elif edit == "hash":
        output.write_text("edited rows\n")
        record["sha256"], record["size"] = hashlib.sha256(b"edited rows\n").hexdigest(), 12
    else:
        del record["digest"]
    record_path(output).write_text(json.dumps(record))
    with pytest.raises(TwoscaleError, match=r"^\S+/\.built/geometry\.parquet\.json: a build record that does not "
                                            r"match its digest .*: remove it and rebuild what it describes$"):
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


def test_a_value_written_another_way_is_the_same_value(tmp_path, config):
    """0.0 edited to 0 (or 10 to 10.0): the orchestrators compare values, and so does the check."""
    measured(tmp_path, config)
    edited = copy.deepcopy(config)
    edited["measure"]["max_loops"] = float(edited["measure"]["max_loops"])
    assert check_inputs(Job("geometry", {}), geometry_args(tmp_path), edited, Path("p.yaml"))


def test_content_changed_under_the_same_size_and_mtime_is_seen(tmp_path, config):
    output = measured(tmp_path, config)
    check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))  # hash cached
    mtime = output.stat().st_mtime_ns
    output.write_text("ROWS\n")
    os.utime(output, ns=(mtime, mtime))  # as `cp -p` or `touch -r` would leave it
    with pytest.raises(TwoscaleError, match="not the file its build record describes"):
        check_inputs(Job("geometry", {}), geometry_args(tmp_path), config, Path("p.yaml"))


def test_a_job_belongs_to_the_stage_whose_matrix_holds_it(config):
    """train_teacher and distill_curve run the train and distill stage modules: the job's recipe, seed and k say
    which declared stage it is."""
    teacher = next(iter(config["teachers"]))
    assert job_of("train", SimpleNamespace(recipe=teacher, seed=1337), config) == Job(
        "train_teacher", {"recipe": teacher, "seed": 1337})
    assert job_of("train", SimpleNamespace(recipe="paper", seed=1337), config).stage == "train"
    config["runtime"]["seeds"] = [1337, 7]
    curve, scored = config["distill"]["curve_blocks"][0], config["distill"]["blocks"][0]
    assert job_of("distill", SimpleNamespace(recipe=teacher, seed=1337, blocks=curve), config).stage == "distill_curve"
    assert job_of("distill", SimpleNamespace(recipe=teacher, seed=7, blocks=scored), config).stage == "distill"
    assert Job("distill_curve", {"recipe": teacher, "seed": 7, "blocks": curve}).params(config) is None  # not explained
    assert job_of("benchmark", SimpleNamespace(recipe=None), config) is None


def test_a_stage_run_by_hand_refuses_an_input_of_other_parameters_and_writes_nothing(tmp_path, config):
    measured(tmp_path, config)
    config["measure"]["max_loops"] += 1
    params = tmp_path / "edited.yaml"
    params.write_text(yaml.safe_dump(config))
    result = subprocess.run([sys.executable, "-m", "twoscale", "geometry", "--params", str(params), "--measure-dir",
                             str(tmp_path / "measure"), "--out-dir", str(tmp_path / "out")], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"twoscale geometry: error: {tmp_path}/measure/paper/seed_1337/step_40/geometry.parquet: built from other "
        f"parameters than {params} holds (measure.max_loops): rebuild it (snakemake --cores all)"]
    assert not (tmp_path / "out").exists()


def test_what_a_job_writes_where_its_command_says_is_every_output_the_orchestrators_give_it(config):
    """For one job of every stage, its command line as the declaration writes it: the outputs `files_written` finds
    from its output options (what the stage's next run recovers and clears) are the job's outputs in the plan of
    both orchestrators (jobs.stages), each with its build record and hash cache."""
    from twoscale.pipeline.declaration.jobs import ITEM, stages

    planned = {stage.name: stage for stage in stages(config)}
    for name, declared in declaration().items():
        stage = planned[name]
        if not stage.jobs():
            continue
        wildcards = stage.jobs()[0]
        words = ITEM.sub(lambda found, job=wildcards: job[found.group(1)], declared["cmd"]).split()
        start = next(i for i, word in enumerate(words) if word.startswith("--"))
        given = {option.removeprefix("--").replace("-", "_"): value
                 for option, value in zip(words[start::2], words[start + 1::2])}
        args = SimpleNamespace(**{key: value if key in provenance.JOB_KEYS else Path(value)
                                  for key, value in given.items()})
        for key in set(provenance.JOB_KEYS) & set(given):
            setattr(args, key, int(given[key]) if key in ("seed", "blocks") else given[key])
        job = job_of(provenance.stage_module(name), args, config)
        written = provenance.files_written(job, args, config)
        outputs = [Path(path.format(**wildcards)) for path in stage.outputs]
        assert sorted(written) == sorted([*outputs, *map(record_path, outputs),
                                          *(path.parent / ".built" / f"{path.name}.stat" for path in outputs)]), name



def test_a_refusal_names_the_dvc_stage_that_rebuilds_the_file(config, monkeypatch):
    """In the checkout's layout, the stage DVC would force: its name, then its matrix values in the matrix's order
    (as dvc.lock names them); elsewhere, none."""
    from twoscale.pipeline.records.provenance import dvc_stage, rebuild

    monkeypatch.chdir(ROOT)
    assert dvc_stage(Path("data/prepared/train.npy"), config) == "tokenize"
    assert dvc_stage(ROOT / "results/train/huginn/seed_1337/checkpoints/step_40.pt", config) == "train@huginn-1337"
    assert dvc_stage(Path("results/measure/paper/seed_1337/step_10/summary.json"), config) == "measure@paper-1337-10"
    assert dvc_stage(Path("results/sweep/strategies/paper/seed_1337/kl_rest.parquet"), config) == (
        "sweep@paper-1337-kl_rest")
    assert dvc_stage(Path("elsewhere/train.npy"), config) is None
    assert rebuild(Path("data/prepared/train.npy"), config) == (
        "rebuild it (snakemake --cores all; with DVC: dvc repro -f --downstream tokenize)")
    assert all(stage.split("@")[0] in declaration() for stage in yaml.safe_load((ROOT / "dvc.lock").read_text())[
        "stages"])  # the names dvc.lock uses have the same form


def test_the_committed_study_read_as_a_reference_is_hashed_not_checked_against_the_parameters(tmp_path, config,
                                                                                             monkeypatch):
    """The claims stage reads the committed study (stages.yaml's reference), built by the claims of another
    parameter set (three seeds): its hash goes into the reader's record, and neither the reader nor the check of
    that record refuses it; the same file anywhere else is refused as any input of other parameters is."""
    monkeypatch.chdir(tmp_path)
    study = copy.deepcopy(config)
    study["runtime"]["seeds"] = [*config["runtime"]["seeds"], 7]
    for path in (Path("results/study/claims.json"), Path("elsewhere/claims.json")):
        with outputs_land_together(lambda outputs: write_records(outputs, Job("claims", {}), study, {})):
            write_text(path, "{}\n")
    check = provenance.BuildCheck(config, Path("p.yaml"))
    assert check.file(Path("results/study/claims.json")) == hashlib.sha256(b"{}\n").hexdigest()
    with pytest.raises(TwoscaleError, match="built from other parameters than p.yaml holds \\(runtime.seeds\\)"):
        check.file(Path("elsewhere/claims.json"))


def landed(output: Path, job: Job, config: dict, text: str, inputs: dict[str, str] | None = None) -> Path:
    with outputs_land_together(lambda outputs: write_records(outputs, job, config, inputs or {})):
        write_text(output, text)
    return output


def swapped_with_its_record(source: Path, target: Path) -> None:
    """`source` and its record copied over `target` and its record, as by hand."""
    target.write_bytes(source.read_bytes())
    record_path(target).write_bytes(record_path(source).read_bytes())
    record_path(target).with_suffix(".stat").unlink()


@pytest.mark.parametrize("name", ["checkpoints/step_10.pt", "metrics.json"])
def test_another_recipe_s_file_swapped_in_with_its_record_is_stale_and_refused(tmp_path, config, monkeypatch, name):
    """huginn's checkpoint (or metrics) and its record copied into paper's folder: the record describes the file and
    its parameter keys may be paper's too, but it is not the record of the job that writes that path."""
    from twoscale.pipeline.orchestrators import stale_outputs

    monkeypatch.chdir(tmp_path)
    written = {recipe: landed(Path(f"runs/smoke/results/train/{recipe}/seed_1337/{name}"),
                              Job("train", {"recipe": recipe, "seed": 1337}), config, f"{recipe}'s")
               for recipe in ("paper", "huginn")}
    params_file = Path("configs/smoke.yaml")
    assert stale_outputs([str(path) for path in written.values()], config, params_file) == []
    swapped_with_its_record(written["huginn"], written["paper"])
    assert stale_outputs([str(path) for path in written.values()], config, params_file) == [str(written["paper"])]
    with pytest.raises(TwoscaleError, match=r"its build record is a train job's \({'recipe': 'huginn', 'seed': "
                                            r"1337}\), not that of the train job that writes it \({'recipe': "
                                            r"'paper', 'seed': '1337'}\): moved or swapped with its record"):
        provenance.BuildCheck(config, params_file).file(written["paper"])


def test_a_measurement_of_another_step_swapped_in_with_its_record_is_stale(tmp_path, config, monkeypatch):
    """A record names no step: that it is another checkpoint's measurement shows in the checkpoint it read."""
    from twoscale.pipeline.orchestrators import stale_outputs

    monkeypatch.chdir(tmp_path)
    first, last = config["train"]["checkpoint_steps"][0], config["train"]["checkpoint_steps"][-1]
    train = Job("train", {"recipe": "paper", "seed": 1337})
    tables = {}
    for step in (first, last):
        checkpoint = landed(Path(f"results/train/paper/seed_1337/checkpoints/step_{step}.pt"), train, config,
                            f"weights {step}")
        tables[step] = landed(Path(f"results/measure/paper/seed_1337/step_{step}/geometry.parquet"), MEASURE,
                              config, f"rows {step}", {str(checkpoint): provenance.current_hash(checkpoint)})
    params_file = Path("params.yaml")
    assert stale_outputs([str(path) for path in tables.values()], config, params_file) == []
    swapped_with_its_record(tables[last], tables[first])
    assert stale_outputs([str(path) for path in tables.values()], config, params_file) == [str(tables[first])]


def test_a_folder_at_an_output_path_is_stale_and_a_reader_refuses_it(tmp_path, config, monkeypatch):
    """A folder where measure writes a table (another run's table inside it): stale, so its job is planned, and
    geometry, which reads the table, stops in one line instead of reading the folder as a dataset."""
    from twoscale.pipeline.orchestrators import stale_outputs

    monkeypatch.chdir(tmp_path)
    step = config["train"]["checkpoint_steps"][0]
    table = Path(f"results/measure/paper/seed_1337/step_{step}/geometry.parquet")
    landed(table, MEASURE, config, "rows\n")
    table.unlink()
    (table / "part").mkdir(parents=True)
    (table / "part/other.parquet").write_text("another run's rows\n")
    assert stale_outputs([str(table)], config, Path("params.yaml")) == [str(table)]
    with pytest.raises(TwoscaleError, match=rf"^{table}: a folder where the measure stage writes a file: move it "
                                            r"away and rebuild it \(snakemake --cores all; with DVC: dvc repro -f "
                                            rf"--downstream measure@paper-1337-{step}\)$"):
        check_inputs(Job("geometry", {}), SimpleNamespace(measure_dir=Path("results/measure")), config,
                     Path("params.yaml"))
