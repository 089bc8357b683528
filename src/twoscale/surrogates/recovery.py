"""How much of a plain GPT a block-recurrent surrogate (or a smaller model) recovers, on held-out windows.

Every model is read through the teacher's frozen final norm and LM head where it has no head of its own (the
surrogate). Measures, in nats per token:
  cross-entropy of the next token;
  recovered fraction (CE_unigram − CE_model) / (CE_unigram − CE_teacher): the share of the teacher's improvement over
    the unigram baseline (the training split's add-one smoothed token frequencies, on the same targets);
  KL(teacher ‖ model) of the next-token distributions;
and for the surrogate the per-layer R² of its states against the teacher's, 1 − SSE / SST with SST about each
channel's mean over the held-out tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from twoscale.data.tokenization import token_counts, unigram_cross_entropy
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.surrogates.distillation import teacher_states
from twoscale.surrogates.model import RaptorSurrogate

Tensor = torch.Tensor


def recovered_fraction(cross_entropy: float, teacher: float, unigram: float) -> float:
    """NaN when the teacher does not beat the unigram baseline: there is nothing to recover."""
    return (unigram - cross_entropy) / (unigram - teacher) if unigram > teacher else math.nan


class LogitScores:
    """Running sums of next-token cross-entropy and of KL(teacher ‖ model) over batches."""

    def __init__(self) -> None:
        self.cross_entropy = 0.0
        self.kl = 0.0
        self.tokens = 0

    def add(self, logits: Tensor, teacher_logits: Tensor, targets: Tensor) -> None:
        logits, teacher_logits = logits.flatten(0, -2).double(), teacher_logits.flatten(0, -2).double()
        self.cross_entropy += float(F.cross_entropy(logits, targets.flatten(), reduction="sum"))
        teacher_log_p = teacher_logits.log_softmax(-1)
        self.kl += float((teacher_log_p.exp() * (teacher_log_p - logits.log_softmax(-1))).sum())
        self.tokens += targets.numel()

    def result(self) -> dict[str, float]:
        return {"cross_entropy": self.cross_entropy / self.tokens, "kl_to_teacher": self.kl / self.tokens}


class StateR2:
    """Per-layer R² of predicted states against the teacher's, accumulated over batches: float64 sums of squared
    errors and of the targets' first and second moments per channel."""

    def __init__(self) -> None:
        self.sse: Tensor | None = None
        self.sum: Tensor | None = None
        self.sum_sq: Tensor | None = None
        self.count = 0

    def add(self, predicted: list[Tensor], target: list[Tensor]) -> None:
        """Lists of (..., C) states, one per layer."""
        p = torch.stack([x.reshape(-1, x.shape[-1]) for x in predicted]).double()
        t = torch.stack([x.reshape(-1, x.shape[-1]) for x in target]).double()
        sse, total, total_sq = ((p - t) ** 2).sum((1, 2)), t.sum(1), (t**2).sum(1)
        if self.sse is None:
            self.sse, self.sum, self.sum_sq = sse, total, total_sq
        else:
            self.sse, self.sum, self.sum_sq = self.sse + sse, self.sum + total, self.sum_sq + total_sq
        self.count += t.shape[1]

    def result(self) -> list[float]:
        if self.sse is None:
            raise ValueError("no states added")
        sst = (self.sum_sq - self.sum**2 / self.count).sum(-1)
        return (1.0 - self.sse / sst).tolist()


@torch.no_grad()
def evaluate_recovery(teacher: LoopedGPT, surrogate: RaptorSurrogate, control: LoopedGPT, train_ids: np.ndarray,
                      batches: Sequence[tuple[Tensor, Tensor]], device: torch.device) -> dict[str, Any]:
    """The teacher, its surrogate (read through the teacher's head) and the control on the held-out batches:
    {model: {cross_entropy, kl_to_teacher, recovered}} for the three, the unigram baseline on the same targets,
    and the surrogate's per-layer R² (layers 1..L)."""
    scores = {name: LogitScores() for name in ("teacher", "surrogate", "control")}
    r2 = StateR2()
    for idx, targets in batches:
        idx, targets = idx.to(device), targets.to(device)
        states = teacher_states(teacher, idx)
        teacher_logits = teacher.logits_of(states[-1])
        predicted = surrogate.rollout(states[0])
        r2.add(predicted, states[1:])
        logits = {"teacher": teacher_logits, "surrogate": teacher.logits_of(predicted[-1]),
                  "control": control(idx, []).logits}
        for name, score in scores.items():
            score.add(logits[name], teacher_logits, targets)
    unigram = unigram_cross_entropy(token_counts([train_ids], teacher.config.vocab_size),
                                    torch.cat([t.flatten() for _, t in batches]).numpy())
    results = {name: score.result() for name, score in scores.items()}
    for result in results.values():
        result["recovered"] = recovered_fraction(result["cross_entropy"], results["teacher"]["cross_entropy"],
                                                 unigram)
    return {**results, "unigram_cross_entropy": unigram, "layer_r2": r2.result()}
