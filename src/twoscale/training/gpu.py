"""Whether `runtime.device` runs on a GPU here, answered without loading torch where no GPU can be: the Snakefile
asks on every call, dry runs included, and torch takes seconds to load."""

from __future__ import annotations

import os

# CUDA (or ROCm's HIP, which torch.cuda also answers for) opens one of these: NVIDIA's driver, AMD's, WSL's GPU
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def uses_cuda(name: str) -> bool:
    """Whether runtime.device `name` runs on a GPU here."""
    if name != "auto":
        return name == "cuda"
    if not any(os.path.exists(path) for path in GPU_DEVICE_FILES):
        return False
    import torch

    return torch.cuda.is_available()
