"""Call and step fingerprints (docs/DESIGN.md section 4)."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tickwork.fsm.fingerprints import call_fingerprint, canonical_json, step_fingerprint

NESTED = {
    "path": "a.py",
    "opts": {"mode": "w", "flags": {"x": 1, "a": [1, {"k": 2, "b": 3}]}},
    "n": 2,
}
REORDERED = {
    "n": 2,
    "opts": {"flags": {"a": [1, {"b": 3, "k": 2}], "x": 1}, "mode": "w"},
    "path": "a.py",
}


def test_the_fingerprint_is_sha256_of_name_and_canonical_json() -> None:
    expected = hashlib.sha256(b'write_file:{"a":1,"b":2}').hexdigest()
    assert call_fingerprint("write_file", {"b": 2, "a": 1}) == expected


def test_canonical_json_sorts_keys_and_has_no_whitespace() -> None:
    assert (
        canonical_json({"b": [1, 2], "a": {"d": 1, "c": None}})
        == '{"a":{"c":null,"d":1},"b":[1,2]}'
    )


def test_key_order_does_not_matter_at_any_level() -> None:
    assert call_fingerprint("edit", NESTED) == call_fingerprint("edit", REORDERED)


def test_whitespace_in_the_models_text_does_not_matter() -> None:
    tight = json.loads('{"path":"a.py","opts":{"mode":"w"}}')
    loose = json.loads('{ "opts" : {\n  "mode": "w" } ,\t"path" : "a.py" }')
    assert call_fingerprint("edit", tight) == call_fingerprint("edit", loose)


def test_whitespace_does_not_matter_through_think(build: Any) -> None:
    reply = build.reply(("read_file", '{"path":"a.py"}'), ("read_file", '{ "path" :  "a.py" }'))
    first, second = build.think(build.head(), reply).step.calls
    assert first.fingerprint == second.fingerprint
    assert first.raw_arguments != second.raw_arguments


def test_different_arguments_differ() -> None:
    assert call_fingerprint("read_file", {"path": "a.py"}) != call_fingerprint(
        "read_file", {"path": "b.py"}
    )
    assert call_fingerprint("f", {"a": [1, 2]}) != call_fingerprint("f", {"a": [2, 1]})
    assert call_fingerprint("f", {"a": 1}) != call_fingerprint("f", {"a": "1"})


def test_different_names_differ() -> None:
    assert call_fingerprint("read_file", {"path": "a.py"}) != call_fingerprint(
        "write_file", {"path": "a.py"}
    )


def test_unparsed_text_and_an_object_differ() -> None:
    assert call_fingerprint("f", "{}") != call_fingerprint("f", {})


def test_step_fingerprint_is_order_sensitive() -> None:
    a, b = call_fingerprint("f", {"x": 1}), call_fingerprint("g", {"x": 1})
    assert step_fingerprint([a, b]) != step_fingerprint([b, a])
    assert step_fingerprint([a, b]) == step_fingerprint(iter([a, b]))
    assert step_fingerprint([a]) != step_fingerprint([a, a])


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=100, deadline=None)
@given(
    arguments=st.dictionaries(st.text(max_size=4), json_value, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_key_order_never_matters(arguments: dict[str, Any], seed: int) -> None:
    shuffled = _shuffled(arguments, random.Random(seed))
    assert call_fingerprint("tool", shuffled) == call_fingerprint("tool", arguments)
