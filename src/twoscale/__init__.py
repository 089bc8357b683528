"""twoscale: reproduce Two-Scale Latent Dynamics for Recurrent-Depth Transformers, end to end."""

__version__ = "0.1.0"
