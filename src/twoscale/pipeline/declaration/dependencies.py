"""What each pipeline stage depends on: its parameter keys and its source files.

A stage's source files are not listed by hand: they are its stage module (`twoscale.stages.<name>`) and every module
of the package that it imports, directly or not, as read from the import graph (grimp), the plumbing aside. The
plumbing runs every stage and makes none of its numbers: the entry points, the configuration (the parameter files
and their schema, landing outputs, errors, the console and progress), the orchestration (this declaration, the jobs,
build records, the preloaded interpreter, and the observers: MLflow tracking, which watches a job and writes none of
its outputs) and the stage modules' shared arguments (`stages.common`). An edit of the plumbing reruns nothing; what
guards it is the smoke set run at two commits and compared output by output (`scripts/compare_commits.py`,
docs/development.md), and a test runs a stage with tracking on and off and finds its outputs byte for byte the same.
What only the plumbing imports is left out with it. Snakemake's rules read this (params trigger reruns, sources are
inputs); dvc.yaml lists the same, and tests check that the two orchestrators agree. A key with {recipe} or
{strategy} is the job's recipe or strategy (DVC: ${item.recipe}, ${item.strategy}).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

from twoscale.config.parameter_files import parse_yaml

PACKAGE = "twoscale"
SOURCE_ROOT = Path(__file__).resolve().parents[3]  # src/, which holds the package
OBSERVERS = frozenset(f"{PACKAGE}.pipeline.observers.{path.stem}"  # every module of the observers' package
                      for path in Path(__file__).parents[1].joinpath("observers").glob("*.py"))
PLUMBING_PACKAGES = (f"{PACKAGE}.config", f"{PACKAGE}.pipeline")  # the observers among them
PLUMBING_MODULES = frozenset({f"{PACKAGE}.__main__", f"{PACKAGE}.stages.common"})

DECLARATION = Path(__file__).with_name("stages.yaml")


@functools.cache
def declared_stages() -> dict[str, dict[str, Any]]:
    """stages.yaml as read, once per process and shared: for reading only (`declaration` gives copies)."""
    return parse_yaml(DECLARATION.read_text())


def declaration() -> dict[str, dict[str, Any]]:
    """Every stage as declared: cmd, inputs, params, outs (and matrix, metrics, plots), in DVC's syntax; a stage
    that merges another's keys (`<<: *train`) gets copies of them, which a caller may change."""
    return {name: copy.deepcopy(stage) for name, stage in declared_stages().items()}


def _format_key(key: str) -> str:
    """A declared parameter key as a template of the job's wildcards: ${item.recipe} -> {recipe}."""
    return re.sub(r"\$\{item\.(\w+)\}", r"{\1}", key)


STAGES: dict[str, list[str]] = {  # each stage's parameter keys
    name: [_format_key(key) for key in stage.get("params", [])] for name, stage in declared_stages().items()
}


@functools.cache
def stage_module(stage: str) -> str:
    """The stage module a stage's command runs (`... preload <module> ...`): train for train_teacher."""
    words = declared_stages()[stage]["cmd"].split()
    return words[words.index(f"{PACKAGE}.pipeline.preload") + 1]


def stage_module_names() -> list[str]:
    """Every stage module the declaration's commands run, once each, in the declaration's order."""
    return list(dict.fromkeys(stage_module(stage) for stage in declared_stages()))


@functools.cache
def _matrices() -> dict[str, dict[str, str]]:
    return {name: stage.get("matrix", {}) for name, stage in declared_stages().items()}


def holds_job(stage: str, keys: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether the stage's matrix under `config` has the job of these keys (recipe, seed, strategy, blocks; a key
    the matrix does not expand is not looked at)."""
    return all(keys[name] in list(lookup(config, values.removeprefix("${").removesuffix("}")))
               for name, values in _matrices()[stage].items() if name in keys)


@functools.cache
def _import_graph():
    import grimp  # imported here: only the orchestrators ask for sources

    return grimp.build_graph(PACKAGE, cache_dir=None)


def module_path(module: str) -> str:
    """The source file of a module of the package, relative to the repository root (src/twoscale/...)."""
    relative = Path(*module.split("."))
    path = relative / "__init__.py" if (SOURCE_ROOT / relative).is_dir() else relative.with_suffix(".py")
    return (Path(SOURCE_ROOT.name) / path).as_posix()


def module_sources(module: str) -> list[str]:
    """The source files of a module of the package and of every module it imports, directly or not, sorted."""
    return sorted(module_path(name) for name in {module, *_import_graph().find_upstream_modules(module)})


def is_plumbing(module: str) -> bool:
    """Whether a module of the package runs every stage without making its numbers (the module docstring)."""
    return module in PLUMBING_MODULES or any(module == package or module.startswith(f"{package}.")
                                             for package in PLUMBING_PACKAGES)


def imported_past_plumbing(root: str) -> set[str]:
    """The modules `root` imports, directly or not, with the root, not counting the plumbing and what is imported
    only through it."""
    graph = _import_graph()
    found: set[str] = set()
    waiting = [root]
    while waiting:
        module = waiting.pop()
        if module not in found and not is_plumbing(module):
            found.add(module)
            waiting += graph.find_modules_directly_imported_by(module)
    return found


def stage_modules(stage: str) -> set[str]:
    """The modules whose code makes a stage's outputs: its stage module and what it imports, the plumbing aside."""
    return imported_past_plumbing(f"{PACKAGE}.stages.{stage_module(stage)}")


def sources(stage: str) -> list[str]:
    """The stage's source files, sorted."""
    if stage not in STAGES:
        raise KeyError(f"no pipeline stage {stage!r}")
    return sorted(module_path(module) for module in stage_modules(stage))


# what Snakemake's rules alone read (DVC runs one job at a time and draws no report)
SNAKEMAKE_ONLY = ("system", "threads", "gpu", "timed", "report", "memory_mb", "runtime_min", "also_reads")
PER_CHECKPOINT = "{step}"  # in a declared output: one file per step of train.checkpoint_steps


# What DVC's cache keeps: what is large, model weights (checkpoints, surrogates), token arrays and the raw corpus
# (sizes: docs/pipeline.md#where-outputs-are-kept). Every other output (tables, metrics, figures, claims,
# histories; their build records beside them) is kept by git, so that a clone redraws every figure and reads every
# claim without the cache.
IN_DVC_CACHE = (".pt", ".npy", "data/raw/corpus.txt")


def in_dvc_cache(path: str) -> bool:
    """Whether DVC's cache keeps a declared output (IN_DVC_CACHE), rather than git."""
    return path.endswith(IN_DVC_CACHE)


def param_values(stage: str, config: dict[str, Any], recipe: str | None = None, strategy: str | None = None
                 ) -> dict[str, Any]:
    """The values of the stage's parameter keys ('data.val_fraction' -> config['data']['val_fraction']); keys
    with {recipe} or {strategy} name the job's recipe or strategy."""
    keys = [key.format(recipe=recipe, strategy=strategy) for key in STAGES[stage]]
    return {key: lookup(config, key) for key in keys}


def output_paths(stage: dict[str, Any]) -> list[str]:
    """A declared stage's output paths: its outs, metrics and plots (each a path, or a path with DVC options)."""
    declared = stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", [])
    return [entry if isinstance(entry, str) else next(iter(entry)) for entry in declared]


def inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


PLACEHOLDER = re.compile(r"\$\{(?:[\w.]*\.)?(\w+)\}|\{(\w+)\}")  # in a declared path: ${item.step}, ${train.steps},
# {step}; its name, the last word


def readable(path: str) -> str:
    """A declared path as a user reads it: results/train/<recipe>/seed_<seed>/checkpoints/step_<step>.pt."""
    return PLACEHOLDER.sub(lambda match: f"<{match[1] or match[2]}>", path)


def same_or_inside(path: str, folder: str) -> bool:
    """Whether a declared path is `folder` or lies inside it, whatever their placeholders are called ({step},
    ${item.step} and ${train.steps} alike)."""
    path, folder = (PLACEHOLDER.sub("{}", text) for text in (path, folder))
    return path == folder or inside(path, folder)


def input_options(stage: str) -> dict[str, str]:
    """The options of a stage's command that name what it reads, with their declared values: a declared input,
    or a folder that holds inputs and no outputs ({'--data-dir': 'data/prepared', ...})."""
    declared = declared_stages()[stage]
    return {option: value for option, value in _options(declared).items()
            if _holds(declared["inputs"], value) and not _holds(output_paths(declared), value)}


def output_options(stage: str) -> dict[str, str]:
    """The options of a stage's command that name what it writes, with their declared values: a declared output,
    or a folder that holds outputs ({'--out-dir': 'results/train/${item.recipe}/seed_${item.seed}', ...})."""
    declared = declared_stages()[stage]
    return {option: value for option, value in _options(declared).items() if _holds(output_paths(declared), value)}


def command_options(stage: str) -> dict[str, str]:
    """The options of a stage's command but --params and --log, in its order, with their declared values."""
    return _options(declared_stages()[stage])


def _options(declared: dict[str, Any]) -> dict[str, str]:
    words = declared["cmd"].split()
    return {option: value for option, value in zip(words, words[1:])
            if option.startswith("--") and option not in ("--params", "--log")}


def _holds(paths: list[str], value: str) -> bool:
    return any(path == value or inside(path, value) for path in paths)


def lookup(config: dict[str, Any], key: str) -> Any:
    """config['a']['b'] for key 'a.b'."""
    value: Any = config
    for part in key.split("."):
        value = value[part]
    return value
