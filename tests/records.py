"""Build records written by hand in tests: a record's digest computed by hand, not by the package."""

from __future__ import annotations

import hashlib
import json


def digest_by_hand(record: dict) -> str:
    """The sha256 of a record's fields other than its digest, as compact JSON with sorted keys."""
    fields = {key: value for key, value in record.items() if key != "digest"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def digested(record: dict) -> dict:
    """The record with its digest, as a stage writes it."""
    return {**record, "digest": digest_by_hand(record)}
