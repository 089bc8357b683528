# Raw text and its tokenization.


rule corpus:
    input:
        sources("corpus"),
        text=[] if config["data"]["source"] != "text" else config["data"]["text_files"],
    output:
        "data/raw/corpus.txt",
        "data/raw/manifest.json",
    params:
        values=param_values("corpus"),
        file=PARAMS_PATH,
    log:
        "logs/corpus.log",
    benchmark:
        "results/benchmarks/corpus.tsv"
    threads: 1
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale corpus --params {params.file} --out-dir data/raw --log {log}"


rule tokenize:
    input:
        sources("tokenize"),
        rules.corpus.output,
    output:
        "data/prepared/tokenizer.json",
        "data/prepared/train.npy",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    params:
        values=param_values("tokenize"),
        file=PARAMS_PATH,
    log:
        "logs/tokenize.log",
    benchmark:
        "results/benchmarks/tokenize.tsv"
    threads: 1
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale tokenize --params {params.file} --corpus-dir data/raw --out-dir data/prepared --log {log}"
