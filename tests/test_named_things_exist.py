"""Every module, function, class and parameter key that a docstring, a comment or a document names in backticks
exists, and every source file they name by its path: a name left behind by a move or a rename fails here, naming
where it is written. A dotted name is read by its first part: a section of the parameters (`train.steps`, checked
against the parameter schema), a module of the package by its last name (`engine.step_tokens`,
`decoding.cache.LayerCache`) or a class or function of one (`LoopedGPT.apply_group`); others (`torch.compile`,
`dvc.yaml`) are outside the package and not checked, unless what follows the first part is the package's
(`generation.step_tokens`: a module gone)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import pkgutil
import re

import pytest
from workspace import ROOT

import twoscale

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# docs/history.md keeps earlier runs as they were read then, names of their day included
CURRENT_DOCUMENTS = [document for document in DOCUMENTS if document.name != "history.md"]
SOURCES = sorted((ROOT / "src").rglob("*.py"))
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`")
MODULE_WORD = re.compile(r"`(\w+)` module|module `(\w+)`")
FILE_LIKE = re.compile(r"\.(ya?ml|json|md|csv|py|smk|parquet|png|pt|txt|tsv|lock|toml|html|log|npy|svg|stat)$")
SOURCE_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|smk|yaml|md|toml))`")
OUTPUT_FOLDERS = ("results/", "runs/", "data/", "logs/", "/", "~", ".venv/", ".snakemake/", "shared/")


@functools.cache
def modules() -> dict[str, list[str]]:
    """The package's modules by their last name (`engine` -> ['twoscale.decoding.engine'])."""
    found: dict[str, list[str]] = {"twoscale": ["twoscale"]}
    for module in pkgutil.walk_packages(twoscale.__path__, "twoscale."):
        found.setdefault(module.name.rsplit(".", 1)[1], []).append(module.name)
    return found


@functools.cache
def top_level_names() -> dict[str, list[object]]:
    """The classes and functions defined by the package's modules, by name."""
    found: dict[str, list[object]] = {}
    for names in modules().values():
        for name in names:
            for attribute, value in vars(importlib.import_module(name)).items():
                if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ == name:
                    found.setdefault(attribute, []).append(value)
    return found


@functools.cache
def schema() -> dict:
    return json.loads((ROOT / "workflow/schemas/params.schema.json").read_text())


def _section(node: dict) -> dict:
    """A schema node with its reference and union resolved to the part that has keys."""
    while "$ref" in node or "anyOf" in node or "allOf" in node:
        if "$ref" in node:
            node = schema()["$defs"][node["$ref"].rsplit("/", 1)[1]]
        else:
            parts = node.get("anyOf") or node.get("allOf")
            node = next((part for part in parts if {"$ref", "properties", "additionalProperties"} & set(part)),
                        parts[0])
    return node


def is_parameter(name: str) -> bool:
    node: dict = schema()
    for part in name.split("."):
        node = _section(node)
        if part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):  # recipes.<name>, sweep.strategies.<name>
            node = node["additionalProperties"]
        else:
            return False
    return True


def _attribute(owner: object, name: str) -> object | None:
    """`owner.name`, a submodule of a package, or for a class an attribute its __init__ sets (`self.name =`)."""
    if inspect.ismodule(owner) and hasattr(owner, "__path__"):
        try:
            return importlib.import_module(f"{owner.__name__}.{name}")
        except ModuleNotFoundError:
            pass
    if hasattr(owner, name):
        return getattr(owner, name)
    if inspect.isclass(owner) and (any(name in vars(base).get("__annotations__", {}) for base in owner.__mro__)
                                   or re.search(rf"\bself\.{name}\b", inspect.getsource(owner))):
        return name  # a field, or set by __init__
    return None


def resolves(owners: list[object], rest: list[str]) -> bool:
    for owner in owners:
        for part in rest:
            owner = _attribute(owner, part)
            if owner is None:
                break
        else:
            return True
    return False


def package_name_exists(name: str) -> bool | None:
    """Whether a dotted name of the package exists; None for a name outside it. A name whose first part is unknown
    but whose second is a class or function of the package (`generation.step_tokens`) names a module that is
    gone."""
    first, *rest = name.split(".")
    if first in schema()["properties"]:
        return is_parameter(name)
    if first in modules():
        return resolves([importlib.import_module(module) for module in modules()[first]], rest)
    if first in top_level_names():
        return resolves(top_level_names()[first], rest)
    return False if rest[0] in top_level_names() else None


def texts() -> list[tuple[str, str]]:
    """(where, text): every docstring and every comment line of the package's sources, and the documents."""
    found = []
    for path in SOURCES:
        source = path.read_text()
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and (
                    docstring := ast.get_docstring(node)):
                found.append((where, docstring))
        found.append((where, "\n".join(line.split("#", 1)[1] for line in source.splitlines() if "#" in line)))
    return found + [(document.relative_to(ROOT).as_posix(), document.read_text()) for document in CURRENT_DOCUMENTS]


def missing_names(where: str, text: str) -> list[str]:
    missing = [f"{where}: `{name}`" for name in DOTTED.findall(text)
               if not FILE_LIKE.search(name) and package_name_exists(name) is False]
    missing += [f"{where}: the `{name}` module" for pair in MODULE_WORD.findall(text) for name in pair
                if name and name not in modules()]
    return missing


def source_path_exists(path: str) -> bool:
    return any((base / path).exists() for base in (ROOT, ROOT / "src/twoscale", ROOT / "docs", ROOT / "workflow"))


def missing_paths(where: str, text: str) -> list[str]:
    return [f"{where}: `{path}`" for path in SOURCE_PATH.findall(text)
            if not path.startswith(OUTPUT_FOLDERS) and "<" not in path and not source_path_exists(path)]


def test_every_named_module_function_and_parameter_exists():
    missing = [line for where, text in texts() for line in missing_names(where, text)]
    assert missing == [], "names that do not exist:\n" + "\n".join(missing)


def test_every_named_source_file_exists():
    missing = [line for where, text in texts() for line in missing_paths(where, text)]
    assert missing == [], "files that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(("text", "expected"), [
    ("the cached decoding of `generation.step_tokens`", ["x: `generation.step_tokens`"]),  # a module gone:
    ("see the `generation` module", ["x: the `generation` module"]),                    # read by its word
    ("`engine.step_tokens` and `decoding.cache.LayerCache`", []),
    ("`engine.no_such_function`", ["x: `engine.no_such_function`"]),
    ("`LoopedGPT.apply_group`, `LoopedGPT.ln_f` and `LoopedGPT.no_such_method`", ["x: `LoopedGPT.no_such_method`"]),
    ("`train.steps`, `sweep.strategies.kl_head.settings` and `train.stepz`", ["x: `train.stepz`"]),
    ("`torch.compile`, `dvc.yaml` and `metrics.json` lie outside the package", []),
])
def test_the_check_finds_what_is_gone_and_passes_what_is_there(text, expected):
    assert missing_names("x", text) == expected


def test_the_path_check_finds_a_moved_file_and_passes_outputs():
    text = "`decoding/engine.py`, `src/twoscale/decoding/rules.py`, `results/claims.md`, `generation/steps.py`"
    assert missing_paths("x", text) == ["x: `generation/steps.py`"]
