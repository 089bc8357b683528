"""What watches the runs without changing their outputs: MLflow tracking (the stage's run, the shared writer
process, the store) and the names both sides use. No stage's sources include them."""
