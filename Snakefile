# twoscale: reproduce "Two-Scale Latent Dynamics for Recurrent-Depth Transformers" end to end.
#   snakemake --cores all                                   # default parameters (params.yaml)
#   snakemake --cores all --configfile configs/smoke.yaml   # another complete parameter set
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/sample.smk"
include: "workflow/rules/distill.smk"
include: "workflow/rules/claims.smk"


onstart:
    pipeline_started()


onsuccess:
    pipeline_finished("FINISHED")


onerror:
    pipeline_finished("FAILED")


rule all:
    default_target: True
    input:
        rules.tokenize.output,
        every_run(rules.train.output),
        rules.geometry.output,
        rules.tradeoff.output,
        every_sampled_run(rules.sample.output),
        every_teacher_run(rules.phases.output),
        rules.surrogates.output,
        rules.claims.output,
