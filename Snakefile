# twoscale: reproduce "Two-Scale Latent Dynamics for Recurrent-Depth Transformers" end to end.
#   snakemake --cores all                                   # default parameters (params.yaml)
#   snakemake --cores all --configfile configs/smoke.yaml   # another parameter set (an overlay of params.yaml)
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/stages.smk"


onstart:
    pipeline_started()


onsuccess:
    pipeline_finished("FINISHED")


onerror:
    pipeline_finished("FAILED")


rule all:
    default_target: True
    input:
        [path for spec in RULES for path in spec.job_outputs()],
