"""The pre-registered thresholds of C7 and C7b on the parallel sampler, fixed from the sources' wording before
looking at any measured number. The verdicts test against them; no figure or measuring stage reads them, so an edit
reruns the claims alone. This module imports nothing."""

from __future__ import annotations

# --- C7: the parallel sampler: 4-5x more tokens/s than static decoding at r = 32, about equal accuracy -------
C7_MIN_SPEEDUP = 4.0      # "4-5x": at least 4x the tokens/s of autoregressive decoding at full recurrence
C7B_MIN_SPEEDUP = 2.0     # C7b (ours): at least 2x autoregressive decoding at the fewest loops of about equal quality
# "about equal quality": the mean paired gap in re-scored cross-entropy to autoregressive decoding at full recurrence is
# within ± sample.quality_tolerance, and the distinct-token fraction at most sample.distinct_tolerance below full
# recurrence's (columns of the summary). A speed-up is read from paired rounds with its 95% interval: wholly at or
# above the threshold passes, wholly below fails, straddling it is inconclusive
