"""How the stages run: their declaration (stages.yaml) and the jobs, sources and parameter keys read from it, the
Snakemake rules and DVC stages written from it, build records and the check of what a stage reads, the preloaded
interpreter that runs stage commands, and MLflow tracking."""
