"""Training: token batches and evaluation windows, device and precision, the training loop and its checkpoints."""
