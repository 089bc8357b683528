"""The pre-registered thresholds of the paper's C6 on the early-exit sweep (C6b reads the same ones against the best
fixed depth), fixed from the sources' wording before looking at any measured number. The verdicts test against them;
no figure or measuring stage reads them, so an edit reruns the claims alone. This module imports nothing."""

from __future__ import annotations

# --- C6: acceleration exit: latency cut at flat perplexity; first-order degrades beyond 1e-3; KL slower -----
# "within 1%" / "matched quality", C6's tolerance, is exits.tables.WITHIN: the latency stage times the points it
# selects, so it sits with the selections and an edit of the thresholds here reruns no timing
C6_MIN_LATENCY_CUT = 0.25      # "cuts latency by up to ~38%" read as at least 25% at the best point within 1%
C6_MAX_FLAT_SPREAD = 0.01      # "essentially flat": max/min perplexity - 1 <= 1% over the paper's thresholds
C6_PAPER_RANGE = (1e-5, 1e-2)  # the paper's threshold sweep
C6_FIRST_ORDER_KNEE = 1e-3     # "the first-order exit degrades perplexity beyond tau ~ 1e-3"
C6_ACCELERATION = "acceleration"  # the paper's rule (vector second difference, two hits)
C6_FIRST_ORDER = "step_norm"      # absolute ||Delta^(k)|| < tau
C6_KL_CRITERION = "kl"            # every strategy with this criterion (kl_head, kl_rest, ...)
