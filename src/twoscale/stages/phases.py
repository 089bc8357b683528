"""Stage `phases`: the phases of a plain GPT's depth (one job per teacher and seed, on its final checkpoint).

The layer-by-layer cosine-distance matrix of the teacher's layer outputs, from two summaries per held-out window
(its mean token state and its last token state), and its split into k contiguous phases by exact max-cut for every
k the distill stage gets for its seed (distill.blocks, with curve_blocks for a seed of runtime.explain_seeds): the
phases it gives one shared block each (drawn by `phase_figures`).
"""

from __future__ import annotations

import argparse
import logging

import polars as pl
import torch

from twoscale.analysis.phases import SimilarityAccumulator, cut_value, segment_phases
from twoscale.config.io import write_json, write_parquet
from twoscale.config.params import DistillParams
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.pipeline.observers import tracking
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.common import load_teacher_run
from twoscale.surrogates.distillation import teacher_states
from twoscale.surrogates.dynamics import sequence_summaries
from twoscale.training.batches import held_out_batches

HELP = "split one plain GPT's depth into contiguous phases by max-cut, for every k"

log = logging.getLogger(__name__)


def layer_similarity(teacher: LoopedGPT, val_ids, distill: DistillParams, device: torch.device) -> torch.Tensor:
    """(L, L): mean over held-out summaries of the cosine between the outputs of layers i and j."""
    similarity = SimilarityAccumulator()
    for idx, _ in held_out_batches(val_ids, distill.n_windows, distill.batch_size, teacher.config.block_size):
        states = teacher_states(teacher, idx.to(device))[1:]
        similarity.add(sequence_summaries(torch.stack(states)))
    return similarity.matrix()


def run(args: argparse.Namespace) -> None:
    params, run = load_teacher_run(args)
    distill = params.distill
    teacher, meta, val_ids, device = open_checkpoint(args, params, run, distill.threads)
    with tracking.stage_run(args.stage, {"distill": distill}, run.tags):
        similarity = layer_similarity(teacher, val_ids, distill, device)
        distance = 1.0 - similarity
        phases = {k: segment_phases(similarity, k) for k in distill.blocks_of(params.explains(run.seed))}
        cuts = {k: cut_value(similarity, p) for k, p in phases.items()}
        L = distance.shape[0]
        write_parquet(args.out_dir / "distance.parquet", pl.DataFrame(
            {"i": [i for i in range(L) for _ in range(L)], "j": [j for _ in range(L) for j in range(L)],
             "distance": distance.flatten().tolist()}))
        write_json(args.out_dir / "phases.json", {
            "teacher": run.recipe, "seed": run.seed, "train_step": meta["step"], "layers": L,
            "phases": {str(k): [list(p) for p in v] for k, v in phases.items()},
            "cut": {str(k): v for k, v in cuts.items()}})
        tracking.log_artifact(args.out_dir / "phases.json")
        tracking.log_curves([{"k": k, "cut": cut} for k, cut in cuts.items()], step_key="k")
    for k, p in phases.items():
        log.info("%s seed %d, k = %d: phases %s (cut %.2f)", run.recipe, run.seed, k,
                 ", ".join(f"{a}-{b}" for a, b in p), cuts[k])
