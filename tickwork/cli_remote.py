"""`tickwork --server URL ...`: the commands the HTTP API serves, sent to a remote server.

The root option `--server` (or TICKWORK_SERVER) names the server, TICKWORK_TOKEN the
token; the served commands then go through `tickwork.remote.Client` and print what they
print locally. Every other command refuses, saying so, rather than act on a local
database the user did not mean.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from tickwork.fsm import wording
from tickwork.fsm.errors import ConfigurationError, InvalidInput, TickworkError
from tickwork.fsm.values import PRICE_RATES, Status

from . import render, views
from .flags import FLAG_OF, INPUT_OPTIONS

if TYPE_CHECKING:
    from tickwork.remote import Client, EventPage

    from .exports import Format

#: the commands the API serves (by their path under `tickwork`)
SERVED = frozenset(
    {
        *("submit", "ls", "show", "watch", "fork", "patch", "cancel"),
        *("approve", "edit", "reject", "provide-output"),
        *("dlq ls", "dlq show", "dlq stats", "dlq export", "dlq fork", "dlq resolve"),
        "dlq dismiss",
    }
)
#: commands that never touch sessions, run whether a server is named or not
ANYWHERE = frozenset({"serve", "config", "runbook", "docs"})
#: the variable that sets how long a request to the server may take
TIMEOUT_VARIABLE = "TICKWORK_SERVER_TIMEOUT_S"
#: how often `watch` asks the server for new events
POLL_S = 0.2
#: how long `watch` keeps asking a server that stopped answering (a restart, a proxy's 502
#: while it comes back) before it gives up: the remote client's `watch` default
AWAY_S = 60.0
#: how often `watch` asks again meanwhile
AWAY_POLL_S = 1.0


#: the API's bodies the remote client checks before sending, by their model's name, and
#: what each is in a refusal of the whole of it
BODIES = {"Submit": "submission", "Decide": "decision", "Fork": "fork", "Closing": "reason"}
#: the command-line option of each field of those bodies whose name is not the option's,
#: besides the fields `tickwork.flags.FLAG_OF` names the flags of
OPTION_OF = {
    "arguments": "--args",
    "kind": "KIND",
}
#: what to give instead, by option, where the refusal itself does not say
HINTS = {
    "KIND": "give the name of a job kind the server runs (e.g. repair)",
    "--model": "give a model spec such as openai:MODEL or scripted:PATH",
    "--id": "give a shorter id, or leave --id out for a random one",
    "--price": "give PROMPT,COMPLETION[,CACHED[,CACHE_WRITE]] in USD per million tokens, "
    "e.g. --price 0.5,1.5",
}
#: the places of --price's numbers (`PRICE_RATES`) in the body's list, as a refusal says them
PLACES = ("first", "second", "third", "fourth", "fifth", "sixth")[: len(PRICE_RATES)]
#: a path in a refusal of the whole body (`api.limits.check_tree`): body.FIELD.KEY...
WHOLE = re.compile(
    r"^(?P<key>a key in )?body\.(?P<field>\w+)(?:\.(?P<sub>[^.\[\s]+)\S*)? (?P<rest>.*)$"
)
#: a refusal of one field of a job's input (`api.bodies`): input.KEY ...
INPUT_FIELD = re.compile(r"^input\.(?P<sub>[^.\[\s]+)\S* (?P<rest>.*)$")


def option_of(field: str, sub: str | None = None) -> str:
    """The command-line option that gave the body's `field` (and its input's key `sub`)."""
    if field == "input" and sub is not None:
        return INPUT_OPTIONS.get(sub, f"--input's {sub}")
    return OPTION_OF.get(field) or FLAG_OF.get(field) or "--" + field.replace("_", "-")


def refusal(model: str, error: Mapping[str, Any]) -> str | None:
    """A refusal by the API's body `model` of a value checked before a --server request
    (one of pydantic's errors), as a user of the command line reads it: the option that
    gave the value, what was wrong and what to give; None for another model."""
    if model not in BODIES:
        return None
    loc = tuple(error.get("loc") or ())
    ctx = error.get("ctx") or {}
    said = str(ctx["error"]) if error.get("type") == "value_error" and "error" in ctx else None
    if not loc:  # the whole body's check, naming where in it
        found = WHOLE.match(said or "")
        if found is None:
            return f"invalid {BODIES[model]}: {said or error.get('msg')}"
        option = option_of(found["field"], found["sub"])
        what = ("a key " if found["key"] else "it ") + found["rest"]
        nested = "nested" in what
        fix = "a flatter JSON object" if nested else "UTF-8 text without NUL bytes"
        return f"invalid {option}: {what}; give {fix}"
    if loc[0] == "budgets" and len(loc) > 1:  # each budget is an option of its own
        loc = (str(loc[1]).removesuffix("_s"), *loc[2:])
    option, part = option_of(str(loc[0])), ""
    if loc[0] == "price" and len(loc) > 1 and loc[1] in range(len(PRICE_RATES)):
        at = int(loc[1])
        part = f"the {PRICE_RATES[at].replace('_', '-')} price (the {PLACES[at]}) "
    elif len(loc) > 1:
        option = f"{option} {' '.join(str(p) for p in loc[1:])}"
    if said is not None:  # the body's own words, which say what is taken
        if loc == ("input",) and (found := INPUT_FIELD.match(said)):
            sub = option_of("input", found["sub"])
            return f"invalid {sub}: it {found['rest']}; give a shorter one"
        less = "; give a smaller input" if loc == ("input",) else ""
        return f"invalid {option}: {said}{less}"
    what = _what(error, part)
    hint = HINTS.get(option.split()[0], "give a shorter one" if "long" in what else "")
    return f"invalid {option}: {what}" + (f"; {hint}" if hint else "")


def _what(error: Mapping[str, Any], part: str) -> str:
    """What pydantic found wrong with the value, in words of the command line's."""
    kind, ctx, given = error.get("type"), error.get("ctx") or {}, error.get("input")
    subject = part or "it "
    if kind == "string_too_long" and isinstance(given, str):
        return (
            f"it is {len(given):,} characters long; at most {ctx['max_length']} characters "
            "are taken"
        )
    if kind == "string_too_short" and not given:
        return "it is empty"
    if kind == "greater_than_equal":
        bound = _number(ctx.get("ge"))
        return f"{subject}must be at least {bound}, not {_number(given)}"
    if kind == "less_than_equal":
        bound = _number(ctx.get("le"))
        return f"{subject}must be at most {bound}, not {_number(given)}"
    if kind == "finite_number":
        return f"{subject}must be a finite number, not {_number(given)}"
    return f"{part}{error.get('msg')}"


def _number(value: object) -> str:
    """A bound as a person writes it: 1,000,000, not 1000000.0."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, (int, float)) else str(value)


def server() -> str | None:
    """The server this command is sent to (`--server` or TICKWORK_SERVER), if any."""
    try:  # Typer 0.2x vendors its own Click, with its own context stack
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context  # type: ignore[no-redef]

    ctx = get_current_context(silent=True)
    found = ctx.find_root().obj if ctx is not None else None
    return found if isinstance(found, str) and found.strip() else None


def client() -> Client | None:
    """A client of the named server, or None to work locally."""
    url = server()
    if url is None:
        return None
    from tickwork.remote import Client

    return Client(url, timeout=request_timeout())


def acted_on(remote: Client, given: str, role: str) -> str:
    """The whole id of the session `given` names, for an action that needs `role`: a token
    of no role, refused the look-up (a read), is told what the action needs, not reading."""
    from tickwork.remote import RemoteError
    from tickwork.remote.plans import refused_for

    try:
        return remote.session_id(given)
    except RemoteError as exc:
        if exc.status != 403:
            raise
        raise refused_for(exc, remote.me(), role) from None


def request_timeout() -> float:
    """Seconds a request to the server may take: TICKWORK_SERVER_TIMEOUT_S, else the
    client's default (a submit whose repository the server clones may need more)."""
    from tickwork.remote.client import TIMEOUT_S

    given = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not given:
        return TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise ConfigurationError(
            f"{TIMEOUT_VARIABLE} must be a number of seconds above 0 (e.g. 120), not "
            f"{given!r}; unset, a request may take {TIMEOUT_S:g}s"
        )
    return seconds


def local_only(what: str, why: str = "") -> None:
    """Refuse `what` when a server is named: the API does not serve it."""
    if server() is not None:
        raise InvalidInput(
            f"{what} is not served by the HTTP API{why}; run it where the database is, "
            "without --server (and with TICKWORK_SERVER unset)"
        )


def no_name(given: str | None, option: str = "--as") -> None:
    """A name the server takes from the token, not from the command line."""
    if given is not None:
        raise InvalidInput(
            f"{option} does not go with --server: the server records the token's name "
            "(TICKWORK_TOKEN); use the token of the person who acts"
        )


def refuse_unserved(app: typer.Typer, prefix: str = "") -> None:
    """Wrap every command the API does not serve so that it refuses with --server."""
    for info in app.registered_commands:
        if info.callback is None:
            continue
        name = info.name or info.callback.__name__.replace("_", "-")
        path = f"{prefix}{name}"
        if path not in SERVED and path not in ANYWHERE:
            info.callback = _refusing(info.callback, f"`tickwork {path}`")
    for group in app.registered_groups:
        if group.typer_instance is not None and group.name:
            refuse_unserved(group.typer_instance, f"{prefix}{group.name} ")


def _refusing(command: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(command)
    def refusing(*args: Any, **kwargs: Any) -> Any:
        local_only(what)
        return command(*args, **kwargs)

    return refusing


def watch(remote: Client, session_id: str, timeout: float | None, json_output: bool) -> None:
    """`tickwork watch` against the server: its events until the session waits or ends."""
    seen: list[dict[str, Any]] = []
    last, started = 0, time.monotonic()
    page = remote.events(session_id, after=last)  # a wrong address or id is said at once
    while True:
        for item in page.events:
            last = item.id
            seen.append(item.data)
            if not json_output:
                render.show(render.event_line(item.data))
        if len(page.events) < 1000:  # else the next page at once
            if not page.status.moving:
                break
            if timeout is not None and time.monotonic() - started > timeout:
                if json_output:
                    head = views.head(remote.get(session_id))
                    views.emit({"head": head, "events": seen, "timed_out": True})
                raise TimeoutError(
                    f"session {session_id} is still {page.status.value} after {timeout:g}s; "
                    "is a worker running for that server?"
                )
            time.sleep(POLL_S)
        page = _next_page(remote, session_id, last)  # the status is read before the events
    view = remote.timeline(session_id)
    if json_output:
        views.emit({"head": view["head"], "events": seen, "timed_out": False})
        return
    outcome = view["head"]["outcome"]
    render.show(
        Text(
            f"session {session_id} is {view['head']['status']}"
            + (f": {outcome}" if outcome else "")
        ),
        *render.outcome(view["head"], view["steps"]),
    )
    if view["head"]["status"] == Status.WAITING_CHILDREN.value and view.get("tree"):
        render.show(*render.waiting_children(view["tree"], session_id))


def _next_page(remote: Client, session_id: str, after: int) -> EventPage:
    """The events after `after`, riding out a server that stops answering for a while (a
    restart, a proxy's 502 while it comes back), as the remote client's `watch` does: a
    note on standard error, then another try every AWAY_POLL_S until AWAY_S have passed."""
    away_since: float | None = None
    while True:
        try:
            page = remote.events(session_id, after=after)
        except TickworkError as exc:  # RemoteError, imported with the client
            if not _away(exc):
                raise
            if away_since is None:
                away_since = time.monotonic()
                render.note(
                    f"the server stopped answering; trying again for up to {AWAY_S:g}s ({exc})"
                )
            elif time.monotonic() - away_since > AWAY_S:
                raise
            time.sleep(AWAY_POLL_S)
            continue
        if away_since is not None:
            render.note("the server answers again")
        return page


def _away(exc: BaseException) -> bool:
    """Whether a refused request says the server is away for now, not that it refused."""
    from tickwork.remote import RemoteError, ServerUnreachable
    from tickwork.remote.errors import GATEWAY_STATUSES

    if isinstance(exc, ServerUnreachable):
        return True
    return isinstance(exc, RemoteError) and exc.status in GATEWAY_STATUSES


def previews(remote: Client, view: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """The server's previews of the calls waiting for a person: a file write's diff, the
    patch an adoption would take."""
    head = view["head"]
    if head["status"] != "waiting_approval":
        return {}
    card = remote.waiting(head["id"])
    return {c["call_id"]: c.get("preview") for c in card["calls"]}


def counted(form: Format, data: bytes) -> str:
    """How many dead letters an export the server sent holds, in words."""
    import csv
    import io

    if form.value == "jsonl":
        n: int | None = sum(1 for line in data.splitlines() if line.strip())
    elif form.value == "csv":
        n = max(len(list(csv.reader(io.StringIO(data.decode("utf-8"))))) - 1, 0)
    else:
        try:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]
        except ImportError:
            return f"{len(data)} bytes of dead letters"
        n = pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
    return wording.counted(n, "dead letter")
