"""One thin module per pipeline stage: parse arguments, load inputs, call the core, write outputs, log to MLflow."""
