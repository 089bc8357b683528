"""Running a trained model: exit criteria, teacher-forced exits, cached generation, exit sweeps, and the parallel
sampler."""
