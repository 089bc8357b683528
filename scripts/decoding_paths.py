"""Time one sequence's decoding by both paths on a trained checkpoint, in one sitting: the engine's functions
launched from Python ("eager", the path before graphs) and the graphs replayed on static buffers ("graphs", with the
host reading an exit decision every `--read-every` steps, and the rules' arithmetic compiled into fused kernels or
launched as it is, `--rule-arithmetic`). The points are those the latency stage times for the
verdicts (full depth, K*, each strategy's best points, from the run's sweep tables) and every timed strategy at
tau = 0, where it never exits. Rounds are paired: a round times every (point, path) once, in an order rotated by one
place per round. Prints a table and writes it as CSV, with every round's median ms per token and the median time a
generation spends before its first token (the graphs' warm-up and capture).

    PYTHONPATH=src python scripts/decoding_paths.py --params P --recipe huginn --seed 1337 --checkpoint C \\
        --data-dir D --strategies-dir S --out decoding_paths.csv [--rounds 5] [--read-every 1 4] \\
        [--rule-arithmetic compiled eager]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch

from twoscale.decoding.engine import decode_prompt, generate
from twoscale.decoding.graphed import READ_EVERY
from twoscale.exits.sweep import never_exit_setting, rules_at
from twoscale.exits.tables import compared_points
from twoscale.stages.checkpoints import add_checkpoint_arguments, open_checkpoint
from twoscale.stages.latency import sweep_tables
from twoscale.stages.validation import read_params
from twoscale.training.batches import held_out_prompts


def decode_tokens(model, decoded, new_tokens, rules, graphs):
    """Greedy generation from a decoded prompt by one path (`graphs` None: the engine, else (read_every, fuse_rules)
    for the graphs): the ms of every generated token, the ms before the first, the logits and loop counts of each,
    the tokens."""
    read_every, fuse_rules = graphs or (READ_EVERY, None)
    started = time.perf_counter()
    out = generate(model, decoded.prompt, new_tokens, rules, decoded=decoded, graphs=graphs is not None,
                   read_every=read_every, fuse_rules=fuse_rules)
    setup_ms = 1000 * (time.perf_counter() - started) - sum(out.ms_per_token)
    first = len(decoded.prompt) - 1
    return out.ms_per_token, setup_ms, torch.stack(out.logits[first:]), out.loops[first:], out.tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_checkpoint_arguments(parser)
    parser.add_argument("--strategies-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--read-every", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rule-arithmetic", nargs="+", choices=["compiled", "eager"], default=["compiled", "eager"])
    args = parser.parse_args()
    params = read_params(args.params)
    run = params.run(args.recipe, args.seed)
    sweep = params.sweep
    model, _, val_ids, device = open_checkpoint(args, params, run, sweep.threads)
    prompts = held_out_prompts(val_ids, sweep.n_prompts, sweep.prompt_tokens)
    timed = {name: strategy for name, strategy in sweep.strategies.items() if strategy.timed}
    points = sorted(compared_points(sweep_tables(args.strategies_dir, list(timed))))
    points += [(name, never_exit_setting(strategy.spec["criterion"], sweep.max_loops)) for name, strategy
               in timed.items() if name != "fixed"]
    points = sorted(set(points))
    paths = [("eager", None)] + [(f"graphs, rule {arithmetic}, read every {n}", (n, arithmetic == "compiled"))
                                 for n in args.read_every for arithmetic in args.rule_arithmetic]
    cells = [(name, setting, path, graphs) for name, setting in points for path, graphs in paths]
    rounds: dict[int, list[float]] = {index: [] for index in range(len(cells))}
    loops: dict[int, float] = {}
    rules_of = {point: rules_at(timed[point[0]].spec, point[1], model.n_groups, sweep.max_loops) for point in points}
    decoded = {point: [decode_prompt(model, prompt, rules_of[point]) for prompt in prompts]
               for point in points}  # untimed, shared by both paths
    references = {point: [decode_tokens(model, state, sweep.new_tokens, rules_of[point], None)
                          for state in decoded[point]] for point in points}  # also the eager path's warm-up
    same: dict[int, bool] = {}
    logit_gap: dict[int, float] = {}
    setup: dict[int, list[float]] = {index: [] for index in range(len(cells))}
    for index, (name, setting, _, graphs) in enumerate(cells):  # equality, and each graph path's warm-up
        point = (name, setting)
        same[index], logit_gap[index] = True, 0.0
        if graphs is None:  # the engine is the reference
            continue
        for state, (_, _, want_logits, want_loops, want) in zip(decoded[point], references[point], strict=True):
            _, _, got_logits, got_loops, got = decode_tokens(model, state, sweep.new_tokens, rules_of[point],
                                                             graphs)
            same[index] = same[index] and got == want and got_loops == want_loops
            logit_gap[index] = max(logit_gap[index], float((got_logits - want_logits).abs().max()))
    for round_index in range(args.rounds):
        shift = round_index % len(cells)
        for index in [*range(shift, len(cells)), *range(shift)]:
            name, setting, _, graphs = cells[index]
            times, mean_loops = [], []
            for prompt_state in decoded[(name, setting)]:
                ms, setup_ms, _, counts, _ = decode_tokens(model, prompt_state, sweep.new_tokens,
                                                           rules_of[(name, setting)], graphs)
                times += ms
                setup[index].append(setup_ms)
                mean_loops += [sum(position) / len(position) for position in counts]
            rounds[index].append(statistics.median(times))
            loops[index] = statistics.fmean(mean_loops)
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    rows = []
    for index, (name, setting, path, _) in enumerate(cells):
        values = rounds[index]
        middle = statistics.median(values)
        rows.append({"strategy": name, "setting": setting, "path": path, "loops_per_group": round(loops[index], 3),
                     "same_as_eager": same[index], "max_logit_gap": f"{logit_gap[index]:.2e}",
                     "median_ms": round(middle, 4), "spread": round((max(values) - min(values)) / middle, 4),
                     "rounds_ms": " ".join(f"{value:.4f}" for value in values),
                     "setup_ms": round(statistics.median(setup[index]), 1)})
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    width = max(len(row["path"]) for row in rows)
    print(f"{'strategy':20} {'setting':>8} {'path':{width}} {'loops':>6} {'ms/token':>9} {'spread':>7} same  gap"
          "       setup ms")
    for row in rows:
        print(f"{row['strategy']:20} {row['setting']:8g} {row['path']:{width}} {row['loops_per_group']:6.2f} "
              f"{row['median_ms']:9.3f} {row['spread']:7.1%} {row['same_as_eager']!s:5} {row['max_logit_gap']} "
              f"{row['setup_ms']:9.1f}")
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else device}")


if __name__ == "__main__":
    main()
