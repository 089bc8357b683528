"""The pre-registered thresholds of the claims' tests: S, C1-C6 (the paper's findings), C7 (the parallel sampler)
and C8 (Raptor's surrogates). They were fixed from the papers' wording before looking at any measured number.

The figures draw some of them as reference lines and the verdicts test against them, so this module sits below
both and imports nothing.
"""

from __future__ import annotations

# --- S: the precondition of every claim, not a claim of the paper: more loops do not break the model -------
S_TOLERANCE = 0.05       # nats: loss at the most loops measured <= the lowest loss over loop counts + 0.05

# --- C1: step sizes shrink quickly with k, within about 5-10 steps -----------------------------------------
C1_K_SETTLED = 10        # "within about 5-10 steps": read at the upper end, k = 10
C1_MAX_RATIO = 0.5       # s(10) <= 0.5 * s(1): at least halved by k = 10
# ...and the fall after k = 10 is smaller than the fall before it: s(10) - s(K) < s(1) - s(10)

# --- C2: across training, loop steps get smaller (decay with k faster in later checkpoints) ----------------
C2_K_SETTLED = 10        # decay measured as s(k)/s(1) at k = min(10, K)
# ...and the mean over k of the relative step size ‖Δ^(k)‖ / ‖x^(k-1)‖ is lower at the last checkpoint

# --- C3: consecutive-step cosine settles around 0.5-0.65 late in training ----------------------------------
C3_BAND = (0.5, 0.65)    # the paper's range, inclusive
C3_ORTHOGONAL_MAX = 0.2  # |cos| <= 0.2 (angle >= ~78 degrees) counts as "orthogonal"
C3_TREND_TOLERANCE = 0.02  # a change of the late-k cosine smaller than this across training is "flat"

# --- C4: DLR >> 1 at every hand-off -------------------------------------------------------------------------
C4_MIN_DLR = 10.0        # ">> 1" read as at least one order of magnitude
C4_DLR_LOOPS = C1_K_SETTLED  # DLR_K divides the jump by the mean of the group's first K steps, and grows with K for
                         # a converging loop; read at K = 10, the k by which C1 says the steps have settled (also
                         # the mean loop count of training), or at the most loops measured if fewer. Fixed from C1's
                         # wording, not from any DLR_K; every K in DLR_SHOWN_LOOPS is printed beside it
DLR_SHOWN_LOOPS = (1, 2, 5, 10, 30)  # the K whose DLR_K the claims and the summaries print (tables hold every K)

# --- C5: tight spirals within groups, large jumps between --------------------------------------------------
C5_MIN_DLR = C4_MIN_DLR  # large jumps: the same order-of-magnitude reading as C4
C5_MIN_TURNING_DEG = 30.0  # a spiral bends: mean turning angle over k >= 2 at least 30 degrees (straight = 0)
C5_MAX_PATH_TO_JUMP = 1.0  # tight: the path walked after the first application is shorter than the jump

# --- C6: acceleration exit: latency cut at flat perplexity; first-order degrades beyond 1e-3; KL slower -----
C6_TOLERANCE = 0.01            # "within 1%" / "matched quality": perplexity <= 1.01 x full-depth perplexity
C6_MIN_LATENCY_CUT = 0.25      # "cuts latency by up to ~38%" read as at least 25% at the best point within 1%
C6_MAX_FLAT_SPREAD = 0.01      # "essentially flat": max/min perplexity - 1 <= 1% over the paper's thresholds
C6_PAPER_RANGE = (1e-5, 1e-2)  # the paper's threshold sweep
C6_FIRST_ORDER_KNEE = 1e-3     # "the first-order exit degrades perplexity beyond tau ~ 1e-3"
C6_ACCELERATION = "acceleration"  # the paper's rule (vector second difference, two hits)
C6_FIRST_ORDER = "step_norm"      # absolute ||Delta^(k)|| < tau
C6_KL_CRITERION = "kl"            # every strategy with this criterion (kl_head, kl_rest, ...)
C6_FULL_DEPTH = "fixed"           # full depth = strategy "fixed" at setting == max_loops

# --- C7: the parallel sampler: 4-5x more tokens/s than static decoding at r = 32, about equal accuracy -------
C7_MIN_SPEEDUP = 4.0      # "4-5x": at least 4x the tokens/s of ordinary decoding at full recurrence
C7B_MIN_SPEEDUP = 2.0     # C7b (ours): at least 2x ordinary decoding at the fewest loops of about equal quality
# "about equal quality": the mean paired gap in re-scored cross-entropy to ordinary decoding at full recurrence is
# within ± sample.quality_tolerance, and the distinct-token fraction at most sample.distinct_tolerance below full
# recurrence's (columns of the summary). A speed-up is read from paired rounds with its 95% interval: wholly at or
# above the threshold passes, wholly below fails, straddling it is inconclusive

# --- C8: Raptor: 2 shared blocks recover >= 90% of the teacher (docs/claims.md#c8; the paper: 96% for DINOv2) ---
C8_BLOCKS = 2             # "2 blocks"
C8_RECOVERY = 0.9         # of the teacher's improvement in cross-entropy over the unigram baseline, read through
                          # the teacher's final norm and LM head; per seed, the teacher's verdict is its seeds'
                          # common verdict
# C8b (ours): the same 2-block surrogate recovers more than a 2-layer GPT trained from scratch on the same tokens
