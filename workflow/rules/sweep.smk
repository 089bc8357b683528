# Early exit on the final checkpoint: one sweep job per strategy, then the trade-off across strategies.

wildcard_constraints:
    strategy="|".join(config["sweep"]["strategies"]),


rule sweep:
    input:
        sources("sweep"),
        f"results/train/checkpoints/step_{config['train']['steps']}.pt",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        "results/sweep/strategies/{strategy}.parquet",
    params:
        values=param_values("sweep"),
        file=PARAMS_FILE,
        steps=config["train"]["steps"],
    log:
        "logs/sweep/{strategy}.log",
    benchmark:
        "results/benchmarks/sweep/{strategy}.tsv"
    threads: config["sweep"]["threads"]
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale sweep --params {params.file} --strategy {wildcards.strategy}"
        " --checkpoint results/train/checkpoints/step_{params.steps}.pt --data-dir data/prepared"
        " --out results/sweep/strategies/{wildcards.strategy}.parquet --log {log}"


rule tradeoff:
    input:
        sources("tradeoff"),
        expand(rules.sweep.output, strategy=config["sweep"]["strategies"]),
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
        file=PARAMS_FILE,
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
