"""What the declaration says a run redoes after a change of its parameters or files, computed from the declared
jobs alone (no orchestrator): what the end-to-end tests hold Snakemake's and DVC's plans to, and the docs' lists."""

from __future__ import annotations

import collections

from twoscale.pipeline.declaration import dependencies, jobs


def declared_jobs(config: dict) -> list[tuple[jobs.Stage, dict, set[str], set[str]]]:
    """Every job of the declaration under `config`: its stage, wildcard values, and the files it reads and writes."""
    return [(stage, job, {path.format(**job) for path in stage.inputs}, {path.format(**job) for path in stage.outputs})
            for stage in jobs.stages(config) for job in stage.jobs()]


def changed_jobs(before: dict, after: dict) -> dict[tuple, str]:
    """The jobs of `after` that `before` lacks or whose parameter values (`dependencies.param_values`, the keys the
    declaration gives their stage) differ: by (stage, wildcard values), each with DVC's name for it."""
    def values(stage: str, job: dict, config: dict) -> dict | None:
        try:
            return dependencies.param_values(stage, config, job.get("recipe"), job.get("strategy"))
        except KeyError:  # a strategy or recipe the set does not have
            return None

    had = {(stage.name, tuple(job.items())) for stage, job, _, _ in declared_jobs(before)}
    return {(stage.name, tuple(job.items())): stage.dvc_name(job) for stage, job, _, _ in declared_jobs(after)
            if (stage.name, tuple(job.items())) not in had or values(stage.name, job, before) != values(
                stage.name, job, after)}


def declared_reruns(before: dict, after: dict, touched: frozenset[str] = frozenset()) -> dict[tuple, str]:
    """What the declaration says a run must redo when its parameters go from `before` to `after` and the files
    `touched` are newer: the changed jobs (`changed_jobs`), every job reading a touched file, and every job reading
    what those write."""
    declared, redo, newer = declared_jobs(after), changed_jobs(before, after), set(touched)
    while True:
        newer |= {path for stage, job, _, outputs in declared if (stage.name, tuple(job.items())) in redo
                  for path in outputs}
        reading = {(stage.name, tuple(job.items())): stage.dvc_name(job) for stage, job, inputs, _ in declared
                   if inputs & newer}
        if reading.keys() <= redo.keys():
            return redo
        redo |= reading


def per_stage(reruns: dict[tuple, str]) -> dict[str, int]:
    """Jobs by stage, as Snakemake's dry run counts them."""
    return dict(collections.Counter(stage for stage, _ in reruns))
