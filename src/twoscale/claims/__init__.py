"""The claims report: every system's verdicts gathered into the claims table, and the table across seeds and
recipes."""
