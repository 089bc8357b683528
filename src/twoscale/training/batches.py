"""Token windows: random training batches, and the fixed, evenly spaced validation windows every evaluation uses."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.models.looped_gpt import LoopedGPT


def random_batch(
    ids: np.ndarray, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of block_size tokens and their next-token targets."""
    starts = torch.randint(0, len(ids) - block_size, (batch_size,), generator=generator).tolist()
    return windows(ids, starts, block_size)


def windows(ids: np.ndarray, starts: Sequence[int], block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    chunk = np.stack([np.asarray(ids[s : s + block_size + 1], dtype=np.int64) for s in starts])
    tokens = torch.from_numpy(chunk)
    return tokens[:, :-1], tokens[:, 1:]


def evaluation_starts(n_tokens: int, block_size: int, n_windows: int) -> list[int]:
    """Fixed, evenly spaced windows over the validation set: the same tokens at every evaluation."""
    last_start = n_tokens - block_size - 1
    if last_start < 0:
        raise TwoscaleError(
            f"validation split has {n_tokens} tokens, fewer than model.block_size + 1 = {block_size + 1}"
        )
    return np.linspace(0, last_start, n_windows).round().astype(int).tolist()


def held_out_batches(ids: np.ndarray, n_windows: int, batch_size: int, block_size: int
                     ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The `evaluation_starts` windows and their targets, in batches of at most batch_size."""
    starts = evaluation_starts(len(ids), block_size, n_windows)
    return [windows(ids, starts[i : i + batch_size], block_size) for i in range(0, len(starts), batch_size)]


@torch.no_grad()
def evaluate_loss(
    model: LoopedGPT, ids: np.ndarray, loops: Sequence[int], n_windows: int, batch_size: int, device: torch.device
) -> float:
    """Mean next-token cross-entropy (nats) over n_windows fixed, evenly spaced validation windows."""
    was_training = model.training
    model.eval()
    total = 0.0
    for x, y in held_out_batches(ids, n_windows, batch_size, model.config.block_size):
        out = model(x.to(device), loops, targets=y.to(device))
        total += out.loss.item() * len(x)
    model.train(was_training)
    return total / n_windows


def held_out_prompts(val_ids: np.ndarray, n_prompts: int, prompt_tokens: int) -> list[list[int]]:
    """Prompts of `prompt_tokens` held-out tokens, spread evenly over the validation array (the latency, sample and
    benchmark stages decode from them)."""
    starts = evaluation_starts(len(val_ids), prompt_tokens, n_prompts)
    return [val_ids[start : start + prompt_tokens].astype(np.int64).tolist() for start in starts]
