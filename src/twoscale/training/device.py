"""Where and in which arithmetic torch runs: the device, native bf16, autocast, threads and seed, a clock that waits
for the device, and the device's measured matmul peak beside its datasheet's."""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import statistics
import time
from collections.abc import Mapping
from typing import Any

import torch

from twoscale.config.errors import TwoscaleError

log = logging.getLogger(__name__)
NUMBERS_ORIGIN = ("precision", "machine", "torch")  # what a stage records of the arithmetic behind its numbers

# Dense (no sparsity) tensor-core peaks from NVIDIA's datasheets, TFLOP/s, by the model in the device's name (the
# longest key that is a whole word of the name: "H200 NVL" before "H200"; "L4" is not "L40S")
DATASHEET_TFLOPS = {
    "H200": {"bf16": 989.4, "tf32": 494.7},
    "H200 NVL": {"bf16": 835.5, "tf32": 417.5},
    "H100 80GB HBM3": {"bf16": 989.4, "tf32": 494.7},
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0},
    "H100 NVL": {"bf16": 835.0, "tf32": 417.5},
    "A100": {"bf16": 312.0, "tf32": 156.0},
    "L40S": {"bf16": 362.1, "tf32": 181.0},
    "L4": {"bf16": 121.0, "tf32": 60.0},
}


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise TwoscaleError("runtime.device is 'cuda' but no CUDA device is available")
    device = torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")
    if name == "auto":
        log.info("runtime.device auto: %s", describe(device))
    return device


def describe(device: torch.device) -> str:
    """The device in words: the GPU's name, or the CPU's."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)"


def machine(device: torch.device) -> str:
    """The processor that runs the arithmetic, by model: the GPU's name, or the CPU's model name (Linux's
    /proc/cpuinfo; elsewhere what the platform module knows), with its core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            name = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    return f"{name or platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"


def provenance(device: torch.device, dtype: torch.dtype) -> dict[str, str]:
    """What computes a stage's numbers, for its tables and its MLflow run (the keys of NUMBERS_ORIGIN): the arithmetic,
    the processor and torch's version."""
    return {"precision": str(dtype).removeprefix("torch."), "machine": machine(device), "torch": torch.__version__}


def recorded_provenance(record: Mapping[str, Any], prefix: str) -> dict[str, str]:
    """The provenance an earlier stage recorded (the train stage's metrics.json), its keys prefixed ('train_'):
    'not recorded' where a key is missing."""
    return {f"{prefix}{key}": str(record.get(key, "not recorded")) for key in NUMBERS_ORIGIN}


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


def configure_torch(threads: int, seed: int, tf32: bool = False) -> None:
    """Threads and seed; float32 matmuls in full float32 unless `tf32` (training only: on CUDA TF32 keeps 10
    mantissa bits, which measurements must not lose)."""
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    torch.manual_seed(seed)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def clock(device: torch.device) -> float:
    """Seconds on a monotonic clock once the device has finished the work queued so far (CUDA runs
    asynchronously: a host clock read without waiting times the launch, not the work)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def times_ms(work, repeats: int, device: torch.device) -> list[float]:
    """Wall times of `work()` in milliseconds over `repeats` calls, after one untimed call, each timed with the
    device's clock."""
    work()
    times = []
    for _ in range(repeats):
        started = clock(device)
        work()
        times.append(1000 * (clock(device) - started))
    return times


def median_ms(work, repeats: int, device: torch.device) -> float:
    return statistics.median(times_ms(work, repeats, device))


CPU_PEAK_SIDES = (256, 512, 1024, 2048)
LONG_ENOUGH_S = 0.1  # one product this long is timed to a few percent; a larger one only adds time


def peak_side(seconds_of_one_product, sides=CPU_PEAK_SIDES, long_enough_s: float = LONG_ENOUGH_S) -> int:
    """The first of `sides` whose product takes `long_enough_s` or more (seconds_of_one_product(side)), else the
    last: a CPU with native arithmetic in the dtype gets the largest side (1024 left a 2-core CPU below the rate
    of its own training steps), one without it a side whose products end (bf16 on a CPU without AVX512-BF16: a
    2048^3 product takes a minute)."""
    for side in sides[:-1]:
        if seconds_of_one_product(side) >= long_enough_s:
            return side
    return sides[-1]


def random_factors(side: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(side, side, generator=generator, device=device).to(dtype) for _ in range(2))
    return a, b


def matmul_size(device: torch.device, dtype: torch.dtype) -> int:
    """The side of the square product that measures a device's peak in `dtype`: 8192 on a GPU (smaller ones leave
    it idle between launches), on a CPU the `peak_side` of its own products' times."""
    if device.type == "cuda":
        return 8192

    def seconds(side: int) -> float:
        a, b = random_factors(side, device, dtype)
        return min(times_ms(lambda: a @ b, 1, device)) / 1000

    return peak_side(seconds)


def matmul_tflops(device: torch.device, dtype: torch.dtype, repeats: int, size: int | None = None) -> float:
    """The device's matmul peak in `dtype` (float32 runs as TF32 when the matmul precision allows it): the
    fastest of `repeats` timed size^3 products of random matrices (a peak is the best the device does)."""
    a, b = random_factors(size or matmul_size(device, dtype), device, dtype)
    return 2 * a.shape[0]**3 / min(times_ms(lambda: a @ b, max(repeats, 5), device)) / 1e9


def datasheet_tflops(device: torch.device) -> dict[str, float] | None:
    """The datasheet's dense bf16 and TF32 peaks of a known GPU, else None."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    known = [key for key in DATASHEET_TFLOPS if re.search(rf"(^|[\s-]){re.escape(key)}($|[\s-])", name)]
    return DATASHEET_TFLOPS[max(known, key=len)] if known else None
