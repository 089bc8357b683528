"""Where and in which arithmetic torch runs: the device, native bf16, autocast, threads and seed."""

from __future__ import annotations

import contextlib
import os

import torch

from twoscale.pipeline.errors import TwoscaleError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TwoscaleError("runtime.device is 'cuda' but no CUDA device is available")
    return torch.device(name)


def native_bf16(device: torch.device) -> bool:
    """Whether the device multiplies bf16 in hardware (CUDA with bf16, a CPU with AVX512-BF16 or AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    capabilities = torch.cpu.get_capabilities()
    return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))


def training_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The autocast dtype of training for runtime.precision: auto is bf16 where the device has it natively."""
    if precision == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float32
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Mixed precision in `dtype` (weights, optimizer and loss stay float32); a no-op for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def configure_torch(threads: int, seed: int) -> None:
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    torch.manual_seed(seed)
    torch.set_float32_matmul_precision("high")
