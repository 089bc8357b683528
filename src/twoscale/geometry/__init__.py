"""The loop geometry system: what the loop iterates do (step sizes, cosines, turning angles, DLR), measured on
every checkpoint, with its figures, verdicts and claims (S, C1-C5)."""
