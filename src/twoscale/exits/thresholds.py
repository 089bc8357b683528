"""The pre-registered thresholds of the paper's C6 on the early-exit sweep (C6b reads the same ones against the best
fixed depth), fixed from the sources' wording before looking at any measured number. The verdicts test against them;
no figure or measuring stage reads them, so an edit reruns the claims alone. This module imports nothing."""

from __future__ import annotations

# --- C6: acceleration exit: latency cut at flat perplexity; first-order degrades beyond 1e-3; KL slower -----
# "within 1%" / "matched quality", C6's tolerance, is exits.tables.WITHIN: the latency stage times the points it
# selects, so it sits with the selections and an edit of the thresholds here reruns no timing
C6_MIN_LATENCY_CUT = 0.25      # "cuts latency by up to ~38%" read as at least 25% at the best point within 1%
C6_MAX_FLAT_SPREAD = 0.01      # "essentially flat": max/min perplexity - 1 <= 1% over the paper's thresholds
# the paper's threshold range, [1e-5, 1e-2], is exits.tables.PAPER_RANGE: the latency stage times the acceleration
# exit's best point within it
C6_FIRST_ORDER_KNEE = 1e-3     # "the first-order exit degrades perplexity beyond tau ~ 1e-3"
C6_MIN_SAVED_LOOPS = 1.0       # a rule "exits" over a range of thresholds when, at one of them, it saves at least
                               # one loop per group on average against full depth; else the checks that read the
                               # range are undecided (a rule that never exits is flat and cuts nothing by construction)
C6_ACCELERATION = "acceleration"  # the paper's rule (vector second difference, two hits)
C6_FIRST_ORDER = "step_norm_relative"  # ||Delta^(k)|| / ||x^(k-1)|| < tau: the states' scale differs ~500x between
                                       # recipes, so an absolute threshold exits for one and never for the other
C6_FIRST_ORDER_ABSOLUTE = "step_norm"  # ||Delta^(k)|| < tau, reported beside
C6_KL_CRITERION = "kl"            # every strategy with this criterion (kl_head, kl_rest, ...)
