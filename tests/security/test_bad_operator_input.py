"""Bad input from operators, through the Python client and the CLI, on SQLite and Postgres:
each is a clear error that says what to do, and nothing is written by a refused request."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, update
from tickwork.fsm.errors import (
    AlreadyDecided,
    CallNotFound,
    ForkOutOfRange,
    IllegalTransition,
    InvalidBudget,
    InvalidDecision,
    InvalidInput,
    InvalidToolArguments,
    NotInDoubt,
    NotWaiting,
    SessionFinished,
    SessionNotFound,
    StaleDecision,
    TickworkError,
    UnknownSchemaVersion,
)
from tickwork.fsm.values import CallState, Status
from tickwork.store.dead_letters import Closing, DeadLetterNotFound
from tickwork.store.schema import dead_letters, decisions, sessions

from tests.security.conftest import Env
from tickwork.cli import main

DANGER: list[dict[str, Any]] = [
    {
        "content": "delete it",
        "tool_calls": [
            {"name": "danger", "arguments": {"value": "prod"}},
            {"name": "echo", "arguments": {"text": "after"}},
        ],
    },
    {"content": "done"},
]
WEIRD_IDS = [
    pytest.param("x'; DROP TABLE tickwork_sessions; --", id="sql"),
    pytest.param('x"); DELETE FROM tickwork_events; --', id="sql-double-quote"),
    pytest.param("../../../etc/passwd", id="path"),
    pytest.param("%", id="like-percent"),
    pytest.param("_", id="like-underscore"),
    pytest.param("a\\b", id="backslash"),
    pytest.param("séance-😀", id="unicode"),
    pytest.param("1 OR 1=1", id="tautology"),
    pytest.param("a" * 300, id="300-chars"),
    pytest.param("", id="empty"),
]


def waiting(env: Env) -> str:
    session_id = env.submit(DANGER)
    head = env.run(session_id)
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s1c0",)
    return session_id


def count(env: Env, table: Any) -> int:
    with env.store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def operations(session_id: str) -> dict[str, Callable[[Env], Any]]:
    """Every client operation that takes a session id."""
    return {
        "get": lambda e: e.client.get(session_id),
        "load": lambda e: e.client.load(session_id),
        "approve": lambda e: e.client.approve(session_id, "s1c0", approver="ops"),
        "reject": lambda e: e.client.reject(session_id, "s1c0", "no", approver="ops"),
        "cancel": lambda e: e.client.cancel(session_id, by="ops"),
        "fork": lambda e: e.client.fork(session_id, from_step=0, by="ops"),
        "wait": lambda e: e.client.wait(session_id, timeout=0.1),
    }


@pytest.mark.parametrize("session_id", WEIRD_IDS)
def test_unknown_or_hostile_session_ids_are_not_found_by_every_operation(
    env: Env, session_id: str
) -> None:
    waiting(env)  # something to lose
    before = count(env, sessions)
    for name, operation in operations(session_id).items():
        with pytest.raises(SessionNotFound, match="no session") as raised:
            operation(env)
        assert "tickwork ls" in str(raised.value), name
    with pytest.raises(DeadLetterNotFound, match="tickwork dlq ls"):
        env.client.dead_letter(session_id)
    assert count(env, sessions) == before


def test_a_nul_byte_in_a_session_id_is_not_found_on_sqlite(sqlite_env: Env) -> None:
    for name, operation in operations("a\x00b").items():
        with pytest.raises(SessionNotFound):
            operation(sqlite_env)
        assert name


def test_a_nul_byte_in_a_session_id_is_not_found_on_postgres(postgres_env: Env) -> None:
    for operation in operations("a\x00b").values():
        with pytest.raises(SessionNotFound):
            operation(postgres_env)


@pytest.mark.parametrize("call_id", ["s9c9", "s1c0'; --", "../s1c0", "", "S1C0", "s1c0\x00"])
def test_unknown_call_ids_name_the_calls_that_wait(env: Env, call_id: str) -> None:
    session_id = waiting(env)
    with pytest.raises(CallNotFound) as raised:
        env.client.approve(session_id, call_id, approver="ops")
    assert "waiting: s1c0" in str(raised.value)
    assert env.client.get(session_id).status is Status.WAITING_APPROVAL


def test_decisions_that_may_not_be_taken_are_refused_and_write_nothing(env: Env) -> None:
    session_id = waiting(env)
    client = env.client
    refusals: list[tuple[type[TickworkError], str, Callable[[], Any]]] = [
        (
            NotWaiting,
            "not waiting for a decision",
            lambda: client.approve(session_id, "s1c1", approver="ops"),
        ),
        (
            NotInDoubt,
            "not in doubt",
            lambda: client.provide_output(session_id, "s1c0", "x", approver="ops"),
        ),
        (
            InvalidDecision,
            "approver's name",
            lambda: client.approve(session_id, "s1c0", approver="  "),
        ),
        (
            StaleDecision,
            "64 hex digits",
            lambda: client.approve(session_id, "s1c0", approver="ops", fingerprint="abc"),
        ),
        (
            StaleDecision,
            "look at the call again",
            lambda: client.approve(session_id, "s1c0", approver="ops", fingerprint="0" * 64),
        ),
        (
            InvalidToolArguments,
            "argument 'value'",
            lambda: client.edit(session_id, "s1c0", {"value": 3}, approver="ops"),
        ),
        (
            InvalidToolArguments,
            "missing required argument 'value'",
            lambda: client.edit(session_id, "s1c0", {}, approver="ops"),
        ),
        (
            InvalidToolArguments,
            "unexpected argument 'sudo'",
            lambda: client.edit(session_id, "s1c0", {"value": "a", "sudo": 1}, approver="ops"),
        ),
        (
            InvalidInput,
            "needs the new arguments",
            lambda: client.decide(session_id, "s1c0", "edit", approver="ops"),
        ),
    ]
    for error, fragment, attempt in refusals:
        with pytest.raises(error, match=fragment) as refused:
            attempt()
        # said to the person who edited, not to the model: before, "call it again with
        # corrected arguments", as a model's own bad call is told
        assert "call it again" not in str(refused.value)
        if error is InvalidToolArguments:
            assert "edit call s1c0 again with corrected arguments" in str(refused.value)
    assert count(env, decisions) == 0 or all(
        d.call_id != "s1c0" for d in env.load(session_id).decisions
    )
    session = env.load(session_id)
    assert session.head.status is Status.WAITING_APPROVAL
    assert session.call("s1c0").state is CallState.AWAITING_APPROVAL  # type: ignore[union-attr]

    client.approve(session_id, "s1c0", approver="alice")
    with pytest.raises(AlreadyDecided, match="by alice"):
        client.reject(session_id, "s1c0", "too late", approver="bob")
    with pytest.raises(IllegalTransition, match="not waiting_approval"):
        client.reject(session_id, "s1c1", "no", approver="bob")
    assert env.run(session_id).status is Status.COMPLETED
    with pytest.raises(AlreadyDecided, match="by alice"):
        client.approve(session_id, "s1c0", approver="bob")
    with pytest.raises(SessionFinished, match="already completed"):
        client.cancel(session_id, by="ops")
    assert [d.approver for d in env.load(session_id).decisions] == ["alice"]


def test_an_edit_whose_arguments_are_not_an_object_is_a_clear_error(sqlite_env: Env) -> None:
    session_id = waiting(sqlite_env)
    with pytest.raises(InvalidInput, match="JSON object"):
        sqlite_env.client.edit(session_id, "s1c0", ["value", "x"], approver="ops")  # type: ignore[arg-type]


def test_an_approver_name_of_500_characters_is_refused(env: Env) -> None:
    session_id = waiting(env)
    with pytest.raises(InvalidDecision):
        env.client.approve(session_id, "s1c0", approver="a" * 500)


@pytest.mark.parametrize(
    "name",
    ["ops\nroot", "ops\x1b[2J", "\u202eops", "ops\tb", "ops\u2028b"],
    ids=["newline", "escape", "bidi-override", "tab", "line-separator"],
)
def test_a_name_with_a_control_character_is_refused_by_each_write_that_records_one(
    env: Env, name: str
) -> None:
    session_id = waiting(env)
    letter = _dead_letter(env)
    before = count(env, sessions)
    attempts: list[Callable[[], Any]] = [
        lambda: env.submit(submitted_by=name),
        lambda: env.client.approve(session_id, "s1c0", approver=name),
        lambda: env.client.fork(session_id, from_step=1, by=name),
        lambda: env.client.cancel(session_id, by=name),
        lambda: env.client.close_dead_letter(letter, state=Closing.RESOLVED, by=name, reason="x"),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInput, match="holds the control character U\\+") as refused:
            attempt()
        assert "without control characters" in str(refused.value)
    assert count(env, sessions) == before
    assert not env.load(session_id).decisions
    assert env.load(session_id).head.status is Status.WAITING_APPROVAL
    assert env.client.dead_letter(letter).status == "open"


def test_a_login_name_with_a_control_character_is_not_recorded_as_the_submitter(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `submitted_by`: the login name is recorded, checked as a name given."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "ops\x1b[2J")
    before = count(env, sessions)
    with pytest.raises(InvalidInput, match=r"^the login name .* holds the control") as refused:
        env.submit()
    assert str(refused.value).endswith("give `submitted_by`")
    assert count(env, sessions) == before


@pytest.mark.parametrize("from_step", [3, 99, -1])
def test_a_fork_outside_the_steps_is_refused(env: Env, from_step: int) -> None:
    session_id = waiting(env)
    before = count(env, sessions)
    with pytest.raises(ForkOutOfRange, match=r"choose `from_step` between 0 and 1"):
        env.client.fork(session_id, from_step=from_step, by="ops")
    assert count(env, sessions) == before


def test_a_fork_patching_an_unknown_call_or_with_bad_budgets_is_refused(env: Env) -> None:
    session_id = waiting(env)
    before = count(env, sessions)
    with pytest.raises(InvalidInput, match="cannot patch the output of s9c9"):
        env.client.fork(session_id, from_step=1, by="ops", tool_outputs={"s9c9": "x"})
    with pytest.raises(InvalidBudget, match="max_steps"):
        env.client.fork(session_id, from_step=1, by="ops", budgets={"max_steps": -1})
    with pytest.raises(InvalidBudget, match="unknown budget"):
        env.client.fork(session_id, from_step=1, by="ops", budgets={"max_stepz": 3})
    assert count(env, sessions) == before


@pytest.mark.parametrize("new_id", ["x'; DROP TABLE t; --", "a" * 100])
def test_a_fork_with_an_invalid_new_id_is_refused(env: Env, new_id: str) -> None:
    session_id = waiting(env)
    with pytest.raises(InvalidInput, match="invalid new_id: "):
        env.client.fork(session_id, from_step=1, by="ops", new_id=new_id)


@pytest.mark.parametrize(
    "budgets",
    [
        {"max_steps": -1},
        {"max_steps": 0},
        {"max_cost_usd": float("nan")},
        {"max_cost_usd": float("inf")},
        {"deadline_s": -0.5},
        {"max_tokens": "many"},
        {"max_steps": 2.5},
        {"max_steps": True},
        {"max_stepz": 3},
        {"max_tokens": 2**70},
        {"deadline_s": 1e308},
    ],
    ids=[
        *("negative", "zero", "nan", "inf", "negative-float", "text", "fraction", "bool"),
        *("unknown", "too-many-tokens", "too-long"),
    ],
)
def test_invalid_budgets_are_refused_before_anything_is_written(
    env: Env, budgets: dict[str, Any]
) -> None:
    before = count(env, sessions)
    with pytest.raises(InvalidBudget, match="budget"):
        env.submit(budgets=budgets)
    assert count(env, sessions) == before


def _dead_letter(env: Env) -> str:
    error = {"transient": False, "message": "401 unauthorized"}
    session_id = env.submit([{"error": error}])
    assert env.run(session_id).status is Status.FAILED
    return session_id


@pytest.mark.parametrize("version", [99, 0, "1", None])
def test_a_dead_letter_with_an_unknown_snapshot_version_is_a_clear_error(
    env: Env, version: Any
) -> None:
    session_id = _dead_letter(env)
    with env.store.engine.begin() as conn:
        row = conn.execute(
            select(dead_letters.c.snapshot).where(dead_letters.c.session_id == session_id)
        ).scalar_one()
        conn.execute(
            update(dead_letters)
            .where(dead_letters.c.session_id == session_id)
            .values(snapshot={**row, "schema_version": version}, schema_version=99)
        )
    letter = env.client.dead_letter(session_id)
    with pytest.raises(UnknownSchemaVersion, match="upgrade tickwork"):
        letter.session()
    assert session_id in [d.session_id for d in env.client.dead_letters()]
    assert env.client.load(session_id).head.status is Status.FAILED, "the session is intact"


class Cli:
    """`tickwork` in this process, on an Env's database."""

    def __init__(
        self, env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for name in list(os.environ):
            if name.startswith("TICKWORK_"):
                monkeypatch.delenv(name)
        monkeypatch.setenv("TICKWORK_DATABASE_URL", env.settings.db_url)
        monkeypatch.setenv("TICKWORK_STATE_DIR", str(env.settings.state_dir))
        monkeypatch.setenv("TICKWORK_QUEUE", env.settings.queue)
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exited:
            main(list(argv))
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err, err
        return int(exited.value.code or 0), out, err


def test_the_cli_answers_bad_ids_and_states_with_one_error_line(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    session_id = waiting(env)
    dead = _dead_letter(env)
    with env.store.engine.begin() as conn:
        conn.execute(
            update(dead_letters)
            .where(dead_letters.c.session_id == dead)
            .values(snapshot={"schema_version": 7, "session": {}})
        )
    cli = Cli(env, monkeypatch, capsys)
    cases = [
        (("show", "x'; DROP TABLE tickwork_sessions; --"), 1, "no session"),
        (("approve", "../../etc/passwd", "s1c0", "--as", "ops"), 1, "no session"),
        (("approve", session_id, "s1c0'; --", "--as", "ops"), 1, "waiting: s1c0"),
        (("approve", session_id, "s1c1", "--as", "ops"), 1, "not waiting"),
        (
            ("edit", session_id, "s1c0", "--args", '{"value": 3}', "--as", "ops"),
            2,
            "argument 'value'",
        ),
        (("edit", session_id, "s1c0", "--args", "[1, 2]", "--as", "ops"), 2, "JSON object"),
        (("fork", session_id, "--from-step", "9", "--as", "ops"), 2, "between 0 and 1"),
        (("submit", "tests.security.jobs:KIND", "--max-steps", "-1"), 2, ""),
        (("dlq", "show", "x' OR '1'='1"), 1, "no dead letter"),
        (("dlq", "show", dead), 1, "schema_version 7"),
    ]
    for argv, code, fragment in cases:
        got, _, err = cli(*argv)
        assert got == code, (argv, got, err)
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith("error: ") and fragment in lines[-1], (argv, err)
    assert env.client.get(session_id).status is Status.WAITING_APPROVAL


@pytest.mark.parametrize("key", ["²", "99999999999999999999999"], ids=["unicode-digit", "huge"])
def test_the_cli_dead_letter_lookup_with_odd_numbers(
    sqlite_env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    code, _, err = Cli(sqlite_env, monkeypatch, capsys)("dlq", "show", key)
    assert code == 1 and "no dead letter" in err
