"""The job-kind conformance kit (`tickwork.testing.check_job_kind`) run as a third party
runs it: on job kinds defined here, outside tickwork, one made of plain functions and one
that implements the interface itself; and on broken ones, which it refuses naming what is
wrong."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Head
from tickwork.worker.jobs import Ending, JobKind, Submission
from tickwork.worker.tools.registry import ToolRegistry, tool

from tickwork.testing import JobKindNonconformant, call, check_job_kind, reply

ORDERS = {"A-1": "order A-1: one teapot, shipped yesterday"}


@tool(idempotent=True)
def lookup_order(order_id: str) -> str:
    """Find an order by its id."""
    return ORDERS.get(order_id, f"no order {order_id}")


def prepare(data: Mapping[str, Any]) -> dict[str, Any]:
    message = data.get("message")
    if not isinstance(message, str) or not message.strip():
        raise InvalidInput("support input: `message` is required, the customer's message as text")
    return {"user_prompt": f"Customer message: {message}"}


#: a kind made of plain functions, as docs/JOB_KINDS.md shows
SUPPORT = JobKind(
    name="support",
    system_prompt="You answer customers; look orders up first.",
    tools=lambda: ToolRegistry([lookup_order]),
    prepare=prepare,
    budgets={"max_steps": 10},
)


class Desk:
    """A kind that implements `tickwork.worker.jobs.Kind` itself: it is told the
    submission (and refuses an untrusted one that names a file) and adds a result."""

    name = "desk"
    system_prompt = "You answer customers."
    budgets: Mapping[str, Any] = {}

    def tools(self) -> ToolRegistry:
        return ToolRegistry([lookup_order])

    def configure(self, data: Mapping[str, Any], submission: Submission) -> dict[str, Any]:
        if "attachment" in data and not submission.trusted:
            raise InvalidInput(
                "desk input: an `attachment` path is taken from trusted callers only"
            )
        config = prepare(data)
        return {**config, "desk": str(submission.state_dir)}

    def completed(self, head: Head, ending: Ending) -> dict[str, Any]:
        return {"answered": bool(head.final_answer)}


DESK = Desk()

GOOD = {"message": "where is my order A-1?"}
BAD: list[Any] = [{}, {"message": 42}, {"message": "  "}]
REPLIES = [reply("", call("lookup_order", order_id="A-1")), reply("It shipped yesterday.")]


def test_a_kind_of_plain_functions_conforms(tmp_path: Path) -> None:
    found = check_job_kind(
        f"{__name__}:SUPPORT", good=GOOD, bad=BAD, replies=REPLIES, folder=tmp_path
    )
    assert found.problems == []
    assert [p.split(" ")[0] for p in found.passed] == [
        "interface",
        "tools",
        "validation",
        "session",
    ]


def test_a_kind_that_implements_the_interface_itself_conforms(tmp_path: Path) -> None:
    found = check_job_kind(f"{__name__}:DESK", good=GOOD, bad=BAD, replies=REPLIES, folder=tmp_path)
    assert found.passed[-1].startswith("session (completed")


@tool
def undocumented(order_id: str) -> str:
    return order_id


def careless(data: Mapping[str, Any]) -> dict[str, Any]:
    return {"user_prompt": "Customer message: " + data["message"]}


#: two problems: a tool the model cannot tell what it does, input it does not check
CARELESS = JobKind(
    name="careless",
    system_prompt="You answer customers.",
    tools=lambda: ToolRegistry([undocumented]),
    prepare=careless,
)


def test_a_broken_kind_fails_naming_each_problem(tmp_path: Path) -> None:
    with pytest.raises(JobKindNonconformant) as failed:
        check_job_kind(
            f"{__name__}:CARELESS",
            good=GOOD,
            bad=[{}, {"message": "fine", "extra": 1}],
            replies=REPLIES,
            folder=tmp_path,
        )
    message = str(failed.value)
    assert f"job kind {__name__}:CARELESS does not conform (3 problems)" in message
    assert "tool 'undocumented' has no description: give its function a docstring" in message
    assert "bad input {} raised KeyError: 'message', not InvalidInput" in message
    assert "bad input {'message': 'fine', 'extra': 1} was accepted" in message
    # a kind that fails its checks is not run
    assert not (tmp_path / "deployment").exists()


class Partial:
    """Written against an older interface: `prepare` and no `configure` or `completed`."""

    name = "partial"
    system_prompt = ""
    budgets: Mapping[str, Any] = {}

    def tools(self) -> ToolRegistry:
        return ToolRegistry()

    def prepare(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"user_prompt": "x"}


PARTIAL = Partial()
#: a name no submission can give, budgets that are not budgets
OVERSPENT = JobKind(
    name="mine:overspent",
    system_prompt="",
    tools=ToolRegistry,
    prepare=prepare,
    budgets={"max_dollars": 5},
)


def test_a_kind_without_the_interface_is_told_which_members_it_lacks(tmp_path: Path) -> None:
    with pytest.raises(JobKindNonconformant) as failed:
        check_job_kind(f"{__name__}:PARTIAL", good=GOOD, bad=BAD, replies=REPLIES, folder=tmp_path)
    message = str(failed.value)
    assert "it has no `configure`: configure(data, submission) -> config" in message
    assert "it has no `completed`: completed(head, ending)" in message


def test_a_kind_with_a_bad_name_or_budgets_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JobKindNonconformant) as failed:
        check_job_kind(
            f"{__name__}:OVERSPENT", good=GOOD, bad=BAD, replies=REPLIES, folder=tmp_path
        )
    message = str(failed.value)
    assert "its name 'over spent' is not usable" not in message  # inner spaces are a name
    assert "its budgets are not budgets" in message and "max_dollars" in message


def test_a_kind_whose_session_does_not_end_as_expected_fails(tmp_path: Path) -> None:
    with pytest.raises(JobKindNonconformant) as failed:
        check_job_kind(
            f"{__name__}:SUPPORT",
            good=GOOD,
            bad=BAD,
            replies=[reply("", call("lookup_order", order_id="A-1"))] * 30,
            folder=tmp_path,
            timeout=30,
        )
    assert "its session did not end as completed" in str(failed.value)


def test_the_kit_needs_a_bad_input_and_an_importable_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one bad input"):
        check_job_kind(f"{__name__}:SUPPORT", good=GOOD, bad=[], replies=REPLIES, folder=tmp_path)
    with pytest.raises(JobKindNonconformant, match="cannot import it"):
        check_job_kind(f"{__name__}:NOPE", good=GOOD, bad=BAD, replies=REPLIES, folder=tmp_path)
