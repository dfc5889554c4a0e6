"""Bad infrastructure and misbehaving tools: a database or broker that is down at submit,
a tool that hangs, floods its output or raises. Clear errors, nothing half-written, nothing
lost: the session goes on."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from tickwork.fsm.errors import StoreError, StoreUnavailable
from tickwork.fsm.values import ErrorCode, Status
from tickwork.store.relay import expired_leases
from tickwork.store.schema import events, outbox, sessions
from tickwork.worker.tick.relay import relay_once

from tests.security.conftest import Env, observations
from tests.security.jobs import SPEC
from tickwork.cli import main
from tickwork.client import Tickwork

DEAD_DB = "postgresql+psycopg://tick:db-secret-pw@127.0.0.1:1/tickwork"


def one_call(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"content": "go", "tool_calls": [{"name": name, "arguments": arguments}]},
        {"content": "done"},
    ]


def rows(env: Env, table: Any, session_id: str) -> int:
    with env.store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(table)
                .where(
                    table.c.session_id == session_id
                    if table is not sessions
                    else table.c.id == session_id
                )
            ).scalar_one()
        )


def test_a_database_that_is_down_at_submit_is_a_clear_error(
    sqlite_env: Env, tmp_path: Path
) -> None:
    offline = Tickwork(sqlite_env.settings.model_copy(update={"database_url": DEAD_DB}))
    published: list[Any] = []
    offline.publish = lambda *a: published.append(a)  # type: ignore[method-assign]
    try:
        with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1.*port 1"):
            offline.submit(SPEC, {}, model=sqlite_env.script([{"content": "x"}]))
    finally:
        offline.close()
    assert published == [], "nothing is published for a session that was not stored"


def test_the_cli_says_which_database_is_down_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith("TICKWORK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TICKWORK_DATABASE_URL", DEAD_DB)
    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path))
    script = tmp_path / "script.json"
    script.write_text('[{"content": "done"}]')
    with pytest.raises(SystemExit) as exited:
        main(["submit", SPEC, "--model", f"scripted:{script}"])
    err = capsys.readouterr().err
    assert exited.value.code == 1, err
    assert err.startswith("error: cannot use the database postgresql")
    assert "TICKWORK_DATABASE_URL" in err and "db-secret-pw" not in err


TRIGGERS = {
    "sqlite": [
        "CREATE TRIGGER refuse_outbox BEFORE INSERT ON tickwork_outbox "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_outbox() RETURNS trigger AS $$ BEGIN "
        "RAISE EXCEPTION 'disk on fire'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_outbox BEFORE INSERT ON tickwork_outbox "
        "FOR EACH ROW EXECUTE FUNCTION refuse_outbox()",
    ],
}
DROPS = {
    "sqlite": ["DROP TRIGGER refuse_outbox"],
    "postgresql": [
        "DROP TRIGGER refuse_outbox ON tickwork_outbox",
        "DROP FUNCTION refuse_outbox()",
    ],
}


def test_a_submit_that_fails_at_its_last_insert_writes_nothing(env: Env) -> None:
    dialect = env.store.engine.dialect.name
    published: list[Any] = []
    env.client.publish = lambda *a: published.append(a)  # type: ignore[method-assign]
    with env.store.engine.begin() as conn:
        for statement in TRIGGERS[dialect]:
            conn.execute(text(statement))
    try:
        with pytest.raises(StoreError, match="disk on fire"):
            env.submit(session_id="half-written")
    finally:
        with env.store.engine.begin() as conn:
            for statement in DROPS[dialect]:
                conn.execute(text(statement))
        del env.client.publish
    assert rows(env, sessions, "half-written") == 0
    assert rows(env, events, "half-written") == 0
    assert published == []
    assert env.run(env.submit(session_id="half-written")).status is Status.COMPLETED


def test_a_broker_that_is_down_at_submit_loses_nothing(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    offline = Tickwork(
        env.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}), store=env.store
    )
    with caplog.at_level(logging.WARNING, logger="tickwork.client"):
        head = offline.submit(SPEC, {}, model=env.script([{"content": "done"}]))
    assert (
        "could not publish" in caplog.text
        and "relay will publish it once the broker is back" in caplog.text
    )
    assert env.client.get(head.id).status is Status.READY
    assert rows(env, outbox, head.id) == 1, "the outbox row waits for the relay"
    later = env.settings.relay_after_s + 1
    clock = env.rt.clock
    env.rt.clock = lambda: head.created_at + timedelta(seconds=later)
    try:
        relay_once(env.rt)
    finally:
        env.rt.clock = clock
    assert (head.id, 0, 0.0) in env.published
    assert env.run(head.id).status is Status.COMPLETED


def test_a_tool_that_hangs_is_abandoned_at_its_timeout(sqlite_env: Env) -> None:
    session_id = sqlite_env.submit(one_call("hang", {}))
    started = time.monotonic()
    head = sqlite_env.run(session_id)
    # the tool would answer after 60 s: well under that, with room for a loaded machine
    # (three ticks, each a few transactions), the run did not wait for it
    assert time.monotonic() - started < 30
    assert head.status is Status.COMPLETED
    output, is_error = observations(sqlite_env.load(session_id))["s1c0"]
    assert is_error and "timed out after 0.5s and was abandoned" in output


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("spew", {"megabytes": 5}, "characters cut from the middle of 5000000"),
        ("shout", {"megabytes": 3}, "printed"),
    ],
)
def test_a_tool_that_floods_its_output(
    sqlite_env: Env,
    capsys: pytest.CaptureFixture[str],
    name: str,
    arguments: dict[str, Any],
    fragment: str,
) -> None:
    session_id = sqlite_env.submit(one_call(name, arguments))
    assert sqlite_env.run(session_id).status is Status.COMPLETED
    output, is_error = observations(sqlite_env.load(session_id))["s1c0"]
    assert not is_error and fragment in output
    assert len(output) <= sqlite_env.settings.max_output_chars + 200
    capsys.readouterr()


def test_a_command_that_prints_megabytes(sqlite_env: Env, tmp_path: Path) -> None:
    workspace = tmp_path / "ws-flood"
    workspace.mkdir()
    session_id = sqlite_env.submit(
        one_call("run_command", {"command": "yes tickwork | head -c 4000000"}),
        kind="repair",
        data={"workspace": str(workspace), "test_command": "true"},
    )
    assert sqlite_env.run(session_id).status is Status.COMPLETED
    output, is_error = observations(sqlite_env.load(session_id))["s1c0"]
    assert not is_error and output.startswith("exit code: 0")
    assert "characters cut from the middle" in output
    assert len(output) <= sqlite_env.settings.max_output_chars + 200


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("boom", {"message": "kaboom"}, "ValueError: kaboom"),
        ("boom", {"message": ""}, "ValueError"),
        ("leave", {}, "SystemExit: 3"),
    ],
    ids=["raises", "raises-without-message", "sys-exit"],
)
def test_a_tool_that_raises_gives_an_error_observation(
    env: Env, name: str, arguments: dict[str, Any], expected: str
) -> None:
    session_id = env.submit(one_call(name, arguments))
    head = env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    output, is_error = observations(env.load(session_id))["s1c0"]
    assert is_error and output == expected


def _binary_output(env: Env) -> None:
    session_id = env.submit(one_call("binary", {}))
    assert env.run(session_id).status is Status.COMPLETED
    output, _ = observations(env.load(session_id))["s1c0"]
    assert output.startswith("ELF") and "header" in output


def test_a_tool_output_with_nul_characters_on_sqlite(sqlite_env: Env) -> None:
    _binary_output(sqlite_env)


def test_a_tool_output_with_nul_characters_on_postgres(postgres_env: Env) -> None:
    _binary_output(postgres_env)


def _not_utf8_output(env: Env) -> None:
    session_id = env.submit(one_call("not_utf8", {}))
    assert env.run(session_id).status is Status.COMPLETED
    output, _ = observations(env.load(session_id))["s1c0"]
    assert output == "name: caf\ufffd \ufffd"


def test_a_tool_output_not_utf8_on_sqlite(sqlite_env: Env) -> None:
    _not_utf8_output(sqlite_env)


def test_a_tool_output_not_utf8_on_postgres(postgres_env: Env) -> None:
    _not_utf8_output(postgres_env)


def test_a_database_error_while_a_call_is_marked_started_does_not_fail_the_session(
    sqlite_env: Env,
) -> None:
    env = sqlite_env
    session_id = env.submit(one_call("effect", {"value": "once"}))
    env.tick(session_id)  # THINK
    assert env.store.get(session_id).status is Status.EXECUTING

    def down(*_: Any, **__: Any) -> None:
        raise StoreUnavailable("cannot use the database sqlite:///x: server closed")

    env.store.start_call = down  # type: ignore[method-assign]
    try:
        with pytest.raises(StoreUnavailable):  # the tick gives up; the session does not fail
            env.tick(session_id)
    finally:
        del env.store.start_call
    head = env.store.get(session_id)
    assert head.status is not Status.FAILED, f"{head.error_code}: {head.error_message}"
    expired_leases(env.store.engine, now=head.updated_at + timedelta(hours=1))
    assert env.run(session_id).status is Status.COMPLETED
    assert env.effects(session_id) == [f"{session_id}:1:s1c0 once"]


def test_an_internal_failure_keeps_everything_and_is_dead_lettered(sqlite_env: Env) -> None:
    """A model spec that cannot be built fails the session INTERNAL, with its dead letter."""
    session_id = sqlite_env.submit(model="scripted:/does/not/exist.json")
    head = sqlite_env.run(session_id)
    assert head.status is Status.FAILED and head.error_code is ErrorCode.INTERNAL
    assert "cannot read script" in head.error_message
    assert sqlite_env.client.dead_letter(session_id).code == "INTERNAL"
