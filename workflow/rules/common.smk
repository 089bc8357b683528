# Shared helpers: the parameter file in use, its validation, stage dependencies and the MLflow parent run.
import os
import subprocess
from pathlib import Path

import yaml

from twoscale.pipeline import dependencies
from twoscale.pipeline import tracking
from twoscale.pipeline.params import ParamsError
from twoscale.stages.validation import read_params
from twoscale.training.device import uses_cuda

# `--configfile X` picks another complete parameter set; stages read that same file through --params.
PARAMS_FILE = os.path.relpath(workflow.overwrite_configfiles[-1]) if workflow.overwrite_configfiles else "params.yaml"
# Rules pass the file as a Path: Snakemake leaves a parameter it cannot serialise out of its params trigger, so a
# second parameter file with the same values (configs/study.yaml over a default run) reruns nothing; the values
# themselves are each job's `values` parameter.
PARAMS_PATH = Path(PARAMS_FILE)

try:
    PARAMS = read_params(PARAMS_FILE)  # one line naming the bad key; also what JSON schema cannot express
except ParamsError as exc:
    raise WorkflowError(str(exc)) from None
if workflow.config_settings.config:
    raise WorkflowError("parameters come from a file: use --configfile FILE, not --config KEY=VALUE")
with open(PARAMS_FILE) as handle:  # the file alone: Snakemake would deep-merge it into params.yaml
    config.clear()
    config.update(yaml.safe_load(handle))
validate(config, "../schemas/params.schema.json")

os.environ.setdefault(tracking.ORCHESTRATOR_ENV, "snakemake")


def sources(stage):
    return dependencies.sources(stage)


def param_values(stage):
    """The stage's parameter values; for a per-run stage, with its job's recipe (and strategy)."""
    return lambda wildcards: dependencies.param_values(
        stage, config, wildcards.get("recipe"), wildcards.get("strategy")
    )


# Jobs that load a model ask for one GPU when the run is on CUDA; the GPU profile (profiles/gpu) says one exists,
# so those jobs never share it: their timings stay their own and their memory is the device's.
GPU_PER_JOB = int(uses_cuda(PARAMS.runtime.device))

RECIPES = list(config["recipes"])
SEEDS = config["runtime"]["seeds"]
STEPS = config["train"]["checkpoint_steps"]
STRATEGIES = list(config["sweep"]["strategies"])


SAMPLE_RECIPES = config["sample"]["recipes"]
TEACHERS = list(config["teachers"])
BLOCKS = config["distill"]["blocks"]


def every_run(pattern, **more):
    """pattern expanded over every recipe and seed (and the other given wildcards)."""
    return expand(pattern, recipe=RECIPES, seed=SEEDS, **more)


def every_sampled_run(pattern):
    """pattern expanded over the runs of the recipes the sample stage works on."""
    return expand(pattern, recipe=SAMPLE_RECIPES, seed=SEEDS)


def every_teacher_run(pattern, **more):
    """pattern expanded over every teacher (a plain GPT under `teachers`) and seed."""
    return expand(pattern, recipe=TEACHERS, seed=SEEDS, **more)


def one_of(names):
    """A wildcard constraint matching exactly these names (none: matching nothing)."""
    return "|".join(names) if names else "(?!)"


wildcard_constraints:
    recipe=one_of(RECIPES + TEACHERS),
    blocks=r"\d+",
    seed=r"\d+",
    step=r"\d+",
    strategy="|".join(STRATEGIES),


def pipeline_started():
    """Create the MLflow store and this invocation's parent run before any job starts."""
    invocation = f"snakemake-{os.getpid()}"
    run_id = tracking.start_pipeline_run("snakemake", invocation, {"params_file": PARAMS_FILE})
    os.environ[tracking.PARENT_ENV] = run_id


def pipeline_finished(status):
    run_id = os.environ.get(tracking.PARENT_ENV)
    if run_id:
        tracking.end_pipeline_run(run_id, status)
    if status == "FINISHED" and PARAMS_FILE == "params.yaml" and os.path.isdir(".dvc"):
        dvc_commit_keeping_mtimes()


def dvc_commit_keeping_mtimes():
    """Record the results in dvc.lock so `dvc repro` sees them current. `dvc commit` replaces an output whose
    content its cache already holds by a link to that cache file, which carries the mtime of whenever those bytes
    were first cached; an output rebuilt byte for byte would then look older than its inputs, and Snakemake would
    rebuild it on every run. The outputs get their own mtimes back."""
    mtimes = {path: path.stat().st_mtime_ns for top in ("data", "results") for path in Path(top).rglob("*")
              if path.is_file() and not path.is_symlink()}
    done = subprocess.run(["dvc", "commit", "--force", "--quiet"], capture_output=True, text=True)
    if done.returncode:
        print("note: dvc commit skipped:", (done.stderr.strip().splitlines() or ["?"])[-1])
    for path, mtime in mtimes.items():
        if path.is_file() and path.stat().st_mtime_ns != mtime:
            os.utime(path, ns=(mtime, mtime), follow_symlinks=False)
