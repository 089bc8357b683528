"""Device only: ms per token of the graphed decoding under each way the host reads the exit decisions, on the
paper's shape (configs/gpu-quick.yaml's model, weights at their random start: at tau = 0 and at a fixed depth the
work does not depend on the weights). Points: full depth, each timed rule at tau = 0 (never exits), acceleration and
KL at tau = inf (exit at their first possible step). Schedules: (read every n steps, the host waiting for a read
`lead` steps after it). Rounds paired and rotated; every cell checked equal to the engine."""
import csv
import os
import statistics
import sys

import torch

from twoscale.decoding.engine import decode_prompt, generate
from twoscale.exits.sweep import rules_at
from twoscale.stages.validation import read_params
from twoscale.training.trainer import model_config
from twoscale.models.looped_gpt import LoopedGPT

params = read_params(sys.argv[1])
run = params.run("huginn", 1337)
sweep = params.sweep
torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = LoopedGPT(model_config(run.model, 4096)).to(device).eval()
if device.type == "cpu":  # a local try of the script: a smaller shape
    model = LoopedGPT(model_config(run.model, 4096).__class__(**{**model_config(run.model, 4096).to_dict(),
                      "n_embd": 64, "n_head": 2})).eval()
prompt = torch.randint(0, 4096, (sweep.prompt_tokens,), generator=torch.Generator().manual_seed(1)).tolist()
new_tokens, rounds = sweep.new_tokens, int(os.environ.get("ROUNDS", 3))
specs = {name: strategy.spec for name, strategy in sweep.strategies.items()}
points = [("fixed", 30.0), ("acceleration", 0.0), ("step_norm", 0.0), ("kl_head", 0.0), ("acceleration", float("inf")),
          ("kl_head", float("inf"))]
schedules = [(4, 0), (1, 1), (2, 1), (4, 1)]
rules = {point: rules_at(specs[point[0]], point[1], model.n_groups, sweep.max_loops) for point in points}
decoded = {point: decode_prompt(model, prompt, rules[point], sweep.max_loops) for point in points}
engine = {point: generate(model, prompt, new_tokens, rules[point], sweep.max_loops, decoded=decoded[point],
                          graphs=False) for point in points}
cells = [(point, schedule) for point in points for schedule in schedules]


def run_cell(point, schedule):
    every, lead = schedule
    return generate(model, prompt, new_tokens, rules[point], sweep.max_loops, decoded=decoded[point], graphs=True,
                    read_every=every, read_lead=lead)


same = {}
for cell in cells:
    out = run_cell(*cell)
    want = engine[cell[0]]
    same[cell] = (out.tokens == want.tokens and out.loops == want.loops,
                  max(float((a - b).abs().max()) for a, b in zip(out.logits, want.logits)))
times = {cell: [] for cell in cells}
for index in range(rounds):
    shift = index % len(cells)
    for cell in cells[shift:] + cells[:shift]:
        times[cell].append(statistics.median(run_cell(*cell).ms_per_token))
rows = []
for (point, (every, lead)), values in times.items():
    middle = statistics.median(values)
    loops = statistics.fmean(sum(c) / len(c) for c in engine[point].loops[len(prompt) - 1:])
    rows.append({"strategy": point[0], "setting": point[1], "read_every": every, "lead": lead,
                 "loops_per_group": round(loops, 2), "same_as_engine": same[(point, (every, lead))][0],
                 "max_logit_gap": f"{same[(point, (every, lead))][1]:.2e}", "median_ms": round(middle, 4),
                 "spread": round((max(values) - min(values)) / middle, 4),
                 "rounds_ms": " ".join(f"{v:.4f}" for v in values)})
    print(f"{point[0]:13} {point[1]:5g} every {every} lead {lead}  loops {loops:5.2f}  {middle:8.3f} ms "
          f"spread {rows[-1]['spread']:6.1%}  same {rows[-1]['same_as_engine']} gap {rows[-1]['max_logit_gap']}",
          flush=True)
with open(os.path.join(os.environ.get("OUT", "/tmp"), "read_schedules.csv"), "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
print("device:", torch.cuda.get_device_name() if device.type == "cuda" else "cpu")
