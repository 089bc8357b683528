"""The workflow's plumbing, which every other part may use and which imports none of them: the typed parameters,
what each stage depends on, file IO, MLflow tracking and the error type."""
