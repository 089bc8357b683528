"""Within each system, the thresholds sit below the figures and the verdicts, and the verdicts below the claims'
prose: importing a lower module never loads a higher one."""

from __future__ import annotations

import subprocess
import sys

import pytest

SYSTEMS = ("geometry", "exits", "sampler", "surrogates")
CLAIMS = "twoscale.claims"
VERDICTS = tuple(f"twoscale.{system}.verdicts" for system in SYSTEMS)


def loaded_by(*modules: str) -> set[str]:
    """The twoscale modules a fresh interpreter has loaded after importing these."""
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "print('\\n'.join(m for m in sys.modules if m.startswith('twoscale')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_system_s_figures_load_its_thresholds_but_no_verdict_or_claim(system):
    loaded = loaded_by(f"twoscale.{system}.figures")
    if system in ("geometry", "surrogates"):  # their figures mark a claim's line (DLR 10, 90% recovered)
        assert f"twoscale.{system}.thresholds" in loaded
    assert not {m for m in loaded if m.startswith((CLAIMS, *VERDICTS)) or m.endswith(".claims")}


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_thresholds_load_nothing_else(system):
    assert {m for m in loaded_by(f"twoscale.{system}.thresholds") if "." in m.removeprefix("twoscale.")} == {
        f"twoscale.{system}.thresholds"}


@pytest.mark.parametrize("verdicts", VERDICTS)
def test_a_verdict_loads_no_claim_prose(verdicts):
    assert not {m for m in loaded_by(verdicts) if m.startswith(CLAIMS) or m.endswith(".claims")}
