# The claims table: the paper's findings C1-C6, the sampler's C7 and Raptor's C8 beside our numbers.


rule claims:
    input:
        sources("claims"),
        multiext("results/geometry/", "geometry.parquet", "loss_vs_loops.parquet", "depth.parquet",
                 "similarity.parquet", "trajectory.parquet"),
        "results/sweep/sweep.parquet",
        every_sampled_run("results/sample/{recipe}/seed_{seed}/summary.csv"),
        "results/surrogates/recovery.csv",
    output:
        report("results/claims.md", caption="../report/claims.rst", category="Claims"),
        "results/claims.json",
    params:
        values=param_values("claims"),
        file=PARAMS_PATH,
    log:
        "logs/claims.log",
    benchmark:
        "results/benchmarks/claims.tsv"
    threads: 1
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale claims --params {params.file} --geometry-dir results/geometry --sweep results/sweep/sweep.parquet"
        " --sample-dir results/sample --recovery results/surrogates/recovery.csv --out-dir results --log {log}"
