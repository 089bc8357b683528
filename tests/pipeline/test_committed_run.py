"""The committed default run is the checkout's: dvc.lock records, for every job of the pipeline under params.yaml,
the source files and parameter values of this checkout, which is what `dvc status` compares first on a fresh clone.
A commit that changes a stage's code or parameters without rerunning the default run (`make reproduce`, then its
results and dvc.lock committed) fails here, rather than leaving every clone to rebuild the run."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from dvc.utils.serialize._yaml import parse_yaml
from records import digested
from workspace import ROOT, copy_repository, run

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import finite_or_null, write_json
from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration.dependencies import in_dvc_cache, lookup, param_values, sources
from twoscale.pipeline.declaration.jobs import stages
from twoscale.pipeline.orchestrators import (
    default_run_records,
    drop_stages_gone,
    dvc_stage_names,
    record_declared_keys,
    relock,
)
from twoscale.pipeline.records.provenance import RECORDS, Job

RERUN = "rerun the default run (make reproduce in a git worktree) and commit its results and dvc.lock"


def read_as_dvc(name: str) -> dict:
    """A file as DVC reads it (ruamel, YAML 1.2: `1e-07` is a number, where PyYAML's YAML 1.1 reads text)."""
    return parse_yaml((ROOT / name).read_text(), name)


def locked_stages() -> dict[str, dict]:
    return read_as_dvc("dvc.lock")["stages"]


def test_dvc_lock_holds_every_job_of_params_yaml_by_dvc_s_names_and_no_other():
    """DVC names a job of a matrix stage by its values in the matrix's order (train@paper-1337); `dvc commit` keeps
    the entries of stages dvc.yaml no longer has, which the workflow drops after it commits."""
    assert set(locked_stages()) == dvc_stage_names(read_raw(ROOT / "params.yaml")), RERUN


def test_dvc_lock_records_the_checkout_s_source_files_of_every_stage():
    stale = []
    for name, locked in locked_stages().items():
        recorded = {dep["path"]: dep["md5"] for dep in locked["deps"] if dep["path"].startswith("src/")}
        differing = set(recorded) ^ set(sources(name.split("@")[0]))
        if differing:
            stale.append(f"{name}: sources {sorted(differing)}")
        stale += [f"{name}: {path}" for path, md5 in recorded.items()
                  if not (ROOT / path).is_file() or hashlib.md5((ROOT / path).read_bytes()).hexdigest() != md5]
    assert stale == [], f"dvc.lock is not current ({len(stale)}: {stale[:3]}): {RERUN}"


def test_dvc_lock_records_every_parameter_key_each_job_declares():
    config = read_raw(ROOT / "params.yaml")
    locked = locked_stages()
    missing = [f"{stage.dvc_name(job)}: {key}" for stage in stages(config) for job in stage.jobs()
               for key in param_values(stage.name, config, job.get("recipe"), job.get("strategy"))
               if key not in locked[stage.dvc_name(job)].get("params", {}).get("params.yaml", {})]
    assert missing == [], f"dvc.lock is not current ({len(missing)}: {missing[:3]}): {RERUN}"


def test_the_committed_build_records_hold_the_values_of_the_keys_their_stages_declare():
    """Each output's record names the parameter values it was built from: those params.yaml holds, for every key
    its stage declares (the check every stage makes of its inputs reads them)."""
    config = read_raw(ROOT / "params.yaml")
    committed = subprocess.run(["git", "ls-files", "data", "results"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
    records = default_run_records(ROOT, config)
    kept_by_git = [path for path in records if not in_dvc_cache(path.name.removesuffix(".json"))]  # a checkpoint's
    # record is in the checkpoints folder DVC's cache keeps whole, present only where the weights are
    assert kept_by_git and all(str(path.relative_to(ROOT)) in committed for path in kept_by_git)  # the premise
    stale = []
    for path in records:
        raw = json.loads(path.read_text())
        if raw["params"] != finite_or_null(Job(raw["stage"], raw["job"]).params(config)):
            stale.append(str(path.relative_to(ROOT)))
    assert stale == [], f"build records not current ({len(stale)}: {stale[:3]}): {RERUN}"


def test_dvc_lock_records_the_parameter_values_of_params_yaml():
    config = read_as_dvc("params.yaml")
    stale = [f"{name}: {key}" for name, locked in locked_stages().items()
             for key, value in locked.get("params", {}).get("params.yaml", {}).items() if lookup(config, key) != value]
    assert stale == [], f"dvc.lock is not current ({len(stale)}: {stale[:3]}): {RERUN}"


def test_dropping_the_stages_gone_leaves_the_rest_of_dvc_lock_as_dvc_wrote_it(tmp_path):
    lock = tmp_path / "dvc.lock"
    text = (ROOT / "dvc.lock").read_text()
    gone = "  distill@plain-1337-9:\n    cmd: python -m twoscale.pipeline.preload distill\n"
    lock.write_text(text.replace("  corpus:\n", gone + "  corpus:\n", 1))
    assert drop_stages_gone(lock, dvc_stage_names(read_raw(ROOT / "params.yaml"))) == ["distill@plain-1337-9"]
    assert lock.read_text() == text


def test_relocking_records_a_key_declared_since_with_its_value_drops_one_no_longer_declared_and_nothing_else(
        tmp_path):
    copy = copy_repository(tmp_path / "copy", ROOT / "params.yaml")
    relock(copy)  # a checkout whose lock is current (a commit under test may not be relocked yet)
    pipeline = (copy / "dvc.yaml").read_text()
    declared = "    - data.val_fraction\n    - tokenize\n"
    assert pipeline.count(declared) == 1
    (copy / "dvc.yaml").write_text(pipeline.replace(declared, "    - data.val_fraction\n    - data.max_chars\n"))
    before = parse_yaml((copy / "dvc.lock").read_text(), "dvc.lock")["stages"]

    assert relock(copy) == ["tokenize"]
    after = parse_yaml((copy / "dvc.lock").read_text(), "dvc.lock")["stages"]
    value = read_raw(copy / "params.yaml")["data"]["max_chars"]
    recorded = before["tokenize"]["params"]["params.yaml"]
    assert after["tokenize"]["params"]["params.yaml"] == {"data.val_fraction": recorded["data.val_fraction"],
                                                          "data.max_chars": value}
    assert {**after, "tokenize": before["tokenize"]} == before


def test_the_default_run_s_records_get_the_keys_declared_since_and_keep_the_rest(tmp_path):
    """What `workflow --relock` does to the build records after a stage declares another key and no longer one: a
    record of the default run gains the one's value and loses the other; an archived run's record (not a file the
    default run writes) is left alone; a record whose values are not params.yaml's refuses, with nothing written."""
    config = read_raw(ROOT / "params.yaml")
    declared = Job("measure", {"recipe": "paper", "seed": 1337}).params(config)
    step = config["train"]["checkpoint_steps"][0]
    default = tmp_path / f"results/measure/paper/seed_1337/step_{step}/{RECORDS}/geometry.parquet.json"
    older = {"stage": "measure", "job": {"recipe": "paper", "seed": 1337}, "sha256": "ab" * 32, "size": 5,
             "inputs": {}, "params": {**{key: value for key, value in declared.items() if key != "train.steps"},
                                      "measure.retired": 1}}
    write_json(default, digested(older))
    archived = tmp_path / f"results/gpu/{RECORDS}/claims.md.json"
    write_json(archived, digested({**older, "stage": "claims", "job": {}, "params": {}}))
    before = archived.read_bytes()

    assert record_declared_keys(tmp_path, config) == [default]
    assert json.loads(default.read_text()) == digested({**older, "params": declared})  # measure.retired left out
    assert archived.read_bytes() == before
    assert record_declared_keys(tmp_path, config) == []  # nothing left to add

    other = {**older, "params": {**{key: value for key, value in declared.items() if key != "train.steps"},
                                 "measure.max_loops": declared["measure.max_loops"] + 1}}
    write_json(default, digested(other))
    written = default.read_bytes()
    with pytest.raises(TwoscaleError, match=r"records measure\.max_loops other than params\.yaml holds.*train\.steps"):
        record_declared_keys(tmp_path, config)
    assert default.read_bytes() == written


def test_relocking_after_a_stage_gains_a_source_records_it_in_the_stage_s_entries(tmp_path):
    """The relock reads the dvc.yaml written just before it: a stage whose module now imports one more file has
    that file, with its hash, in each of its jobs' entries (it read the old dvc.yaml and left the stage changed)."""
    copy = copy_repository(tmp_path / "copy", ROOT / "params.yaml")
    gained = "src/twoscale/geometry/thresholds.py"
    assert gained not in sources("training_figures")  # the premise
    module = copy / "src/twoscale/report/training.py"
    imports = "from twoscale.report.tables import require\n"
    gaining = imports + "from twoscale.geometry import thresholds  # noqa\n"
    module.write_text(module.read_text().replace(imports, gaining))
    run([sys.executable, "-m", "twoscale", "workflow", "--relock"], copy, PYTHONPATH=str(copy / "src"))
    lock = parse_yaml((copy / "dvc.lock").read_text(), "dvc.lock")["stages"]
    entries = [entry for name, entry in lock.items() if name.split("@")[0] == "training_figures"]
    digest = hashlib.md5((copy / gained).read_bytes()).hexdigest()
    assert entries and all({"path": gained, "hash": "md5", "md5": digest, "size": (copy / gained).stat().st_size}
                           in entry["deps"] for entry in entries)


def test_relocking_records_the_changed_sources_and_nothing_else(tmp_path):
    """`workflow --relock` after a change that leaves the outputs alone: the lock then records the edited
    source file's hash and size in each stage that has it, and every other byte as it was, the parameter values
    recorded too where params.yaml has since changed (relocking sources calls nothing else current)."""
    copy = copy_repository(tmp_path / "copy", ROOT / "params.yaml")
    edited = copy / "src/twoscale/data/corpus.py"
    old = hashlib.md5(edited.read_bytes()).hexdigest(), edited.stat().st_size
    edited.write_text(edited.read_text() + "# a comment\n")
    new = hashlib.md5(edited.read_bytes()).hexdigest(), edited.stat().st_size
    params = (copy / "params.yaml").read_text()
    (copy / "params.yaml").write_text(params.replace("max_chars:", "max_chars: 1  #", 1))
    locked = (copy / "dvc.lock").read_text()
    having = [name for name in locked_stages() if "src/twoscale/data/corpus.py" in sources(name.split("@")[0])]
    assert having  # the premise: some stage reads the edited file

    said = run([sys.executable, "-m", "twoscale", "workflow", "--relock"], copy)
    assert f"dvc.lock: {len(having)} stages recorded" in said
    entry = "    - path: src/twoscale/data/corpus.py\n      hash: md5\n      md5: {}\n      size: {}\n"
    assert locked.count(entry.format(*old)) == len(having)
    assert (copy / "dvc.lock").read_text() == locked.replace(entry.format(*old), entry.format(*new))
