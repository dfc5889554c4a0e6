"""Sessions through real workers for tests: an embedded deployment, a worker in this
process, scripted models and a driver (re-exported by `tickwork.testing`)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from celery import Celery

from tickwork.client import Tickwork
from tickwork.fsm.values import Head, Session, Status, ToolCall
from tickwork.worker.config.settings import Settings
from tickwork.worker.models.scripted import ScriptedModel

__all__ = [
    "SessionDriver",
    "call",
    "embedded_settings",
    "git",
    "reply",
    "running_worker",
    "scripted_model",
    "until",
    "write_script",
]


def embedded_settings(folder: Path, **overrides: Any) -> Settings:
    """Settings of a new embedded deployment in `folder` (its SQLite file and broker folder),
    with queues of its own and the schema made; `overrides` are `Settings` fields. The
    relay runs often and leases are short, so a test sees recovery in seconds."""
    queue = f"tickwork.test.{uuid.uuid4().hex[:8]}"
    fields: dict[str, Any] = {
        "state_dir": Path(folder) / "state",
        "queue": queue,
        "dead_letter_queue": f"{queue}.dead",
        "lease_s": 3.0,
        "relay_period_s": 0.25,
        "relay_after_s": 1.5,
        **overrides,
    }
    settings = Settings(**fields)
    prepare_database(settings)
    return settings


def prepare_database(settings: Settings) -> None:
    """Make (or bring up to date) the schema of `settings`' database."""
    from tickwork.store.migrate import upgrade

    if settings.db_url.startswith("sqlite"):
        settings.state_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)


@contextmanager
def running_worker(
    settings: Settings,
    *,
    concurrency: int = 2,
    relay: bool = True,
    queues: list[str] | None = None,
    runtime_level: int | None = None,
) -> Iterator[Celery]:
    """A real Celery worker (threads pool) in this process, serving `settings`' queues, the
    relay beside it unless `relay=False`, and the runtime's background threads (the webhook
    dispatcher when TICKWORK_WEBHOOK_URL is set); all stop when the `with` ends. `queues`:
    the queues it consumes (default: the tick and dead-letter queues). `runtime_level`: the
    level it runs, for tests of a rolling upgrade (a higher one stands for a later release)."""
    from celery.contrib.testing.worker import start_worker

    from tickwork.worker.tick.app import make_app, runtime
    from tickwork.worker.tick.relay import RelayThread

    app = make_app(settings, relay=False)
    rt = runtime(app)
    if runtime_level is not None:
        rt.level = runtime_level
    thread = RelayThread(rt) if relay else None
    try:
        with start_worker(
            app,
            pool="threads",
            concurrency=concurrency,
            perform_ping_check=False,
            shutdown_timeout=30,
            loglevel="WARNING",
            **({"queues": queues} if queues else {}),
        ) as controller:
            if controller.hub is not None:
                # the event loop sees the end of the `with` only between two polls, and
                # without a timer of its own it polls RabbitMQ's socket for up to 10 s
                controller.hub.call_repeatedly(0.2, lambda: None)
            if thread:
                thread.start()
            for background in rt.background:
                background.start()
            try:
                yield app
            finally:
                for background in rt.background:
                    background.stop()
                if thread:
                    thread.stop()
                    thread.join(5)
    finally:
        app.close()  # its receivers, and its runtime: sign of life, threads, connections


def call(name: str, /, **arguments: Any) -> dict[str, Any]:
    """A tool call in a scripted reply: `call("read_file", path="a.py")`."""
    return {"name": name, "arguments": arguments}


def reply(content: str = "", *calls: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    """A scripted reply: its text and tool calls (`call(...)`); `more` adds the script's
    other keys (`usage`, `delay_s`, `error`)."""
    made: dict[str, Any] = {"content": content, **more}
    if calls:
        made["tool_calls"] = [dict(c) for c in calls]
    return made


def write_script(
    replies: Sequence[Mapping[str, Any]],
    folder: Path,
    *,
    repeat_last: bool = False,
    name: str = "script",
) -> str:
    """Write `replies` as a script file in `folder`; the model spec that plays it
    (`scripted:PATH`, an absolute path: workers may run in another directory)."""
    folder = Path(folder).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{uuid.uuid4().hex[:6]}.json"
    data: Any = list(replies)
    if repeat_last:
        data = {"replies": data, "repeat_last": True}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return f"scripted:{path}"


def scripted_model(
    replies: Sequence[Mapping[str, Any]], folder: Path, *, repeat_last: bool = False
) -> ScriptedModel:
    """A `ScriptedModel` playing `replies` (checked now), for calling a model directly."""
    spec = write_script(replies, folder, repeat_last=repeat_last)
    return ScriptedModel(spec.removeprefix("scripted:"))


def until(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """`predicate()`'s first true value, asked every 50 ms; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def git(folder: Path, *args: str) -> str:
    """Run git in `folder` with an author set (a commit works where git has no identity);
    its output, stripped. CalledProcessError if it fails."""
    done = subprocess.run(
        ["git", "-c", "user.name=tickwork tests", "-c", "user.email=tests@tickwork.invalid", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


#: what `SessionDriver.run` does with a call that waits for a person: approve it
Decide = Callable[["SessionDriver", Session, ToolCall], None]


def approve_all(driver: SessionDriver, session: Session, call: ToolCall) -> None:
    driver.client.approve(
        session.head.id, call.call_id, approver=driver.approver, fingerprint=call.fingerprint
    )


class SessionDriver:
    """Submits sessions through a client and drives them to an end, deciding on the way.

    It does not run ticks: a worker must (`running_worker`, or `tickwork worker`). Give it
    `settings` (it opens a client and closes it) or a `client` of your own."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        client: Tickwork | None = None,
        approver: str = "tests",
        timeout: float = 60.0,
        scripts: Path | None = None,
    ) -> None:
        self._owned = client is None
        self.client = client if client is not None else Tickwork(settings)
        self.approver = approver
        self.timeout = timeout
        #: where `submit(replies=...)` writes its scripts
        self.scripts = Path(scripts or self.client.settings.state_dir / "scripts")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.client.close()

    def submit(
        self,
        kind: str,
        input: Mapping[str, Any] | None = None,
        *,
        replies: Sequence[Mapping[str, Any]] | None = None,
        model: str | None = None,
        **kw: Any,
    ) -> str:
        """Submit a session of `kind`; its model plays `replies`, or is `model` (a spec).
        `kw` goes to `Tickwork.submit` (budgets, session_id, price, ...). Returns its id."""
        if replies is not None:
            if model is not None:
                raise ValueError("give replies or model, not both")
            model = write_script(replies, self.scripts)
        return self.client.submit(kind, input, model=model, **kw).id

    def run_until(
        self, session_id: str, *statuses: Status | str, timeout: float | None = None
    ) -> Head:
        """The session's head once its status is one of `statuses` (default: suspended or
        finished); AssertionError if it ends in another or the time runs out."""
        wanted = {Status(s) for s in statuses} if statuses else None
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            head = self.client.get(session_id)
            if (wanted is None and not head.status.moving) or (
                wanted is not None and head.status in wanted
            ):
                return head
            if head.status.terminal:
                raise AssertionError(_unexpected(head, wanted))
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out: {_unexpected(head, wanted)} (is a worker running?)"
                )
            time.sleep(0.05)

    def decide(
        self,
        session_id: str,
        call_id: str,
        *,
        reject: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        output: str | None = None,
        comment: str = "",
    ) -> Head:
        """Approve the call, or reject it with feedback (`reject=`), run it with other
        `arguments`, or give its `output` (an in-doubt call)."""
        call = self.client.load(session_id).call(call_id)
        if call is None:
            raise AssertionError(f"session {session_id} has no call {call_id}")
        kw: dict[str, Any] = {
            "approver": self.approver,
            "fingerprint": call.fingerprint,
            "comment": comment,
        }
        if sum(x is not None for x in (reject, arguments, output)) > 1:
            raise ValueError("give at most one of reject, arguments and output")
        if reject is not None:
            return self.client.reject(session_id, call_id, reject, **kw)
        if arguments is not None:
            return self.client.edit(session_id, call_id, arguments, **kw)
        if output is not None:
            return self.client.provide_output(session_id, call_id, output, **kw)
        return self.client.approve(session_id, call_id, **kw)

    def run(
        self,
        session_id: str,
        *,
        until: Status | str | None = None,
        decide: Decide = approve_all,
        timeout: float | None = None,
    ) -> Session:
        """Run the session until it finishes (or reaches `until`), deciding each call that
        waits for a person with `decide` (default: approve it), its children's too while it
        waits for them; its snapshot then."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        wanted = Status(until) if until is not None else None
        while True:
            left = max(0.0, deadline - time.monotonic())
            head = self.run_until(session_id, timeout=left)
            if wanted is not None and head.status is wanted:
                break
            if head.status is Status.WAITING_CHILDREN:
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out: {_unexpected(head, wanted)}")
                self._decide_below(head, decide)
                continue
            if head.status is not Status.WAITING_APPROVAL:
                if wanted is not None:
                    raise AssertionError(_unexpected(head, {wanted}))
                break
            session = self.client.load(session_id)
            for call_id in head.awaiting:
                found = session.call(call_id)
                if found is not None:
                    decide(self, session, found)
            now = self.client.get(session_id)
            if now.status is Status.WAITING_APPROVAL and now.version == head.version:
                raise AssertionError(
                    f"session {session_id} still waits for {', '.join(now.awaiting)}: "
                    "the decide function must decide every waiting call"
                )
        return self.snapshot(session_id)

    def _decide_below(self, head: Head, decide: Decide) -> None:
        """Decide the waiting calls of the sessions under `head` (its children and theirs),
        or wait a moment while they run."""
        below: set[str] = {head.id}
        waiting = []
        for each in self.client.store.tree(head.root_id or head.id):  # oldest first
            if each.parent_id in below:
                below.add(each.id)
                if each.status is Status.WAITING_APPROVAL:
                    waiting.append(each)
        for child in waiting:
            session = self.client.load(child.id)
            for call_id in child.awaiting:
                found = session.call(call_id)
                if found is not None:
                    decide(self, session, found)
        if not waiting:
            time.sleep(0.05)

    def snapshot(self, session_id: str) -> Session:
        """The session as stored: head, steps, calls, observations, decisions."""
        return self.client.load(session_id)


def _unexpected(head: Head, wanted: set[Status] | None) -> str:
    expected = "suspended or finished" if wanted is None else " or ".join(s.value for s in wanted)
    error = f" ({head.error_code.value}: {head.error_message})" if head.error_code else ""
    return f"session {head.id} is {head.status.value}{error}, expected {expected}"
