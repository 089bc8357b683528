# Early exit on the final checkpoint of every run: one sweep job per recipe, seed and strategy, then the
# trade-off across strategies and runs.


rule sweep:
    input:
        sources("sweep"),
        f"results/train/{{recipe}}/seed_{{seed}}/checkpoints/step_{STEPS[-1]}.pt",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        "results/sweep/strategies/{recipe}/seed_{seed}/{strategy}.parquet",
    params:
        values=param_values("sweep"),
        file=PARAMS_PATH,
        step=STEPS[-1],
    log:
        "logs/sweep/{recipe}/seed_{seed}/{strategy}.log",
    benchmark:
        "results/benchmarks/sweep/{recipe}/seed_{seed}/{strategy}.tsv"
    threads: config["sweep"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale sweep --params {params.file} --recipe {wildcards.recipe} --seed {wildcards.seed}"
        " --strategy {wildcards.strategy}"
        " --checkpoint results/train/{wildcards.recipe}/seed_{wildcards.seed}/checkpoints/step_{params.step}.pt"
        " --data-dir data/prepared"
        " --out results/sweep/strategies/{wildcards.recipe}/seed_{wildcards.seed}/{wildcards.strategy}.parquet"
        " --log {log}"


rule tradeoff:
    input:
        sources("tradeoff"),
        every_run(rules.sweep.output, strategy=STRATEGIES),
    output:
        "results/sweep/sweep.parquet",
        "results/sweep/summary.csv",
        report(
            multiext("results/figures/", "fig4_exit_sweep.png", "exit_tradeoff.png"),
            caption="../report/exits.rst",
            category="Early exit",
        ),
    params:
        values=param_values("tradeoff"),
        file=PARAMS_PATH,
    log:
        "logs/tradeoff.log",
    benchmark:
        "results/benchmarks/tradeoff.tsv"
    threads: 1
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale tradeoff --params {params.file} --strategies-dir results/sweep/strategies"
        " --out-dir results/sweep --figures-dir results/figures --log {log}"
