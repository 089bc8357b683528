"""`twoscale set` changes only the values it is given, every other byte of the file as written, and refuses a key
the file lacks or a value the schema refuses with the file untouched; DVC's own -S rewrites the whole file (why the
command exists)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from twoscale.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def params(tmp_path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text((ROOT / "params.yaml").read_text())
    return path


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_only_the_values_set_change_their_comments_and_inline_lists_kept(params):
    before = params.read_text()
    assert main(["set", "--params", str(params), "data.max_chars=300000", "measure.loss_loops=[1, 2, 4]",
                 "train.eval_every=50"]) == 0
    assert sorted(changed_lines(before, params.read_text())) == sorted([
        "-  max_chars: null       # truncate the corpus (null: keep all)",
        "+  max_chars: 300000     # truncate the corpus (null: keep all)",
        "-  eval_every: 100", "+  eval_every: 50",
        "-  loss_loops: [1, 2, 3, 4, 6, 8, 12, 16, 24, 30]", "+  loss_loops: [1, 2, 4]"])


def test_setting_the_values_it_holds_leaves_the_file_byte_for_byte(params):
    before = params.read_bytes()
    held = "train.checkpoint_steps=[25, 50, 100, 200, 400, 600]"
    assert main(["set", "--params", str(params), "data.max_chars=null", held]) == 0
    assert params.read_bytes() == before


def test_a_number_in_e_notation_is_written_as_both_yaml_versions_read_a_number(params):
    """PyYAML, which the jobs and Snakemake's schema check read the file with, reads 1e-07 as text."""
    import yaml

    settings = "sweep.strategies.acceleration.settings=[0, 1e-5, 1e-3, .inf]"
    assert main(["set", "--params", str(params), "train.weight_decay=1e-7", settings]) == 0
    text = params.read_text()
    assert "  weight_decay: 1.0e-07\n" in text and "settings: [0, 1.0e-05, 0.001, .inf]" in text
    raw = yaml.safe_load(text)
    assert raw["train"]["weight_decay"] == 1e-7
    assert raw["sweep"]["strategies"]["acceleration"]["settings"] == [0, 1e-5, 1e-3, float("inf")]


@pytest.mark.parametrize(("assignment", "said"), [
    ("train.step=3", "train.step: the file has no such key"),
    ("nosuch.steps=3", "nosuch: not a section of the file"),
    ("train.steps", "give KEY=VALUE"),
    ("train.steps=-5", "train.steps"),
    ("train.steps=[1", "the value is not YAML"),
])
def test_a_bad_assignment_is_one_line_and_the_file_is_untouched(params, capsys, assignment, said):
    before = params.read_bytes()
    assert main(["set", "--params", str(params), assignment]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("twoscale set: error: ") and said in error[0]
    assert params.read_bytes() == before


def test_dvc_s_own_set_param_rewrites_the_whole_file(params):
    """The premise of the command: DVC's -S (Hydra and OmegaConf) writes every inline list out and moves comments,
    treeverse/dvc#8720. When a DVC release stops doing so, this fails and the command can go."""
    from dvc.utils.hydra import apply_overrides

    before = params.read_text()
    apply_overrides(str(params), ["data.max_chars=300000"])
    assert len(changed_lines(before, params.read_text())) > 20


def test_a_file_that_cannot_be_read_is_one_line(tmp_path, capsys):
    assert main(["set", "--params", str(tmp_path / "missing.yaml"), "train.steps=3"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"twoscale set: error: {tmp_path / 'missing.yaml'}: No such file or directory"]


def test_a_file_that_resolve_wrote_keeps_its_own_list_indentation(tmp_path):
    """`twoscale resolve --out` writes lists as PyYAML does, their dashes under their key: set changes the one value
    and no other line."""
    resolved = tmp_path / "whole.yaml"
    assert main(["resolve", "configs/smoke.yaml", "--out", str(resolved)]) == 0
    before = resolved.read_text()
    assert "\nruntime:\n  device: auto\n  threads: 1\n  precision: auto\n  seeds:\n  - 1337\n" in before  # the premise
    assert main(["set", "--params", str(resolved), "data.max_chars=200000", "runtime.seeds=[1337, 7]"]) == 0
    assert sorted(changed_lines(before, resolved.read_text())) == sorted([
        "-  max_chars: 300000", "+  max_chars: 200000", "+  - 7"])
