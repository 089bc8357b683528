"""params.yaml validation: every bad value fails at once with one line naming the key; the schema stays in sync."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from twoscale.config.parameter_files import changed_keys, load_params, read_raw, results_root
from twoscale.config.params import ParamsError, params_schema, parse_params
from twoscale.exits.sweep import check_strategies

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "workflow/schemas/params.schema.json"


def default_raw() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def with_change(path: str, value) -> dict:
    raw = default_raw()
    *parents, last = path.split(".")
    node = raw
    for part in parents:
        node = node[part]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return raw


DELETE = object()


SHIPPED_SETS = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("name", ["params.yaml", *SHIPPED_SETS])
def test_shipped_parameter_sets_are_valid(name):
    params = load_params(ROOT / name)
    assert params.train.checkpoint_steps[-1] == params.train.steps
    jsonschema.validate(read_raw(ROOT / name), json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("train.learning_rate", "fast", "train.learning_rate = 'fast': Input should be a valid number"),
        ("train.learning_rate", -1.0, "train.learning_rate = -1.0: Input should be greater than 0"),
        ("train.steps", 2.5, "train.steps = 2.5: Input should be a valid integer"),
        ("model.n_layer", DELETE, "model.n_layer: missing (required key)"),
        ("model.widht", 3, "model.widht: unknown key"),
        ("data.source", "web",
         "data.source = 'web': Input should be 'shakespeare', 'public_domain', 'text' or 'huggingface'"),
        ("runtime.device", "tpu", "runtime.device = 'tpu'"),
        ("data.val_fraction", 0.7, "data.val_fraction = 0.7: Input should be less than 0.5"),
        ("tokenize.vocab_size", 100, "tokenize.vocab_size = 100: Input should be greater than or equal to 260"),
        ("train.loops.distribution", "zipf", "train.loops.distribution = 'zipf'"),
        ("runtime.precision", "fp16", "runtime.precision = 'fp16': Input should be 'auto', 'fp32' or 'bf16'"),
        ("train.learning_rate", math.inf, "train.learning_rate = inf: Input should be a finite number"),
        ("train.weight_decay", math.inf, "train.weight_decay = inf: Input should be a finite number"),
        ("sample.state_std", math.nan, "sample.state_std = nan: Input should be a finite number"),
        # .inf (exit at once) is the one threshold that is not finite: -.inf and NaN would be written into a build
        # record as .inf is (null), so a set sweeping them could reuse the results of one sweeping .inf
        ("sweep.strategies.kl_head.settings", [1e-3, math.nan],
         "sweep.strategies.kl_head.settings.1 = nan: Input should be greater than or equal to 0"),
        ("sweep.strategies.kl_head.settings", [-math.inf, 1e-3],
         "sweep.strategies.kl_head.settings.0 = -inf: Input should be greater than or equal to 0"),
        ("sweep.strategies.kl_head.settings", [0, -1e-3], "sweep.strategies.kl_head.settings.1 = -0.001: Input"),
        # a bound on what a typo can ask for, said in one short line
        ("runtime.seeds", list(range(100_000)), "runtime.seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
         "14, 15, 16, 17, 18, 19, 20, 21, 2... (100000 items): List should have at most 64 items"),
        ("sweep.strategies.kl_head.settings", [i / 1000 for i in range(129)],
         "sweep.strategies.kl_head.settings = [0.0, 0.001, 0.002"),
        # a seed folds onto a generator state one to one only in 0..2**32-1; a count is a whole number as written
        ("runtime.seeds", [-1], "runtime.seeds.0 = -1: Input should be greater than or equal to 0"),
        ("runtime.seeds", [2**32], "runtime.seeds.0 = 4294967296: Input should be less than or equal to 4294967295"),
        ("runtime.seeds", [2**64], "runtime.seeds.0 = 18446744073709551616: Input should be less than"),
        ("runtime.seeds", [1.0], "runtime.seeds.0 = 1.0: Input should be a valid integer"),
        ("runtime.seeds", [True], "runtime.seeds.0 = True: Input should be a valid integer"),
        ("runtime.seeds", ["7"], "runtime.seeds.0 = '7': Input should be a valid integer"),
        ("train.checkpoint_steps", [300, 600.0], "train.checkpoint_steps.1 = 600.0: Input should be a valid integer"),
        ("model.bias", "yes", "model.bias = 'yes': Input should be a valid boolean"),
        ("sweep.strategies", {"fixed": {"spec": {"criterion": "fixed"}, "settings": [30]},
                              "x$(touch PWNED)": {"spec": {"criterion": "step_norm"}, "settings": [0.1]}},
         "sweep.strategies.x$(touch PWNED): a strategy name is 1 to 64 lower case letters, digits and _"),
        ("sweep.strategies", {"fixed": {"spec": {"criterion": "fixed"}, "settings": [30]},
                              "../../x": {"spec": {"criterion": "step_norm"}, "settings": [0.1]}},
         "sweep.strategies.../../x: a strategy name is"),
        ("recipes", {"r" * 300: {}}, "recipes.'" + "r" * 64 + "'...: a recipe name is"),
        ("recipes", {"a\nb": {}}, "recipes.'a\\nb': a recipe name is"),
    ],
)
def test_bad_value_names_key_value_and_expectation(path, value, expected):
    with pytest.raises(ParamsError) as info:
        parse_params(with_change(path, value), "params.yaml")
    message = str(info.value)
    assert message.startswith(f"params.yaml: {expected}")
    assert "\n" not in message


def test_an_exit_threshold_of_inf_means_exit_at_once_and_is_allowed():
    settings = [0, 1e-3, math.inf]
    assert parse_params(with_change("sweep.strategies.kl_head.settings", settings)).sweep.strategies[
        "kl_head"].settings == settings


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([{"first": 1, "last": 2}, {"first": 2, "last": 3}], "overlaps or precedes"),
        ([{"first": 3, "last": 3}, {"first": 1, "last": 1}], "overlaps or precedes"),
        ([{"first": 4, "last": 6}], "outside layers 0-5"),
        ([{"first": 3, "last": 2}], "last (2) is before first (3)"),
        ([], "recipes.paper: a recipe loops (model.groups)"),
    ],
)
def test_impossible_group_layouts(groups, expected):
    with pytest.raises(ParamsError, match="model") as info:
        parse_params(with_change("model.groups", groups))
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"train.checkpoint_steps": [100, 50, 1200]}, "not strictly increasing"),
        ({"train.checkpoint_steps": [100, 300]}, "last checkpoint step (300) must equal steps (600)"),
        ({"train.warmup_steps": 5000}, "warmup_steps (5000) must be below steps"),
        ({"model.n_head": 5}, "n_embd (128) is not divisible by n_head (5)"),
    ],
)
def test_cross_field_rules(changes, expected):
    raw = default_raw()
    for path, value in changes.items():
        section, key = path.split(".")
        raw[section][key] = value
    with pytest.raises(ParamsError) as info:
        parse_params(raw)
    assert expected in str(info.value)
    assert str(info.value).startswith(f"params: {path.split('.')[0]}")


def test_unreadable_files(tmp_path):
    with pytest.raises(ParamsError, match="parameter file not found"):
        load_params(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("train: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(tmp_path / "bad.yaml")
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    with pytest.raises(ParamsError, match="binary.yaml: not a text file"):
        load_params(tmp_path / "binary.yaml")
    with pytest.raises(ParamsError, match="is a folder, not a parameter file"):
        load_params(tmp_path)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ParamsError, match="expected a mapping"):
        load_params(tmp_path / "list.yaml")


def test_committed_schema_is_generated_from_the_model():
    assert json.loads(SCHEMA_FILE.read_text()) == params_schema()


def test_schema_rejects_what_the_model_rejects_per_field():
    schema = json.loads(SCHEMA_FILE.read_text())
    for path, value in [("train.learning_rate", -1.0), ("model.widht", 3), ("data.source", "web")]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(with_change(path, value), schema)


def test_stage_with_bad_params_exits_nonzero_with_one_line(tmp_path):
    raw = copy.deepcopy(default_raw())
    raw["train"]["learning_rate"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "twoscale", "corpus", "--params", str(bad), "--out-dir", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"twoscale corpus: error: {bad}: train.learning_rate = -1: Input should be greater than 0"
    ]
    assert not out.exists()


HOSTILE_STRATEGY = "x$(touch PWNED)"


@pytest.mark.parametrize(("change", "expected"), [
    (("model.groups", [{"first": 1, "last": 2}, {"first": 2, "last": 3}]),
     "bad.yaml: model: group 2-3 overlaps or precedes the group before it"),
    (("sweep.strategies", {**default_raw()["sweep"]["strategies"], HOSTILE_STRATEGY: {"spec": {"criterion": "fixed"},
                                                                                      "settings": [1]}}),
     f"bad.yaml: sweep.strategies.{HOSTILE_STRATEGY}: a strategy name is"),
])
def test_snakemake_refuses_bad_params_before_any_job(tmp_path, change, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_change(*change)))
    snapshots = ROOT / ".snakemake/twoscale/params"
    before = set(snapshots.glob("*.yaml"))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "--dry-run", "--cores", "1", "--configfile", str(bad)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode != 0
    assert set(snapshots.glob("*.yaml")) == before  # the refused set left no snapshot behind
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert errors[0].startswith("error: ") and expected in errors[0]  # the key, on the error's first line
    assert "Traceback" not in result.stderr and "WorkflowError" not in result.stderr
    assert not (ROOT / "PWNED").exists() and not list((ROOT / "results/sweep/strategies").glob("*/*/x*"))


def test_a_parameter_file_other_than_params_yaml_writes_under_runs_and_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert results_root("params.yaml") == results_root(tmp_path / "params.yaml") == Path(".")
    assert results_root("configs/smoke.yaml") == Path("runs/smoke")
    assert results_root("elsewhere/params.yaml") == Path("runs/params")  # not the checkout's own params.yaml
    assert results_root("my-set_2.yml") == Path("runs/my-set_2")
    for name in ("my params.yaml", "a$(touch x).yaml", ".yaml", "v1.2.yaml", "x" * 65 + ".yaml"):
        with pytest.raises(ParamsError, match="names its results folder"):
            results_root(name)


def test_snakemake_refuses_a_parameter_file_whose_name_cannot_be_a_folder(tmp_path):
    bad = tmp_path / "my params.yaml"
    bad.write_text(yaml.safe_dump(read_raw(ROOT / "configs/smoke.yaml")))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "--dry-run", "--cores", "1", "--configfile", str(bad)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("error: my params: a parameter file other than")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "strategies, fragment",
    [
        ({"acceleration": {"spec": {"criterion": "acceleration"}, "settings": [0.1]}}, "need 'fixed'"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [1, 2]}}, "must include max_loops (4)"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [1.5, 4]}}, "loops must be whole numbers"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [4, math.inf]}}, "loops must be whole numbers"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [4]},
          "argmax": {"spec": {"criterion": "argmax"}, "settings": [math.inf]}}, "hits must be whole numbers"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [4, 9]}}, "fixed loops 9 > max_loops 4"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [4], "timed": False}}, "fixed must be timed"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [4]},
          "mystery": {"spec": {"criterion": "telepathy"}, "settings": [1]}}, "strategies.mystery: unknown exit"),
        ({"fixed": {"spec": {"criterion": "fixed"}, "settings": [4]},
          "kl": {"spec": {"criterion": "kl", "decode": "tea leaves"}, "settings": [1]}}, "strategies.kl:"),
    ],
)
def test_bad_sweep_strategies_name_the_problem(strategies, fragment):
    raw = read_raw(ROOT / "configs/smoke.yaml")
    raw["sweep"]["strategies"] = strategies
    with pytest.raises(ParamsError, match="sweep") as error:
        check_strategies(parse_params(raw).sweep)
    assert fragment in str(error.value) and "\n" not in str(error.value)


# --- recipes and seeds --------------------------------------------------------------------------------------


def with_recipes(**recipes) -> dict:
    raw = default_raw()
    raw["recipes"] = recipes
    raw["sample"]["recipes"] = []
    return raw


@pytest.mark.parametrize(
    ("recipes", "expected"),
    [
        ({"huginn": {"model": {"norm": "layer"}}},
         "recipes.huginn.model.norm = 'layer': Input should be 'pre', 'sandwich', 'group' or 'rescale'"),
        ({"huginn": {"model": {"widht": 3}}}, "recipes.huginn.model.widht: unknown key"),
        ({"huginn": {"train": {"loops": {"mean": -1}}}},
         "recipes.huginn.train.loops.mean = -1: Input should be greater than 0"),
        ({"huginn": {"model": {"n_head": 5}}}, "recipes.huginn.model: n_embd (128) is not divisible by n_head (5)"),
        ({"huginn": {"train": {"steps": 600}}}, "recipes.huginn.train.steps: shared by every recipe"),
        ({"huginn": {"train": {"checkpoint_steps": [600]}}}, "recipes.huginn.train.checkpoint_steps: shared"),
        ({"huginn": {"measure": {"max_loops": 3}}}, "recipes.huginn.measure: unknown key"),
        ({"Huginn-2": {}}, "recipes.Huginn-2: a recipe name is 1 to 64 lower case letters"),
        ({"small": {"model": {"block_size": 32}}},
         "recipes.small: measure.trajectory_token (64) must be below model.block_size (32)"),
        ({}, "recipes = {}: Dictionary should have at least 1 item"),
    ],
)
def test_bad_recipes_name_the_key(recipes, expected):
    with pytest.raises(ParamsError) as info:
        parse_params(with_recipes(**recipes), "params.yaml")
    assert str(info.value).startswith(f"params.yaml: {expected}")
    assert "\n" not in str(info.value)


def test_a_recipe_changes_only_its_keys_and_nested_keys_merge():
    params = parse_params(with_recipes(paper={}, short={"model": {"norm": "sandwich"},
                                                         "train": {"loops": {"mean": 4.0}}}))
    shared, short = params.run("paper", 1337), params.run("short", 1337)
    assert shared.model == params.model and shared.train == params.train
    assert short.model.norm == "sandwich" and short.model.n_embd == params.model.n_embd
    assert short.train.loops.mean == 4.0
    assert short.train.loops.model_dump(exclude={"mean"}) == params.train.loops.model_dump(exclude={"mean"})
    assert (short.recipe, short.seed, short.tags) == ("short", 1337, {"recipe": "short", "seed": "1337"})


def test_runs_are_every_recipe_and_seed_in_file_order():
    raw = with_recipes(b={}, a={})
    raw["runtime"]["seeds"], raw["runtime"]["explain_seeds"] = [3, 1], [1]
    params = parse_params(raw)
    assert params.runs() == [("b", 3), ("b", 1), ("a", 3), ("a", 1)]
    assert params.explained_runs() == [("b", 1), ("a", 1)]
    assert (params.explains(1), params.explains(3)) == (True, False)


def test_an_explained_seed_gets_the_whole_recovery_curve_and_another_the_scored_k():
    raw = with_change("distill.blocks", [2])
    raw["distill"]["curve_blocks"] = [4, 1]
    distill = parse_params(raw).distill
    assert (distill.blocks_of(explained=True), distill.blocks_of(explained=False)) == ([1, 2, 4], [2])


@pytest.mark.parametrize(("runtime", "distill", "expected"), [
    ({"seeds": [1, 2], "explain_seeds": [3]}, {}, "runtime: explain_seeds: 3 is not in seeds [1, 2]"),
    ({"seeds": [1, 2], "explain_seeds": [2, 2]}, {}, "runtime: explain_seeds [2, 2] repeat a seed"),
    ({"seeds": [1], "explain_seeds": []}, {}, "runtime.explain_seeds = []: List should have at least 1 item"),
    ({}, {"blocks": [2], "curve_blocks": [1, 2]}, "distill: blocks [2] and curve_blocks [1, 2] repeat a value"),
])
def test_bad_explained_seeds_and_curves(runtime, distill, expected):
    raw = with_change("distill.blocks", distill.get("blocks", [2]))
    raw["runtime"].update(runtime)
    raw["distill"].update(distill)
    with pytest.raises(ParamsError, match=re.escape(expected)):
        parse_params(raw)


@pytest.mark.parametrize(("seeds", "expected"), [
    ([], "runtime.seeds = []: List should have at least 1 item"),
    ([1, 2, 1], "runtime: seeds [1, 2, 1] repeat a seed"),
])
def test_bad_seed_lists(seeds, expected):
    with pytest.raises(ParamsError, match=re.escape(expected)):
        parse_params(with_change("runtime.seeds", seeds))


def test_a_run_outside_the_file_is_one_line():
    params = load_params(ROOT / "params.yaml")
    with pytest.raises(ParamsError, match=r"'loopy' is neither under recipes nor under teachers \(known: paper, "
                                          r"huginn, plain\)"):
        params.run("loopy", 1337)
    with pytest.raises(ParamsError, match=r"seed 5 is not in runtime.seeds \[1337\]"):
        params.run("paper", 5)


# --- the sample stage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("sample.recipes", ["paper"], "sample.recipes: 'paper' has no input injection (model.injection: none)"),
    ("sample.recipes", ["loopy"], "sample.recipes: 'loopy' is not under recipes (known: paper, huginn)"),
    ("sample.inner_loops", [0, 4], "sample.inner_loops.0 = 0: Input should be greater than 0"),
    ("sample.inner_loops", [4, 31], "sample: inner_loops 31 exceeds loops (30)"),
    ("sample.tolerances", [0.03, -0.1], "sample.tolerances.1 = -0.1: Input should be greater than or equal to 0"),
    ("sample.baseline_loops", [1, 2], "sample: baseline_loops must include loops (30)"),
    ("sample.freezes", ["vibes"], "sample.freezes.0 = 'vibes': Input should be 'latent_difference' or 'acceleration'"),
    ("sample.new_tokens", 200, "sample.prompt_tokens + sample.new_tokens (216) exceeds model.block_size (128)"),
])
def test_bad_sample_settings_name_the_key(path, value, expected):
    with pytest.raises(ParamsError) as info:
        parse_params(with_change(path, value), "params.yaml")
    assert str(info.value).startswith(f"params.yaml: {expected}")
    assert "\n" not in str(info.value)


def test_the_sample_stage_runs_on_the_recipes_with_injection_only():
    params = load_params(ROOT / "params.yaml")
    assert params.sample_runs() == [("huginn", seed) for seed in params.runtime.seeds]


# --- teachers and the distill stages ------------------------------------------------------------------------


@pytest.mark.parametrize(("teachers", "blocks", "expected"), [
    ({"plain": {"model": {"groups": [{"first": 1, "last": 2}]}}}, [2], "teachers.plain.model.groups: a teacher has no"),
    ({"paper": {}}, [2], "teachers.paper: also a recipe name"),
    ({"Plain": {}}, [2], "teachers.Plain: a teacher name is 1 to 64 lower case letters"),
    ({"plain": {"model": {"norm": "sandwich"}}}, [2], "teachers.plain.model.norm: a teacher is a pre-LN GPT"),
    ({"plain": {"train": {"steps": 10}}}, [2], "teachers.plain.train.steps: shared by every run"),
    ({"plain": {"model": {"n_layer": 3}}}, [2, 4], "distill: 4 blocks for the 3 layers of teacher 'plain'"),
    ({"plain": {"model": {"n_head": 5}}}, [2], "teachers.plain.model: n_embd (128) is not divisible by n_head"),
    ({"plain": {}}, [2, 2], "distill: blocks [2, 2] and curve_blocks [] repeat a value"),
])
def test_bad_teachers_name_the_key(teachers, blocks, expected):
    raw = default_raw()
    raw["teachers"], raw["distill"]["blocks"], raw["distill"]["curve_blocks"] = teachers, blocks, []
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "params.yaml")
    assert str(info.value).startswith(f"params.yaml: {expected}")
    assert "\n" not in str(info.value)


def test_a_recipe_without_looped_groups_belongs_under_teachers():
    with pytest.raises(ParamsError, match="recipes.flat: a recipe loops .* a plain GPT goes under teachers"):
        parse_params(with_recipes(paper={}, flat={"model": {"groups": []}}))


def test_a_teacher_is_the_shared_model_without_groups_plus_its_changes():
    params = load_params(ROOT / "params.yaml")
    run = params.run("plain", 1337)
    assert run.model.groups == [] and run.model.n_layer == 8
    assert run.model.model_dump(exclude={"groups", "n_layer"}) == params.model.model_dump(
        exclude={"groups", "n_layer"})
    assert run.train == params.train
    assert params.teacher_runs() == [("plain", 1337)]
    raw = default_raw()
    raw["teachers"] = {}
    assert parse_params(raw).teacher_runs() == []


def test_changed_keys_name_every_value_that_differs_added_and_removed_ones_too():
    before = {"measure": {"max_loops": 10, "loss_loops": [1, 2]}, "train": {"steps": 40}, "sample": {"a": 1}}
    after = {"measure": {"max_loops": 6, "loss_loops": [1, 2]}, "train": {"steps": 40, "extra": 1}, "sample": 3}
    assert changed_keys(before, after) == ["measure.max_loops", "train.extra", "sample"]
    assert changed_keys(before, copy.deepcopy(before)) == []
    assert changed_keys(before, None) == ["the whole file"]


# --- parameter sets as overlays ------------------------------------------------------------------------------


def overlay(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_overlay_merges_mappings_replaces_the_rest_and_drops_a_named_entry_set_to_null(tmp_path):
    overlay(tmp_path, "base.yaml", "sweep: {max_loops: 30, strategies: {fixed: {settings: [1, 30]}, kl: {x: 1}}}\n"
                                   "data: {max_chars: 5, text_files: [a, b]}\n")
    over = overlay(tmp_path, "over.yaml", "base: base.yaml\nsweep: {strategies: {kl: null}}\n"
                                          "data: {max_chars: null, text_files: [c]}\n")
    assert read_raw(over) == {"sweep": {"max_loops": 30, "strategies": {"fixed": {"settings": [1, 30]}}},
                              "data": {"max_chars": None, "text_files": ["c"]}}  # null over a value: null


def test_an_overlay_dropping_an_entry_the_base_lacks_is_refused(tmp_path):
    overlay(tmp_path, "base.yaml", "recipes: {paper: {}, huginn: {}}\n")
    typo = overlay(tmp_path, "typo.yaml", "base: base.yaml\nrecipes: {huggin: null}\n")
    with pytest.raises(ParamsError, match=r"typo.yaml: recipes.huggin: null drops an entry of the base, which has"):
        read_raw(typo)


def test_a_recipe_change_set_to_null_is_still_an_unknown_key_not_a_drop():
    raw = read_raw(ROOT / "params.yaml")
    raw["recipes"]["paper"] = {"model": {"injecton": None}}
    with pytest.raises(ParamsError, match="injecton"):
        parse_params(raw)


def test_overlays_chain_and_each_base_is_found_from_its_own_folder(tmp_path):
    (tmp_path / "sets").mkdir()
    overlay(tmp_path, "base.yaml", "a: {x: 1, y: 1, z: 1}\n")
    overlay(tmp_path, "sets/middle.yaml", "base: ../base.yaml\na: {y: 2}\n")
    top = overlay(tmp_path, "sets/top.yaml", "base: middle.yaml\na: {z: 3}\n")
    assert read_raw(top) == {"a": {"x": 1, "y": 2, "z": 3}}


@pytest.mark.parametrize(("text", "message"), [
    ("base: absent.yaml\n", r"over.yaml: base .*absent.yaml: parameter file not found"),
    ("base: 3\n", r"over.yaml: base = 3: give the path of the parameter file this one changes"),
    ("base: over.yaml\n", r"over.yaml: .*more than 8 overlays deep"),
    ("base: list.yaml\n", r"over.yaml: base .*list.yaml: not a mapping of sections"),
])
def test_a_bad_base_is_one_line_naming_the_overlay(tmp_path, text, message):
    overlay(tmp_path, "list.yaml", "[1, 2]\n")
    with pytest.raises(ParamsError, match=message):
        read_raw(overlay(tmp_path, "over.yaml", text))


def leaves(raw: dict, prefix: str = "") -> dict[str, object]:
    return {key: value for name, sub in raw.items() for key, value in (
        leaves(sub, f"{prefix}{name}.").items() if isinstance(sub, dict) and sub else [(f"{prefix}{name}", sub)])}


@pytest.mark.parametrize("name", [Path(path).stem for path in SHIPPED_SETS if Path(path).stem != "ablations"])
def test_a_shipped_set_holds_only_what_it_changes_of_its_base(name):
    raw = yaml.safe_load((ROOT / f"configs/{name}.yaml").read_text())
    base_file = (ROOT / "configs" / raw.pop("base")).resolve()
    assert base_file.is_relative_to(ROOT) and base_file.suffix == ".yaml"
    base = leaves(read_raw(base_file))
    same = [key for key, value in leaves(raw).items() if key in base and base[key] == value]
    assert same == [], f"configs/{name}.yaml repeats {base_file.name}'s values: {same}"


def test_resolve_writes_the_whole_set_and_refuses_a_bad_one(tmp_path):
    out = tmp_path / "smoke.yaml"
    done = subprocess.run([sys.executable, "-m", "twoscale", "resolve", "configs/smoke.yaml", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(out.read_text()) == read_raw(ROOT / "configs/smoke.yaml")  # no `base` left in it
    bad = overlay(tmp_path, "bad.yaml", f"base: {ROOT / 'params.yaml'}\nmeasure: {{max_loops: 0}}\n")
    refused = subprocess.run([sys.executable, "-m", "twoscale", "resolve", str(bad), "--out", str(tmp_path / "x")],
                             cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "measure.max_loops" in refused.stderr and not (tmp_path / "x").exists()
