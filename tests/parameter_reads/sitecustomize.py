"""Records the parameter keys a process reads, for the end-to-end test of stages.yaml's declared keys.

With this folder on PYTHONPATH, Python imports this module as every process starts. Where TWOSCALE_PARAMETER_READS
names a folder, it hooks twoscale's parameter models as their modules load, and as the process ends writes what was
read, with its command line, to <folder>/<pid>.json: `reads`, the keys whose values were read, and `names`, the
fields holding named sections (recipes, teachers, sweep.strategies) whose names alone were read.

A key is read when a field of a parsed parameter set is read by attribute ('measure.max_loops') or as part of its
section read whole (`model_dump`: each of its fields but those excluded, and those a `model_copy` replaced). The
sections of a run (`Params.run`) count as the shared sections' keys and their recipe's or teacher's
('model.n_layer' and 'recipes.huginn.model.n_layer'), which the recipe may change (not the train keys every run
shares, such as train.steps). Not counted, each a read that no output depends on:
- reads by the observers (`dependencies.OBSERVERS`): what a job logs;
- a checkpoint compared with the parameters in force (`run_fingerprint`, `load_model_matching`) in a stage that
  reads checkpoints: the checkpoint, a declared input, carries them (train, which writes the fingerprint into its
  checkpoints, counts its reads);
- the check that every sweep strategy builds (`check_strategies`), which refuses a bad file before any work;
- resolving a run inside `Params.run` (its shared sections read whole to merge the recipe in).
Not seen: what a process reads other than by attribute or `model_dump` (`model_dump_json`, comparing or hashing
sections; none of the stages does), and what the smoke set's values never lead a stage to read.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import PathFinder

FOLDER = os.environ.get("TWOSCALE_PARAMETER_READS")
WRITES_CHECKPOINTS = "train"  # the stage module that writes run_fingerprint into what it writes

observers: frozenset[str] = frozenset()  # dependencies.OBSERVERS, once that module has loaded
keys_of: dict[int, tuple[str, ...]] = {}  # id of a parsed section -> the keys its fields count under
kept: list[object] = []  # the sections of keys_of, kept alive so that no other object takes their ids
not_read: dict[int, frozenset[str]] = {}  # id of a section -> fields whose values are not the parameter file's
shared_by_every_run: dict[int, tuple[str, ...]] = {}  # id of a run's train section -> keys no recipe changes
read: dict[str, set[str]] = {"reads": set(), "names": set()}
unrecorded = 0  # > 0 inside a call whose reads are not counted


def observed() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") in observers:
            return True
        frame = frame.f_back
    return False


def record(section: object, field: str, section_type: type) -> None:
    """A read of `field` of a registered section (a leaf, or the names of the sections a field holds)."""
    if unrecorded or observed() or field in not_read.get(id(section), ()):
        return
    keys = keys_of[id(section)]
    if field in shared_by_every_run.get(id(section), ()):  # no recipe may change it
        keys = keys[:1]
    value = object.__getattribute__(section, field)
    kind = "names" if isinstance(value, dict) and any(isinstance(v, section_type) for v in value.values()) else "reads"
    read[kind].update(f"{key}.{field}" if key else field for key in keys)


def register(section: object, keys: tuple[str, ...], section_type: type) -> None:
    """Count reads of `section` (and of the sections in its fields) under `keys`."""
    keys_of[id(section)] = keys
    kept.append(section)
    for field in type(section).model_fields:
        value = object.__getattribute__(section, field)
        if isinstance(value, section_type):
            register(value, tuple(f"{key}.{field}" if key else field for key in keys), section_type)
        elif isinstance(value, dict):
            for name, item in value.items():
                if isinstance(item, section_type):
                    register(item, tuple(f"{key}.{field}.{name}" if key else f"{field}.{name}" for key in keys),
                             section_type)


def unrecorded_call(function):
    @functools.wraps(function)
    def call(*args, **kwargs):
        global unrecorded
        unrecorded += 1
        try:
            return function(*args, **kwargs)
        finally:
            unrecorded -= 1
    return call


def hook_params(module) -> None:
    section_type = module.Section
    plain_getattribute = section_type.__getattribute__
    plain_dump, plain_copy = section_type.model_dump, section_type.model_copy

    def getattribute(self, name):
        value = plain_getattribute(self, name)
        if id(self) in keys_of and name in type(self).model_fields and not isinstance(value, section_type):
            record(self, name, section_type)
        return value

    def model_dump(self, *args, **kwargs):
        if id(self) in keys_of:
            excluded = kwargs.get("exclude") or ()
            for field in type(self).model_fields:
                if field not in excluded:
                    record(self, field, section_type)
        return unrecorded_call(plain_dump)(self, *args, **kwargs)

    def model_copy(self, *args, update=None, **kwargs):
        copy = plain_copy(self, *args, update=update, **kwargs)
        if id(self) in keys_of:
            register(copy, keys_of[id(self)], section_type)
            not_read[id(copy)] = not_read.get(id(self), frozenset()) | frozenset(update or ())
            if id(self) in shared_by_every_run:
                shared_by_every_run[id(copy)] = shared_by_every_run[id(self)]
        return copy

    section_type.__getattribute__ = getattribute
    section_type.model_dump = model_dump
    section_type.model_copy = model_copy

    plain_parse = module.parse_params

    @functools.wraps(plain_parse)
    def parse_params(*args, **kwargs):
        params = plain_parse(*args, **kwargs)
        register(params, ("",), section_type)
        return params

    module.parse_params = parse_params
    plain_run = module.Params.run

    @functools.wraps(plain_run)
    def run(self, recipe, seed):
        result = unrecorded_call(plain_run)(self, recipe, seed)
        if id(self) in keys_of:
            owner = "recipes" if recipe in plain_getattribute(self, "recipes") else "teachers"
            for section in ("model", "train"):
                register(getattr(result, section), (section, f"{owner}.{recipe}.{section}"), section_type)
            shared_by_every_run[id(result.train)] = module.SHARED_TRAIN_KEYS
        return result

    module.Params.run = run


def hook_dependencies(module) -> None:
    global observers
    observers = module.OBSERVERS


def hook_trainer(module) -> None:
    if sys.argv[1:2] != [WRITES_CHECKPOINTS]:
        module.run_fingerprint = unrecorded_call(module.run_fingerprint)
    module.load_model_matching = unrecorded_call(module.load_model_matching)


def hook_sweep(module) -> None:
    module.check_strategies = unrecorded_call(module.check_strategies)


HOOKS = {"twoscale.config.params": hook_params, "twoscale.pipeline.declaration.dependencies": hook_dependencies,
         "twoscale.training.trainer": hook_trainer, "twoscale.exits.sweep": hook_sweep}


class AfterLoading(MetaPathFinder):
    """Finds the hooked modules as Python would, and hooks each once it has run."""

    def find_spec(self, name, path, target=None):
        if name not in HOOKS:
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            HOOKS[name](module)
        spec.loader.exec_module = exec_module
        return spec


def write() -> None:
    """What was read, for any process that ran a stage (a figure stage may parse no parameter set), not for the
    command that waits for a forked job."""
    if "twoscale.config" in sys.modules:
        path = os.path.join(os.environ.get("TWOSCALE_PARAMETER_READS", FOLDER), f"{os.getpid()}.json")
        with open(path, "w") as out:
            json.dump({"argv": sys.argv, **{kind: sorted(keys) for kind, keys in read.items()}}, out)


if FOLDER:
    sys.meta_path.insert(0, AfterLoading())
    atexit.register(write)
