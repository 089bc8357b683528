"""What every system's report shares: the run keys and column checks of the stacked tables, the verdict and
speed-ratio types, the record of a claim and the row it makes, and the figures' style."""
