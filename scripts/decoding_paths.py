"""Time one sequence's decoding by several paths, in one sitting: the engine's functions launched from Python
("eager", the path before graphs) and the graphs replayed on static buffers, laid out as `GraphOptions` say (the host
reading an exit decision every `--read-every` steps; the rules' arithmetic compiled into fused kernels or launched
as it is, `--rule-arithmetic`; each step's judgement beside the next step on a second stream or in line,
`--judgement`). The points: full depth, every timed strategy at its never-exiting setting (the same loops as full
depth, plus the rule) and, given a run's sweep tables (`--strategies-dir`), the points the latency stage times for
the verdicts. On a trained checkpoint (`--checkpoint`, `--data-dir`: prompts from its held-out tokens) or, without
one, the set's model at its random start (at a fixed depth or a never-exiting setting the work does not depend on
the weights). Rounds are paired: a round times every (point, path) once, in an order rotated by one place per
round, and each cell's ratio to full depth by the same path is taken round by round. Every cell is checked equal to
the engine's decoding. Prints a table and writes it as CSV, with every round's median ms per token and the median
time a generation spends before its first token (the graphs' warm-up and capture).

    PYTHONPATH=src python scripts/decoding_paths.py --params P --out decoding_paths.csv [--recipe huginn]
        [--seed S] [--checkpoint C --data-dir D] [--strategies-dir S] [--rounds 5] [--read-every 1 4]
        [--rule-arithmetic compiled eager] [--judgement beside in-line] [--no-eager]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch

from twoscale.decoding.engine import decode_prompt, generate
from twoscale.decoding.graphed import GraphOptions
from twoscale.exits.sweep import never_exit_setting, rules_at
from twoscale.exits.tables import compared_points
from twoscale.models.looped_gpt import LoopedGPT
from twoscale.stages.checkpoints import open_checkpoint
from twoscale.stages.latency import sweep_tables
from twoscale.stages.validation import read_params
from twoscale.training.batches import held_out_prompts
from twoscale.training.device import configure_torch, resolve_device
from twoscale.training.trainer import model_config

RANDOM_PROMPT_SEED = 1


def decode_tokens(model, decoded, new_tokens, rules, options):
    """Greedy generation from a decoded prompt by one path (`options` None: the engine, else the graphs laid out as
    they say): the ms of every generated token, the ms before the first, the logits and loop counts of each, the
    tokens."""
    started = time.perf_counter()
    out = generate(model, decoded.prompt, new_tokens, rules, decoded=decoded, graphs=options is not None,
                   graph_options=options or GraphOptions())
    setup_ms = 1000 * (time.perf_counter() - started) - sum(out.ms_per_token)
    first = len(decoded.prompt) - 1
    return out.ms_per_token, setup_ms, torch.stack(out.logits[first:]), out.loops[first:], out.tokens


def graph_paths(read_every: list[int], arithmetic: list[str], judgement: list[str]) -> list[tuple[str, GraphOptions]]:
    return [(f"graphs, rule {how}, read every {n}, judged {where}",
             GraphOptions(read_every=n, fuse_rules=how == "compiled", overlap_rules=where == "beside"))
            for n in read_every for how in arithmetic for where in judgement]


def never_exiting_points(sweep) -> list[tuple[str, float]]:
    """Every timed strategy at the setting where it never exits: `fixed` (always timed) at full depth, the others
    running the same loops plus their rule."""
    return [(name, never_exit_setting(strategy.spec["criterion"], sweep.max_loops))
            for name, strategy in sweep.strategies.items() if strategy.timed]


def random_model_and_prompts(params, run, threads: int) -> tuple[LoopedGPT, list[list[int]]]:
    """The set's model at its random start, on the set's device, and random prompts (at a fixed depth or a
    never-exiting setting the work does not depend on the weights or the tokens)."""
    sweep = params.sweep
    configure_torch(threads, run.seed)
    vocab_size = params.tokenize.vocab_size
    model = LoopedGPT(model_config(run.model, vocab_size)).to(resolve_device(params.runtime.device)).eval()
    generator = torch.Generator().manual_seed(RANDOM_PROMPT_SEED)
    return model, [torch.randint(0, vocab_size, (sweep.prompt_tokens,), generator=generator).tolist()
                   for _ in range(sweep.n_prompts)]


def model_and_prompts(args: argparse.Namespace, params, run, threads: int) -> tuple[LoopedGPT, list[list[int]]]:
    """The checkpoint's model and held-out prompts, or the set's model at its random start and random prompts."""
    if args.checkpoint is None:
        return random_model_and_prompts(params, run, threads)
    model, _, val_ids, _ = open_checkpoint(args, params, run, threads)
    return model, held_out_prompts(val_ids, params.sweep.n_prompts, params.sweep.prompt_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, required=True)
    parser.add_argument("--recipe", default="huginn")
    parser.add_argument("--seed", type=int, help="the run's seed (default: the set's first)")
    parser.add_argument("--checkpoint", type=Path, help="a trained checkpoint (default: the model at its start)")
    parser.add_argument("--data-dir", type=Path, help="the set's prepared tokens (with --checkpoint)")
    parser.add_argument("--strategies-dir", type=Path, help="the run's sweep tables: also time the verdicts' points")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--read-every", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rule-arithmetic", nargs="+", choices=["compiled", "eager"], default=["compiled", "eager"])
    parser.add_argument("--judgement", nargs="+", choices=["beside", "in-line"],
                        help="default: both on a GPU, in line elsewhere (a second stream needs CUDA)")
    parser.add_argument("--no-eager", action="store_true", help="time the graphs only")
    args = parser.parse_args()
    if (args.checkpoint is None) != (args.data_dir is None):
        parser.error("--checkpoint and --data-dir go together")
    params = read_params(args.params)
    if args.judgement is None:
        args.judgement = ["beside", "in-line"] if resolve_device(params.runtime.device).type == "cuda" else ["in-line"]
    run = params.run(args.recipe, params.runtime.seeds[0] if args.seed is None else args.seed)
    sweep = params.sweep
    model, prompts = model_and_prompts(args, params, run, sweep.threads)
    timed = {name: strategy for name, strategy in sweep.strategies.items() if strategy.timed}
    full_depth = ("fixed", never_exit_setting("fixed", sweep.max_loops))
    points = never_exiting_points(sweep)
    if args.strategies_dir is not None:
        points += compared_points(sweep_tables(args.strategies_dir, list(timed)))
    points = sorted(set(points))
    paths = ([] if args.no_eager else [("eager", None)]) + graph_paths(args.read_every, args.rule_arithmetic,
                                                                       args.judgement)
    cells = [(name, setting, path, options) for name, setting in points for path, options in paths]
    rounds: dict[int, list[float]] = {index: [] for index in range(len(cells))}
    loops: dict[int, float] = {}
    rules_of = {point: rules_at(sweep.strategies[point[0]].spec, point[1], model.n_groups, sweep.max_loops)
                for point in points}
    decoded = {point: [decode_prompt(model, prompt, rules_of[point]) for prompt in prompts]
               for point in points}  # untimed, shared by every path
    references = {point: [decode_tokens(model, state, sweep.new_tokens, rules_of[point], None)
                          for state in decoded[point]] for point in points}  # also the eager path's warm-up
    same: dict[int, bool] = {}
    logit_gap: dict[int, float] = {}
    setup: dict[int, list[float]] = {index: [] for index in range(len(cells))}
    for index, (name, setting, _, options) in enumerate(cells):  # equality, and each graph path's warm-up
        point = (name, setting)
        same[index], logit_gap[index] = True, 0.0
        if options is None:  # the engine is the reference
            continue
        for state, (_, _, want_logits, want_loops, want) in zip(decoded[point], references[point], strict=True):
            _, _, got_logits, got_loops, got = decode_tokens(model, state, sweep.new_tokens, rules_of[point],
                                                             options)
            same[index] = same[index] and got == want and got_loops == want_loops
            logit_gap[index] = max(logit_gap[index], float((got_logits - want_logits).abs().max()))
    for round_index in range(args.rounds):
        shift = round_index % len(cells)
        for index in [*range(shift, len(cells)), *range(shift)]:
            name, setting, _, options = cells[index]
            times, mean_loops = [], []
            for prompt_state in decoded[(name, setting)]:
                ms, setup_ms, _, counts, _ = decode_tokens(model, prompt_state, sweep.new_tokens,
                                                           rules_of[(name, setting)], options)
                times += ms
                setup[index].append(setup_ms)
                mean_loops += [sum(position) / len(position) for position in counts]
            rounds[index].append(statistics.median(times))
            loops[index] = statistics.fmean(mean_loops)
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    full = {path: rounds[cells.index((*full_depth, path, options))] for path, options in paths}
    rows = []
    for index, (name, setting, path, _) in enumerate(cells):
        values = rounds[index]
        middle = statistics.median(values)
        ratios = [value / reference for value, reference in zip(values, full[path], strict=True)]
        rows.append({"strategy": name, "setting": setting, "path": path, "loops_per_group": round(loops[index], 3),
                     "same_as_eager": same[index], "max_logit_gap": f"{logit_gap[index]:.2e}",
                     "median_ms": round(middle, 4), "spread": round((max(values) - min(values)) / middle, 4),
                     "ratio_to_full_depth": round(statistics.median(ratios), 4),
                     "ratio_low": round(min(ratios), 4), "ratio_high": round(max(ratios), 4),
                     "rounds_ms": " ".join(f"{value:.4f}" for value in values),
                     "setup_ms": round(statistics.median(setup[index]), 1)})
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    width = max(len(row["path"]) for row in rows)
    print(f"{'strategy':20} {'setting':>8} {'path':{width}} {'loops':>6} {'ms/token':>9} {'spread':>7} "
          f"{'x full depth':>21} same  gap       setup ms")
    for row in rows:
        ratio = f"{row['ratio_to_full_depth']:.3f} ({row['ratio_low']:.3f}-{row['ratio_high']:.3f})"
        print(f"{row['strategy']:20} {row['setting']:8g} {row['path']:{width}} {row['loops_per_group']:6.2f} "
              f"{row['median_ms']:9.3f} {row['spread']:7.1%} {ratio:>21} {row['same_as_eager']!s:5} "
              f"{row['max_logit_gap']} {row['setup_ms']:9.1f}")
    print(f"device: {torch.cuda.get_device_name() if model.lm_head.weight.is_cuda else 'cpu'}")


if __name__ == "__main__":
    main()
