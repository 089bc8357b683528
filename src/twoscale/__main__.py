"""`python -m twoscale <stage> ...`: the one entry point that Snakemake, DVC and users call."""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import logging
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

from twoscale.config import console, progress
from twoscale.config.errors import Stopped, TwoscaleError
from twoscale.config.io import outputs_land_together, recover
from twoscale.config.parameter_files import changed_keys, read_raw, shown_keys
from twoscale.config.params import ParamsError, parse_params
from twoscale.pipeline import orchestrators
from twoscale.pipeline.declaration import dependencies
from twoscale.pipeline.observers import tracking
from twoscale.pipeline.records import provenance

COMMAND_PACKAGES = ("stages", "tools")  # the pipeline's stages; the other commands


@functools.cache
def commands() -> dict[str, tuple[str, str]]:
    """Every command, its module and its help line: each module of twoscale.stages and twoscale.tools that declares
    HELP, read without importing it (an import would load its libraries), the stages in the pipeline's order
    (stages.yaml), the others after. A new command is a new module: this file, which every stage's job runs, stays
    as it is."""
    found = {}
    for package in COMMAND_PACKAGES:
        for path in sorted(Path(__file__).with_name(package).glob("*.py")):
            for node in ast.parse(path.read_text()).body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                    node, ast.AnnAssign) and node.value is not None else []
                if [getattr(target, "id", None) for target in targets] == ["HELP"]:
                    try:
                        found[path.stem] = (f"twoscale.{package}.{path.stem}", ast.literal_eval(node.value))
                    except ValueError:
                        raise TwoscaleError(f"{path}: HELP must be a plain string (read without importing it)")
    order = [name for name in dependencies.STAGES if name in found]
    return {name: found[name] for name in [*order, *sorted(set(found) - set(order))]}


def build_parser(stage: str | None = None) -> argparse.ArgumentParser:
    """The command line; only `stage`'s module is imported for its arguments (each job is a fresh interpreter, and
    importing every stage, plotting libraries included, would add seconds to each)."""
    parser = argparse.ArgumentParser(prog="twoscale", description=__doc__)
    sub = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for name, (module, help_text) in commands().items():
        stage_parser = sub.add_parser(name, help=help_text, description=help_text)
        stage_parser.add_argument("--log", type=Path, help="write the stage's log and progress to this file, and "
                                  "only its start, end and errors to the console (a workflow's job)")
        if name == stage:
            add_arguments(name, importlib.import_module(module), stage_parser)
    return parser


def add_arguments(name: str, command, parser: argparse.ArgumentParser) -> None:
    """A command's options: a pipeline stage's as stages.yaml declares its command (inputs optional where the
    module says what happens `WHEN_INPUTS_LEFT_OUT`), then those its module's `add_arguments` adds, if any."""
    if name in dependencies.STAGES:
        from twoscale.stages.common import add_declared_arguments  # only a stage's job loads it

        add_declared_arguments(parser, name, getattr(command, "WHEN_INPUTS_LEFT_OUT", ""))
    if hasattr(command, "add_arguments"):
        command.add_arguments(parser)


def stage_named(argv: list[str]) -> str | None:
    """The stage a command line names: its first word (the top-level parser has no options but --help)."""
    return argv[0] if argv and argv[0] in commands() else None


def setup_logging(log_file: Path | None) -> None:
    """The stage's log on stderr; with a log file (a workflow's job), there, with its progress, and only warnings on
    stderr, where the jobs running side by side would interleave."""
    console = logging.StreamHandler(sys.stderr)
    handlers: list[logging.Handler] = [console]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w"))
        console.setLevel(logging.WARNING)
    progress.into_log(log_file is not None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", handlers=handlers, force=True)
    for noisy in ("mlflow", "alembic", "urllib3", "git", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def usage_line() -> str:
    """This process's record of its own use as it ends, the last line of a job's log (read by
    pipeline.job_times): CPU seconds, its waited-for children's included, and peak resident memory (for a job forked
    from the preloaded interpreter, the pages it shares with it included)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return f"resources used: cpu_s={cpu_s:.3f} max_rss_mb={own.ru_maxrss / 1024:.1f}"


def stop(signum, frame) -> None:
    raise Stopped


def check_unchanged(path: Path, before: object) -> None:
    """TwoscaleError in one line if the parameter file no longer holds what it held when the stage started (DVC and
    a stage run by hand read the file itself): the stage's outputs would then come from values no longer in force."""
    try:
        after = read_raw(path)
    except ParamsError:
        after = None
    changed = changed_keys(before, after)
    if changed:
        raise TwoscaleError(f"{path} changed while the stage ran ({shown_keys(changed)}): its outputs were not "
                            "written; run it again")


def recording(args: argparse.Namespace, params_file: Path | None, config: object):
    """For a pipeline stage: roll back a landing of its outputs that a kill interrupted, check the inputs it is given
    against their build records (one line, before anything runs, if one was built from other parameters), and
    return what writes its outputs' own records."""
    if params_file is None or args.stage not in dependencies.STAGES:  # benchmark, cost: no pipeline job
        return None
    parse_params(config, str(params_file))  # a bad file: its one-line refusal, before anything reads its keys
    job = provenance.job_of(args.stage, args, config)
    if job is None:
        return None
    recover(provenance.files_written(job, args, config))  # what a kill of its last run left: never a mixed set
    inputs = provenance.check_inputs(job, args, config, params_file)
    return lambda outputs: provenance.write_records(outputs, job, config, inputs)


def fail(args: argparse.Namespace, reason: str, details: str = "") -> int:
    """Say why the stage failed in one line on stderr, and in its log with `details`; the exit code."""
    message = f"twoscale {args.stage}: error: {reason}"
    print(message, file=sys.stderr)
    if args.log is not None:
        with contextlib.suppress(OSError), args.log.open("a") as handle:
            handle.write(details + message + "\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(stage_named(argv)).parse_args(argv)
    signal.signal(signal.SIGTERM, stop)
    if args.stage in dependencies.STAGES:
        orchestrators.watch_orchestrator()
    try:
        return run_stage(args)
    finally:
        if args.log is not None:  # the job's own CPU seconds and peak memory, for `twoscale cost`
            with contextlib.suppress(OSError), args.log.open("a") as handle:
                handle.write(usage_line() + "\n")


def job_line(args: argparse.Namespace, what: str) -> None:
    """One console line of a workflow's job (one with a log file), named by its log."""
    if args.log is not None:
        print(f"twoscale {args.stage} ({args.log}): {what}", file=sys.stderr, flush=True)


def took(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def run_stage(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        setup_logging(args.log)
        job_line(args, "started")
        params_file = getattr(args, "params", None)
        before = read_raw(params_file) if params_file is not None else None
        with outputs_land_together(recording(args, params_file, before)):
            importlib.import_module(commands()[args.stage][0]).run(args)
            if params_file is not None:
                check_unchanged(params_file, before)
    except TwoscaleError as exc:
        tracking.outputs_not_landed("FAILED")
        return fail(args, str(exc))
    except OSError as exc:  # a file the stage could not read or write: one line here, the traceback in its log
        tracking.outputs_not_landed("FAILED")
        return fail(args, f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror or str(exc),
                    traceback.format_exc())
    except KeyboardInterrupt:
        tracking.outputs_not_landed("KILLED")
        print(f"twoscale {args.stage}: interrupted", file=sys.stderr)
        return 130
    except Stopped:
        tracking.outputs_not_landed("KILLED")
        print(f"twoscale {args.stage}: stopped (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    job_line(args, f"done in {took(time.monotonic() - started)}")
    return 0


if __name__ == "__main__":
    console.whole_lines(sys.stderr)  # a job's lines and Snakemake's share the console
    sys.exit(main())
