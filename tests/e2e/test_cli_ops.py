"""config, db upgrade, the zero-configuration default, and relay --once."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, select
from tickwork.store import make_engine
from tickwork.store.liveness import new_key
from tickwork.store.owners import signed
from tickwork.store.schema import outbox

from tests.e2e.conftest import ROOT, TEST_KIND, Cli, Deployment, at_once, call, until
from tests.services import postgres_database
from tickwork.render import when
from tickwork.testing.store_ticks import claim

PASSWORD = "hunter2-db-secret"
KEY = "sk-proj-AbCdEf0123456789xyz"
SLACK = "T0001/B0001/webhookPathSecret42"


def _bare_env(**settings: str) -> dict[str, str]:
    """The environment without any TICKWORK_ setting but these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {**env, "PYTHONPATH": str(ROOT), **settings}


def test_config_masks_secrets(tmp_path: Path) -> None:
    cli = Cli(
        _bare_env(
            TICKWORK_DATABASE_URL=f"postgresql://tick:{PASSWORD}@db.internal:5432/tw",
            TICKWORK_BROKER_URL=f"redis://:{KEY}@redis.internal:6379/0",
            TICKWORK_MODEL=f"openai:gpt-4o?key={KEY}",
            TICKWORK_IMPORTS='["tests.jobs:TEST"]',
            TICKWORK_API_MODELS=f'["openai:gpt-4o?key={KEY}"]',
            TICKWORK_STATE_DIR=str(tmp_path / "state"),
            TICKWORK_METRICS_PORT="9808",
            TICKWORK_WEBHOOK_URL=f"https://hooks.internal/services/{SLACK}?token={KEY}",
            TICKWORK_WEBHOOK_SECRET=PASSWORD,
            TICKWORK_API_TOKENS=f'{{"{PASSWORD}": {{"name": "alice", "roles": ["approver"]}}}}',
            TICKWORK_API_PORT="8080",
        ),
        tmp_path,
    )
    as_json = cli("config", "--json")
    as_table = cli.inline("config")
    shown = as_json.json()
    assert shown["database_url"] == "postgresql://tick:****@db.internal:5432/tw"
    assert shown["broker_url"] == "redis://:****@redis.internal:6379/0"
    assert shown["model"] == "openai:gpt-4o?key=****"
    assert shown["imports"] == ["tests.jobs:TEST"]
    assert shown["api_models"] == ["openai:gpt-4o?key=****"]
    assert shown["budgets"]["max_steps"] == 50
    assert (
        shown["budgets"]["max_tokens"] == 2_000_000
    )  # a name with "token" in a budget is not a secret
    # the settings of a worker's /metrics and webhooks and of `tickwork serve` are shown too
    assert shown["metrics_port"] == 9808 and shown["api_port"] == 8080
    assert shown["webhook_url"] == "https://hooks.internal/****"  # a Slack-style URL's path
    assert shown["webhook_secret"] == "****" and shown["api_tokens"] == "****"
    assert shown["webhook_attempts"] == 5 and shown["api_host"] == "127.0.0.1"
    for output in (as_json.stdout, as_table.stdout):
        assert PASSWORD not in output and KEY not in output and "sk-proj" not in output
        assert SLACK not in output
    assert "TICKWORK_DATABASE_URL" in as_table.stdout
    assert "TICKWORK_WEBHOOK_SECRET" in as_table.stdout and "TICKWORK_API_PORT" in as_table.stdout
    cli.inline("config", ok=False, TICKWORK_LEASE_S="soon").error(
        2, "invalid setting TICKWORK_LEASE_S"
    )
    cli.inline("config", ok=False, TICKWORK_TRANSCRIPT_CACHE="-1").error(
        2, "invalid setting TICKWORK_TRANSCRIPT_CACHE"
    )


def test_zero_configuration_and_db_upgrade(tmp_path: Path) -> None:
    state = tmp_path / "state"
    fresh = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
    other = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "other")), tmp_path)
    unreachable = "postgresql://nobody@127.0.0.1:1/x"
    with postgres_database() as url:
        again, upgraded, on_postgres = at_once(
            lambda: fresh("db", "upgrade", "--json"),
            lambda: fresh("db", "upgrade", "--json"),
            lambda: other("db", "upgrade", "--json", TICKWORK_DATABASE_URL=url),
        )
        engine = make_engine(url)
        try:
            tables = set(inspect(engine).get_table_names())
        finally:
            engine.dispose()
    # the SQLite file did not exist: the schema was made first, whole, once
    assert fresh.inline("ls", "--json").json() == []
    assert (state / "tickwork.db").exists()
    assert upgraded.json()["revision"] == again.json()["revision"]
    assert sorted(p.name for p in state.iterdir() if p.name.startswith(".")) == []
    done = on_postgres.json()
    assert {"tickwork_sessions", "tickwork_outbox", "tickwork_dead_letters"} <= tables
    assert done["revision"] == upgraded.json()["revision"]
    assert done["database_url"] == url  # no password to mask
    missing = other.inline("ls", ok=False, TICKWORK_DATABASE_URL=unreachable)
    missing.error(1, "cannot use the database", "TICKWORK_DATABASE_URL")


def test_relay_once_publishes_a_lost_tick(
    deployment: Deployment, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = deployment.client
    # as if the publish after commit had been lost: only the outbox row knows the tick
    monkeypatch.setattr(client, "publish", lambda session_id, version: None)
    script = deployment.script(
        [{"content": "hi", "tool_calls": [call("echo", text="x")]}, {"content": "bye"}]
    )
    sid = client.submit(TEST_KIND, {}, model=script).id

    counts = cli("relay", "--once", "--json", TICKWORK_RELAY_AFTER_S="0").json()
    assert counts == {
        "republished": 1,
        "lease_expiries": 0,
        "delayed": 0,
        "taken_over": 0,
        "admitted": 0,
        "unsent": 0,
    }
    with deployment.worker(relay=False):
        done = client.wait(sid, timeout=30)
    assert done.status.value == "completed" and done.final_answer == "bye"


def test_relay_once_says_when_the_broker_did_not_take_a_tick(
    deployment: Deployment, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before, it exited 0 saying "republished 0 ticks": a cron job running it saw success
    client = deployment.client
    monkeypatch.setattr(client, "publish", lambda session_id, version: None)
    sid = client.submit(TEST_KIND, {}, model=deployment.script([{"content": "bye"}])).id
    away = "redis://127.0.0.1:1/0"

    refused = cli("relay", "--once", ok=False, TICKWORK_RELAY_AFTER_S="0", TICKWORK_BROKER_URL=away)

    assert refused.code == 1, refused
    said = refused.stderr.splitlines()[-1]  # after the relay's own log lines
    assert said.startswith(f"error: the broker at {away} (TICKWORK_BROKER_URL) did not take 1 ")
    assert "tickwork relay --once" in said and "Traceback" not in refused.stderr
    assert "gave back 1 tick to" in refused.stderr and sid in refused.stderr  # due at once
    counts = cli("relay", "--once", "--json", TICKWORK_RELAY_AFTER_S="0").json()
    assert counts["republished"] == 1 and counts["unsent"] == 0  # the tick was kept
    with deployment.worker(relay=False):
        done = client.wait(sid, timeout=30)
    assert done.status.value == "completed" and done.final_answer == "bye"


def test_relay_once_takes_over_a_session_whose_worker_is_gone(
    deployment: Deployment, cli: Cli
) -> None:
    """As the relay every worker runs does: the lease has long to run, but the sign of
    life it names is held by nobody; a sign seen gone is looked at again after its grace."""
    client = deployment.client
    sid = client.submit(TEST_KIND, {}, model=deployment.script([{"content": "bye"}])).id
    gone = signed("gone-worker", new_key())
    claim(client.store, sid, now=datetime.now(UTC), owner=gone)
    held = client.store.lease(sid)
    assert held is not None

    done = cli("relay", "--once", "--json", ok=False, TICKWORK_LIVENESS_GRACE_S="0.2")

    assert done.code == 0, done
    assert done.json()["taken_over"] == 1 and done.json()["lease_expiries"] == 0
    # the relay's log (it said "took over 1 sessions")
    assert f"took over 1 session whose worker is gone: {sid}" in done.stderr
    assert client.store.lease(sid) is None
    # the session itself says so, naming the worker it was taken from
    said = [e for e in cli("show", sid, "--json").json()["events"] if e["kind"] == "taken_over"]
    assert [e["data"] for e in said] == [{"from": gone}]
    shown = " ".join(cli("show", sid, COLUMNS="200").stdout.split())
    assert f"taken over {when(said[0]['at'])} from {gone}, whose worker was gone" in shown
    with deployment.worker(relay=False):
        done = client.wait(sid, timeout=30)
    assert done.status.value == "completed" and done.final_answer == "bye"


def test_relay_once_revives_an_expired_lease_and_the_session_says_whose(
    deployment: Deployment, cli: Cli
) -> None:
    """A lease that ran out with no tick saved (its worker stopped, or gone where no sign of
    life is watched) is offered again, and `show` says whose lease it was and when: the
    session lost its lease's time, and the operator can tell why."""
    client = deployment.client
    sid = client.submit(TEST_KIND, {}, model=deployment.script([{"content": "bye"}])).id
    stalled = "stalled@host:41:1"  # no sign of life: only the lease's end frees it
    claim(client.store, sid, now=datetime.now(UTC) - timedelta(hours=1), owner=stalled)

    done = cli("relay", "--once", "--json", ok=False)

    assert done.code == 0, done
    assert done.json()["lease_expiries"] == 1
    assert f"revived 1 session whose lease expired: {sid}" in done.stderr
    said = [e for e in cli("show", sid, "--json").json()["events"] if e["kind"] == "lease_expired"]
    assert [e["data"] for e in said] == [{"from": stalled}]
    shown = " ".join(cli("show", sid, COLUMNS="200").stdout.split())
    assert (
        f"lease ran out {when(said[0]['at'])} the lease of {stalled} ran out with no tick "
        "saved: offered again" in shown
    )
    with deployment.worker(relay=False):
        done = client.wait(sid, timeout=30)
    assert done.status.value == "completed" and done.final_answer == "bye"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_db_current_history_and_downgrade(tmp_path: Path, backend: str) -> None:
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            url = stack.enter_context(postgres_database())
        else:
            url = f"sqlite:///{tmp_path / 'tw.db'}"
        cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
        db = functools.partial(cli, "db", TICKWORK_DATABASE_URL=url)

        before, listed = at_once(
            lambda: db("current", "--json", ok=False), lambda: db("history", "--json")
        )
        revisions = listed.json()
        newest = next(r["revision"] for r in revisions if r["head"])
        # no schema at all is not "migrated": exit 1, saying what to run; --json still
        # gives the object
        before.error(1, f"database {url} has no tickwork schema", "tickwork db upgrade")
        assert json.loads(before.stdout) == {
            "database_url": url,
            "revision": None,
            "head": newest,
            "up_to_date": False,
        }
        db("current", ok=False).error(1, "has no tickwork schema", "tickwork db upgrade")
        assert revisions[-1]["follows"] == [] and not any(r["current"] for r in revisions)
        assert not (tmp_path / "tw.db").exists()  # looking made no database

        db("upgrade")
        after, listed = at_once(lambda: db("current", "--json"), lambda: db("history", "--json"))
        assert after.json()["revision"] == newest and after.json()["up_to_date"]
        assert [r["revision"] for r in listed.json() if r["current"]] == [newest]
        assert "the newest" in db("current").stdout and "(head, current)" in db("history").stdout

        # destructive: asks, and with no terminal to ask in, refuses without --yes
        db("downgrade", "base", ok=False).error(2, "--yes")
        db("downgrade", "nope", "--yes", ok=False).error(2, "'nope'", "tickwork db history")
        assert _tables(url) >= {"tickwork_sessions", "tickwork_outbox"}
        # `-1`, as the help says, goes one back
        previous = listed.json()[1]["revision"]
        assert db("downgrade", "-1", "--yes", "--json").json()["revision"] == previous
        assert db("upgrade", "--json").json()["revision"] == newest

        assert db("downgrade", "base", "--yes", "--json").json()["revision"] is None
        assert not _tables(url) & {"tickwork_sessions", "tickwork_outbox", "tickwork_events"}
        gone = db("current", "--json", ok=False)
        gone.error(1, "has no tickwork schema")
        assert json.loads(gone.stdout)["revision"] is None
        db("downgrade", "base", "--yes", ok=False).error(2, "no tickwork schema")
        assert db("upgrade", "--json").json()["revision"] == newest


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_python_m_tickwork_ignores_modules_in_the_working_directory(tmp_path: Path) -> None:
    # `python -m` puts the working directory first on sys.path; a tasks.py or worker.py
    # there must not stand in for tickwork's packages
    for name in ("tasks", "worker", "store", "fsm"):
        (tmp_path / f"{name}.py").write_text(f"raise RuntimeError('{name}.py was imported')\n")
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", "config", "--json"],
        cwd=tmp_path,
        env=_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["queue"] == "tickwork.ticks"


def test_relay_once_publishes_a_delayed_tick_when_due(deployment: Deployment, cli: Cli) -> None:
    client = deployment.client
    error = {"transient": True, "message": "429 slow down", "retry_after_s": 0.5}
    sid = client.submit(TEST_KIND, {}, model=deployment.script([{"error": error}])).id
    with deployment.worker(relay=False):
        waiting = until(lambda: (h := client.get(sid)).model_attempts == 1 and h, what="retry")
    with client.store.engine.connect() as conn:
        (row,) = conn.execute(select(outbox).where(outbox.c.session_id == sid)).all()
    assert row.published_at is None and row.due_at > waiting.updated_at

    until(lambda: datetime.now(UTC) > row.due_at, what="the tick to fall due")
    counts = cli("relay", "--once", "--json").json()
    with deployment.worker(relay=False):
        again = until(lambda: (h := client.get(sid)).model_attempts == 2 and h, what="2nd call")

    assert counts == {
        "republished": 0,
        "lease_expiries": 0,
        "delayed": 1,
        "taken_over": 0,
        "admitted": 0,
        "unsent": 0,
    }
    assert again.status.value == "ready"


def test_config_names_a_variable_that_is_no_setting(tmp_path: Path) -> None:
    """A mistyped variable (TICKWORK_RETENTION_COMPLETED for ..._S) was ignored without a
    word, by `tickwork config` too, so retention silently stayed off."""
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    done = cli.inline(
        "config",
        "--json",
        ok=False,
        TICKWORK_RETENTION_COMPLETED="30d",
        TICKWORK_BUDGETS__MAX_STEPS="9",
        TICKWORK_TOKEN="t" * 20,
        TICKWORK_SERVER="",
        TICKWORK_SERVER_TIMEOUT_S="120",  # the command line's, with --server
    )
    assert done.code == 0, done
    assert done.json()["budgets"]["max_steps"] == 9
    assert done.stderr.splitlines() == [
        "note: TICKWORK_RETENTION_COMPLETED is no tickwork setting and is ignored; did you "
        "mean TICKWORK_RETENTION_COMPLETED_S? (`tickwork config` lists every setting)"
    ], done.stderr
