"""The exit rules system: teacher-forced evaluation of exit rules over held-out windows, the sweep of their
settings and their timing, with its figures, verdicts and claims (C6)."""
