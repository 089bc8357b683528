# Raptor (SCIENCE §4): the plain GPTs under `teachers` train like the recipes, then the phases of each teacher run's
# depth, one distill job per teacher, seed and k (a k-block surrogate and a k-layer control), and one gathering job
# that tables the recovery and compares the dynamics of depth of teachers, surrogates and looped models.


use rule train as train_teacher with:
    wildcard_constraints:
        recipe=one_of(TEACHERS),
    params:
        values=param_values("train_teacher"),
        file=PARAMS_PATH,


rule phases:
    input:
        sources("phases"),
        f"results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{STEPS[-1]}.pt",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        "results/distill/{recipe}/seed_{seed}/distance.parquet",
        "results/distill/{recipe}/seed_{seed}/phases.json",
        report(
            "results/distill/{recipe}/seed_{seed}/phases.png",
            caption="../report/phases.rst",
            category="Block-recurrent surrogates",
            subcategory="{recipe}",
            labels={"teacher": "{recipe}", "seed": "{seed}"},
        ),
    wildcard_constraints:
        recipe=one_of(TEACHERS),
    params:
        values=param_values("phases"),
        file=PARAMS_PATH,
        step=STEPS[-1],
    log:
        "logs/phases/{recipe}/seed_{seed}.log",
    benchmark:
        "results/benchmarks/phases/{recipe}/seed_{seed}.tsv"
    threads: config["distill"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale phases --params {params.file} --recipe {wildcards.recipe} --seed {wildcards.seed}"
        " --checkpoint results/train/{wildcards.recipe}/seed_{wildcards.seed}/checkpoints/step_{params.step}.pt"
        " --data-dir data/prepared --out-dir results/distill/{wildcards.recipe}/seed_{wildcards.seed} --log {log}"


rule distill:
    input:
        sources("distill"),
        f"results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{STEPS[-1]}.pt",
        "results/distill/{recipe}/seed_{seed}/phases.json",
        "data/prepared/train.npy",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        multiext("results/distill/{recipe}/seed_{seed}/k_{blocks}/", "surrogate.pt", "control.pt",
                 "history.parquet", "evaluation.json"),
    wildcard_constraints:
        recipe=one_of(TEACHERS),
    params:
        values=param_values("distill"),
        file=PARAMS_PATH,
        step=STEPS[-1],
    log:
        "logs/distill/{recipe}/seed_{seed}/k_{blocks}.log",
    benchmark:
        "results/benchmarks/distill/{recipe}/seed_{seed}/k_{blocks}.tsv"
    threads: config["distill"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale distill --params {params.file} --recipe {wildcards.recipe} --seed {wildcards.seed}"
        " --blocks {wildcards.blocks}"
        " --checkpoint results/train/{wildcards.recipe}/seed_{wildcards.seed}/checkpoints/step_{params.step}.pt"
        " --phases results/distill/{wildcards.recipe}/seed_{wildcards.seed}/phases.json --data-dir data/prepared"
        " --out-dir results/distill/{wildcards.recipe}/seed_{wildcards.seed}/k_{wildcards.blocks} --log {log}"


rule surrogates:
    input:
        sources("surrogates"),
        every_teacher_run("results/distill/{recipe}/seed_{seed}/k_{blocks}/surrogate.pt", blocks=BLOCKS),
        every_teacher_run("results/distill/{recipe}/seed_{seed}/k_{blocks}/evaluation.json", blocks=BLOCKS),
        every_teacher_run(f"results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{STEPS[-1]}.pt"),
        every_run(f"results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{STEPS[-1]}.pt"),
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        multiext("results/surrogates/", "recovery.csv", "layer_r2.csv", "dynamics.parquet"),
        report(
            multiext("results/figures/", "surrogate_recovery.png", "depth_dynamics.png"),
            caption="../report/surrogates.rst",
            category="Block-recurrent surrogates",
        ),
    params:
        values=param_values("surrogates"),
        file=PARAMS_PATH,
    log:
        "logs/surrogates.log",
    benchmark:
        "results/benchmarks/surrogates.tsv"
    threads: config["distill"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale surrogates --params {params.file} --train-dir results/train --distill-dir results/distill"
        " --data-dir data/prepared --out-dir results/surrogates --figures-dir results/figures --log {log}"
