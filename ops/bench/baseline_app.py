"""The physical limit the tick is measured against: a bare Celery task that re-enqueues
itself and does one Postgres transaction per hop (select a ~4 KB JSON row for update,
update it, commit), with tickwork's delivery settings (late ack, prefetch 1).

`step` is the floor of ops/bench/peers.py: a hop that INSERTs one row (the step's record)
and enqueues the next, nothing else.

`celery -A ops.bench.baseline_app worker` with BENCH_BROKER_URL, BENCH_QUEUE, BENCH_DB_URL.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg
from celery import Celery
from psycopg.types.json import Jsonb

TABLE = """
create table if not exists bench_chains (
    id text primary key,
    data jsonb not null,
    hops integer not null default 0,
    started_at timestamptz,
    done_at timestamptz
)"""

STEPS_TABLE = """
create table if not exists bench_steps (
    session text not null,
    n integer not null,
    record jsonb not null,
    at timestamptz not null default clock_timestamp(),
    primary key (session, n)
)"""

app = Celery("bench_baseline", broker=os.environ.get("BENCH_BROKER_URL"), set_as_current=False)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    result_backend=None,
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get("BENCH_QUEUE", "bench.baseline"),
    task_create_missing_queues=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": 2 * 3600.0},
)

_held: dict[tuple[int, int], psycopg.Connection[Any]] = {}


def _connection() -> psycopg.Connection[Any]:
    """This process's and thread's connection, opened after any fork (the threads pool's
    threads must not queue on one connection)."""
    key = (os.getpid(), threading.get_ident())
    conn = _held.get(key)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["BENCH_DB_URL"], autocommit=True)
        _held[key] = conn
    return conn


@app.task(name="bench.hop", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def hop(chain: str, n: int, total: int) -> None:
    conn = _connection()
    with conn.transaction():
        (data,) = conn.execute(  # type: ignore[misc]
            "select data from bench_chains where id = %s for update", (chain,)
        ).fetchone()
        data["n"] = n + 1
        conn.execute(
            "update bench_chains set data = %s, hops = hops + 1,"
            " done_at = case when %s then clock_timestamp() else done_at end where id = %s",
            (Jsonb(data), n + 1 >= total, chain),
        )
    if n + 1 < total:
        hop.apply_async((chain, n + 1, total))


@app.task(name="bench.step", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def step(session: str, n: int, total: int) -> None:
    """Hop `n` of `total`: one INSERT (one transaction; a redelivered hop inserts nothing),
    then the next hop."""
    _connection().execute(
        "insert into bench_steps (session, n, record) values (%s, %s, %s) on conflict do nothing",
        (session, n, Jsonb({"hop": n})),
    )
    if n + 1 < total:
        step.apply_async((session, n + 1, total))
