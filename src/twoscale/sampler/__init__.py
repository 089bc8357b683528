"""The parallel (diffusion-forcing) sampler system: the sampler, its comparison with cached autoregressive decoding,
with its figure, verdicts and claims (C7)."""
