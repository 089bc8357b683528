"""The loop map's spectrum on a run's spectrum tables, per recipe, group and checkpoint: what the claims report for
the last checkpoint (`spectrum_reading`), at every checkpoint. Medians over the sampled tokens: the spectral radius
of the token's own block and of its prefix against the measured late step ratio (with each one's median absolute
error), the share of tokens whose dominant eigenvalue is real and whose cos(arg λ) is in the paper's band, and the
predicted against the measured late cosine.

    python scripts/spectrum_table.py results/spectrum
"""

import argparse

from twoscale.geometry.verdicts import spectrum_reading
from twoscale.report.run_tables import run_tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", type=run_tables("spectrum"), metavar="FOLDER",
                        help="a run's spectrum tables (results/spectrum)")
    spectrum = parser.parse_args().tables
    print("| recipe | seed | step | group | radius (err) | prefix radius (err) | measured ratio | real | in band | "
          "predicted cos | measured cos |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (recipe, seed), run in spectrum.group_by("recipe", "seed", maintain_order=True):
        for step in sorted(run["step"].unique()):
            for g in spectrum_reading(run, step):
                print(f"| {recipe} | {seed} | {step} | {g['group']} | {g['median_radius']:.3f} "
                      f"({g['radius_vs_ratio']['median_abs_error']:.3f}) | {g['median_prefix_radius']:.3f} "
                      f"({g['prefix_vs_ratio']['median_abs_error']:.3f}) | {g['median_measured_ratio']:.3f} | "
                      f"{g['real_share']:.0%} | {g['band_share']:.0%} | {g['median_predicted_cosine']:.3f} | "
                      f"{g['median_measured_cosine']:.3f} |")


if __name__ == "__main__":
    main()
