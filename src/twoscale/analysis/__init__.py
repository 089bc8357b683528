"""Phases of depth (max-cut segmentation of a similarity matrix), shared by the loop geometry and the surrogates."""
