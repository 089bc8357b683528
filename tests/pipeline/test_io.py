"""What the stages write is strict JSON: a value that is not finite becomes null, never a bare NaN."""

from __future__ import annotations

import json
import math

import pytest

from twoscale.pipeline.io import write_json


def test_json_is_written_sorted_and_readable_by_a_strict_parser(tmp_path):
    write_json(tmp_path / "m.json", {"b": 1.5, "a": [1, None]})
    text = (tmp_path / "m.json").read_text()
    assert text == '{\n  "a": [\n    1,\n    null\n  ],\n  "b": 1.5\n}\n'
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}")) == {"a": [1, None], "b": 1.5}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_value_that_is_not_finite_is_written_as_null(tmp_path, value):
    write_json(tmp_path / "m.json", {"loss": value, "rows": [1.0, value, {"r2": value}], "pair": (value, 2)})
    text = (tmp_path / "m.json").read_text()
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert strict == {"loss": None, "rows": [1.0, None, {"r2": None}], "pair": [None, 2]}
