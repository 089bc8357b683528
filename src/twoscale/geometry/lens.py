"""A logit lens across loop steps: what the model would predict if it stopped group g after k loop steps, against
what it predicts at full depth.

Each iterate x^(k) of group g is decoded two ways, named as the early-exit rules name theirs: "head", the final
norm and LM head on the state, exactly as a rule's head decode; or "rest", the model's own forward pass with group g
stopped at k: every later segment once, each later group one full loop step (its input injection and group norm
included), every position stopped at k together, then the head. A rule's "rest" decode is not this: it runs the
later groups' layers without injection or group norm and attends to the earlier positions' cached step-1 entries
(`decoding.engine.decode_rest`, the look-ahead a decoder can afford from its cache, as Huginn's coda). The lens asks
what the model would predict had the group stopped at k, which only the forward pass answers
(docs/methods.md#a-logit-lens-across-loop-steps). Per group and k: the fraction of tokens whose top-1 token is the
full-depth prediction's, and the mean KL(p_full ‖ p_k) in nats.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from twoscale.decoding.rules import DECODES
from twoscale.models.looped_gpt import LoopedGPT


def decoded_logits(model: LoopedGPT, state: Tensor, group: int, decode: str) -> Tensor:
    """The logits a state of looped group `group` decodes to: "head" (ln_f and the LM head on it) or "rest" (the
    segments after the group, each later group one loop step with its injection and norm, then ln_f and the LM
    head: the forward pass with the group stopped here, not a rule's cached look-ahead)."""
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
    if decode == "head":
        return model.logits_of(state)
    return model.logits_of(model.run_segments(state, [1] * model.n_groups, model.segment_index(group) + 1))


@torch.no_grad()
def lens_sums(model: LoopedGPT, idx: Tensor, loops: int, decode: str) -> list[dict]:
    """For one batch of windows `idx` (B, T), every group looped `loops` times: per group g and loop step
    k = 1..loops, the number of tokens, how many agree at top 1 with the full-depth prediction, and the sum of
    KL(p_full ‖ p_k) over tokens (sums, so that batches add up)."""
    out = model(idx, [loops] * model.n_groups, record_trajectories=True)
    full = F.log_softmax(out.logits.double(), dim=-1)
    top = full.argmax(-1)
    rows = []
    for group, trajectory in enumerate(out.trajectories):
        for k in range(1, trajectory.shape[0]):
            logp = F.log_softmax(decoded_logits(model, trajectory[k], group, decode).double(), dim=-1)
            kl = (full.exp() * (full - logp)).sum(-1)
            rows.append({"group": group, "k": k, "tokens": top.numel(),
                         "top1_agree": int((logp.argmax(-1) == top).sum()), "kl_sum": float(kl.sum())})
    return rows


def lens_means(model: LoopedGPT, batches: Iterable[Tensor], loops: int, decodes: Sequence[str] = DECODES
               ) -> list[dict]:
    """`lens_sums` over batches of windows, for each decode: per decode, group and k, the tokens, the fraction
    agreeing at top 1 with the full-depth prediction and the mean KL(p_full ‖ p_k) in nats."""
    totals: dict[tuple[str, int, int], dict] = {}
    for idx in batches:
        for decode in decodes:
            for row in lens_sums(model, idx, loops, decode):
                total = totals.setdefault((decode, row["group"], row["k"]),
                                          {"tokens": 0, "top1_agree": 0, "kl_sum": 0.0})
                for key in total:
                    total[key] += row[key]
    return [{"decode": decode, "group": group, "k": k, "tokens": total["tokens"],
             "top1_agreement": total["top1_agree"] / total["tokens"], "mean_kl": total["kl_sum"] / total["tokens"]}
            for (decode, group, k), total in totals.items()]
