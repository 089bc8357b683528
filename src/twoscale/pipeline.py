"""What each pipeline stage depends on: its parameter keys and its source files.

Snakemake's rules read this (params trigger reruns, sources are inputs); dvc.yaml lists the same, and a test checks
that the two orchestrators agree.
"""

from __future__ import annotations

from typing import Any

SHARED_SOURCES = ["src/twoscale/params.py", "src/twoscale/stages/common.py"]

STAGES: dict[str, dict[str, list[str]]] = {
    "corpus": {
        "params": ["data"],
        "sources": ["src/twoscale/stages/corpus.py", "src/twoscale/corpus.py"],
    },
    "tokenize": {
        "params": ["data.val_fraction", "tokenize"],
        "sources": ["src/twoscale/stages/tokenize.py", "src/twoscale/tokenization.py"],
    },
    "train": {
        "params": ["runtime", "model", "train"],
        "sources": ["src/twoscale/stages/train.py", "src/twoscale/training.py", "src/twoscale/model.py"],
    },
    "measure": {
        "params": ["runtime.device", "runtime.seed", "measure"],
        "sources": [
            "src/twoscale/stages/measure.py",
            "src/twoscale/measurement.py",
            "src/twoscale/geometry.py",
            "src/twoscale/phases.py",
            "src/twoscale/model.py",
            "src/twoscale/training.py",
        ],
    },
    "geometry": {
        "params": ["train.checkpoint_steps"],
        "sources": ["src/twoscale/stages/geometry.py", "src/twoscale/plots.py", "src/twoscale/tables.py"],
    },
    "sweep": {
        "params": ["runtime.device", "runtime.seed", "sweep"],
        "sources": [
            "src/twoscale/stages/sweep.py",
            "src/twoscale/sweep.py",
            "src/twoscale/exits.py",
            "src/twoscale/early_exit.py",
            "src/twoscale/generation.py",
            "src/twoscale/model.py",
            "src/twoscale/training.py",
        ],
    },
    "tradeoff": {
        "params": ["sweep.strategies"],
        "sources": [
            "src/twoscale/stages/tradeoff.py",
            "src/twoscale/plots.py",
            "src/twoscale/claims.py",
            "src/twoscale/tables.py",
        ],
    },
    "claims": {
        "params": [],
        "sources": ["src/twoscale/stages/claims.py", "src/twoscale/claims.py", "src/twoscale/tables.py"],
    },
}


def sources(stage: str) -> list[str]:
    return STAGES[stage]["sources"] + SHARED_SOURCES


def param_values(stage: str, config: dict[str, Any]) -> dict[str, Any]:
    """The values of the stage's parameter keys ('data.val_fraction' -> config['data']['val_fraction'])."""
    values = {}
    for key in STAGES[stage]["params"]:
        value: Any = config
        for part in key.split("."):
            value = value[part]
        values[key] = value
    return values
