"""Secrets: masked in stored observations and events, in logs, and in `tickwork config`.

`worker/config/secrets.py` does the masking; `advance` masks each change before it is saved and
`make_app` installs the log masking.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tickwork.fsm.machine import Change
from tickwork.fsm.values import Decision, DecisionKind, Event, EventKind, Head, Observation, Status
from tickwork.worker.config.secrets import (
    MASK,
    Masker,
    install_log_masking,
    mask,
    mask_change,
    mask_decision,
    masker_for,
    uninstall_log_masking,
)
from tickwork.worker.config.settings import Settings
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.app import make_app, runtime

from tests.security.conftest import Env
from tests.security.jobs import LEAKED_KEY
from tickwork.cli import main

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENV_KEY = "anthropic-live-0123456789abcdef"


@pytest.fixture(autouse=True)
def _no_log_masking_left() -> Iterator[None]:
    yield
    uninstall_log_masking()


def test_the_masker_masks_patterns_secret_variables_and_url_passwords() -> None:
    settings = Settings(
        database_url="postgresql://tick:db-pass-123456@db:5432/tw",
        secret_patterns=[r"sk-[A-Za-z0-9_\-]{8,}", r"ghp_[A-Za-z0-9]{20}"],
    )
    masker = Masker.from_settings(
        settings, {"ANTHROPIC_API_KEY": ENV_KEY, "MY_TOKEN": "short", "HOME": "/root"}
    )
    text = (
        f"key={LEAKED_KEY} gh=ghp_{'a' * 20} env={ENV_KEY} "
        "url=redis://:hunter2hunter2@cache:6379/0 db=db-pass-123456 home=/root short"
    )
    masked = masker.text(text)
    for secret in (LEAKED_KEY, "ghp_a", ENV_KEY, "hunter2", "db-pass-123456"):
        assert secret not in masked, (secret, masked)
    assert masked.count(MASK) == 5
    assert "home=/root short" in masked, "ordinary text and short values stay"
    nested = masker.value({"out": [f"x {LEAKED_KEY}", {"k": ENV_KEY}], "n": 3, LEAKED_KEY: 1})
    assert json.dumps(nested).count(MASK) == 3 and nested["n"] == 3


def test_a_variable_naming_a_secrets_file_is_not_masked_as_a_secret() -> None:
    # before, the path of TICKWORK_API_TOKENS_FILE was masked wherever it appeared: the
    # server's log of a tokens file it did not take said `TICKWORK_API_TOKENS_FILE **** is
    # not JSON`, hiding which file (`tickwork config` showed it, settings named *_file being
    # no secret there)
    path = "/etc/tickwork/tokens.json"
    masker = Masker.from_settings(
        Settings(), {"TICKWORK_API_TOKENS_FILE": path, "DB_PASSWORD_FILE": "/run/secrets/db-pw"}
    )
    said = f"TICKWORK_API_TOKENS_FILE {path} is not JSON; see /run/secrets/db-pw"
    assert masker.text(said) == said
    assert masker.text(ENV_KEY) == ENV_KEY  # nothing else was taken for a secret either
    secret = Masker.from_settings(Settings(), {"TICKWORK_WEBHOOK_SECRET": ENV_KEY})
    assert secret.text(f"signed with {ENV_KEY}") == f"signed with {MASK}"


def test_mask_hides_url_passwords_and_secret_query_parameters() -> None:
    text = "see https://u:pass-word1@h/p?api_key=k-123&x=1&Token=t-9#f and ?page=2"
    assert mask(text) == "see https://u:****@h/p?api_key=****&x=1&Token=****#f and ?page=2"
    assert mask('{"u": "http://h/?secret=s1"}', [r"h/"]) == '{"u": "http://****?secret=****"}'


def test_mask_change_copies_nothing_it_does_not_mask() -> None:
    """Every tick's change was copied whole (its head, observations and events) to mask
    it, even with nothing to mask: a change with no secret in it is given back as it is,
    and one with a secret in one observation has that one masked, the rest as they were."""
    head = Head(id="s", kind="k", created_at=NOW, updated_at=NOW, model="m", error_message="x")
    clean = Observation(call_id="s1c0", content="ran the tests: 3 passed", at=NOW)
    event = Event(kind=EventKind.MODEL_RETRY, at=NOW, data={"error": "busy", "n": [1, "two"]})
    change = Change(head=head, observations=(clean,), events=(event,))
    for masker in (Masker(), Masker([r"sk-[A-Za-z0-9_\-]{8,}"], [ENV_KEY])):
        assert mask_change(change, masker) is change
    leaked = Observation(call_id="s1c1", content=f"KEY={LEAKED_KEY}", at=NOW)
    change = Change(head=head, observations=(clean, leaked), events=(event,))
    masked = mask_change(change, Masker([r"sk-[A-Za-z0-9_\-]{8,}"]))
    assert masked is not change and masked.observations[1].content == f"KEY={MASK}"
    assert masked.observations[0] is clean and masked.events[0] is event
    assert masked.head is head


def test_mask_change_masks_observations_events_and_the_error_but_not_the_call() -> None:
    head = Head(
        id="s",
        kind="k",
        created_at=NOW,
        updated_at=NOW,
        model="m",
        status=Status.FAILED,
        error_message=f"model said {LEAKED_KEY}",
    )
    change = Change(
        head=head,
        observations=(Observation(call_id="s1c0", content=f"KEY={LEAKED_KEY}", at=NOW),),
        events=(Event(kind=EventKind.MODEL_RETRY, at=NOW, data={"error": LEAKED_KEY}),),
    )
    masked = mask_change(change, Masker([r"sk-[A-Za-z0-9_\-]{8,}"]))
    assert LEAKED_KEY not in masked.model_dump_json()
    assert masked.observations[0].content == f"KEY={MASK}"
    assert masked.events[0].data == {"error": MASK}
    decision = Decision(
        call_id="s1c0",
        kind=DecisionKind.PROVIDE_OUTPUT,
        approver="ops",
        at=NOW,
        fingerprint="f" * 64,
        output=f"it printed {LEAKED_KEY}",
        comment=LEAKED_KEY,
    )
    shown = mask_decision(decision, Masker([r"sk-[A-Za-z0-9_\-]{8,}"]))
    assert LEAKED_KEY not in shown.model_dump_json() and shown.fingerprint == "f" * 64


def test_masker_for_is_built_once_per_configuration() -> None:
    settings = Settings()
    assert masker_for(settings, {"A_KEY": ENV_KEY}) is masker_for(settings, {"A_KEY": ENV_KEY})
    assert masker_for(settings, {"A_KEY": ENV_KEY}).text(ENV_KEY) == MASK


def test_log_masking_covers_arguments_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    install_log_masking(Masker([r"sk-[A-Za-z0-9_\-]{8,}"]))
    log = logging.getLogger("tickwork.test.secrets")
    with caplog.at_level(logging.INFO, logger="tickwork.test.secrets"):
        log.warning("calling with %s", LEAKED_KEY)
        try:
            raise RuntimeError(f"refused key {LEAKED_KEY}")
        except RuntimeError:
            log.exception("the call failed")
    assert "calling with ****" in caplog.text
    assert "RuntimeError: refused key ****" in caplog.text
    assert LEAKED_KEY not in caplog.text
    uninstall_log_masking()
    with caplog.at_level(logging.INFO, logger="tickwork.test.secrets"):
        log.warning("plain %s", "text")
    assert "plain text" in caplog.text


def test_a_secret_in_a_tool_output_is_stored_masked(sqlite_env: Env) -> None:
    session_id = sqlite_env.submit(
        [{"content": "look", "tool_calls": [{"name": "leak", "arguments": {}}]}, {"content": "ok"}]
    )
    assert sqlite_env.run(session_id).status is Status.COMPLETED
    stored = sqlite_env.load(session_id).model_dump_json()
    assert "OPENAI_API_KEY=****" in stored
    assert LEAKED_KEY not in stored


def test_a_secret_in_a_model_error_is_masked_in_events_and_the_dead_letter(
    sqlite_env: Env,
) -> None:
    error = {"transient": True, "message": f"401: incorrect API key {LEAKED_KEY}"}
    session_id = sqlite_env.submit([{"error": error}], budgets={"max_model_retries": 1})
    head = sqlite_env.run(session_id)
    assert head.status is Status.FAILED
    assert LEAKED_KEY not in sqlite_env.load(session_id).model_dump_json()
    assert LEAKED_KEY not in sqlite_env.client.dead_letter(session_id).model_dump_json()


def test_a_secret_in_a_tool_exception_is_masked_in_the_worker_log(
    sqlite_env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = sqlite_env.submit(
        [
            {"content": "go", "tool_calls": [{"name": "fail_leak", "arguments": {}}]},
            {"content": "ok"},
        ]
    )
    with make_app(sqlite_env.settings, relay=False) as app, caplog.at_level(logging.INFO):
        rt = runtime(app)
        for _ in range(5):
            head = sqlite_env.store.get(session_id)
            if not head.status.runnable:
                break
            advance(rt, session_id, head.version)
    assert "fail_leak" in caplog.text, "the tool's exception is logged"
    assert LEAKED_KEY not in caplog.text
    assert LEAKED_KEY not in sqlite_env.load(session_id).model_dump_json()


def _config(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], **settings: str
) -> str:
    """`tickwork config --json` with only these TICKWORK_ settings; its output."""
    for name in list(os.environ):
        if name.startswith("TICKWORK_"):
            monkeypatch.delenv(name)
    for name, value in settings.items():
        monkeypatch.setenv(f"TICKWORK_{name.upper()}", value)
    with pytest.raises(SystemExit) as exited:
        main(["config", "--json"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_tickwork_config_masks_configured_patterns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    token = "ghp_" + "Z" * 24
    monkeypatch.setenv("OPENAI_API_KEY", LEAKED_KEY)
    out = _config(
        monkeypatch,
        capsys,
        state_dir=str(tmp_path),
        secret_patterns='["ghp_[A-Za-z0-9]{20,}"]',
        model=f"openai:gpt-4o?token={token}",
        queue=f"ticks-{token}",
        database_url="postgresql://tick:db-pass-123456@db:5432/tw",
    )
    shown = json.loads(out)
    assert token not in out and LEAKED_KEY not in out and "db-pass-123456" not in out
    assert shown["model"] == "openai:gpt-4o?token=****"
    assert shown["queue"] == "ticks-****"
    assert shown["database_url"] == "postgresql://tick:****@db:5432/tw"


def test_tickwork_config_masks_a_password_only_redis_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = _config(
        monkeypatch,
        capsys,
        state_dir=str(tmp_path),
        broker_url="redis://:broker-pass-9876@cache:6379/0",
    )
    assert "broker-pass-9876" not in out
    assert json.loads(out)["broker_url"] == "redis://:****@cache:6379/0"


def test_a_secret_typed_into_a_decision_is_stored_masked(sqlite_env: Env) -> None:
    calls = [
        {"name": "danger", "arguments": {"value": "a"}},
        {"name": "danger", "arguments": {"value": "b"}},
    ]
    session_id = sqlite_env.submit([{"content": "go", "tool_calls": calls}, {"content": "done"}])
    assert sqlite_env.run(session_id).status is Status.WAITING_APPROVAL
    client = sqlite_env.client
    client.approve(session_id, "s1c0", approver="ops", comment=f"fine, key {LEAKED_KEY}")
    client.reject(session_id, "s1c1", f"never with {LEAKED_KEY}", approver="ops")
    assert sqlite_env.run(session_id).status is Status.COMPLETED
    session = sqlite_env.load(session_id)
    assert LEAKED_KEY not in session.model_dump_json()
    approved, rejected = session.decision("s1c0"), session.observation("s1c1")
    assert approved is not None and approved.comment == f"fine, key {MASK}"
    assert rejected is not None and rejected.content.endswith(f"never with {MASK}")


def test_a_masked_access_line_keeps_its_arguments_for_uvicorns_formatter() -> None:
    """uvicorn's access formatter unpacks a record's arguments: a request whose query holds a
    secret (`?token=...`) is logged masked, not as a logging traceback without its line."""
    from uvicorn.logging import AccessFormatter

    install_log_masking(Masker([]))
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(AccessFormatter('%(client_addr)s "%(request_line)s" %(status_code)s'))
    log = logging.getLogger("tickwork.test.access")
    log.addHandler(handler)
    log.propagate = False
    try:
        asked = ("127.0.0.1:5000", "GET", "/api/v1/me?token=alice-token-0123456789", "1.1", 401)
        log.warning('%s - "%s %s HTTP/%s" %d', *asked)
    finally:
        log.removeHandler(handler)
    line = written.getvalue()
    assert '127.0.0.1:5000 "GET /api/v1/me?token=**** HTTP/1.1" 401' in line, line
    assert "alice-token" not in line
