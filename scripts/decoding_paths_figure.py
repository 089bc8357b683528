"""Draw a table of scripts/decoding_paths.py: ms per token of every point by every path, the rounds' range as a
whisker, on a log scale (the engine launched from Python is up to ten times the graphs).

    PYTHONPATH=src python scripts/decoding_paths_figure.py decoding_paths.csv decoding_paths.png
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path, help="a CSV of scripts/decoding_paths.py")
    parser.add_argument("figure", type=Path, help="the PNG to write")
    args = parser.parse_args()
    source, target = args.table, args.figure
    if not source.is_file():
        parser.error(f"{source}: no such table")
    with source.open() as handle:
        rows = list(csv.DictReader(handle))
    points = list(dict.fromkeys((row["strategy"], float(row["setting"])) for row in rows))
    paths = list(dict.fromkeys(row["path"] for row in rows))
    height = 0.8 / len(paths)
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(points) * len(paths) / 2 + 1.5))
    for index, path in enumerate(paths):
        cells = {(row["strategy"], float(row["setting"])): row for row in rows if row["path"] == path}
        at = [number + index * height for number in range(len(points))]
        rounds = [[float(value) for value in cells[point]["rounds_ms"].split()] for point in points]
        middle = [float(cells[point]["median_ms"]) for point in points]
        whiskers = [[m - min(r) for m, r in zip(middle, rounds)], [max(r) - m for m, r in zip(middle, rounds)]]
        axes.barh(at, middle, height=height, xerr=whiskers, label=path, capsize=2)
    axes.set_yticks([number + 0.4 - height / 2 for number in range(len(points))])
    axes.set_yticklabels([f"{name} {setting:g}" if name == "fixed" else f"{name} τ {setting:g}"
                          for name, setting in points])
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("ms per generated token (median of the rounds; whisker: their range)")
    axes.legend(loc="lower right", fontsize="small")
    axes.grid(axis="x", which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main()
