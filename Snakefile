# twoscale: reproduce "Two-Scale Latent Dynamics for Recurrent-Depth Transformers" end to end.
#   snakemake --cores all                                   # default parameters (params.yaml)
#   snakemake --cores all --configfile configs/smoke.yaml   # another parameter set (an overlay of params.yaml)
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


report: "workflow/report/workflow.rst"  # the report's home page: what the workflow does and how to read it


include: "workflow/rules/common.smk"
# one file per system, written from src/twoscale/pipeline/declaration/stages.yaml (`python -m twoscale workflow`);
# a rule reads the outputs of rules in files before its own
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


# Everything: every output of every job of the set, the claims table and every figure among them (a file removed
# beside what was built from it is built again), and the outputs their build records disown, forced.
rule all:
    default_target: True
    input:
        EVERY_OUTPUT,
        stale_rebuilt,
