"""A stage's source files come from what its stage module and the entry points import, the observers (MLflow
tracking) aside; dvc.yaml is what the declaration generates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from twoscale.pipeline import dependencies

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "src/twoscale"
OBSERVER_FILES = {PACKAGE_DIR / "pipeline" / name for name in ("tracking.py", "tracking_writer.py", "mlflow_store.py")}


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
    """The files of a module and of what it imports, not going through an observer."""
    files, todo = set(), [module]
    while todo:
        path = module_file(todo.pop())
        if path is not None and path.name != "__init__.py" and path not in files and path not in OBSERVER_FILES:
            files.add(path)
            todo += imported_modules(path)
    return files


@pytest.mark.parametrize("stage", sorted(dependencies.STAGES))
def test_sources_are_what_the_stage_module_imports(stage):
    module = dependencies.stage_module(stage)
    entry_points = closure("twoscale.__main__") | closure("twoscale.pipeline.preload")
    expected = closure(f"twoscale.stages.{module}") | entry_points
    assert {ROOT / path for path in dependencies.sources(stage)} == expected


def test_no_stage_counts_the_observers_among_its_sources_though_stages_import_them():
    importing = [stage for stage in dependencies.STAGES
                 if OBSERVER_FILES & {module_file(name) for name in imported_modules(
                     module_file(f"twoscale.stages.{dependencies.stage_module(stage)}"))}]
    assert len(importing) > 20  # the premise: the stages do import tracking
    assert not any(OBSERVER_FILES & {ROOT / path for path in dependencies.sources(stage)} for stage in importing)
    # what the orchestrators run is a source all the same: the preloaded interpreter of their commands
    assert all("src/twoscale/pipeline/preload.py" in dependencies.sources(stage) for stage in dependencies.STAGES)


def test_a_stage_depends_on_its_own_cores_only():
    assert "src/twoscale/data/corpus.py" in dependencies.sources("corpus")
    assert not any("/decoding/" in path or "/models/" in path for path in dependencies.sources("corpus"))
    assert "src/twoscale/training/flops.py" in dependencies.sources("train")
    assert "src/twoscale/surrogates/recovery.py" not in dependencies.sources("sweep")


def test_the_committed_dvc_yaml_is_the_generated_one():
    assert (ROOT / "dvc.yaml").read_text() == dependencies.dvc_yaml(), "run: python -m twoscale workflow"


def test_an_unknown_stage_has_no_sources():
    with pytest.raises(KeyError, match="telepathy"):
        dependencies.sources("telepathy")
