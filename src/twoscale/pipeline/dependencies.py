"""What each pipeline stage depends on: its parameter keys and its source files; and where a run's outputs go.

Snakemake's rules read this (params trigger reruns, sources are inputs); dvc.yaml lists the same, and a test checks
that the two orchestrators agree. A key with {recipe} or {strategy} is the job's recipe or strategy (DVC:
${item.recipe}, ${item.strategy}).
"""

from __future__ import annotations

from typing import Any

SHARED_SOURCES = ["src/twoscale/pipeline/params.py", "src/twoscale/stages/common.py"]

TRAIN_SOURCES = [  # the train stage's code, for the recipes (train) and the teachers (train_teacher) alike
    "src/twoscale/stages/train.py",
    "src/twoscale/training/trainer.py",
    "src/twoscale/training/batches.py",
    "src/twoscale/training/device.py",
    "src/twoscale/models/looped_gpt.py",
]

STAGES: dict[str, dict[str, list[str]]] = {
    "corpus": {
        "params": ["data"],
        "sources": ["src/twoscale/stages/corpus.py", "src/twoscale/data/corpus.py"],
    },
    "tokenize": {
        "params": ["data.val_fraction", "tokenize"],
        "sources": ["src/twoscale/stages/tokenize.py", "src/twoscale/data/tokenization.py"],
    },
    "train": {
        "params": ["runtime.device", "runtime.threads", "runtime.precision", "model", "train", "recipes.{recipe}"],
        "sources": TRAIN_SOURCES,
    },
    "measure": {
        "params": ["runtime.device", "measure"],
        "sources": [
            "src/twoscale/stages/measure.py",
            "src/twoscale/analysis/measurement.py",
            "src/twoscale/analysis/geometry.py",
            "src/twoscale/analysis/phases.py",
            "src/twoscale/models/looped_gpt.py",
            "src/twoscale/training/trainer.py",
            "src/twoscale/training/batches.py",
            "src/twoscale/training/device.py",
        ],
    },
    "geometry": {
        "params": ["runtime.seeds", "recipes", "train.checkpoint_steps"],
        "sources": [
            "src/twoscale/stages/geometry.py",
            "src/twoscale/report/plots.py",
            "src/twoscale/report/claims.py",
            "src/twoscale/report/tables.py",
            "src/twoscale/pipeline/dependencies.py",
        ],
    },
    "sweep": {  # its own strategy only: changing one strategy's grid reruns that strategy's jobs alone
        "params": ["runtime.device", "sweep.threads", "sweep.max_loops", "sweep.n_windows", "sweep.batch_size",
                   "sweep.n_prompts", "sweep.prompt_tokens", "sweep.new_tokens", "sweep.strategies.{strategy}"],
        "sources": [
            "src/twoscale/stages/sweep.py",
            "src/twoscale/inference/sweep.py",
            "src/twoscale/inference/exits.py",
            "src/twoscale/inference/early_exit.py",
            "src/twoscale/inference/generation.py",
            "src/twoscale/models/looped_gpt.py",
            "src/twoscale/training/trainer.py",
            "src/twoscale/training/batches.py",
            "src/twoscale/training/device.py",
        ],
    },
    "tradeoff": {
        "params": ["runtime.seeds", "recipes", "sweep.strategies"],
        "sources": [
            "src/twoscale/stages/tradeoff.py",
            "src/twoscale/report/plots.py",
            "src/twoscale/report/claims.py",
            "src/twoscale/report/tables.py",
            "src/twoscale/pipeline/dependencies.py",
        ],
    },
    "sample": {
        "params": ["runtime.device", "sample"],
        "sources": [
            "src/twoscale/stages/sample.py",
            "src/twoscale/inference/sampling.py",
            "src/twoscale/inference/sampler.py",
            "src/twoscale/inference/generation.py",
            "src/twoscale/inference/exits.py",
            "src/twoscale/inference/sweep.py",
            "src/twoscale/report/tables.py",
            "src/twoscale/report/plots.py",
            "src/twoscale/models/looped_gpt.py",
            "src/twoscale/training/trainer.py",
            "src/twoscale/training/batches.py",
            "src/twoscale/training/device.py",
        ],
    },
    "train_teacher": {  # the train stage on the plain GPTs under `teachers`
        "params": ["runtime.device", "runtime.threads", "runtime.precision", "model", "train", "teachers.{recipe}"],
        "sources": TRAIN_SOURCES,
    },
    "phases": {
        "params": ["runtime.device", "distill.threads", "distill.blocks", "distill.n_windows", "distill.batch_size"],
        "sources": [
            "src/twoscale/stages/phases.py",
            "src/twoscale/analysis/phases.py",
            "src/twoscale/analysis/dynamics.py",
            "src/twoscale/report/surrogate_plots.py",
            "src/twoscale/report/plots.py",
            "src/twoscale/report/tables.py",
            "src/twoscale/models/looped_gpt.py",
            "src/twoscale/training/distillation.py",
            "src/twoscale/training/trainer.py",
            "src/twoscale/training/batches.py",
            "src/twoscale/training/device.py",
        ],
    },
    "distill": {  # not distill.blocks: changing the list of k reruns no other k's job
        "params": ["runtime.device", "runtime.precision", "model", "train", "teachers.{recipe}", "distill.threads",
                   "distill.n_windows", "distill.batch_size", "distill.train_batch_size", "distill.phase_steps",
                   "distill.rollout_steps", "distill.learning_rate", "distill.anneal_fraction",
                   "distill.depth_hidden", "distill.layerscale_init"],
        "sources": [
            "src/twoscale/stages/distill.py",
            "src/twoscale/training/distillation.py",
            "src/twoscale/analysis/recovery.py",
            "src/twoscale/data/tokenization.py",
            "src/twoscale/models/surrogate.py",
            "src/twoscale/models/looped_gpt.py",
            "src/twoscale/training/trainer.py",
            "src/twoscale/training/batches.py",
            "src/twoscale/training/device.py",
        ],
    },
    "surrogates": {
        "params": ["runtime.seeds", "recipes", "teachers", "distill"],
        "sources": [
            "src/twoscale/stages/surrogates.py",
            "src/twoscale/analysis/dynamics.py",
            "src/twoscale/report/surrogate_plots.py",
            "src/twoscale/report/plots.py",
            "src/twoscale/report/claims.py",
            "src/twoscale/report/tables.py",
            "src/twoscale/models/surrogate.py",
            "src/twoscale/models/looped_gpt.py",
            "src/twoscale/training/distillation.py",
            "src/twoscale/training/trainer.py",
            "src/twoscale/training/batches.py",
            "src/twoscale/training/device.py",
            "src/twoscale/pipeline/dependencies.py",
        ],
    },
    "claims": {
        "params": [],
        "sources": [
            "src/twoscale/stages/claims.py",
            "src/twoscale/report/claims.py",
            "src/twoscale/report/claims_by_recipe.py",
            "src/twoscale/report/tables.py",
            "src/twoscale/pipeline/dependencies.py",
        ],
    },
}


def sources(stage: str) -> list[str]:
    return STAGES[stage]["sources"] + SHARED_SOURCES


def run_subdir(recipe: str, seed: int | str) -> str:
    """Where a per-run stage's outputs go under the stage's folder: results/train/<recipe>/seed_<seed>/..."""
    return f"{recipe}/seed_{seed}"


def param_values(stage: str, config: dict[str, Any], recipe: str | None = None, strategy: str | None = None
                 ) -> dict[str, Any]:
    """The values of the stage's parameter keys ('data.val_fraction' -> config['data']['val_fraction']); keys
    with {recipe} or {strategy} name the job's recipe or strategy."""
    values = {}
    for key in STAGES[stage]["params"]:
        key = key.format(recipe=recipe, strategy=strategy)
        value: Any = config
        for part in key.split("."):
            value = value[part]
        values[key] = value
    return values
