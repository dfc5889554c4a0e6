"""Real Postgres, Redis and RabbitMQ for the tests: found, or skipped locally, failed in CI."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_ADMIN_URLS = [u for u in (os.environ.get("TICKWORK_TEST_PG_ADMIN"),) if u] or [
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "postgresql+psycopg://root@127.0.0.1:5432/postgres",
]
REDIS_URL = os.environ.get("TICKWORK_TEST_REDIS", "redis://127.0.0.1:6379/0")
RABBITMQ_URL = os.environ.get("TICKWORK_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672//")


def missing(what: str, why: object) -> None:
    """Skip locally; under CI a missing service is a failure, so CI always uses the real one."""
    message = f"{what} is not answering ({why}); start it (see CONTRIBUTING.md)"
    if IN_CI:
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(message)


def _admin_url() -> str:
    import psycopg

    errors = []
    for url in PG_ADMIN_URLS:
        try:
            with psycopg.connect(url.replace("+psycopg", ""), connect_timeout=3):
                return url
        except psycopg.Error as exc:
            errors.append(str(exc).strip().splitlines()[0])
    missing("Postgres at 127.0.0.1:5432", "; ".join(errors))
    raise AssertionError("unreachable")


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh database for this test run, dropped afterwards."""
    import psycopg

    admin = _admin_url()
    name = f"tickwork_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        missing(f"Redis at {REDIS_URL}", exc)
    finally:
        client.close()
    return REDIS_URL


@contextmanager
def own_redis(*options: str) -> Iterator[str]:
    """A redis-server of this test's own on a free loopback port, started with `options`
    (what only its start can set: `--rename-command CONFIG ""`, `--databases 4`), stopped
    afterwards; its database 0's URL. Skipped without redis-server (failed in CI)."""
    import redis

    found = shutil.which("redis-server")
    if found is None:
        missing("redis-server (to start a Redis of the test's own)", "not on PATH")
        raise AssertionError("unreachable")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            found,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(
                            f"redis-server {' '.join(options)} on port {port} did not start "
                            f"(exit code {server.poll()})"
                        ) from None
                    time.sleep(0.05)
        finally:
            client.close()
        yield url
    finally:
        server.terminate()
        server.wait(10)


def rabbitmq_url(url: str = RABBITMQ_URL) -> str:
    from kombu import Connection

    with Connection(url, connect_timeout=3) as conn:
        try:
            conn.ensure_connection(max_retries=1)
        except Exception as exc:
            missing(f"RabbitMQ at {conn.as_uri()}", exc)
    return url
