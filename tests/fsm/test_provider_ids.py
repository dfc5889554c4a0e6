"""Calls keep the provider's ids for the transcript, and the reason a person must approve."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from tickwork.fsm.approvals import ApprovalRule, approval_reason
from tickwork.fsm.transcript import messages
from tickwork.fsm.values import MAX_PROVIDER_CALL_ID, ModelReply, Observation, ProposedCall, Usage


def reply(*ids: str | None) -> ModelReply:
    return ModelReply(
        content="look",
        calls=tuple(
            ProposedCall(name="read_file", arguments={"path": f"{i}.py"}, id=call_id)
            for i, call_id in enumerate(ids)
        ),
        usage=Usage(prompt_tokens=10, completion_tokens=5),
    )


@pytest.mark.parametrize(
    ("ids", "kept"),
    [
        pytest.param(("abcDEF123", "XyZ987654"), ["abcDEF123", "XyZ987654"], id="all_given"),
        pytest.param((None, None), [None, None], id="none_given"),
        pytest.param(("abcDEF123", None), [None, None], id="one_missing"),
        pytest.param(("call_1", "call_1"), [None, None], id="repeated"),
        pytest.param(("call 1", "call_2"), [None, None], id="with_space"),
        pytest.param(("call\n1", "call_2"), [None, None], id="control_character"),
        pytest.param(("é" * 9, "call_2"), [None, None], id="not_ascii"),
        pytest.param(("x" * (MAX_PROVIDER_CALL_ID + 1), "y"), [None, None], id="too_long"),
        pytest.param(("", "call_2"), [None, None], id="empty"),
    ],
)
def test_a_step_keeps_the_providers_ids_only_when_each_call_has_its_own(
    build: Any, ids: tuple[str | None, ...], kept: list[str | None]
) -> None:
    change = build.think(build.head(), reply(*ids))
    calls = change.step.calls
    assert [c.provider_call_id for c in calls] == kept
    assert [c.call_id for c in calls] == ["s1c0", "s1c1"], "our own ids stay the keys"
    assert len({c.wire_id for c in calls}) == len(calls)


def test_the_transcript_sends_back_the_providers_ids(build: Any) -> None:
    change = build.think(build.head(), reply("abcDEF123", "XyZ987654"))
    seen = {
        c.call_id: Observation(call_id=c.call_id, content="ok", at=build.at(1))
        for c in change.step.calls
    }
    out = messages(change.head, [change.step], seen)
    offered = [c["id"] for m in out if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in out if m["role"] == "tool"]
    assert offered == answered == ["abcDEF123", "XyZ987654"]


def test_the_transcript_sends_our_ids_when_the_provider_gave_none(build: Any) -> None:
    change = build.think(build.head(), reply(None, None))
    seen = {
        c.call_id: Observation(call_id=c.call_id, content="ok", at=build.at(1))
        for c in change.step.calls
    }
    out = messages(change.head, [change.step], seen)
    assert [m["tool_call_id"] for m in out if m["role"] == "tool"] == ["s1c0", "s1c1"]


def _policy(arguments: Mapping[str, Any]) -> bool | str | None:
    command = arguments["cmd"]
    if command == "boom":
        raise RuntimeError("policy crashed")
    if command == "yes":
        return True
    if command == "no":
        return False
    return f"{command} deletes files" if command.startswith("rm") else None


@pytest.mark.parametrize(
    ("rule", "arguments", "reason"),
    [
        pytest.param(None, {"cmd": "rm x"}, None, id="no_rule"),
        pytest.param(
            ApprovalRule(always=True),
            {},
            "tool 'run_command' always needs a person's approval",
            id="always",
        ),
        pytest.param(
            ApprovalRule(policy=_policy), {"cmd": "rm x"}, "rm x deletes files", id="text"
        ),
        pytest.param(ApprovalRule(policy=_policy), {"cmd": "ls"}, None, id="text_none"),
        pytest.param(
            ApprovalRule(policy=_policy),
            {"cmd": "yes"},
            "the approval policy of tool 'run_command' asks for a person",
            id="true",
        ),
        pytest.param(ApprovalRule(policy=_policy), {"cmd": "no"}, None, id="false"),
        pytest.param(
            ApprovalRule(policy=_policy),
            {"cmd": "boom"},
            "the approval policy of tool 'run_command' raised RuntimeError: policy crashed, so "
            "a person decides",
            id="raises",
        ),
        pytest.param(ApprovalRule(policy=_policy), None, None, id="unparsable"),
    ],
)
def test_approval_reason(
    rule: ApprovalRule | None, arguments: dict[str, Any] | None, reason: str | None
) -> None:
    assert approval_reason(rule, arguments, of="tool 'run_command'") == reason


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"cmd": "yes"}, "the `approve_update` of node 'offer' asks for a person"),
        (
            {"cmd": "boom"},
            "the `approve_update` of node 'offer' raised RuntimeError: policy crashed, so a "
            "person decides",
        ),
    ],
    ids=["true", "raises"],
)
def test_a_policy_with_a_name_of_its_own_is_named_by_it(
    arguments: dict[str, Any], reason: str
) -> None:
    """A node's `approve_update` was "the approval policy of the update of node 'offer'",
    a name its author never wrote; the reason names the setting."""
    found = approval_reason(
        ApprovalRule(policy=_policy),
        arguments,
        of="the update of node 'offer'",
        policy="the `approve_update` of node 'offer'",
    )
    assert found == reason


def test_the_reason_is_recorded_with_the_call(build: Any) -> None:
    rules = {"run_command": ApprovalRule(policy=_policy)}
    change = build.think(
        build.head(),
        build.reply(("run_command", {"cmd": "rm -rf build"}), ("run_command", {"cmd": "ls"})),
        rules=rules,
    )
    first, second = change.step.calls
    assert (first.needs_approval, first.approval_reason) == (True, "rm -rf build deletes files")
    assert (second.needs_approval, second.approval_reason) == (False, None)
    assert change.head.awaiting == ("s1c0",)


def test_a_tool_s_policy_that_raised_asks_a_person_naming_the_tool(build: Any) -> None:
    """Of two tools' policies the one that raised is named, so the person deciding and the
    operator mending it know whose check broke."""
    rules = {"run_command": ApprovalRule(policy=_policy), "shell": ApprovalRule(policy=_policy)}
    change = build.think(
        build.head(),
        build.reply(("shell", {"cmd": "ls"}), ("run_command", {"cmd": "boom"})),
        rules=rules,
    )
    first, second = change.step.calls
    assert (first.needs_approval, first.approval_reason) == (False, None)
    assert second.needs_approval and change.head.awaiting == ("s1c1",)
    assert second.approval_reason == (
        "the approval policy of tool 'run_command' raised RuntimeError: policy crashed, so a "
        "person decides"
    )
