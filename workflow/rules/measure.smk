# Geometry of the loop iterates: one measure job per recipe, seed and checkpoint, gathered across runs.


rule measure:
    input:
        sources("measure"),
        "results/train/{recipe}/seed_{seed}/checkpoints/step_{step}.pt",
        "data/prepared/val.npy",
        "data/prepared/stats.json",
    output:
        multiext("results/measure/{recipe}/seed_{seed}/step_{step}/", "geometry.parquet", "loss_vs_loops.parquet",
                 "depth.parquet", "similarity.parquet", "trajectory.parquet", "summary.json"),
    params:
        values=param_values("measure"),
        file=PARAMS_PATH,
    log:
        "logs/measure/{recipe}/seed_{seed}/step_{step}.log",
    benchmark:
        "results/benchmarks/measure/{recipe}/seed_{seed}/step_{step}.tsv"
    threads: config["measure"]["threads"]
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/twoscale.yaml"
    shell:
        "python -m twoscale measure --params {params.file} --recipe {wildcards.recipe} --seed {wildcards.seed}"
        " --checkpoint results/train/{wildcards.recipe}/seed_{wildcards.seed}/checkpoints/step_{wildcards.step}.pt"
        " --data-dir data/prepared --out-dir results/measure/{wildcards.recipe}/seed_{wildcards.seed}/step_{wildcards.step}"
        " --log {log}"


rule geometry:
    input:
        sources("geometry"),
        every_run(rules.measure.output, step=STEPS),
    output:
        multiext("results/geometry/", "geometry.parquet", "loss_vs_loops.parquet", "depth.parquet",
                 "similarity.parquet", "trajectory.parquet"),
        "results/geometry/summary.csv",
        report(
            multiext("results/figures/", "fig1_trajectory_pca.png", "fig2_drift_to_loop_ratio.png",
                     "fig3a_step_size.png", "fig3b_step_cosine.png", "depth_similarity_phases.png",
                     "loss_vs_loops.png", "acceleration.png", "diagnostics.png"),
            caption="../report/figures.rst",
            category="Geometry",
        ),
    params:
        values=param_values("geometry"),
        file=PARAMS_PATH,
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
