"""The scripts under scripts/ are run by hand (on a GPU node, before a commit), not by the workflow: each still
imports what it names from the package, which a refactoring of the package could otherwise break unseen."""

from __future__ import annotations

import importlib.util

import pytest
from workspace import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))
OWN_ENVIRONMENT = {"look_at_report": "playwright"}  # run from a venv of its own (docs/running.md)


def test_the_scripts_are_found():
    assert {"decoding_paths", "gpu_kit", "compare_commits"} <= {path.stem for path in SCRIPTS}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_every_script_imports(path, monkeypatch):
    if path.stem in OWN_ENVIRONMENT:
        pytest.importorskip(OWN_ENVIRONMENT[path.stem])
    monkeypatch.syspath_prepend(str(path.parent))  # as when run: a script imports its neighbours
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # the scripts run only as __main__
