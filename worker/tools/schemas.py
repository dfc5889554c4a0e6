"""Argument schemas of tools: from docstrings and pydantic, and back into words for the model."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping
from typing import Any

_ARGS_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_PARAM_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def signature_line(name: str, schema: Mapping[str, Any]) -> str:
    """The arguments in one line, e.g. `read_file(path: string, start_line: integer = 1)`."""
    required = set(schema.get("required", ()))
    parts = []
    for param, prop in schema.get("properties", {}).items():
        part = f"{param}: {type_name(prop)}"
        if param not in required:
            part += f" = {json.dumps(prop.get('default'))}"
        parts.append(part)
    return f"{name}({', '.join(parts)})"


def explain_error(error: Mapping[str, Any]) -> str:
    """One pydantic validation error in words the model can act on."""
    where = ".".join(str(part) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"missing required argument '{where}'"
    if error["type"] == "extra_forbidden":
        return f"unexpected argument '{where}'"
    got = repr(error.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    return f"argument '{where}': {error['msg']} (got {got})"


def type_name(prop: Mapping[str, Any]) -> str:
    if "anyOf" in prop:
        return " | ".join(type_name(option) for option in prop["anyOf"])
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "enum" in prop:
        return " | ".join(json.dumps(value) for value in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array" and isinstance(prop.get("items"), Mapping):
        return f"array of {type_name(prop['items'])}"
    return str(kind)


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description, and per-parameter text from a Google-style `Args:` section."""
    lines = inspect.cleandoc(doc or "").splitlines()
    start = next((i for i, line in enumerate(lines) if _ARGS_SECTION.match(line)), None)
    if start is None:
        return "\n".join(lines).strip(), {}
    params: dict[str, str] = {}
    current, indent = None, None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0:
            break  # the next section (Returns:, Raises:) or prose
        match = _PARAM_LINE.match(line.strip())
        if match and (indent is None or depth == indent):
            indent, current = depth, match[1]
            params[current] = match[2]
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(lines[:start]).strip(), params


def without_titles(node: Any) -> Any:
    """The schema without pydantic's `title`s, which only cost the model tokens."""
    if isinstance(node, list):
        return [without_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "patternProperties"):
            out[key] = {name: without_titles(sub) for name, sub in value.items()}
        elif key in ("default", "const", "enum", "examples"):
            out[key] = value  # data, not schema
        else:
            out[key] = without_titles(value)
    return out
