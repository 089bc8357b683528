"""How the stages run, in four rooms: `declaration` (stages.yaml and what is read and written from it: jobs,
parameter keys, source files, the Snakemake rules and dvc.yaml), `records` (build records, the check of what a stage
reads, reuse across parameter sets), `observers` (MLflow tracking) and, here, the runner: the preloaded interpreter
that runs stage commands (`preload`), one orchestrator at a time per checkout (`orchestrators`) and where a run's
time went (`job_times`)."""
