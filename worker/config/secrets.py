"""Masking secrets in what tickwork stores and logs.

A tool that runs `env` or reads `.env`, a model server whose error message quotes the API
key, an exception that prints a connection URL: each would otherwise put a secret into
the session's observations and events (kept for ever and shown to the model, the CLI and
the dead-letter export) or into the worker's log. `Masker` replaces, with `****`:

- every match of the configured `secret_patterns` (`TICKWORK_SECRET_PATTERNS`),
- the values of this process's secret environment variables (names containing key,
  secret, token or password, e.g. `OPENAI_API_KEY`, but not those ending in `_FILE`, which
  name a file), wherever they appear,
- passwords in URLs (`scheme://user:PASSWORD@host`) and the values of query parameters
  whose name says secret (`?access_token=VALUE`).

This is the one masker: `mask` (settings shown by `tickwork config`, database URLs in
messages) and the approval webhook's cards use it too.

Call sites (one line each):

- `worker/tick/advance.py`, `advance`: `change = mask_change(change, rt.masker)` (`Runtime.masker`:
  `masker_for(settings)` at the first tick of the process)
  just before `rt.store.save(change, ...)`, so observations, events and error messages are
  stored masked (and the model reads the masked text).
- `worker/tick/app.py`, `make_app`: `install_log_masking(masker_for(settings))`, so every log
  record of the worker (messages, arguments and tracebacks) is masked when it is made.
- `tickwork/writes.py`, `decide`: `decision = mask_decision(decision, masker_for(...))`
  for the comment, feedback and output a person types.
"""

from __future__ import annotations

import logging
import operator
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

from tickwork.fsm.machine import Change
from tickwork.fsm.values import Decision, Event, Observation

MASK = "****"
#: names of environment variables, settings and query parameters that hold a secret
SECRET_NAMES = re.compile(r"key|secret|token|password", re.IGNORECASE)
#: shorter environment values are not treated as secrets: masking "1" or "true" everywhere
#: would garble every text
MIN_SECRET_CHARS = 8
#: the user may be empty: Redis URLs are usually `redis://:PASSWORD@host`
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]+@")
#: `?api_key=VALUE` or `&token=VALUE`: the value ends where the parameter, the URL or a JSON
#: string does
_QUERY_SECRET = re.compile(
    r"([?&][^=&#\s\"']*(?:key|secret|token|password)[^=&#\s\"']*=)[^&#\s\"']+", re.IGNORECASE
)


class MaskSettings(Protocol):
    """What masking reads of `tickwork.worker.config.settings.Settings` (which imports this
    module)."""

    @property
    def secret_patterns(self) -> Sequence[str]: ...
    @property
    def database_url(self) -> str: ...
    @property
    def broker_url(self) -> str: ...


class Masker:
    """Replaces secrets in text and in JSON-like values."""

    def __init__(self, patterns: Iterable[str] = (), values: Iterable[str] = ()) -> None:
        self.patterns = tuple(re.compile(p) for p in patterns)
        literal = sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self.values = re.compile("|".join(re.escape(v) for v in literal)) if literal else None

    @classmethod
    def from_settings(
        cls, settings: MaskSettings, environ: Mapping[str, str] | None = None
    ) -> Masker:
        """The settings' patterns, and the secret values of `environ` and of the URLs."""
        return cls(settings.secret_patterns, secret_values(settings, environ))

    def text(self, text: str) -> str:
        if not text:
            return text
        if self.values is not None:
            text = self.values.sub(MASK, text)
        text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
        text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
        for pattern in self.patterns:
            text = pattern.sub(MASK, text)
        return text

    def value(self, value: Any) -> Any:
        """`value` with every string in it masked (dict keys too), lists and dicts rebuilt."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        return value


def mask(text: str, patterns: Iterable[str] = ()) -> str:
    """`text` with URL passwords, secret query parameters and what matches `patterns`
    masked; for text shown outside a tick (settings, database URLs in messages)."""
    return _masker(tuple(patterns), ()).text(text)


def secret_values(settings: MaskSettings, environ: Mapping[str, str] | None = None) -> list[str]:
    """Values to mask wherever they appear: secret environment variables, URL passwords."""
    environ = os.environ if environ is None else environ
    # a `*_FILE` variable names where a secret is kept (TICKWORK_API_TOKENS_FILE, Docker's
    # FOO_PASSWORD_FILE): its path is no secret, and masking it hid which file a log meant
    values = [
        v
        for name, v in environ.items()
        if SECRET_NAMES.search(name) and not name.upper().endswith("_FILE") and v
    ]
    for url in (settings.database_url, settings.broker_url):
        found = _URL_PASSWORD.search(url or "")
        if found:
            values.append(found.group(0)[len(found.group(1)) : -1])
    return values


def masker_for(settings: MaskSettings, environ: Mapping[str, str] | None = None) -> Masker:
    """The masker of `settings` in this environment; built once per combination."""
    values = tuple(sorted(set(secret_values(settings, environ))))
    return _masker(tuple(settings.secret_patterns), values)


@lru_cache(maxsize=16)
def _masker(patterns: tuple[str, ...], values: tuple[str, ...]) -> Masker:
    return Masker(patterns, values)


def mask_event(event: Event, masker: Masker) -> Event:
    """The event with its data masked; the same event when there is nothing to mask."""
    data = masker.value(event.data)
    return event if data == event.data else event.model_copy(update={"data": data})


def mask_observation(observation: Observation, masker: Masker) -> Observation:
    """The observation with its content masked; the same one when there is nothing to mask."""
    content = masker.text(observation.content)
    if content == observation.content:
        return observation
    return observation.model_copy(update={"content": content})


def mask_change(change: Change, masker: Masker) -> Change:
    """The change with its observations, events and the head's error message masked; what
    has nothing to mask is kept as it is (the same objects: a tick copies nothing for it).

    Tool calls and their arguments are left alone: masking them would change what runs
    and the fingerprints approvers decide on.
    """
    head = change.head
    error = masker.text(head.error_message)
    if error != head.error_message:
        head = head.model_copy(update={"error_message": error})
    observations = tuple(mask_observation(o, masker) for o in change.observations)
    events = tuple(mask_event(e, masker) for e in change.events)
    if (
        head is change.head
        and all(map(operator.is_, observations, change.observations))
        and all(map(operator.is_, events, change.events))
    ):
        return change
    return change.model_copy(update={"head": head, "observations": observations, "events": events})


def mask_decision(decision: Decision, masker: Masker) -> Decision:
    """A person's comment, feedback and hand-written output, masked. Edited arguments are
    left alone, as a model's are in `mask_change`: they are what runs."""
    return decision.model_copy(
        update={
            "comment": masker.text(decision.comment),
            "feedback": masker.text(decision.feedback),
            "output": masker.text(decision.output),
        }
    )


_lock = threading.Lock()
#: the record factory logging had before ours, and the masker ours uses
_state: dict[str, Any] = {"previous": None, "masker": None}


def _masking_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record: logging.LogRecord = _state["previous"](*args, **kwargs)
    masker: Masker | None = _state["masker"]
    if masker is None:
        return record
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: logging reports it when it is emitted
        return record
    masked = masker.text(message)
    if masked != message:
        record.msg, record.args = _masked_parts(record, masker, masked)
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = masker.text(logging.Formatter().formatException(record.exc_info))
    return record


def _masked_parts(record: logging.LogRecord, masker: Masker, masked: str) -> tuple[Any, Any]:
    """The record's format and arguments each masked, where together they give the masked
    message: a formatter that reads the arguments (uvicorn's access log unpacks them) still
    finds them. Else the masked message whole, without arguments."""
    args = record.args
    if isinstance(record.msg, str) and isinstance(args, tuple) and args:
        parts = tuple(masker.text(a) if isinstance(a, str) else a for a in args)
        form = masker.text(record.msg)
        try:
            if form % parts == masked:
                return form, parts
        except (TypeError, ValueError):
            pass
    return masked, None


def install_log_masking(masker: Masker) -> None:
    """Mask every log record of this process when it is made: its message (arguments
    merged in) and its traceback. Installing again only changes the masker.

    A record factory rather than a handler filter: it covers the handlers Celery adds
    later and the records of every logger.
    """
    with _lock:
        if _state["previous"] is None:
            _state["previous"] = logging.getLogRecordFactory()
            logging.setLogRecordFactory(_masking_factory)
        _state["masker"] = masker


def uninstall_log_masking() -> None:
    with _lock:
        if _state["previous"] is not None:
            logging.setLogRecordFactory(_state["previous"])
        _state["previous"] = _state["masker"] = None
