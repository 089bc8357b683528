"""Two-stage distillation of a plain GPT into a block-recurrent surrogate (Raptor,
docs/methods.md#block-recurrent-surrogates).

Targets are the teacher's residual states x_0 (embedding) .. x_L (after every layer) on random training windows.
  stage 1 ("phases"): every block learns its own phase. For a phase of layers a..b its loss is
      r · mean_l MSE(block(x_l, l+1), x_{l+1})            one step from the teacher's state (teacher forcing)
      + (1 − r) · mean_l MSE(rollout_l, x_{l+1})           the block rolled out from x_a alone
    with the teacher-forcing weight r falling linearly from 1 to 0 over the first `anneal_fraction` of the steps.
    The blocks train together (their losses add) but never read each other's output.
  stage 2 ("rollout"): the whole surrogate rolled out from the embedding x_0, MSE at every layer.
Both stages: AdamW, cosine learning rate from the peak to a tenth of it, gradient clipping at 1.

The control of a surrogate is a plain GPT with as many layers as the surrogate has blocks, trained from scratch on
the same tokens (`train_plain_gpt`).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from twoscale.config.params import TrainParams
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.surrogates.model import RaptorSurrogate, SurrogateConfig
from twoscale.training.batches import random_batch
from twoscale.training.device import autocast
from twoscale.training.trainer import build_state, checkpoint_name, load_payload, publish, save_payload, train

Tensor = torch.Tensor
SURROGATE_FORMAT = 1


def teacher_forcing_weight(step: int, steps: int, anneal_fraction: float) -> float:
    """r at 0-based `step` of `steps`: 1 at the start, falling linearly to 0 at anneal_fraction · steps, then 0."""
    anneal_steps = anneal_fraction * steps
    if anneal_steps <= 0:
        return 0.0
    return max(0.0, 1.0 - step / anneal_steps)


@torch.no_grad()
def teacher_states(teacher: LoopedGPT, idx: Tensor) -> list[Tensor]:
    """x_0 .. x_L of a plain GPT on idx (B, T): the embedding, then the state after every layer (float32)."""
    return teacher.depth_states(idx, [])


def phase_loss(surrogate: RaptorSurrogate, states: list[Tensor], forcing: float) -> Tensor:
    """Stage 1's loss, summed over the phases."""
    total = states[0].new_zeros(())
    for first, last in surrogate.config.phases:
        targets = states[first + 1 : last + 2]
        rollout = surrogate.rollout(states[first], first, last)
        loss = (1.0 - forcing) * _mean_mse(rollout, targets)
        if forcing > 0:
            one_step = [surrogate.step(states[layer], layer) for layer in range(first, last + 1)]
            loss = loss + forcing * _mean_mse(one_step, targets)
        total = total + loss
    return total


def rollout_loss(surrogate: RaptorSurrogate, states: list[Tensor]) -> Tensor:
    """Stage 2's loss: the surrogate rolled out from the embedding, MSE at every layer."""
    return _mean_mse(surrogate.rollout(states[0]), states[1:])


def _mean_mse(predictions: list[Tensor], targets: list[Tensor]) -> Tensor:
    return torch.stack([F.mse_loss(p.float(), t) for p, t in zip(predictions, targets)]).mean()


def cosine_lr(step: int, steps: int, peak: float) -> float:
    """From the peak at step 0 down to a tenth of it at the last step."""
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * step / max(1, steps - 1))))


def distill(
    surrogate: RaptorSurrogate,
    teacher: LoopedGPT,
    train_ids: np.ndarray,
    phase_steps: int,
    rollout_steps: int,
    batch_size: int,
    learning_rate: float,
    anneal_fraction: float,
    generator: torch.Generator,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run both stages on random training windows; one history row per step (stage, step, loss, forcing)."""
    teacher.eval()
    surrogate.train()
    block_size = teacher.config.block_size
    history = []
    for stage, steps in (("phases", phase_steps), ("rollout", rollout_steps)):
        optimizer = torch.optim.AdamW(surrogate.parameters(), lr=learning_rate, weight_decay=0.0)
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(step, steps, learning_rate)
            idx, _ = random_batch(train_ids, batch_size, block_size, generator)
            states = teacher_states(teacher, idx.to(device))
            forcing = teacher_forcing_weight(step, steps, anneal_fraction) if stage == "phases" else 0.0
            with autocast(device, dtype):
                loss = phase_loss(surrogate, states, forcing) if stage == "phases" else rollout_loss(surrogate,
                                                                                                     states)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(surrogate.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            row = {"stage": stage, "step": step + 1, "loss": loss.item(), "teacher_forcing": forcing}
            history.append(row)
            if progress is not None:
                progress(row)
    surrogate.eval()
    return history


def save_surrogate(path: Path, surrogate: RaptorSurrogate, meta: dict) -> None:
    payload = {"format": SURROGATE_FORMAT, "config": surrogate.config.to_dict(), "model": surrogate.state_dict(),
               **meta}
    save_payload(path, payload)


def load_surrogate(path: Path, device: str | torch.device = "cpu") -> tuple[RaptorSurrogate, dict]:
    """A saved surrogate in eval mode, and the rest of what was saved with it."""
    payload = load_payload(path, "surrogate", SURROGATE_FORMAT, device)
    surrogate = RaptorSurrogate(SurrogateConfig.from_dict(payload["config"])).to(device)
    surrogate.load_state_dict(payload["model"])
    return surrogate.eval(), {k: v for k, v in payload.items() if k not in ("format", "config", "model")}


def train_plain_gpt(config: ModelConfig, train_params: TrainParams, seed: int, train_ids: np.ndarray,
                    val_ids: np.ndarray, device: torch.device, dtype: torch.dtype, out_path: Path,
                    progress: Callable[[int, dict], None] | None = None) -> LoopedGPT:
    """A plain GPT trained from scratch exactly as the train stage trains a run (same batches for the same seed),
    saved as a checkpoint at out_path after the last step only."""
    final_only = train_params.model_copy(update={"checkpoint_steps": [train_params.steps]})
    state = build_state(config, final_only, seed, device)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_path.parent) as scratch:
        train(state, train_ids, val_ids, final_only, device, None, Path(scratch), f"plain-{seed}", progress, dtype)
        publish(Path(scratch) / checkpoint_name(train_params.steps), out_path, last=True)
    return state.model.eval()
