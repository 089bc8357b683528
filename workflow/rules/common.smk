# Shared by the files of rules (the Snakefile includes this first): the parameter file in use and its validation,
# where the run writes (DATA, RESULTS, LOGS), each stage's source files and parameter values, the resources of its
# jobs; and the MLflow parent run and the claim on the checkout against DVC.
import contextlib
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path


from snakemake.settings.enums import RerunTrigger

from twoscale.pipeline.declaration import dependencies
from twoscale.pipeline.declaration import jobs
from twoscale.pipeline import orchestrators
from twoscale.pipeline.observers import tracking
from twoscale.config import console
from twoscale.config.errors import TwoscaleError
from twoscale.config.params import ParamsError
from twoscale.config.parameter_files import read_raw, results_root
from twoscale.stages.validation import read_params
from twoscale.training.gpu import uses_cuda

# Snakemake's records and the jobs' lines share the console: each leaves in one write (twoscale.config.console)
console.whole_records(sys.stderr)

# `--configfile X` picks another parameter set (a file that changes params.yaml: its `base`).
PARAMS_FILE = os.path.relpath(workflow.overwrite_configfiles[-1]) if workflow.overwrite_configfiles else "params.yaml"

# A bad parameter file stops the run with one line naming the key (a WorkflowError would put its own header and a
# traceback line around it).
try:
    # The run reads the file once, here: the workflow and its jobs use a snapshot of it (twoscale.pipeline.
    # orchestrators), so an edit while the run is under way changes nothing of it. Jobs that Snakemake spawns on a
    # cluster node read the snapshot of the run that spawned them.
    if workflow.is_main_process or orchestrators.SNAPSHOT_ENV not in os.environ:
        os.environ[orchestrators.SNAPSHOT_ENV] = str(orchestrators.params_snapshot(PARAMS_FILE))
    SNAPSHOT = os.environ[orchestrators.SNAPSHOT_ENV]
    # also checks what JSON schema cannot express, once per sweep section and code (marks beside the snapshots)
    PARAMS = read_params(SNAPSHOT, PARAMS_FILE, orchestrators.SNAPSHOTS.parent / "checked")
    # where it writes: the checkout's data/, results/ and logs/ for params.yaml, runs/<name>/ for another file
    RESULTS_ROOT = results_root(PARAMS_FILE)
except ParamsError as exc:
    if workflow.is_main_process and orchestrators.SNAPSHOT_ENV in os.environ:  # a refused set's snapshot serves no run
        Path(os.environ[orchestrators.SNAPSHOT_ENV]).unlink(missing_ok=True)
    sys.exit(f"error: {exc}")
if workflow.config_settings.config:  # the values would not reach the jobs, which read the parameter file
    sys.exit("error: parameters come from a file, not --config KEY=VALUE; the same run, in a folder of its own: "
             + orchestrators.override_command(PARAMS_FILE, workflow.config_settings.config, sys.argv[1:]))
config.clear()  # the set the file resolves to, not Snakemake's own deep merge of it into params.yaml (which keeps
# the entries an overlay drops)
config.update(read_raw(SNAPSHOT))
validate(config, "../schemas/params.schema.json")
# Jobs read the snapshot through --params. Rules pass it as a Path: Snakemake leaves a parameter it cannot serialise
# out of its params trigger, so a second parameter file with the same values (configs/study.yaml over a default run)
# reruns nothing; the values themselves are each job's `values` parameter.
PARAMS_PATH = Path(SNAPSHOT)

os.environ.setdefault(tracking.ORCHESTRATOR_ENV, "snakemake")
if workflow.is_main_process:  # a job whose run is killed outright stops itself (orchestrators.watch_orchestrator)
    os.environ[orchestrators.ORCHESTRATOR_PID_ENV] = orchestrators.orchestrator_named()

# Every output of every job of the set. The default target asks for each: Snakemake builds a missing file only
# where something it must build reads it, so one removed (by a failed job, or by hand) beside the outputs built
# from it would otherwise stay missing.
EVERY_OUTPUT = [path for stage in jobs.stages(config, RESULTS_ROOT) for path in stage.job_outputs()]

# An output that is there but is not the file its build record describes (replaced by hand, its modification time
# kept or not; restored by `dvc checkout` without its record), or was built from other values or inputs than the
# set's, is rebuilt with everything built from it: Snakemake looks at times and at its own records only, and would
# call it current while the jobs reading it refuse it.
# (Checked against the set as its jobs read it: `validate` above fills in the schema's defaults, which a job's
# records do not hold.)
# An output whose landing a kill interrupted counts as stale (its job's rerun rolls it back); an unreadable record of
# one stops the run here, before any job would remove outputs.
try:
    STALE = (orchestrators.stale_outputs(EVERY_OUTPUT, read_raw(SNAPSHOT), PARAMS_FILE) if workflow.is_main_process
             else [])
except TwoscaleError as exc:
    sys.exit(f"error: {exc}")
if STALE:
    print(f"note: {len(STALE)} output(s) are not what their build records and {PARAMS_FILE} say, so they are built "
          f"again: {', '.join(STALE[:3])}{' ...' if len(STALE) > 3 else ''}", file=sys.stderr)

# A report shows the outputs as they are: none while some are to be rebuilt, or while a run is rewriting them.
if workflow.is_main_process and any(arg == "--report" or arg.startswith("--report=") for arg in sys.argv[1:]):
    try:
        with orchestrators.written_by(Path.cwd(), "snakemake --report"):
            pass
    except TwoscaleError as exc:
        sys.exit(f"error: no report now: {exc}")
    if STALE:
        sys.exit(f"error: no report while {len(STALE)} output(s) are to be built again ({STALE[0]} ...): run "
                 f"snakemake --cores all --configfile {PARAMS_FILE} first")


def stale_rebuilt(wildcards):
    """The default target's way to rebuild the stale outputs: Snakemake's own --forcerun for them. (The Snakefile is
    read before the run's settings exist; the DAG, built after, asks for this while it resolves the target, and
    decides what to run only then.) Nothing to read."""
    workflow.dag.forcefiles.update(STALE)
    return []


# where the run writes: the checkout's data/, results/ and logs/ for params.yaml, under runs/<name>/ for another
# parameter file (the declaration's paths, twoscale.pipeline.declaration.jobs)
DATA, RESULTS, LOGS = (jobs.rooted(top, "" if RESULTS_ROOT == Path(".") else RESULTS_ROOT.as_posix())
                       for top in jobs.ROOTED)

# The files that data.source "text" names (paths or globs, `**` recursing) are the corpus stage's inputs, so an
# edit to one reruns it; dvc.yaml cannot list them from a parameter. A pattern matching nothing adds nothing, and
# the corpus job then fails naming it.
TEXT_FILES = sorted({path for pattern in config["data"]["text_files"] for path in glob.glob(pattern, recursive=True)
                     if os.path.isfile(path)}) if config["data"]["source"] == "text" else []


def sources(stage):
    """The stage's source files: its stage module and what that imports (a stage reruns when one changes)."""
    return dependencies.sources(stage)


def existing(path):
    """A repository file a stage reads where the checkout has it, for every parameter set (the committed study a
    run is read against: stages.yaml's `reference`)."""
    return [path] if os.path.isfile(path) else []


def ancestor(files, levels, empty=None):
    """The folder `levels` above a rule's file (of a list, the shallowest): the folders the commands name, derived
    from the rules' own files, as Snakemake's linter asks. An empty list (a folder input that no job of the
    parameter set writes into) gives `empty`."""
    if not files and empty is not None:
        return empty
    file = files if isinstance(files, str) else min(files, key=lambda path: len(Path(path).parts))
    return Path(file).parents[levels - 1].as_posix()


def one_of(values):
    """A wildcard constraint matching exactly these values (none: matching nothing)."""
    return "|".join(re.escape(str(value)) for value in values) if values else "(?!)"


def every_core(wildcards):
    """A timed job's threads (latency, sample): every core Snakemake was given, so that no other job runs beside it
    while it measures; its torch threads stay those of its parameters. (A function, so that commands that schedule
    no job, such as --unlock, need no --cores.) The `timed` resource marks these jobs for a cluster profile, which
    can ask for a node of their own."""
    return workflow.cores


def param_values(stage):
    """The stage's parameter values; for a per-run stage, with its job's recipe (and strategy)."""
    return lambda wildcards: dependencies.param_values(
        stage, config, wildcards.get("recipe"), wildcards.get("strategy")
    )


# Jobs that load a model ask for one GPU when the run is on CUDA; the GPU profile (profiles/gpu) says one exists,
# so those jobs never share it: their timings stay their own and their memory is the device's.
GPU_PER_JOB = int(uses_cuda(PARAMS.runtime.device))


# While this run is under way, DVC refuses to touch what it writes (twoscale.pipeline.orchestrators).
WRITING = contextlib.ExitStack()


def submits_to_slurm():
    """Whether this run's jobs go to Slurm (`executor: slurm`, as profiles/slurm sets). Snakemake sets its executor
    plugin just before onstart (None while the Snakefile is read; jobs get --no-hooks): call it from onstart only."""
    return getattr(workflow.executor_plugin, "name", None) == "slurm"


def pipeline_started():
    """Claim data/ and results/ against DVC, then create the MLflow store and this invocation's parent run, before
    any job starts; on a local run, the scheduler is woken by jobs only (no timers)."""
    if not submits_to_slurm():
        orchestrators.scheduler_woken_by_jobs(workflow.scheduler)
    command = " ".join(["snakemake", *sys.argv[1:]])
    try:
        with tracking.interrupts_held():
            WRITING.enter_context(orchestrators.written_by(Path.cwd(), command))
            # a tracking server that does not answer or a store that cannot be opened stops the run here, in one line
            run_id = tracking.start_pipeline_run("snakemake", f"snakemake-{os.getpid()}",
                                                 {"params_file": PARAMS_FILE, "results_root": str(RESULTS_ROOT)})
    except TwoscaleError as exc:
        WRITING.close()
        sys.exit(f"error: {exc}")
    except BaseException:  # Ctrl-C while the store is created: no job ran, so give the claim back now
        WRITING.close()
        raise
    if run_id:  # None with TWOSCALE_TRACKING=off
        os.environ[tracking.PARENT_ENV] = run_id
        stage_runs = tracking.start_stage_groups(run_id, dependencies.stage_module_names())
        os.environ[tracking.STAGE_GROUPS_ENV] = json.dumps(stage_runs)
        if warning := tracking.sqlite_on_slurm_warning(tracking.tracking_uri(), submits_to_slurm()):
            print(warning, file=sys.stderr)


def pipeline_finished(status):
    WRITING.close()
    run_id = os.environ.get(tracking.PARENT_ENV)
    if run_id:
        tracking.end_pipeline_run(run_id, status)
    if status == "FINISHED" and RESULTS_ROOT == Path(".") and os.path.isdir(".dvc"):
        if Path(PARAMS_FILE).read_bytes() != Path(SNAPSHOT).read_bytes():
            # dvc.lock would record the edited values beside results built from the snapshot's
            print("note: dvc commit skipped: params.yaml changed while the workflow ran; run it again")
        elif not builds_everything():
            # `dvc commit` records every stage: it would call current the outputs this run left out
            print("note: dvc commit skipped: the run built some targets only; `snakemake` with none records them")
        else:
            dvc_commit_keeping_mtimes()


def builds_everything():
    """Whether this run brought every output up to date: the default target, every rule, every rerun trigger."""
    dag = workflow.dag_settings
    return (set(dag.targets) <= {"all"} and not (dag.target_jobs or dag.until or dag.omit_from or dag.allowed_rules
                                                 or dag.batch) and set(dag.rerun_triggers) == set(RerunTrigger.all()))


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
    else:  # what `dvc commit` keeps of stages dvc.yaml no longer has
        orchestrators.drop_stages_gone(Path("dvc.lock"), orchestrators.dvc_stage_names(config))
    for path, mtime in mtimes.items():
        if path.is_file() and path.stat().st_mtime_ns != mtime:
            os.utime(path, ns=(mtime, mtime), follow_symlinks=False)
