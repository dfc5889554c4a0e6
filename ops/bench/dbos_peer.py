"""DBOS Transact as a contender of ops/bench/peers.py: a workflow with a step per model reply
and a step per tool call (each step's result one row of its system database, written before
the next step runs), started through a DBOS queue whose worker concurrency is the run's
concurrency, on its Postgres system database.

DBOS holds one instance per process, so a run of it has a process of its own (peers.py
runs every contender that way).
"""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from ops.bench import contenders

QUEUE = "peers"


@DBOS.step()
def call_model(steps: int, index: int) -> dict[str, Any]:
    return contenders.reply(steps, index)


@DBOS.step()
def run_tool(name: str, arguments: dict[str, Any]) -> str:
    if name != "noop":
        raise ValueError(f"the fake model called {name!r}; the benchmark has only noop")
    return "ok"


@DBOS.workflow()
def session(steps: int) -> int:
    """The agent loop: a reply, its calls, until a reply without calls; returns the steps."""
    done = 0
    while True:
        answer = call_model(steps, done)
        calls = answer.get("tool_calls") or []
        if not calls:
            return done
        for call in calls:
            run_tool(call["name"], call["arguments"])
        done += 1


class Dbos:
    def __init__(self, options: contenders.Options) -> None:
        self.options = options

    def __enter__(self) -> Dbos:
        DBOS(
            config={
                "name": "tickwork-peers",
                "system_database_url": self.options.url,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()
        DBOS.register_queue(
            QUEUE,
            worker_concurrency=self.options.concurrency,
            polling_interval_sec=self.options.dbos_poll_s,
        )
        return self

    def __exit__(self, *_: object) -> None:
        DBOS.destroy()

    def run(self, sessions: int, steps: int) -> float:
        ids = [DBOS.enqueue_workflow(QUEUE, session, steps).workflow_id for _ in range(sessions)]
        _, failed, ended = contenders.wait_for(
            self.options.url,
            "select count(*) filter (where status = 'SUCCESS'),"
            " count(*) filter (where status not in ('SUCCESS', 'ENQUEUED', 'PENDING')),"
            " max(coalesce(completed_at, updated_at)) from dbos.workflow_status"
            " where workflow_uuid = any(%s)",
            (ids,),
            lambda row: row[0] + row[1] == len(ids),
            what="DBOS workflows",
        )
        if failed:
            raise RuntimeError(f"{failed} DBOS workflows did not succeed")
        (recorded,) = contenders.wait_for(
            self.options.url,
            "select count(*) from dbos.operation_outputs where workflow_uuid = any(%s)",
            (ids,),
            lambda row: True,
            what="DBOS steps",
        )
        if recorded != sessions * (2 * steps + 1):
            raise RuntimeError(f"DBOS recorded {recorded} steps, not {sessions * (2 * steps + 1)}")
        return float(ended) / 1000
