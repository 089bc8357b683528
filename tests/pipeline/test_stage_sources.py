"""A stage's source files come from what its stage module imports, the plumbing (entry points, configuration,
orchestration, MLflow tracking among it, the stage modules' shared arguments) aside; dvc.yaml is what the
declaration generates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from twoscale.config.parameter_files import read_raw
from twoscale.pipeline.declaration import dependencies, dvc_file

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "src/twoscale"
OBSERVER_FILES = {*(PACKAGE_DIR / "pipeline/observers").glob("*.py")}
# written out by hand: the folders and modules that run every stage and make none of its numbers
PLUMBING_FILES = {*(PACKAGE_DIR / "config").glob("*.py"), *(PACKAGE_DIR / "pipeline").rglob("*.py"),
                  PACKAGE_DIR / "__main__.py", PACKAGE_DIR / "stages/common.py"}


def module_file(module: str) -> Path | None:
    """The file of a twoscale module (or of the package a dotted name ends in), None for a name inside a module."""
    path = ROOT / "src" / Path(*module.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def imported_modules(path: Path) -> set[str]:
    """The twoscale modules a file imports, read from its syntax tree (`from twoscale.a import b` is module
    twoscale.a.b when that is a module, else twoscale.a); imports inside functions count too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("twoscale")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("twoscale"):
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if module_file(f"{node.module}.{alias.name}") is not None}
    return found


def closure(module: str) -> set[Path]:
    """The files of a module and of what it imports, not going through the plumbing."""
    files, todo = set(), [module]
    while todo:
        path = module_file(todo.pop())
        if path is not None and path.name != "__init__.py" and path not in files and path not in PLUMBING_FILES:
            files.add(path)
            todo += imported_modules(path)
    return files


@pytest.mark.parametrize("stage", sorted(dependencies.STAGES))
def test_sources_are_what_the_stage_module_imports(stage):
    expected = closure(f"twoscale.stages.{dependencies.stage_module(stage)}")
    assert {ROOT / path for path in dependencies.sources(stage)} == expected


def test_no_stage_counts_the_plumbing_among_its_sources_though_every_stage_runs_it():
    importing = [stage for stage in dependencies.STAGES
                 if OBSERVER_FILES & {module_file(name) for name in imported_modules(
                     module_file(f"twoscale.stages.{dependencies.stage_module(stage)}"))}]
    assert len(importing) > 20  # the premise: the stages do import tracking
    assert "twoscale.config.params" in imported_modules(PACKAGE_DIR / "stages/common.py")  # and the configuration
    assert OBSERVER_FILES < PLUMBING_FILES
    assert not any(PLUMBING_FILES & {ROOT / path for path in dependencies.sources(stage)}
                   for stage in dependencies.STAGES)


def test_a_stage_depends_on_its_own_cores_only():
    assert "src/twoscale/data/corpus.py" in dependencies.sources("corpus")
    assert not any("/decoding/" in path or "/models/" in path for path in dependencies.sources("corpus"))
    assert "src/twoscale/training/flops.py" in dependencies.sources("train")
    assert "src/twoscale/surrogates/recovery.py" not in dependencies.sources("sweep")


def test_the_committed_dvc_yaml_is_the_generated_one():
    generated = dvc_file.dvc_yaml(read_raw(ROOT / "params.yaml"))
    assert (ROOT / "dvc.yaml").read_text() == generated, "run: python -m twoscale workflow"


def test_an_unknown_stage_has_no_sources():
    with pytest.raises(KeyError, match="telepathy"):
        dependencies.sources("telepathy")
