# The parallel "diffusion forcing" sampler against ordinary cached decoding: one job per recipe with input
# injection (sample.recipes) and seed, on the run's final checkpoint.


rule sample:
    input:
        sources("sample"),
        f"results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{STEPS[-1]}.pt",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        "results/sample/{recipe}/seed_{seed}/sample.parquet",
        "results/sample/{recipe}/seed_{seed}/summary.csv",
        report(
            "results/sample/{recipe}/seed_{seed}/tradeoff.png",
            caption="../report/sampler.rst",
            category="Parallel sampler",
            subcategory="{recipe}",
            labels={"recipe": "{recipe}", "seed": "{seed}"},
        ),
    params:
        values=param_values("sample"),
        file=PARAMS_PATH,
        step=STEPS[-1],
    log:
        "logs/sample/{recipe}/seed_{seed}.log",
    benchmark:
        "results/benchmarks/sample/{recipe}/seed_{seed}.tsv"
    threads: config["sample"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale sample --params {params.file} --recipe {wildcards.recipe} --seed {wildcards.seed}"
        " --checkpoint results/train/{wildcards.recipe}/seed_{wildcards.seed}/checkpoints/step_{params.step}.pt"
        " --data-dir data/prepared --out-dir results/sample/{wildcards.recipe}/seed_{wildcards.seed} --log {log}"
