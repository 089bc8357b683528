"""Ruff's checks of pyproject.toml (pyflakes, pycodestyle with the 120-column limit, import order) hold for the
whole code, and the check is real: a line one column too long fails it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = str(Path(sys.executable).with_name("ruff"))


def ruff_check(*arguments: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([RUFF, "check", "--no-cache", "--output-format", "concise", *map(str, arguments)],
                          cwd=ROOT, capture_output=True, text=True)


def line_of(width: int) -> str:
    """A statement of exactly `width` characters, with spaces throughout (ruff lets a line whose overlong part is
    one word pass)."""
    ones = ", ".join(["1"] * ((width - 6) // 3))
    name = "N" * (width - len(f" = [{ones}]"))
    line = f"{name} = [{ones}]"
    assert len(line) == width
    return line


def test_the_code_passes_ruff():
    result = ruff_check("src", "tests", "scripts")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_refuses_a_line_over_the_limit(tmp_path):
    at_limit, over = tmp_path / "at_limit.py", tmp_path / "over.py"
    at_limit.write_text(line_of(120) + "\n")
    over.write_text(line_of(121) + "\n")
    assert ruff_check("--config", ROOT / "pyproject.toml", at_limit).returncode == 0
    result = ruff_check("--config", ROOT / "pyproject.toml", over)
    assert result.returncode == 1 and "E501 Line too long (121 > 120)" in result.stdout
