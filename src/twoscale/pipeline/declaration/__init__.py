"""The pipeline as declared: stages.yaml, and what is read from it (each stage's jobs, parameter keys and
source files) and written from it (the Snakemake rules, dvc.yaml)."""
