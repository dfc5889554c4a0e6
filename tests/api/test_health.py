"""Issue 12: /healthz is liveness only; /readyz checks the database, its schema revision and
the broker, and names the one that is not ready."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from tickwork.store.migrate import upgrade
from tickwork.worker.config.settings import Settings

from tests.api.conftest import TOKEN, TOKENS, Server, Stack
from tickwork.api import ApiSettings, make_api

#: the deployment's operators: /readyz tells them why it is not ready
ADMIN = "root-admin-token-00000001"
WITH_ADMIN = {**TOKENS, ADMIN: {"name": "root", "roles": ["admin"]}}


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    with Server(make_api(settings, ApiSettings(api_tokens=WITH_ADMIN))) as server:  # type: ignore[arg-type]
        yield server.url


def probe(url: str, path: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{url}{path}", headers=headers, timeout=30)
    return answer.status_code, answer.json()


def test_a_working_deployment_is_live_and_ready(stack: Stack) -> None:
    assert probe(stack.url, "/healthz") == (200, {"ok": True})
    status, body = probe(stack.url, "/readyz")
    assert status == 200 and body["checks"] == {"database": "ok", "schema": "ok", "broker": "ok"}
    # as uptime monitors and load balancers ask: HEAD, no token
    for path in ("/healthz", "/readyz"):
        assert httpx.head(f"{stack.url}{path}").status_code == 200, path


def test_a_database_without_the_schema_is_live_but_not_ready(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    sqlite3.connect(tmp_path / "tickwork.db").close()  # a database nobody migrated
    with serving(settings) as url:
        assert probe(url, "/healthz") == (200, {"ok": True})
        status, body = probe(url, "/readyz", ADMIN)
        assert status == 503 and body["code"] == "not_ready" and body["check"] == "schema"
        assert "no schema" in str(body["message"]) and "tickwork db upgrade" in str(body["message"])


def test_a_database_behind_the_migrations_is_not_ready(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    upgrade(settings.db_url, "0001")
    with serving(settings) as url:
        status, body = probe(url, "/readyz", ADMIN)
        assert status == 503 and body["check"] == "schema"
        assert "revision 0001" in str(body["message"])


def test_a_database_that_does_not_answer_is_named(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=tmp_path, database_url="postgresql+psycopg://postgres@127.0.0.1:1/none"
    )
    with serving(settings) as url:
        assert probe(url, "/healthz")[0] == 200
        status, body = probe(url, "/readyz")
        assert status == 503 and body["check"] == "database", body


def test_readyz_tells_only_an_admin_why_the_database_does_not_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """/readyz needs no token (probes send none): such a caller, or a tenant's token, gets
    the status and which check failed, never the database's error text (its host, user,
    driver's words); the server's log has it, and so does an admin's /readyz."""
    settings = Settings(
        state_dir=tmp_path, database_url="postgresql+psycopg://tick:db-secret-pw@127.0.0.1:1/none"
    )
    with serving(settings) as url, caplog.at_level(logging.WARNING, logger="tickwork.api"):
        for token in (None, TOKEN["olga"], "not-a-token-at-all-00001"):
            answer = httpx.get(
                f"{url}/readyz",
                headers={"Authorization": f"Bearer {token}"} if token else {},
                timeout=30,
            )
            assert answer.status_code == 503, answer.text
            body = answer.json()
            assert body["code"] == "not_ready" and body["check"] == "database"
            assert str(body["message"]).startswith("database: does not answer")
            assert "server's log" in str(body["message"])
            for secret in ("127.0.0.1", "tick:", "5432", ":1", "onnection", "psycopg"):
                assert secret not in str(body["message"]), body
        status, told = probe(url, "/readyz", ADMIN)
    assert status == 503 and told["check"] == "database"
    assert "127.0.0.1" in str(told["message"]) or "onnect" in str(told["message"]), told
    logged = [r.getMessage() for r in caplog.records if "/readyz" in r.getMessage()]
    assert logged and "database: does not answer (" in logged[0], logged


def test_a_broker_that_does_not_answer_is_named(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, broker_url="redis://127.0.0.1:1/0")
    upgrade(settings.db_url)
    with serving(settings) as url:
        status, body = probe(url, "/readyz")
        assert status == 503 and body["check"] == "broker", body
        assert "cannot connect" in str(body["message"])


@pytest.mark.parametrize(
    ("options", "told"),
    [
        # CONFIG allowed: the server says how many databases it has
        (("--databases", "4"), ["the Redis server there has 4 (0 to 3)", "a number from 0 to 3"]),
        # CONFIG refused (renamed away, as on many a managed Redis): the server's own words,
        # and the count a Redis server has unless its redis.conf says otherwise
        (
            ("--rename-command", "CONFIG", ""),
            [
                "which the Redis server there refuses (DB index is out of range)",
                "a Redis server has 16 unless its redis.conf says otherwise: 0 to 15",
            ],
        ),
    ],
    ids=["config-allowed", "config-refused"],
)
def test_a_redis_database_the_server_has_not_is_named_as_such(
    tmp_path: Path, options: tuple[str, ...], told: list[str]
) -> None:
    """Not "cannot connect": the server answers, and refuses the database the URL names.
    Each case on a redis-server of its own: whether CONFIG is allowed is set at its start."""
    import redis

    from tests.services import own_redis

    with own_redis(*options) as server:
        asked = redis.Redis.from_url(server)
        try:  # the case is what it says: the server answers CONFIG, or refuses it
            if "CONFIG" in options:
                with pytest.raises(redis.ResponseError):
                    asked.config_get("databases")
            else:
                assert asked.config_get("databases") == {"databases": "4"}
        finally:
            asked.close()
        settings = Settings(state_dir=tmp_path, broker_url=server.replace("/0", "/99"))
        upgrade(settings.db_url)
        with serving(settings) as url:
            status, body = probe(url, "/readyz", ADMIN)
    assert status == 503 and body["check"] == "broker", body
    message = str(body["message"])
    assert "names Redis database 99" in message, message
    for said in told:
        assert said in message, (said, message)


def test_a_request_while_the_database_is_away_is_a_503_that_says_so(tmp_path: Path) -> None:
    """The store raises StoreUnavailable (not SQLAlchemy's error); the API answers it as a
    503 with its JSON error, the database's words and password kept out of the body."""
    settings = Settings(
        state_dir=tmp_path, database_url="postgresql+psycopg://tick:db-secret-pw@127.0.0.1:1/none"
    )
    token = next(t for t, who in TOKENS.items() if who["roles"] == ["approver"])
    with serving(settings) as url:
        answer = httpx.get(
            f"{url}/api/v1/sessions", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["code"] == "database_unavailable"
    assert "try again" in body["message"]
    assert "db-secret-pw" not in answer.text and "127.0.0.1" not in answer.text


def test_a_request_while_every_database_connection_is_in_use_is_a_503_busy_retry_after(
    tmp_path: Path,
) -> None:
    """The pool's timeout (SQLAlchemy's QueuePool TimeoutError) was answered as a database
    that does not answer ("check that it runs"), with no Retry-After: the database runs, the
    server had more requests at once than connections. It is 503 `server_busy` with
    Retry-After, and the remote client and `tickwork --server` say to try again."""

    from tests.e2e.conftest import Cli
    from tickwork.client import Tickwork
    from tickwork.remote import Client, RemoteError

    # the pool as the settings size it: it was fixed (10 + 40 on Postgres, 30 s), and the
    # answer's Retry-After a constant 2 s, whatever the pool's timeout
    settings = Settings(
        state_dir=tmp_path,
        database_pool_size=1,
        database_pool_overflow=0,
        database_pool_timeout_s=0.2,
    )
    upgrade(settings.db_url)
    client = Tickwork(settings)
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    with Server(app) as server, client.store.engine.connect():  # the pool's one, held
        answer = httpx.get(
            f"{server.url}/api/v1/sessions", headers={"Authorization": f"Bearer {TOKEN['olga']}"}
        )
        with Client(server.url, token=TOKEN["olga"]) as remote, pytest.raises(RemoteError) as got:
            remote.sessions()
        said = Cli({"TICKWORK_SERVER": server.url, "TICKWORK_TOKEN": TOKEN["olga"]}, tmp_path)
        shown = said.inline("ls", ok=False).error(1, "the server is busy", "try again in 1 s")
    client.close()
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"  # the pool's timeout, in whole seconds
    body = answer.json()
    assert (body["code"], body["retry_after_s"]) == ("server_busy", 1), body
    assert "database" in body["message"] and "QueuePool" not in answer.text
    assert (got.value.status, got.value.code) == (503, "server_busy")
    assert got.value.message == body["message"] and got.value.details["retry_after_s"] == 1
    assert "check that it runs" not in shown


def test_a_busy_answers_retry_after_is_the_pool_of_the_engine_it_was_given(
    tmp_path: Path,
) -> None:
    """The Retry-After of `server_busy` was the settings' pool timeout
    (TICKWORK_DATABASE_POOL_TIMEOUT_S, 30 s unset) whatever pool the server's store had: a
    client built on an engine of its own waits as long as that engine's pool does."""
    from tickwork.store import open_store

    from tickwork.client import Tickwork

    settings = Settings(state_dir=tmp_path)
    upgrade(settings.db_url)
    store = open_store(settings.db_url, pool_size=1, max_overflow=0, pool_timeout=1.5)
    client = Tickwork(settings, store=store)
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    with Server(app) as server, store.engine.connect():  # the pool's one, held
        answer = httpx.get(
            f"{server.url}/api/v1/sessions",
            headers={"Authorization": f"Bearer {TOKEN['olga']}"},
            timeout=30,
        )
    client.close()
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "server_busy"
    # the engine's 1.5 s, in whole seconds: not the settings' 30
    assert (answer.headers["Retry-After"], answer.json()["retry_after_s"]) == ("2", 2)
