"""The Snakemake rules, read from the pipeline's declaration (stages.yaml) for one parameter file.

The declaration is written in DVC's syntax; this translates each stage to what a Snakemake rule needs: its
wildcards and their values (a DVC matrix), input and output patterns, the shell command, log, benchmark, threads,
whether it asks for the GPU, whether it times its work, and its report entries. workflow/rules/stages.smk turns each into a rule.

Translation:
  ${item.recipe}         the job's own wildcard: {recipe} in paths, {wildcards.recipe:q} (shell-quoted) in the command;
  ${train.steps}         a parameter value: written into paths, {params.step:q} in the command (COMMAND_PARAMS);
  .../step_{step}.pt     one file per checkpoint step (train.checkpoint_steps); DVC tracks its folder;
  a folder input         every output of every job that lies inside it (DVC: the folder); a folder of the job's
                         own wildcards, those outputs with the wildcards kept.

The declaration's paths lie under data/, results/ and logs/ of the checkout, where the default parameter set
(params.yaml) writes; the rules of any other set put them under its own root (runs/<name>/, params.results_root).
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from twoscale.pipeline.dependencies import PER_CHECKPOINT, declaration, inside, lookup, output_paths

ITEM = re.compile(r"\$\{item\.(\w+)\}")
WILDCARD = re.compile(r"\{(\w+)\}")  # a job's own wildcard in a rule's path
PARAMETER = re.compile(r"\$\{([\w.]+)\}")
CHECKPOINT_STEPS = "train.checkpoint_steps"
# Parameter values a command names, passed to the rule as params (the names are part of the recorded command).
COMMAND_PARAMS = {"train.steps": "step"}
ROOTED = ("data", "results", "logs")  # the top folders of what the stages write, moved under a parameter set's root
ROOTED_ARGUMENT = re.compile(r"(?<=\s)(?=(?:%s)(?:/|\s|$))" % "|".join(ROOTED))


@dataclass(frozen=True)
class Report:
    """How the Snakemake report shows some of a stage's outputs."""

    files: tuple[str, ...]  # file-name patterns of the outputs shown
    caption: str  # a file of workflow/report/
    category: str
    subcategory: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def shows(self, path: str) -> bool:
        return any(fnmatch.fnmatch(PurePosixPath(path).name, pattern) for pattern in self.files)


@dataclass(frozen=True)
class Rule:
    name: str
    wildcards: tuple[tuple[str, tuple[str, ...]], ...]  # per wildcard, the values its jobs take
    inputs: tuple[str, ...]  # files, as patterns of the wildcards
    outputs: tuple[str, ...]
    shell: str
    log: str
    benchmark: str
    threads: int
    gpu: bool  # asks for the GPU of a CUDA run
    timed: bool  # times its work, so no other job may run beside it
    memory_mb: int  # what a job may use, for a cluster's scheduler
    runtime_min: int
    command_params: tuple[tuple[str, Any], ...]
    report: Report | None

    def jobs(self) -> list[dict[str, str]]:
        """Every job's wildcard values."""
        names = [name for name, _ in self.wildcards]
        return [dict(zip(names, values)) for values in itertools.product(*(v for _, v in self.wildcards))]

    def job_outputs(self) -> list[str]:
        return [path.format(**job) for job in self.jobs() for path in self.outputs]


def _values(config: dict[str, Any], expression: str) -> tuple[str, ...]:
    """A matrix entry's values: ${recipes} -> the recipe names (a mapping's keys), ${runtime.seeds} -> '1337', ..."""
    value = lookup(config, PARAMETER.fullmatch(expression).group(1))
    return tuple(str(item) for item in value)


def _pattern(path: str, config: dict[str, Any]) -> str:
    """A declared path as a Snakemake pattern: the job's wildcards in braces, parameter values written in."""
    path = ITEM.sub(r"{\1}", path)
    return PARAMETER.sub(lambda found: str(lookup(config, found.group(1))), path)


def _outputs(stage: dict[str, Any], config: dict[str, Any], root: str) -> list[str]:
    paths = []
    for path in output_paths(stage):
        pattern = _rooted(_pattern(path, config), root)
        if PER_CHECKPOINT in path:  # not ${item.step}, which is the job's own step
            steps = lookup(config, CHECKPOINT_STEPS)
            paths += [pattern.replace(PER_CHECKPOINT, str(step)) for step in steps]
        else:
            paths.append(pattern)
    return paths


def _rooted(path: str, root: str) -> str:
    """A declared path under the parameter set's root ('' for the checkout itself)."""
    return f"{root}/{path}" if root and path.split("/", 1)[0] in ROOTED else path


def _command(stage: dict[str, Any], root: str) -> tuple[str, str, tuple[str, ...]]:
    """The shell command with Snakemake's placeholders and its paths under `root`, the log path (DVC syntax, not
    yet rooted) and the command's params."""
    cmd = stage["cmd"]
    log = re.search(r"--log (\S+)", cmd).group(1)
    cmd = cmd.replace(f"--log {log}", "--log {log:q}")
    cmd = re.sub(r"--params \S+", "--params {params.file:q}", cmd)
    cmd = ITEM.sub(r"{wildcards.\1:q}", cmd)
    named = tuple(key for key in PARAMETER.findall(cmd))
    unknown = set(named) - set(COMMAND_PARAMS)
    if unknown:
        raise ValueError(f"command names parameters with no rule param: {sorted(unknown)}")
    cmd = PARAMETER.sub(lambda found: "{params.%s:q}" % COMMAND_PARAMS[found.group(1)], cmd)
    if root:
        cmd = ROOTED_ARGUMENT.sub(root + "/", cmd)
    return cmd, log, named


def _threads(stage: dict[str, Any], config: dict[str, Any]) -> int:
    threads = stage.get("threads", 1)
    return int(lookup(config, PARAMETER.fullmatch(threads).group(1))) if isinstance(threads, str) else threads


def _report(stage: dict[str, Any]) -> Report | None:
    declared = stage.get("report")
    if declared is None:
        return None
    labels = tuple((name, ITEM.sub(r"{\1}", value)) for name, value in declared.get("labels", {}).items())
    subcategory = declared.get("subcategory")
    return Report(files=tuple(declared["files"]), caption=declared["caption"], category=declared["category"],
                  subcategory=subcategory and ITEM.sub(r"{\1}", subcategory), labels=labels)


def _rule(name: str, stage: dict[str, Any], config: dict[str, Any], root: str) -> Rule:
    shell, log, named = _command(stage, root)
    log = _pattern(log, config)
    return Rule(
        name=name,
        wildcards=tuple((wildcard, _values(config, expression))
                        for wildcard, expression in stage.get("matrix", {}).items()),
        inputs=tuple(_rooted(_pattern(path, config), root) for path in stage["inputs"]),
        outputs=tuple(_outputs(stage, config, root)),
        shell=shell,
        log=_rooted(log, root),
        benchmark=_rooted("results/benchmarks/" + log.removeprefix("logs/").removesuffix(".log") + ".tsv", root),
        threads=_threads(stage, config),
        gpu=bool(stage.get("gpu", False)),
        timed=bool(stage.get("timed", False)),
        memory_mb=int(stage["memory_mb"]),
        runtime_min=int(stage["runtime_min"]),
        command_params=tuple((COMMAND_PARAMS[key], lookup(config, key)) for key in named),
        report=_report(stage),
    )


def rules(config: dict[str, Any], root: str | PurePosixPath = ".") -> list[Rule]:
    """Every stage's rule, its paths under `root` (the checkout itself by default), with a folder input replaced by
    every output of every job inside that folder (none, when no job writes there: a stage with no teachers to
    read)."""
    root = "" if PurePosixPath(root) == PurePosixPath(".") else PurePosixPath(root).as_posix()
    declared = [_rule(name, stage, config, root) for name, stage in declaration().items()]
    patterns = [path for rule in declared for path in rule.outputs]
    every_output = [path for rule in declared for path in rule.job_outputs()]

    def files(path: str) -> list[str]:
        if not any(inside(pattern, path) for pattern in patterns):
            return [path]
        if "{" not in path:
            return [output for output in every_output if inside(output, path)]
        # a folder of the job's own wildcards: the outputs inside it, its wildcards kept (the same for every job)
        folder = re.compile("[^/]+".join(map(re.escape, WILDCARD.split(path)[::2])) + "/")
        return list(dict.fromkeys(path + "/" + output[match.end():] for output in every_output
                                  if (match := folder.match(output))))

    return [replace(rule, inputs=tuple(f for path in rule.inputs for f in files(path))) for rule in declared]
