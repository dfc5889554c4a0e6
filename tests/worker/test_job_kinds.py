"""Job kinds are reached through their typed interface (`tickwork.worker.jobs.Kind`): what
a kind is told comes in fixed arguments, and a kind of the old shape is refused loudly."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import ConfigurationError, InvalidInput
from tickwork.fsm.values import Head
from tickwork.worker.jobs import Ending, JobKind, Jobs, Kind, Submission, as_kind
from tickwork.worker.jobs.graphs import GraphKind
from tickwork.worker.tools.registry import ToolRegistry

from tests.graphs import REFUND


def test_a_prepare_that_asks_for_the_submission_by_keyword_is_refused_when_defined() -> None:
    def old(data: Mapping[str, Any], *, trusted: bool = True) -> dict[str, Any]:
        return {"user_prompt": "x"}

    with pytest.raises(ConfigurationError) as refused:
        JobKind(name="old", system_prompt="", tools=ToolRegistry, prepare=old)
    assert "its prepare takes trusted" in str(refused.value)
    assert "configure(data, submission)" in str(refused.value)


def test_a_kind_of_plain_functions_is_given_the_input_only() -> None:
    kind = JobKind(
        name="plain",
        system_prompt="",
        tools=ToolRegistry,
        prepare=lambda data: {"user_prompt": str(data["task"])},
    )
    assert isinstance(kind, Kind)
    submission = Submission(state_dir=Path("/nowhere"), trusted=False)
    assert kind.configure({"task": "t"}, submission) == {"user_prompt": "t"}


class Strict:
    """Reads a local path from its input: refuses it from outside, as a kind must."""

    name = "strict"
    system_prompt = ""
    budgets: Mapping[str, Any] = {}
    seen: list[Submission] = []

    def tools(self) -> ToolRegistry:
        return ToolRegistry()

    def configure(self, data: Mapping[str, Any], submission: Submission) -> dict[str, Any]:
        self.seen.append(submission)
        if not submission.trusted and data.get("path"):
            raise InvalidInput("strict input: a `path` is taken from trusted callers only")
        return {"user_prompt": "x"}

    def completed(self, head: Head, ending: Ending) -> dict[str, Any]:
        return {}


STRICT = Strict()


def test_the_client_tells_a_kind_whether_the_submission_is_trusted(tmp_path: Path) -> None:
    from tickwork.client import Tickwork
    from tickwork.testing import embedded_settings, reply, write_script

    settings = embedded_settings(tmp_path, workspace_roots=[tmp_path])
    script = write_script([reply("done")], tmp_path)
    client = Tickwork(settings)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    try:
        client.submit(f"{__name__}:STRICT", {"path": "/etc"}, model=script, trusted=True)
        with pytest.raises(InvalidInput, match="trusted callers only"):
            client.submit(f"{__name__}:STRICT", {"path": "/etc"}, model=script, trusted=False)
    finally:
        client.close()
    trusted, untrusted = STRICT.seen[-2:]
    assert (trusted.trusted, untrusted.trusted) == (True, False)
    assert untrusted.workspace_roots == (tmp_path,) and untrusted.state_dir == settings.state_dir
    assert untrusted.artifacts is not None


def test_what_is_no_kind_is_refused_naming_the_interface() -> None:
    with pytest.raises(ConfigurationError, match="not a job kind") as refused:
        as_kind({"name": "dict"}, "pkg.mod:KIND")
    assert "configure(data, submission)" in str(refused.value)
    assert "check_job_kind" in str(refused.value)


def test_a_graph_kind_is_found_as_one_and_another_kind_is_not() -> None:
    jobs = Jobs()
    assert isinstance(jobs.graph("tests.graphs:REFUND"), GraphKind)
    assert jobs.graph("tests.graphs:REFUND") is REFUND
    with pytest.raises(InvalidInput, match="runs no graph"):
        jobs.graph("tests.jobs:TEST")
