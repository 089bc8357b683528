"""Device only: ms per generated token of graphed decoding for the timed rules at tau = 0 (never exit: the same 30
loops as full depth, plus the rule) and at tau = inf (exit at the first step they can), against full depth, on the
paper's shape (the set's model, weights at their random start: at tau = 0 and at a fixed depth the work does not
depend on the weights), the host reading every `read_every` steps (4, the default: one graph per 4 steps; 1: one
graph and one read per step). Rounds paired and rotated; every cell checked equal to the engine's decoding.

    PYTHONPATH=src python never_exiting_rules.py PARAMS OUT_CSV   (ROUNDS=5)
"""
import csv
import os
import statistics
import sys
import time

import torch

from twoscale.decoding.engine import decode_prompt, generate
from twoscale.exits.sweep import rules_at
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.stages.validation import read_params
from twoscale.training.trainer import model_config

began = time.time()
params = read_params(sys.argv[1])
run = params.run("huginn", 1337)
sweep = params.sweep
torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
config = model_config(run.model, 4096)
if device.type == "cpu":  # a local try of the script: a smaller shape
    config = config.__class__(**{**config.to_dict(), "n_embd": 64, "n_head": 2})
model = LoopedGPT(config).to(device).eval()
prompt = torch.randint(0, 4096, (sweep.prompt_tokens,), generator=torch.Generator().manual_seed(1)).tolist()
new_tokens, rounds = sweep.new_tokens, int(os.environ.get("ROUNDS", 5))
specs = {name: strategy.spec for name, strategy in sweep.strategies.items()}
points = [("fixed", 30.0), ("acceleration", 0.0), ("step_norm", 0.0), ("kl_head", 0.0),
          ("acceleration", float("inf")), ("kl_head", float("inf"))]
schedules = [4, 1]
rules = {point: rules_at(specs[point[0]], point[1], model.n_groups, sweep.max_loops) for point in points}
decoded = {point: decode_prompt(model, prompt, rules[point]) for point in points}
engine = {point: generate(model, prompt, new_tokens, rules[point], decoded=decoded[point], graphs=False)
          for point in points}
cells = [(point, every) for point in points for every in schedules]


def run_cell(point, every):
    return generate(model, prompt, new_tokens, rules[point], decoded=decoded[point], graphs=True, read_every=every)


same = {}
for cell in cells:
    out, want = run_cell(*cell), engine[cell[0]]
    same[cell] = (out.tokens == want.tokens and out.loops == want.loops,
                  max(float((a - b).abs().max()) for a, b in zip(out.logits, want.logits)))
print(f"[{time.time() - began:.0f} s] checked against the engine", flush=True)
times = {cell: [] for cell in cells}
for index in range(rounds):
    shift = index % len(cells)
    for cell in cells[shift:] + cells[:shift]:
        times[cell].append(statistics.median(run_cell(*cell).ms_per_token))
full = {every: statistics.median(times[(("fixed", 30.0), every)]) for every in schedules}
rows = []
for (point, every), values in times.items():
    middle = statistics.median(values)
    loops = statistics.fmean(sum(c) / len(c) for c in engine[point].loops[len(prompt) - 1:])
    ratios = [v / f for v, f in zip(values, times[(("fixed", 30.0), every)])]  # paired by round
    rows.append({"strategy": point[0], "setting": point[1], "read_every": every, "loops_per_group": round(loops, 2),
                 "same_as_engine": same[(point, every)][0], "max_logit_gap": f"{same[(point, every)][1]:.2e}",
                 "median_ms": round(middle, 4), "spread": round((max(values) - min(values)) / middle, 4),
                 "ratio_to_full_depth": round(statistics.median(ratios), 4),
                 "ratio_low": round(min(ratios), 4), "ratio_high": round(max(ratios), 4),
                 "rounds_ms": " ".join(f"{v:.4f}" for v in values)})
    r = rows[-1]
    print(f"{point[0]:13} {point[1]:5g} every {every}  loops {loops:5.2f}  {middle:8.3f} ms spread {r['spread']:6.1%}"
          f"  x{r['ratio_to_full_depth']:.3f} ({r['ratio_low']:.3f}-{r['ratio_high']:.3f})  same {r['same_as_engine']}"
          f" gap {r['max_logit_gap']}", flush=True)
with open(sys.argv[2], "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
print("device:", torch.cuda.get_device_name() if device.type == "cuda" else "cpu", f"{time.time() - began:.0f} s")
