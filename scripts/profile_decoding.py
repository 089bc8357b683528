"""Where a graphed token's time goes: one sequence decoded under torch.profiler at full depth and under every timed
exit rule at the setting where it never exits, the rule's arithmetic compiled and op by op. Per generated token:
the kernels the device ran, the time it was busy with them, and the time it sat idle between them (launches, the
host's reads) against the token's wall time. The weights are at their random start: at a fixed depth and at
tau = 0 the work does not depend on them. Prints a table and writes it as CSV.

    PYTHONPATH=src python scripts/profile_decoding.py --params P [--out profile.csv] [--tokens 8]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch
from decoding_paths import never_exiting_points, random_model_and_prompts
from torch.profiler import ProfilerActivity, profile

from twoscale.decoding.engine import decode_prompt, token_stepper
from twoscale.decoding.graphed import GraphOptions
from twoscale.exits.sweep import rules_at
from twoscale.stages.validation import read_params


def device_intervals(events, on_gpu: bool) -> list[tuple[float, float]]:
    """(start, end) in µs of every kernel the device ran (on a CPU: every aten operator, the nearest thing)."""
    if on_gpu:
        chosen = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
    else:
        chosen = [event for event in events if event.name.startswith("aten::") and not event.cpu_parent]
    return sorted((event.time_range.start, event.time_range.end) for event in chosen)


def busy_and_idle(intervals: list[tuple[float, float]]) -> tuple[float, float]:
    """The time covered by the intervals and the gaps between them, from the first start to the last end (µs)."""
    busy = idle = 0.0
    reached = None
    for start, end in intervals:
        if reached is None or start >= reached:
            if reached is not None:
                idle += start - reached
            busy += end - start
            reached = end
        elif end > reached:
            busy += end - reached
            reached = end
    return busy, idle


def profile_point(model, prompt, new_tokens, rules, fuse_rules, on_gpu):
    """The tokens' kernels, busy and idle time and wall time per token, the graphs captured before the profile."""
    decoded = decode_prompt(model, prompt, rules)
    total = len(prompt) + new_tokens
    step = token_stepper(model, [cache.grown(total) for cache in decoded.caches], rules, graphs=True,
                         options=GraphOptions(fuse_rules=fuse_rules))
    tokens, loops = list(prompt), []
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for position in range(len(prompt) - 1, total - 1):
            logits, counts = step(tokens[position], position)
            tokens.append(int(logits.argmax()))  # the host waits for the token, as generation does
            loops.append(sum(counts) / len(counts))
        wall = time.perf_counter() - started
    intervals = device_intervals(profiler.events(), on_gpu)
    busy, idle = busy_and_idle(intervals)
    return {"kernels_per_token": round(len(intervals) / new_tokens, 1),
            "busy_ms_per_token": round(busy / 1000 / new_tokens, 4),
            "idle_ms_per_token": round(idle / 1000 / new_tokens, 4),
            "wall_ms_per_token": round(1000 * wall / new_tokens, 4),
            "loops_per_group": round(statistics.fmean(loops), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, required=True)
    parser.add_argument("--recipe", default="huginn")
    parser.add_argument("--out", type=Path, default=Path("profile_decoding.csv"))
    parser.add_argument("--tokens", type=int, default=8)
    args = parser.parse_args()
    params = read_params(args.params)
    sweep = params.sweep
    model, prompts = random_model_and_prompts(params, params.run(args.recipe, params.runtime.seeds[0]), sweep.threads)
    on_gpu = model.lm_head.weight.is_cuda
    prompt = prompts[0]
    points = never_exiting_points(sweep)
    rows = []
    for name, setting in points:
        rules = rules_at(sweep.strategies[name].spec, setting, model.n_groups, sweep.max_loops)
        for fuse_rules in ([None] if name == "fixed" else [True, False]):
            row = {"strategy": name, "setting": setting,
                   "rule": "none" if fuse_rules is None else "compiled" if fuse_rules else "op by op"}
            row |= profile_point(model, prompt, args.tokens, rules, fuse_rules, on_gpu)
            rows.append(row)
            print(row, flush=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("device:", torch.cuda.get_device_name() if on_gpu else "cpu (aten operators stand for kernels)")


if __name__ == "__main__":
    main()
