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


def _reads_message(data: Mapping[str, Any]) -> dict[str, Any]:
    return {"user_prompt": f"message: {data['message']}"}  # no check: a KeyError without it


def _spawning_tools() -> ToolRegistry:
    from tickwork.worker.tools.spawn import SPAWN_TOOL

    return ToolRegistry([SPAWN_TOOL])


#: a kind whose prepare raises KeyError on input without `message`, not InvalidInput
CARELESS = JobKind(name="careless", system_prompt="", tools=_spawning_tools, prepare=_reads_message)


def test_a_kind_that_raises_on_input_is_a_refusal_naming_it_not_a_traceback(
    tmp_path: Path,
) -> None:
    from tickwork.client import Tickwork
    from tickwork.testing import embedded_settings, reply, write_script

    settings = embedded_settings(tmp_path)
    client = Tickwork(settings)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    try:
        with pytest.raises(InvalidInput) as refused:
            client.submit(f"{__name__}:CARELESS", {}, model=write_script([reply("x")], tmp_path))
    finally:
        client.close()
    assert "job kind 'careless' cannot take this input" in str(refused.value)
    assert "KeyError: 'message'" in str(refused.value)


def test_a_child_input_the_kind_raises_on_is_an_error_observation(tmp_path: Path) -> None:
    from tickwork.fsm.values import Status

    from tickwork.testing import SessionDriver, call, embedded_settings, reply, running_worker

    settings = embedded_settings(tmp_path)
    spawn = call("spawn_agents", children=[{"role": "helper", "input": {}}], join="all")
    replies = [reply("", spawn), reply("gave up")]
    with running_worker(settings), SessionDriver(settings) as driver:
        session_id = driver.submit(f"{__name__}:CARELESS", {"message": "hi"}, replies=replies)
        session = driver.run(session_id)
    assert session.head.status is Status.COMPLETED, session.head
    observed = session.observation("s1c0")
    assert observed is not None and observed.is_error
    assert "child 'helper': its input was refused" in observed.content
    assert "KeyError: 'message'" in observed.content


#: kinds whose configure returns what no session can store
LISTED = JobKind(name="listed", system_prompt="", tools=ToolRegistry, prepare=lambda _: ["x"])
SETS = JobKind(
    name="sets", system_prompt="", tools=ToolRegistry, prepare=lambda _: {"user_prompt": {1}}
)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("LISTED", "job kind 'listed': its configure returned a list, not a dict"),
        ("SETS", "job kind 'sets': its configure returned a dict that is not JSON"),
    ],
)
def test_a_config_that_cannot_be_stored_names_the_kind(
    tmp_path: Path, kind: str, said: str
) -> None:
    from tickwork.client import Tickwork
    from tickwork.testing import embedded_settings, reply, write_script

    client = Tickwork(embedded_settings(tmp_path))
    client.publish = lambda *_: None  # type: ignore[method-assign]
    try:
        with pytest.raises(ConfigurationError) as refused:
            client.submit(f"{__name__}:{kind}", {}, model=write_script([reply("x")], tmp_path))
        assert client.sessions() == []
    finally:
        client.close()
    assert said in str(refused.value)
