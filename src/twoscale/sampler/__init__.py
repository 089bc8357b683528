"""The parallel (diffusion-forcing) sampler system: the sampler, its comparison with ordinary cached decoding,
with its figure, verdicts and claims (C7)."""
