# Training of the looped GPT, with checkpoints across training.


rule train:
    input:
        sources("train"),
        "data/prepared/train.npy",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
        "data/prepared/tokenizer.json",
    output:
        expand("results/train/checkpoints/step_{step}.pt", step=config["train"]["checkpoint_steps"]),
        "results/train/history.parquet",
        report("results/train/history.csv", caption="../report/history.rst", category="Training"),
        "results/train/metrics.json",
    params:
        values=param_values("train"),
        file=PARAMS_FILE,
    log:
        "logs/train.log",
    benchmark:
        "results/benchmarks/train.tsv"
    threads: config["runtime"]["threads"]
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale train --params {params.file} --data-dir data/prepared --out-dir results/train --log {log}"

