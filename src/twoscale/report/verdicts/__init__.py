"""The claims' verdicts, one module per system: `geometry` (S, C1-C5), `exits` (C6), `sampler` (C7) and
`surrogates` (C8), with `common` for how a claim's checks add up to its verdict. Each verdict is a pure function
from the tables the stages write to a `common.Verdict`: the claim's checks (pass, fail or undecided, per group,
hand-off or sub-test) and the measured numbers behind them. The report's prose is in `report.claims`."""
