"""The chat transcript the model sees."""

from __future__ import annotations

from typing import Any

from tickwork.fsm.transcript import messages
from tickwork.fsm.values import Observation, Step


def steps_and_observations(build: Any) -> tuple[list[Step], dict[str, Observation]]:
    calls = (
        build.call("read_file", '{ "path" : "a.py" }', index=0),
        build.call("run_tests", "", index=1),
    )
    steps = [
        Step(step=1, thought="look and test", calls=calls, at=build.at(1)),
        Step(step=2, thought="It is fixed.", at=build.at(2)),
    ]
    observations = {
        "s1c0": Observation(call_id="s1c0", content="def f(): ...", at=build.at(1)),
        "s1c1": Observation(call_id="s1c1", content="1 failed", is_error=True, at=build.at(1)),
    }
    return steps, observations


def test_messages_in_order_with_roles(build: Any) -> None:
    steps, observations = steps_and_observations(build)
    assert messages(build.head(), steps, observations) == [
        {"role": "system", "content": "You repair code."},
        {"role": "user", "content": "Fix the bug."},
        {
            "role": "assistant",
            "content": "look and test",
            "tool_calls": [
                {
                    "id": "s1c0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{ "path" : "a.py" }'},
                },
                {
                    "id": "s1c1",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": ""},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "s1c0", "name": "read_file", "content": "def f(): ..."},
        {"role": "tool", "tool_call_id": "s1c1", "name": "run_tests", "content": "ERROR: 1 failed"},
        {"role": "assistant", "content": "It is fixed."},
    ]


def test_tool_messages_carry_our_call_ids(build: Any) -> None:
    steps, observations = steps_and_observations(build)
    out = messages(build.head(), steps, observations)
    offered = [c["id"] for m in out if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in out if m["role"] == "tool"]
    assert offered == answered == ["s1c0", "s1c1"]


def test_only_error_observations_are_prefixed(build: Any) -> None:
    steps, observations = steps_and_observations(build)
    tools = [
        m["content"] for m in messages(build.head(), steps, observations) if m["role"] == "tool"
    ]
    assert tools == ["def f(): ...", "ERROR: 1 failed"]


def test_without_system_prompt_the_task_comes_first(build: Any) -> None:
    head = build.head(config={"user_prompt": "Fix it."})
    assert messages(head, [], {}) == [{"role": "user", "content": "Fix it."}]


def test_without_user_prompt_the_input_is_the_task(build: Any) -> None:
    head = build.head(config={}, input={"repo": "x"})
    assert messages(head, [], {}) == [{"role": "user", "content": '{"repo": "x"}'}]


def test_call_without_observation_has_no_tool_message(build: Any) -> None:
    steps, observations = steps_and_observations(build)
    del observations["s1c1"]
    out = messages(build.head(), steps[:1], observations)
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["s1c0"]


def test_instructions_follow_their_step(build: Any) -> None:
    steps, observations = steps_and_observations(build)
    config = {
        "user_prompt": "Fix it.",
        "instructions": [
            {"after_step": 0, "text": "Be brief."},
            {"after_step": 1, "text": "Now explain."},
        ],
    }
    out = messages(build.head(config=config), steps, observations)
    assert [m["content"] for m in out if m["role"] == "user"] == [
        "Fix it.",
        "Be brief.",
        "Now explain.",
    ]
    assert out[1] == {"role": "user", "content": "Be brief."}
    at = out.index({"role": "user", "content": "Now explain."})
    assert out[at - 1]["tool_call_id"] == "s1c1"
    assert out[at + 1] == {"role": "assistant", "content": "It is fixed."}
