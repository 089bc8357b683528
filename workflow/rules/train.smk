# Training of the looped GPT, one job per recipe and seed, with checkpoints across training; the plain GPTs under
# `teachers` train the same way (rule train_teacher, workflow/rules/distill.smk).


rule train:
    input:
        sources("train"),
        "data/prepared/train.npy",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
        "data/prepared/tokenizer.json",
    output:
        expand("results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{step}.pt", step=STEPS),
        "results/train/{recipe}/seed_{seed}/history.parquet",
        report("results/train/{recipe}/seed_{seed}/history.csv", caption="../report/history.rst",
               category="Training", subcategory="{recipe}", labels={"recipe": "{recipe}", "seed": "{seed}"}),
        "results/train/{recipe}/seed_{seed}/metrics.json",
    wildcard_constraints:
        recipe=one_of(RECIPES),
    params:
        values=param_values("train"),
        file=PARAMS_PATH,
    log:
        "logs/train/{recipe}/seed_{seed}.log",
    benchmark:
        "results/benchmarks/train/{recipe}/seed_{seed}.tsv"
    threads: config["runtime"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale train --params {params.file} --recipe {wildcards.recipe} --seed {wildcards.seed}"
        " --data-dir data/prepared --out-dir results/train/{wildcards.recipe}/seed_{wildcards.seed} --log {log}"
