"""An approval card survives the worker that saved the wait: it is in the store, not in
the worker's memory, and another worker's dispatcher delivers it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tickwork.fsm.values import Status
from tickwork.store import deliveries

from tests.tasks.conftest import Deployment, kill, stop, until

pytestmark = pytest.mark.slow

DANGER = [
    {"content": "delete it", "tool_calls": [{"name": "danger", "arguments": {"value": "db"}}]},
    {"content": "done"},
]


class Receiver:
    """The first POST hangs (its worker is killed meanwhile); later ones are answered 200."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.answered: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                card = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, card))
                    first = len(receiver.got) == 1
                if first:
                    receiver.release.wait(60)
                    return
                with receiver.lock:
                    receiver.answered.append(card)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    with Receiver() as found:
        # the spawned workers read their webhook settings from the environment
        monkeypatch.setenv("TICKWORK_WEBHOOK_URL", found.url)
        monkeypatch.setenv("TICKWORK_WEBHOOK_TIMEOUT_S", "1")
        monkeypatch.setenv("TICKWORK_WEBHOOK_BACKOFF_S", "0.05")
        yield found


def test_a_card_survives_its_worker_killed_after_the_save(
    deployment: Deployment, receiver: Receiver
) -> None:
    session_id = deployment.submit(DANGER)
    first = deployment.spawn()
    try:
        until(lambda: receiver.got, timeout=60, what="the first worker to post the card")
        kill(first)  # mid-POST: the card was taken, not delivered
    finally:
        stop(first)
    head = deployment.client.get(session_id)
    assert head.status is Status.WAITING_APPROVAL
    engine = deployment.client.store.engine
    state = deliveries.state(engine, session_id, head.version)
    assert state is not None and state["delivered_at"] is None and state["attempts"] == 1
    assert receiver.answered == []
    second = deployment.spawn()
    try:
        until(lambda: receiver.answered, timeout=60, what="the second worker to deliver it")
        state = until(
            lambda: (
                (s := deliveries.state(engine, session_id, head.version))
                and s["delivered_at"]
                and s
            ),
            timeout=10,
            what="the delivery recorded",
        )
    finally:
        stop(second)
    assert [c["session"]["id"] for c in receiver.answered] == [session_id]
    assert receiver.answered[0]["calls"][0]["call_id"] == "s1c0"
    keys = [h["idempotency-key"] for h, _ in receiver.got]
    assert keys == [f"{session_id}:{head.version}"] * 2
    assert state["attempts"] == 2


def test_a_finished_card_survives_its_worker_killed_mid_post(
    deployment: Deployment, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repair ends `repaired` in a real worker, which starts posting its finished card and
    is killed; another worker delivers it, under the same key, with the outcome."""
    monkeypatch.setenv("TICKWORK_WEBHOOK_EVENTS", "approval_requested,finished")
    project = deployment.tmp / "project"
    project.mkdir()
    (project / "README").write_text("a project\n")
    write = {"name": "run_command", "arguments": {"command": "printf 'fixed\\n' >> fixed.txt"}}
    head = deployment.client.submit(
        "repair",
        {"workspace": str(project), "test_command": "test -f fixed.txt"},
        model=deployment.script([{"content": "fix", "tool_calls": [write]}, {"content": "done"}]),
    )
    first = deployment.spawn()
    try:
        until(lambda: receiver.got, timeout=90, what="the first worker to post the card")
        kill(first)
    finally:
        stop(first)
    ended = deployment.client.get(head.id)
    assert ended.status is Status.COMPLETED and ended.result["outcome"] == "repaired"
    second = deployment.spawn()
    try:
        until(lambda: receiver.answered, timeout=60, what="the second worker to deliver it")
    finally:
        stop(second)
    [card] = receiver.answered
    assert card["type"] == "tickwork.finished"
    assert (card["session"]["id"], card["session"]["outcome"]) == (head.id, "repaired")
    keys = [h["idempotency-key"] for h, _ in receiver.got]
    assert keys == [f"{head.id}:{ended.version}"] * 2
