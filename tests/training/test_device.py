"""The device helpers: which runs use CUDA, the datasheet peaks, the clock and matmul peak, and model FLOPs
utilisation from a training history (values worked out by hand)."""

from __future__ import annotations

import pytest
import torch

from twoscale.config.errors import TwoscaleError
from twoscale.stages.train import WARMUP_STEPS, utilisation
from twoscale.training import device as device_module
from twoscale.training import gpu
from twoscale.training.device import (
    datasheet_tflops,
    matmul_tflops,
    median_ms,
    peak_side,
    resolve_device,
)
from twoscale.training.gpu import uses_cuda

CPU = torch.device("cpu")


def test_cuda_is_used_when_named_or_when_auto_finds_it(monkeypatch, tmp_path):
    assert uses_cuda("cuda") and not uses_cuda("cpu")
    driver = tmp_path / "nvidiactl"
    monkeypatch.setattr(gpu, "GPU_DEVICE_FILES", (str(driver),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not uses_cuda("auto")  # no driver's device file: torch is not asked
    driver.touch()
    assert uses_cuda("auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not uses_cuda("auto")


@pytest.mark.parametrize(("name", "bf16"), [("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.0),
                                            ("NVIDIA H200", 989.4), ("NVIDIA H200 NVL", 835.5),
                                            ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA L4", 121.0),
                                            ("NVIDIA L40S", 362.1), ("NVIDIA L40", None),
                                            ("NVIDIA GeForce RTX 4090", None)])
def test_datasheet_peaks_by_device_name(monkeypatch, name, bf16):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    peaks = datasheet_tflops(torch.device("cuda"))
    assert (peaks and peaks["bf16"]) == bf16
    assert datasheet_tflops(CPU) is None


def test_median_ms_calls_the_work_once_untimed_then_repeats(monkeypatch):
    ticks = iter([0.0, 0.001, 1.0, 1.003, 2.0, 2.002])
    monkeypatch.setattr(device_module.time, "perf_counter", lambda: next(ticks))
    calls = []
    assert median_ms(lambda: calls.append(1), 3, CPU) == pytest.approx(2.0)
    assert len(calls) == 4


def test_the_matmul_peak_is_2n3_flops_over_the_fastest_repeat(monkeypatch):
    # one untimed product, then five timed ones of 4, 2, 3, 5 and 2.5 ms: the fastest, 2 ms, sets the peak
    ticks = iter([0.0, 0.004, 1.0, 1.002, 2.0, 2.003, 3.0, 3.005, 4.0, 4.0025])
    monkeypatch.setattr(device_module.time, "perf_counter", lambda: next(ticks))
    assert matmul_tflops(CPU, torch.float32, repeats=5, size=64) == pytest.approx(2 * 64**3 / 0.002 / 1e12)


def test_the_peak_side_is_the_first_whose_product_takes_long_enough():
    timed = []

    def seconds(side: int) -> float:  # 1e-10 s per multiply-add: 256 -> 1.7 ms, 512 -> 13 ms, 1024 -> 107 ms
        timed.append(side)
        return side**3 * 1e-10

    assert peak_side(seconds) == 1024 and timed == [256, 512, 1024]
    timed.clear()
    assert peak_side(lambda side: timed.append(side) or 1e-3) == 2048  # fast everywhere: the largest,
    assert timed == [256, 512, 1024]  # which is never probed
    assert peak_side(lambda side: 60.0) == 256  # no native arithmetic: the first product is already long


def test_auto_resolves_to_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert resolve_device("auto") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == CPU
    with pytest.raises(TwoscaleError, match="no CUDA device"):
        resolve_device("cuda")


def history(seconds: list[float], tflop: list[float]) -> list[dict]:
    return [{"seconds": s, "model_tflop": f} for s, f in zip(seconds, tflop, strict=True)]


def test_utilisation_leaves_out_the_warmup_steps():
    # 10 warm-up steps of 5 s, then 3 steps of 1, 2 and 1 s doing 2, 4 and 2 TFLOP: 8 TFLOP in 4 s = 2 TFLOP/s
    rows = history([5.0] * WARMUP_STEPS + [1.0, 2.0, 1.0], [2.0] * WARMUP_STEPS + [2.0, 4.0, 2.0])
    out = utilisation(rows, peak_tflops=8.0, datasheet={"bf16": 10.0, "tf32": 5.0}, dtype=torch.bfloat16,
                      device=CPU)
    assert out["model_tflops_per_s"] == pytest.approx(2.0)
    assert out["mfu"] == pytest.approx(0.25)
    assert out["datasheet_tflops"] == 10.0 and out["mfu_datasheet"] == pytest.approx(0.2)


def test_utilisation_of_a_short_run_uses_every_step_and_of_no_step_is_unknown():
    out = utilisation(history([1.0, 3.0], [1.0, 1.0]), peak_tflops=1.0, datasheet=None, dtype=torch.float32,
                      device=CPU)
    assert out["model_tflops_per_s"] == pytest.approx(0.5) and out["mfu_datasheet"] is None
    empty = utilisation([], peak_tflops=1.0, datasheet={"bf16": 1.0, "tf32": 1.0}, dtype=torch.float32,
                        device=CPU)
    assert empty["model_tflops_per_s"] is None and empty["mfu"] is None and empty["mfu_datasheet"] is None
    assert empty["peak_memory_gib"] is None  # a CPU run: no device memory to report


def test_the_machine_is_named_by_its_processor_model(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU 9000 @ 3.00GHz\n"
                       "processor\t: 1\nmodel name\t: Test CPU 9000 @ 3.00GHz\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(cpuinfo if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    monkeypatch.setattr(device_module.os, "cpu_count", lambda: 4)
    assert device_module.machine(torch.device("cpu")) == "Test CPU 9000 @ 3.00GHz, 4 CPUs"
    record = device_module.provenance(torch.device("cpu"), torch.float64)
    assert record == {"precision": "float64", "machine": "Test CPU 9000 @ 3.00GHz, 4 CPUs", "torch": torch.__version__}


def test_without_cpuinfo_the_machine_is_what_the_platform_knows(monkeypatch):
    def no_file(path, *args, **kwargs):
        raise FileNotFoundError(path)

    monkeypatch.setattr("builtins.open", no_file)
    monkeypatch.setattr(device_module.platform, "processor", lambda: "arm")
    monkeypatch.setattr(device_module.os, "cpu_count", lambda: 8)
    assert device_module.machine(torch.device("cpu")) == "arm, 8 CPUs"


def test_a_gpu_is_named_by_its_device_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert device_module.machine(torch.device("cuda")) == "NVIDIA H100 80GB HBM3"
