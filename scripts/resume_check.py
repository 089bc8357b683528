"""Check, on this machine's device, what docs/running.md says of determinism and resuming: three trainings of one
recipe through the real CLI, in folders of their own, two uninterrupted (a, a2) and one killed with SIGKILL as soon
as its first checkpoint lands and then rerun (b), which resumes from that checkpoint. Prints, as JSON, how far apart
the final weights and the loss curves of a2 and b are from a: bitwise equal on the CPU; on CUDA, a2 measures the
run-to-run spread that b's distance is read against.

    python scripts/resume_check.py --params configs/gpu-quick.yaml --recipe huginn --steps 20 --work /tmp/resume

The three runs start together (a GPU runs them side by side; their timings are not read).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from twoscale.config.parameter_files import read_raw
from twoscale.training.trainer import read_checkpoint


def write_params(source: Path, target: Path, steps: int) -> int:
    """`source` with `steps` training steps and checkpoints at half of them and at the end; the first one."""
    raw = read_raw(source)  # an overlay (configs/*.yaml) resolved
    first = steps // 2
    raw["train"].update(steps=steps, checkpoint_steps=[first, steps],
                        warmup_steps=min(raw["train"]["warmup_steps"], first),
                        eval_every=first)
    target.write_text(yaml.safe_dump(raw))
    return first


def command(params: Path, recipe: str, seed: int, data_dir: Path, work: Path, run: str) -> list[str]:
    return [sys.executable, "-m", "twoscale", "train", "--params", str(params), "--recipe", recipe,
            "--seed", str(seed), "--data-dir", str(data_dir), "--out-dir", str(work / f"out-{run}"),
            "--resume-dir", str(work / f"resume-{run}"), "--log", str(work / f"{run}.log")]


def distance(left: dict, right: dict) -> dict:
    """Largest absolute difference over all weights, and the relative L2 distance of the whole weight vector."""
    max_abs, squared, norm = 0.0, 0.0, 0.0
    for name, tensor in left["model"].items():
        a, b = tensor.double(), right["model"][name].double()
        max_abs = max(max_abs, (a - b).abs().max().item())
        squared += (a - b).pow(2).sum().item()
        norm += a.pow(2).sum().item()
    losses = [(x["train_loss"], y["train_loss"]) for x, y in zip(left["history"], right["history"], strict=True)]
    return {"bitwise_equal": squared == 0.0, "max_abs_weight_diff": max_abs,
            "relative_l2_weight_diff": (squared / norm) ** 0.5,
            "max_abs_train_loss_diff": max(abs(x - y) for x, y in losses),
            "final_train_loss": [losses[-1][0], losses[-1][1]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, required=True)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--work", type=Path, required=True, help="a folder of its own: params, runs, logs")
    parser.add_argument("--timeout", type=float, default=600, help="seconds the whole check may take")
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=False)
    params = args.work / "params.yaml"
    first = write_params(args.params, params, args.steps)

    def start(run: str) -> subprocess.Popen:
        # a store per run: processes that create one new SQLite store together fail in its migrations
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{(args.work / f'mlflow-{run}.db').resolve()}"}
        env.pop("TWOSCALE_MLFLOW_PARENT_RUN", None)
        return subprocess.Popen(command(params, args.recipe, args.seed, args.data_dir, args.work, run), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    runs = {run: start(run) for run in ("a", "a2", "b")}
    deadline = time.monotonic() + args.timeout
    try:
        while not list((args.work / "resume-b").glob(f"*/*/*/step_{first}.pt")):
            if runs["b"].poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"run b ended or stalled before its step-{first} checkpoint (see {args.work}/b.log)")
            time.sleep(0.01)
    finally:
        runs["b"].send_signal(signal.SIGKILL)
        runs["b"].wait()
    killed_with = sorted(p.name for p in (args.work / "resume-b").glob("*/*/*/step_*.pt"))
    runs["b"] = start("b")
    for run, process in runs.items():
        if process.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
            raise SystemExit(f"run {run} failed (see {args.work}/{run}.log)")

    final = {run: read_checkpoint(args.work / f"out-{run}" / "checkpoints" / f"step_{args.steps}.pt")
             for run in runs}
    resumed_log = (args.work / "b.log").read_text()
    report = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__, "recipe": args.recipe, "steps": args.steps,
        "b_killed_with_checkpoints": killed_with, "b_resumed": "resuming" in resumed_log,
        "uninterrupted_twice": distance(final["a"], final["a2"]),
        "killed_and_resumed": distance(final["a"], final["b"]),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    sys.exit(main())
