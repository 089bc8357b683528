"""The pre-registered thresholds of C8 and C8b on Raptor's surrogates, fixed from the sources' wording before
looking at any measured number. The figures draw some of them as reference lines and the verdicts test against them,
so this module imports nothing."""

from __future__ import annotations

# --- C8: Raptor: 2 shared blocks recover >= 90% of the teacher (docs/claims.md#c8; the paper: 96% for DINOv2) ---
C8_BLOCKS = 2             # "2 blocks"
C8_RECOVERY = 0.9         # of the teacher's improvement in cross-entropy over the unigram baseline, read through
                          # the teacher's final norm and LM head; per seed, the teacher's verdict is its seeds'
                          # common verdict
# C8b (ours): the same 2-block surrogate recovers more than a 2-layer GPT trained from scratch on the same tokens
