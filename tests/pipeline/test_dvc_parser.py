"""DVC reads dvc.yaml and dvc.lock (the whole lock again for each stage it looks at) with ruamel's C parser where
ruamel.yaml.clib is installed, about nine times faster than its pure-Python one (docs/development.md): the
environment has it, and it reads the project's files to the same data as the pure-Python parser."""

from __future__ import annotations

import pytest
from dvc.utils.serialize._yaml import parse_yaml
from ruamel.yaml import YAML
from ruamel.yaml.main import CParser
from workspace import ROOT


def test_dvc_s_yaml_reader_takes_the_c_parser():
    assert CParser is not None
    assert YAML(typ="safe").Parser is CParser  # what DVC's parse_yaml builds


@pytest.mark.parametrize("name", ["dvc.yaml", "dvc.lock", "params.yaml"])
def test_the_c_parser_reads_the_project_s_files_as_the_pure_python_one(name):
    text = (ROOT / name).read_text()
    assert parse_yaml(text, name) == YAML(typ="safe", pure=True).load(text)
