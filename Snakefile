# twoscale: reproduce "Two-Scale Latent Dynamics for Recurrent-Depth Transformers" end to end.
#   snakemake --cores all                                   # default parameters (params.yaml)
#   snakemake --cores all --configfile configs/smoke.yaml   # another parameter set (an overlay of params.yaml)
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


report: "workflow/report/workflow.rst"  # the report's home page: what the workflow does and how to read it


include: "workflow/rules/common.smk"
# one file per system, written from src/twoscale/pipeline/stages.yaml (`python -m twoscale workflow`); a rule reads
# the outputs of rules in files before its own
include: "workflow/rules/data.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/geometry.smk"
include: "workflow/rules/exits.smk"
include: "workflow/rules/sampler.smk"
include: "workflow/rules/surrogates.smk"
include: "workflow/rules/claims.smk"


onstart:
    pipeline_started()


onsuccess:
    pipeline_finished("FINISHED")


onerror:
    pipeline_finished("FAILED")


# Everything: the claims table, every figure, and every output of every job (a file removed beside what was built
# from it is built again).
rule all:
    default_target: True
    input:
        EVERY_OUTPUT,
        stale_rebuilt,
        rules.claims.output,
        rules.geometry_figures.output,
        rules.precision_figures.output,
        rules.mechanism_figures.output,
        rules.exit_figures.output,
        expand(rules.sampler_figures.output, recipe=config["sample"]["recipes"], seed=config["runtime"]["seeds"]),
        expand(rules.phase_figures.output, recipe=config["teachers"], seed=config["runtime"]["seeds"]),
        rules.surrogate_figures.output,
