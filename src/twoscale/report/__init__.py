"""What every system's report is built from: reading the measured tables, the verdict and speed-ratio types, the
pre-registered thresholds and the figures."""
