"""The precision question on a run's precision tables: per recipe, group and checkpoint, the late consecutive-step
cosine (C3's reading: the mean over k > K/2) measured in each precision, with the late step in that precision's
epsilons, and where a float32 or bfloat16 measurement lands in the paper's band [0.5, 0.65] or falls across
training (by 0.1 or more from the first checkpoint to the last) while float64 stays aligned (late cosine >= 0.9).

    python scripts/precision_answer.py results/precision
"""

import argparse

import polars as pl

from twoscale.geometry.figures import precision_points
from twoscale.geometry.thresholds import C3_BAND
from twoscale.report.run_tables import run_tables

ALIGNED = 0.9  # a float64 late cosine at least this: the steps still point one way
FALL = 0.1  # a late cosine lower by at least this at the last checkpoint than at the first: it fell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", type=run_tables("precision"), metavar="FOLDER",
                        help="a run's precision tables (results/precision)")
    points = precision_points(parser.parse_args().tables)
    lo, hi = C3_BAND
    for (recipe, seed), run in points.group_by("recipe", "seed", maintain_order=True):
        print(f"\n{recipe}, seed {seed}: late cosine (late step in epsilons) per checkpoint")
        steps = sorted(run["step"].unique())
        print("| group | precision | " + " | ".join(f"step {s}" for s in steps) + " |")
        print("|---|---|" + "---|" * len(steps))
        for (group, precision), part in run.sort("group").group_by("group", "precision", maintain_order=True):
            cells = {row["step"]: f"{row['late_cosine']:.3f} ({row['step_in_eps']:.2g})"
                     for row in part.iter_rows(named=True)}
            print(f"| {group} | {precision} | " + " | ".join(cells.get(s, "–") for s in steps) + " |")
        in_band = run.filter(pl.col("late_cosine").is_between(lo, hi) & (pl.col("precision") != "float64"))
        print(f"in the paper's band [{lo}, {hi}] (not float64): "
              + (", ".join(f"{r['precision']} group {r['group']} step {r['step']}: {r['late_cosine']:.3f}"
                           for r in in_band.iter_rows(named=True)) or "none"))
        exact = run.filter(pl.col("precision") == "float64").select("step", "group",
                                                                    pl.col("late_cosine").alias("float64"))
        wide = run.join(exact, on=["step", "group"]).filter(pl.col("precision") != "float64")
        for (group, precision), part in wide.sort("step").group_by("group", "precision", maintain_order=True):
            first, last = part.row(0, named=True), part.row(-1, named=True)
            if last["late_cosine"] <= first["late_cosine"] - FALL and last["float64"] >= ALIGNED:
                print(f"falls across training while float64 stays aligned: {precision} group {group} "
                      f"{first['late_cosine']:.3f} (step {first['step']}) -> {last['late_cosine']:.3f} "
                      f"(step {last['step']}); float64 {first['float64']:.3f} -> {last['float64']:.3f}")


if __name__ == "__main__":
    main()
