"""The Python client API: submit, inspect, decide, cancel, fork, analyse dead letters."""

from __future__ import annotations

import getpass
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from celery import Celery

from fsm.errors import CallNotFound, InvalidBudget, InvalidInput
from fsm.forks import ForkPatch
from fsm.values import Budgets, Decision, DecisionKind, Head, Session
from store import Store
from store import dead_letters as dl
from worker.app import TICK, make_app
from worker.jobs import Jobs
from worker.runtime import build_store, utc_now
from worker.settings import Settings, load_settings

log = logging.getLogger("tickwork.client")
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Tickwork:
    """One handle on a tickwork deployment, configured from settings."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        app: Celery | None = None,
        store: Store | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings or load_settings()
        self._app = app
        self.store = store or build_store(self.settings)
        self.jobs = Jobs(self.settings.imports)
        self.clock = clock

    @property
    def app(self) -> Celery:
        if self._app is None:
            self._app = make_app(self.settings, relay=False)
        return self._app

    def close(self) -> None:
        self.store.engine.dispose()

    def publish(self, session_id: str, version: int) -> None:
        """Wake a worker; if the broker is down the outbox row stays and the relay publishes."""
        try:
            self.app.send_task(TICK, args=(session_id, version), queue=self.settings.queue)
        except Exception as exc:
            log.warning("could not publish the tick of %s (%s); the relay will", session_id, exc)

    def submit(
        self,
        kind: str,
        input: Mapping[str, Any] | None = None,
        *,
        model: str | None = None,
        budgets: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        submitted_by: str | None = None,
    ) -> Head:
        """Store a new session of job kind `kind` and enqueue its first tick.

        `submitted_by` is recorded on the session [default: the login name]."""
        by = _login() if submitted_by is None else submitted_by.strip()
        if len(by) > 200:
            raise InvalidInput("submitted_by is longer than 200 characters")
        job = self.jobs.get(kind)
        config = job.prepare(dict(input or {}), state_dir=self.settings.state_dir)
        spec = model or self.settings.model or str(config.pop("default_model", ""))
        if not spec:
            raise InvalidInput(
                "no model given: pass --model (scripted:PATH or openai:MODEL) or set TICKWORK_MODEL"
            )
        if session_id is not None and not SESSION_ID.match(session_id):
            raise InvalidInput(
                f"session id {session_id!r} may only hold letters, digits, "
                "'_', '-' and '.', up to 64 characters"
            )
        now = self.clock()
        head = Head(
            id=session_id or uuid.uuid4().hex,
            kind=kind,
            created_at=now,
            updated_at=now,
            model=spec,
            input=dict(input or {}),
            budgets=self.budgets(job.budgets, budgets or {}),
            config={"system_prompt": job.system_prompt, **config},
            submitted_by=by,
        )
        self.store.create(Session(head=head), now=now)
        self.publish(head.id, head.version)
        return head

    def budgets(self, *layers: Mapping[str, Any]) -> Budgets:
        merged = self.settings.budgets.model_dump()
        for layer in layers:
            unknown = sorted(set(layer) - set(merged))
            if unknown:
                raise InvalidBudget(
                    f"unknown budget {', '.join(unknown)}; known: {', '.join(merged)}"
                )
            merged.update({k: v for k, v in layer.items() if v is not None})
        try:
            return Budgets(**merged)
        except ValueError as exc:
            raise InvalidBudget(f"invalid budget: {_first_error(exc)}") from None

    def get(self, session_id: str) -> Head:
        return self.store.get(session_id)

    def load(self, session_id: str) -> Session:
        return self.store.load(session_id)

    def sessions(self, **filters: Any) -> list[Head]:
        """Sessions newest first, filtered by status, kind, error_code; paged by limit, offset."""
        return self.store.list_sessions(**filters)

    def wait(self, session_id: str, *, timeout: float = 60.0, poll: float = 0.05) -> Head:
        """The session once it is suspended or finished; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"session {session_id} still {head.status.value} after "
                    f"{timeout}s; is a worker running (`tickwork worker`)?"
                )
            time.sleep(poll)

    def decide(
        self,
        session_id: str,
        call_id: str,
        kind: DecisionKind | str,
        *,
        approver: str,
        fingerprint: str | None = None,
        comment: str = "",
        arguments: Mapping[str, Any] | None = None,
        feedback: str = "",
        output: str = "",
    ) -> Head:
        """Decide one waiting call; `fingerprint` binds the decision to what the approver saw
        (None binds it to the call as stored now)."""
        kind = DecisionKind(kind)
        head, call = self.store.find_call(session_id, call_id)
        if call is None:
            raise CallNotFound(
                f"session {session_id} has no call {call_id!r}; waiting: "
                f"{', '.join(head.awaiting) or 'none'}"
            )
        if kind is DecisionKind.EDIT:
            if arguments is not None and not isinstance(arguments, Mapping):
                raise InvalidInput(
                    f"the arguments of an edit of call {call_id} must be a JSON "
                    f"object, got {type(arguments).__name__}"
                )
            if arguments is None:
                raise InvalidInput(f"an edit of call {call_id} needs the new arguments")
            tools = self.jobs.tools(head.kind)
            if call.name in tools:
                arguments = tools.get(call.name).validate(dict(arguments))
        decision = Decision(
            call_id=call_id,
            kind=kind,
            approver=approver,
            at=self.clock(),
            fingerprint=call.fingerprint if fingerprint is None else fingerprint,
            comment=comment,
            feedback=feedback,
            output=output,
            arguments=dict(arguments) if arguments is not None else None,
        )
        head = self.store.decide(session_id, decision, now=decision.at)
        if head.status.runnable:
            self.publish(head.id, head.version)
        return head

    def approve(self, session_id: str, call_id: str, *, approver: str, **kw: Any) -> Head:
        return self.decide(session_id, call_id, DecisionKind.APPROVE, approver=approver, **kw)

    def edit(
        self,
        session_id: str,
        call_id: str,
        arguments: Mapping[str, Any],
        *,
        approver: str,
        **kw: Any,
    ) -> Head:
        return self.decide(
            session_id, call_id, DecisionKind.EDIT, approver=approver, arguments=arguments, **kw
        )

    def reject(
        self, session_id: str, call_id: str, feedback: str, *, approver: str, **kw: Any
    ) -> Head:
        return self.decide(
            session_id, call_id, DecisionKind.REJECT, approver=approver, feedback=feedback, **kw
        )

    def provide_output(
        self, session_id: str, call_id: str, output: str, *, approver: str, **kw: Any
    ) -> Head:
        return self.decide(
            session_id, call_id, DecisionKind.PROVIDE_OUTPUT, approver=approver, output=output, **kw
        )

    def cancel(self, session_id: str, *, by: str = "") -> Head:
        return self.store.request_cancel(session_id, now=self.clock(), by=by)

    def fork(
        self,
        session_id: str,
        *,
        from_step: int,
        by: str,
        system_prompt: str | None = None,
        append_instruction: str | None = None,
        tool_outputs: Mapping[str, str] | None = None,
        budgets: Mapping[str, Any] | None = None,
        resolve_dead_letter: bool = False,
        new_id: str | None = None,
    ) -> Head:
        """A new session from `session_id`'s step `from_step` with a declared patch."""
        if new_id is not None and not SESSION_ID.match(new_id):
            raise InvalidInput(
                f"session id {new_id!r} may only hold letters, digits, "
                "'_', '-' and '.', up to 64 characters"
            )
        if budgets:
            self.budgets(budgets)  # names and values checked before anything is written
        patch = ForkPatch(
            system_prompt=system_prompt,
            append_instruction=append_instruction,
            tool_outputs=dict(tool_outputs or {}),
            budgets=dict(budgets or {}),
        )
        head = self.store.fork(
            session_id,
            new_id=new_id or uuid.uuid4().hex,
            from_step=from_step,
            patch=patch,
            by=by,
            now=self.clock(),
            resolve_dead_letter=resolve_dead_letter,
        )
        if head.status.runnable:
            self.publish(head.id, head.version)
        return head

    def dead_letters(self, **filters: Any) -> list[dl.DeadLetter]:
        return dl.list_dead_letters(self.store.engine, **filters)

    def dead_letter(self, key: int | str) -> dl.DeadLetter:
        return dl.get_dead_letter(self.store.engine, key)

    def dead_letter_stats(
        self, *, by: str = "code", since: datetime | None = None
    ) -> list[dict[str, Any]]:
        return dl.stats(self.store.engine, by=by, since=since)


def _login() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)
