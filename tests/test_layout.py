"""The package is layered (pyproject's [tool.importlinter]): no module imports from a layer above it, the systems never
import each other, and the model file imports nothing of the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_layer_imports_from_a_layer_above_it():
    result = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout
