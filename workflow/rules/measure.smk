# Geometry of the loop iterates: one measure job per checkpoint.

wildcard_constraints:
    step=r"\d+",


rule measure:
    input:
        sources("measure"),
        "results/train/checkpoints/step_{step}.pt",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        multiext("results/measure/step_{step}/", "geometry.parquet", "loss_vs_loops.parquet", "depth.parquet",
                 "similarity.parquet", "trajectory.parquet", "summary.json"),
    params:
        values=param_values("measure"),
        file=PARAMS_FILE,
    log:
        "logs/measure/step_{step}.log",
    benchmark:
        "results/benchmarks/measure/step_{step}.tsv"
    threads: config["measure"]["threads"]
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale measure --params {params.file} --checkpoint results/train/checkpoints/step_{wildcards.step}.pt"
        " --data-dir data/prepared --out-dir results/measure/step_{wildcards.step} --log {log}"


rule geometry:
    input:
        sources("geometry"),
        expand(rules.measure.output, step=config["train"]["checkpoint_steps"]),
    output:
        multiext("results/geometry/", "geometry.parquet", "loss_vs_loops.parquet", "depth.parquet",
                 "similarity.parquet", "trajectory.parquet"),
        "results/geometry/summary.csv",
        report(
            multiext("results/figures/", "fig1_trajectory_pca.png", "fig2_drift_to_loop_ratio.png",
                     "fig3a_step_size.png", "fig3b_step_cosine.png", "depth_similarity_phases.png",
                     "loss_vs_loops.png", "acceleration.png"),
            caption="../report/figures.rst",
            category="Geometry",
        ),
    params:
        values=param_values("geometry"),
        file=PARAMS_FILE,
    log:
        "logs/geometry.log",
    benchmark:
        "results/benchmarks/geometry.tsv"
    threads: 1
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale geometry --params {params.file} --measure-dir results/measure"
        " --out-dir results/geometry --figures-dir results/figures --log {log}"

