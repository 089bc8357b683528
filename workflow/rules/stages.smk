# One rule per stage of the pipeline's declaration (src/twoscale/pipeline/stages.yaml), as translated by
# twoscale.pipeline.snakemake_rules for the parameter file in use.
import glob
import re

from twoscale.pipeline import snakemake_rules

RULES = snakemake_rules.rules(config, RESULTS_ROOT)
SHELL = {spec.name: spec.shell for spec in RULES}
# The files that data.source "text" names (paths or globs, `**` recursing) are the corpus stage's inputs, so an
# edit to one reruns it; dvc.yaml cannot list them from a parameter. A pattern matching nothing adds nothing, and
# the corpus job then fails naming it.
TEXT_FILES = sorted({path for pattern in config["data"]["text_files"] for path in glob.glob(pattern, recursive=True)
                     if os.path.isfile(path)}) if config["data"]["source"] == "text" else []


def in_report(spec, path):
    """The output, flagged for the Snakemake report when the stage's report shows it."""
    shown = spec.report
    if shown is None or not shown.shows(path):
        return path
    return report(path, caption=f"../report/{shown.caption}", category=shown.category,
                  subcategory=shown.subcategory, labels=dict(shown.labels) or None)


def one_of(values):
    """A wildcard constraint matching exactly these values (none: matching nothing)."""
    return "|".join(re.escape(value) for value in values) if values else "(?!)"


# A timed job (latency, sample) reserves every core Snakemake was given, so that no other job runs beside it while
# it measures; its torch threads stay those of its parameters. (A function, so that commands that schedule no job,
# such as --unlock, need no --cores.) The `timed` resource marks these jobs for a cluster profile, which can ask for
# a node of their own.
for spec in RULES:
    # Each rule's command is found by its name. Snakemake evaluates the shell expression twice: once here, to record
    # the rule's command (`rule` is then the global set below), and again inside the job (where `rule` is the job's
    # rule name). The loop variable would by then name the last stage.
    globals()["rule"] = spec.name

    rule:
        name:
            spec.name
        input:
            dependencies.sources(spec.name),
            spec.inputs,
            TEXT_FILES if spec.name == "corpus" else [],
        output:
            [in_report(spec, path) for path in spec.outputs],
        params:
            values=param_values(spec.name),
            file=PARAMS_PATH,
            **dict(spec.command_params),
        log:
            spec.log,
        benchmark:
            spec.benchmark
        threads: (lambda wildcards: workflow.cores) if spec.timed else spec.threads
        resources:
            mem_mb=spec.memory_mb,
            runtime=spec.runtime_min,
            **({"gpu": GPU_PER_JOB} if spec.gpu else {}),
            **({"timed": 1} if spec.timed else {}),
        wildcard_constraints:
            **{wildcard: one_of(values) for wildcard, values in spec.wildcards},
        conda:
            "../envs/twoscale.yaml"
        shell:
            SHELL[rule]


globals().pop("rule")
