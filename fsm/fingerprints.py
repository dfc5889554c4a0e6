"""Stable fingerprints of tool calls and steps (docs/DESIGN.md section 4)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with keys sorted at every level and no whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_fingerprint(name: str, arguments: Any) -> str:
    """SHA-256 of `name:canonical-arguments`; arguments that did not parse count as their text."""
    return hashlib.sha256(f"{name}:{canonical_json(arguments)}".encode()).hexdigest()


def step_fingerprint(call_fingerprints: Iterable[str]) -> str:
    """SHA-256 of the step's call fingerprints in order."""
    return hashlib.sha256("".join(call_fingerprints).encode()).hexdigest()
