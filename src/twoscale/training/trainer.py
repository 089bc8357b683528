"""Training of the looped GPT: loop-count sampling, learning-rate schedule, checkpoints, resume, the training loop.

Every random choice (batches, loop counts) comes from one seeded `torch.Generator` whose state is saved in each
checkpoint together with the model, optimizer, scheduler and global RNG states, so a run resumed from a checkpoint
ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.config.io import atomic_path
from twoscale.config.params import (
    HASH_CHARS,
    LoopSchedule,
    ModelParams,
    RunParams,
    RuntimeParams,
    TrainParams,
    params_hash,
)
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
from twoscale.training.batches import evaluate_loss, evaluation_starts, random_batch
from twoscale.training.device import autocast, clock
from twoscale.training.flops import training_step_flops

CHECKPOINT_FORMAT = 1
CPP_COMPILERS = ("g++", "clang++")  # what torch.compile's CPU backend looks for


def model_config(model: ModelParams, vocab_size: int) -> ModelConfig:
    """The model's configuration from its parameter section (the model file itself knows nothing of parameters)."""
    fields = model.model_dump(exclude={"groups"})
    return ModelConfig(vocab_size=vocab_size, groups=tuple((g.first, g.last) for g in model.groups), **fields)


def checkpoint_name(step: int) -> str:
    return f"step_{step}.pt"


CHECKPOINT_NAME = re.compile(r"step_(\d+)\.pt")


def checkpoint_step(path: Path) -> int | None:
    """The training step a checkpoint's file name says (None for another name)."""
    named = CHECKPOINT_NAME.fullmatch(path.name)
    return None if named is None else int(named.group(1))


DATA_FILES = ("tokenizer.json", "train.npy", "val.npy")


def data_fingerprint(data_dir: Path) -> str:
    """A hash of the prepared data a run trains on."""
    digest = hashlib.sha256()
    for name in DATA_FILES:
        try:
            with (data_dir / name).open("rb") as handle:
                hashlib.file_digest(handle, lambda: digest)
        except FileNotFoundError:
            raise TwoscaleError(f"{data_dir / name}: not found (run the tokenize stage first)") from None
    return digest.hexdigest()[:HASH_CHARS]


def run_fingerprint(runtime: RuntimeParams, run: RunParams, data_dir: Path) -> str:
    """Everything a training run depends on: its model and train sections and the runtime with its seed (the first
    HASH_CHARS characters, `params_hash`), then its data (the rest, `data_fingerprint`). Each checkpoint carries it,
    an interrupted run's state is kept under it, and the stages that read a checkpoint compare it with the
    parameters and data in force."""
    own = runtime.model_copy(update={"seeds": [run.seed], "explain_seeds": [run.seed]})  # what other runs do aside
    return params_hash(run.model, run.train, own) + data_fingerprint(data_dir)


def sample_loop_counts(schedule: LoopSchedule, n_groups: int, generator: torch.Generator) -> list[int]:
    """One loop count per group for one training step."""
    if schedule.distribution == "fixed":
        return [schedule.max] * n_groups
    if schedule.distribution == "uniform":
        return torch.randint(1, schedule.max + 1, (n_groups,), generator=generator).tolist()
    # Poisson-lognormal (Geiping et al. 2025): r = Poisson(exp(t)) + 1, t ~ N(log(mean) - sigma^2 / 2, sigma)
    t = torch.randn(n_groups, generator=generator, dtype=torch.float64) * schedule.sigma
    rate = torch.exp(t + math.log(schedule.mean) - schedule.sigma**2 / 2)
    counts = torch.poisson(rate, generator=generator).long() + 1
    return counts.clamp(max=schedule.max).tolist()


def learning_rate(step: int, train: TrainParams) -> float:
    """Linear warmup to the peak, then cosine decay that reaches min_lr_ratio * peak at step train.steps."""
    peak = train.learning_rate
    if step < train.warmup_steps:
        return peak * (step + 1) / train.warmup_steps
    progress = (step - train.warmup_steps) / max(1, train.steps - train.warmup_steps)
    floor = train.min_lr_ratio * peak
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class TrainState:
    model: LoopedGPT
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    generator: torch.Generator
    step: int = 0
    history: list[dict] = field(default_factory=list)


def compile_blocks(model: LoopedGPT, device: torch.device) -> None:
    """Compile every layer with torch.compile, in place (the state dict keeps its keys). Per block, not the whole
    model: loop counts change every step, and a compiled block serves every loop count without recompiling. On a
    CPU the compiled kernels are C++: one line, before any work, where there is no compiler."""
    compilers = (os.environ.get("CXX", ""), *CPP_COMPILERS)
    if device.type == "cpu" and not any(shutil.which(name) for name in compilers if name):
        raise TwoscaleError("runtime.compile: compiling for the CPU needs a C++ compiler (g++ or clang++) on PATH; "
                            "install one or set runtime.compile: false")
    for block in model.blocks:
        block.compile()


def build_state(config: ModelConfig, train: TrainParams, seed: int, device: torch.device) -> TrainState:
    torch.manual_seed(seed)
    model = LoopedGPT(config).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train.learning_rate,
        betas=(train.beta1, train.beta2),
        fused=device.type == "cuda",
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate(step, train) / train.learning_rate
    )
    generator = torch.Generator().manual_seed(seed)
    return TrainState(model, optimizer, scheduler, generator)


# A step's timings belong to the process that ran it: a checkpoint leaves them out (None), so that identical runs
# save identical bytes; a resumed run's history has no timings for the steps run before it resumed.
WALL_CLOCK = ("tokens_per_s", "seconds")


def save_checkpoint(path: Path, state: TrainState, fingerprint: str) -> None:
    payload = {
        "format": CHECKPOINT_FORMAT,
        "fingerprint": fingerprint,
        "step": state.step,
        "model_config": state.model.config.to_dict(),
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scheduler": state.scheduler.state_dict(),
        "generator": state.generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "history": [{key: None if key in WALL_CLOCK else value for key, value in row.items()}
                    for row in state.history],
    }
    save_payload(path, payload, now=True)  # an interrupted run resumes from it, whatever became of its stage


# what a checkpoint other than a run's last holds: the weights and what names them (the rest is for resuming, which
# reads the resume folder's full checkpoints, and the last checkpoint keeps it)
WEIGHTS_ONLY = ("format", "fingerprint", "step", "model_config", "model", "history")


def save_payload(path: Path, payload: dict, now: bool = False) -> None:
    """torch.save of the payload in its canonical form, through a file object (the archive's inner folder is then
    always "archive", not the name of the temporary file), so equal payloads give identical bytes. In place with
    the stage's other outputs, unless `now` (see `atomic_path`)."""
    with atomic_path(path, now) as tmp, tmp.open("wb") as handle:
        torch.save(canonical(payload), handle)


def canonical(value: object) -> object:
    """The payload with fresh containers and interned strings. A pickle writes an object it has written before as a
    reference to it, so equal payloads pickle alike only if they share the same objects: a resumed run's optimizer
    state, read back from a file, has its own copy of each key (`step`, ...) where an uninterrupted run's share one,
    and its checkpoints would differ in bytes, not in content. Tensors are kept as they are (tied weights stay
    tied)."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {canonical(key): canonical(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(canonical(item) for item in value)
    return value


def load_payload(path: Path, what: str, format: int, map_location: str | torch.device = "cpu",
                 mmap: bool = False) -> dict:
    """Load a saved dict safely (weights_only) and check it is one of ours: `what` (a checkpoint, a surrogate) in
    its `format`. `mmap` maps the file instead of reading it: only the tensors used are read from disk."""
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise TwoscaleError(f"{path}: {what} not found") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise TwoscaleError(f"{path}: not a readable {what} ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != format:
        raise TwoscaleError(f"{path}: not a twoscale {what} (format {format})")
    return payload


def read_checkpoint(path: Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> dict:
    """Load a training checkpoint safely and check it is one of ours."""
    return load_payload(path, "checkpoint", CHECKPOINT_FORMAT, map_location, mmap)


def load_model(path: Path, device: str | torch.device = "cpu") -> tuple[LoopedGPT, dict]:
    """The model stored in a checkpoint, in eval mode, and the checkpoint's metadata. The file is mapped, not read:
    the optimizer's moments, two thirds of it, stay on disk (at GPT-2 small's shape a job's load 1.1-1.6 s -> 0.1 s
    of CPU, and 0.8 GB less memory)."""
    payload = read_checkpoint(path, device, mmap=True)
    model = LoopedGPT(ModelConfig.from_dict(payload["model_config"])).to(device)
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as exc:
        raise TwoscaleError(f"{path}: weights do not match its model config ({str(exc).splitlines()[0]})") from None
    return model.eval(), {k: payload[k] for k in ("step", "fingerprint", "model_config", "history")}


def load_model_matching(path: Path, run: RunParams, fingerprint: str, vocab_size: int, device: torch.device
                        ) -> tuple[LoopedGPT, dict]:
    """`load_model`, refusing a checkpoint that is not what its path and the parameters in force say: one of `run`'s
    checkpoint steps, named after its step, trained with `run`'s model parameters and with the `run_fingerprint`
    given (its training parameters, runtime, seed and data)."""
    loaded, meta = load_model(path, device)
    expected = model_config(run.model, vocab_size).to_dict()
    found = loaded.config.to_dict()
    if found != expected:
        different = sorted(k for k in expected if found.get(k) != expected[k])
        raise TwoscaleError(f"{path}: trained with other model parameters ({', '.join(different)}); rerun train")
    check_checkpoint(path, meta, run, fingerprint)
    return loaded, meta


def check_checkpoint(path: Path, meta: dict, run: RunParams, fingerprint: str) -> None:
    """TwoscaleError in one line unless the checkpoint `meta` at `path` is the step its name says, one of the run's
    checkpoint steps, and trained with the run's parameters (`fingerprint`, see `run_fingerprint`)."""
    step = meta["step"]
    if checkpoint_step(path) != step:
        raise TwoscaleError(f"{path}: holds training step {step}, so its name must be {checkpoint_name(step)}")
    if step not in run.train.checkpoint_steps:
        raise TwoscaleError(f"{path}: step {step} is not one of train.checkpoint_steps {run.train.checkpoint_steps}"
                            f" of {run.recipe}; rerun train")
    if meta["fingerprint"][:HASH_CHARS] != fingerprint[:HASH_CHARS]:
        raise TwoscaleError(f"{path}: not trained with the train and runtime parameters and seed {run.seed} of "
                            f"{run.recipe} in force; rerun train")
    if meta["fingerprint"][HASH_CHARS:] != fingerprint[HASH_CHARS:]:
        raise TwoscaleError(f"{path}: trained on other data than the prepared data in force; rerun train")


def restore_state(state: TrainState, payload: dict) -> None:
    state.model.load_state_dict(payload["model"])
    state.optimizer.load_state_dict(payload["optimizer"])
    state.scheduler.load_state_dict(payload["scheduler"])
    state.generator.set_state(payload["generator"])
    torch.set_rng_state(payload["torch_rng"])
    if payload["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(payload["cuda_rng"])
    state.step = payload["step"]
    state.history = list(payload["history"])


def latest_resumable(resume_dir: Path, fingerprint: str) -> dict | None:
    """The newest checkpoint left in resume_dir by an interrupted run with the same fingerprint."""
    candidates = sorted(resume_dir.glob("step_*.pt"), key=checkpoint_step, reverse=True)
    for path in candidates:
        try:
            payload = read_checkpoint(path)
        except TwoscaleError:
            continue
        if payload["fingerprint"] == fingerprint:
            return payload
    return None


def publish(src: Path, dst: Path, last: bool) -> None:
    """Place the resume folder's checkpoint `src` at its output path `dst`: the run's last checkpoint whole (a hard
    link when possible, else a copy), any other as its weights alone (WEIGHTS_ONLY), a third of its size."""
    if not last:
        payload = read_checkpoint(src, mmap=True)
        save_payload(dst, {key: payload[key] for key in WEIGHTS_ONLY})
        return
    with atomic_path(dst) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def diverged(step: int, loss: float, grad_norm: float, checkpoint_steps: Sequence[int], resume_dir: Path) -> str:
    """One line for a run whose loss or gradient turned non-finite: where, and the last good checkpoint kept."""
    kept = [s for s in checkpoint_steps if s < step]
    last = f"the last good checkpoint, step {kept[-1]}, is kept in {resume_dir}" if kept else "no checkpoint yet"
    return (f"training diverged at step {step} (loss {loss}, gradient norm {grad_norm}): {last}; "
            "lower train.learning_rate or raise train.warmup_steps")


def train_step(state: TrainState, x: torch.Tensor, y: torch.Tensor, loops: Sequence[int], train: TrainParams,
               device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """One optimizer update on the batch (x, y) with the given loop counts: the loss before it and the gradient
    norm before clipping."""
    with autocast(device, dtype):
        out = state.model(x, loops, targets=y, backprop_depth=train.loops.backprop_depth,
                          straight_through=train.loops.straight_through)
    out.loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(), train.grad_clip).item()
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.scheduler.step()
    state.step += 1
    return out.loss.item(), grad_norm


def train(
    state: TrainState,
    train_ids: np.ndarray,
    val_ids: np.ndarray,
    train: TrainParams,
    device: torch.device,
    checkpoint_dir: Path | None,
    resume_dir: Path,
    fingerprint: str,
    progress: Callable[[int, dict], None] | None = None,
    dtype: torch.dtype = torch.float32,
) -> TrainState:
    """Train from state.step to train.steps, saving a checkpoint at every step in train.checkpoint_steps.

    Checkpoints are written to resume_dir whole (kept until training completes, so a killed run resumes even when
    the orchestrator deletes its outputs) and published into checkpoint_dir (not when None; `publish`). Forward
    passes (training and evaluation) run under autocast in `dtype`.
    """
    model, config = state.model, state.model.config
    if len(train_ids) < config.block_size + 1:
        raise TwoscaleError(
            f"training split has {len(train_ids)} tokens, fewer than model.block_size + 1 = {config.block_size + 1}"
        )
    evaluation_starts(len(val_ids), config.block_size, 1)  # fails early if validation is too short
    eval_loops = [train.eval_loops] * model.n_groups
    model.train()
    tokens_per_step = train.batch_size * config.block_size
    while state.step < train.steps:
        started = clock(device)
        x, y = random_batch(train_ids, train.batch_size, config.block_size, state.generator)
        loops = sample_loop_counts(train.loops, model.n_groups, state.generator)
        lr = state.optimizer.param_groups[0]["lr"]
        loss, grad_norm = train_step(state, x.to(device), y.to(device), loops, train, device, dtype)
        elapsed = clock(device) - started
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            raise TwoscaleError(diverged(state.step, loss, grad_norm, train.checkpoint_steps, resume_dir))
        row = {
            "step": state.step,
            "train_loss": loss,
            "val_loss": math.nan,
            "lr": lr,
            "grad_norm": grad_norm,
            "mean_loops": sum(loops) / len(loops) if loops else None,  # None: a plain GPT
            "tokens_per_s": tokens_per_step / elapsed,
            "model_tflop": training_step_flops(config, loops, train.loops.backprop_depth, train.batch_size) / 1e12,
            "seconds": elapsed,
        }
        if state.step % train.eval_every == 0 or state.step in train.checkpoint_steps:
            with autocast(device, dtype):
                row["val_loss"] = evaluate_loss(
                    model, val_ids, eval_loops, train.batch_size * train.eval_batches, train.batch_size, device
                )
        state.history.append(row)
        if state.step in train.checkpoint_steps:
            resume_path = resume_dir / checkpoint_name(state.step)
            save_checkpoint(resume_path, state, fingerprint)
            if checkpoint_dir is not None:
                publish(resume_path, checkpoint_dir / checkpoint_name(state.step),
                        last=state.step == max(train.checkpoint_steps))
        if progress is not None:
            progress(state.step, row)
    return state
