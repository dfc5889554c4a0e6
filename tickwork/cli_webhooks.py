"""`tickwork webhooks ls|resend`: the webhook cards given up (or, `ls --pending`, those still
to be sent), and sending them again once their receiver answers (docs/WEBHOOKS.md; the
runbook's "Webhook cards are not delivered")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from tickwork.fsm.errors import InvalidInput

from . import options, render, views
from .context import Context

if TYPE_CHECKING:
    from tickwork.store.deliveries import Cards, GivenUp, Pending
    from tickwork.worker.config.settings import WebhookSettings

C = TypeVar("C")

#: the most cards `webhooks ls` lists (the oldest first)
SHOWN = 1000
#: how long past its next attempt a card may wait before `ls --pending` says that no worker
#: seems to send cards (a dispatcher's pass comes every few seconds while webhooks are on)
OVERDUE_S = 60.0

Sessions = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="SESSION",
        help="Only the cards of these sessions (ids, or the start of one).",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        no_args_is_help=True,
        help="Webhook cards given up (their receiver away, refusing or moved): list them, "
        "send them again.",
    )
    group.command("ls")(list_given_up)
    group.command()(resend)
    app.add_typer(group, name="webhooks")


def list_given_up(
    sessions: Sessions = None,
    pending: Annotated[
        bool,
        typer.Option(
            "--pending",
            help="The cards still to be sent instead: retried after a failure, or put back "
            "by `resend`; soonest first, with when.",
        ),
    ] = False,
    json_output: options.Json = False,
) -> None:
    """List the webhook cards no worker tries any more, oldest first, with why: their
    attempts spent (TICKWORK_WEBHOOK_ATTEMPTS), refused by the receiver (a 4xx), or
    redirected by it (a 301 or 308: no redirect is followed; set TICKWORK_WEBHOOK_URL to
    where it points). Cards whose session moved on before they went out are not listed:
    they are not to be sent. With --pending, the cards the workers are still to send."""
    ids = _checked(sessions)
    if pending:
        return _list_pending(ids, json_output=json_output)
    ids, cards, more = _read(ids, lambda read, named: read.given_up(**named))
    if more:
        render.note(
            f"more than {SHOWN:,} cards were given up: the oldest {SHOWN:,} are listed; name "
            "sessions to see theirs (`tickwork webhooks resend --all` sends every one)"
        )
    render.listing(
        [_view(c) for c in cards],
        _table,
        json_output=json_output,
        none=f"no webhook card{_of(ids)} was given up",
    )


def _read(
    ids: list[str] | None, read: Callable[[Cards, dict[str, Any]], list[C]]
) -> tuple[list[str] | None, list[C], bool]:
    """The sessions `ids` name (whole ids), the first `SHOWN` cards `read` gives of them
    (`session_ids`, `limit`), and whether there were more."""
    with Context() as ctx:
        ids = _named(ctx, ids)
        cards = read(ctx.store.cards, {"session_ids": ids, "limit": SHOWN + 1})
    return ids, cards[:SHOWN], len(cards) > SHOWN


def _list_pending(ids: list[str] | None, *, json_output: bool) -> None:
    """`webhooks ls --pending`: the cards due soonest first, and, for cards long past their
    next attempt, the two reasons they may be: no worker sends cards (what to check), or a
    slow receiver holds up the dispatchers, which post one card at a time."""
    ids, cards, more = _read(ids, lambda read, named: read.pending(**named))
    if more:
        render.note(
            f"more than {SHOWN:,} cards are to be sent: the {SHOWN:,} due soonest are listed"
        )
    render.listing(
        [_pending_view(c) for c in cards],
        _pending_table,
        json_output=json_output,
        none=f"no webhook card{_of(ids)} is waiting to be sent",
    )
    late = datetime.now(UTC) - timedelta(seconds=OVERDUE_S)
    overdue = [c for c in cards if c.next_attempt_at and c.next_attempt_at < late]
    if overdue:
        since = render.when(views.date(overdue[0].next_attempt_at))
        render.note(
            f"{len(overdue):,} card{'s' if len(overdue) != 1 else ''} due since {since} or "
            "later not sent yet. If they stay so, no worker sends cards: check that the "
            "workers run with TICKWORK_WEBHOOK_URL set and the card's kind in "
            "TICKWORK_WEBHOOK_EVENTS (`tickwork config` there shows the settings in force). "
            "If they go out slowly, the receiver is slow: each card waits for the one before "
            "it, up to TICKWORK_WEBHOOK_TIMEOUT_S each"
        )


def resend(
    sessions: Sessions = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every card given up, of every session and tenant.")
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Send the webhook cards given up again, once their receiver answers: the workers'
    dispatchers post them at their next pass, each with its attempts anew. An approval card
    whose session no longer waits is dropped then, not sent; a receiver drops a copy it had
    by its `Idempotency-Key`. Name the sessions, or give --all. Exits 1 if none was found."""
    ids = _checked(sessions)
    if ids is None and not every:
        raise InvalidInput(
            "name the sessions whose cards to send again, or give --all for every card "
            "given up (`tickwork webhooks ls` lists them)"
        )
    if ids is not None and every:
        raise InvalidInput("give session ids or --all, not both")
    hooks = _hooks()
    with Context() as ctx:
        ids = _named(ctx, ids)
        cards = ctx.store.cards.send_again(now=datetime.now(UTC), session_ids=ids)
    if json_output:
        render.listing([_view(c) for c in cards], _table, json_output=True, none="")
    else:
        for card in cards:
            render.show(f"{card.key} ({_card(card.kind)}): {_next(card.kind, hooks)}")
    if not cards:
        render.note(f"no webhook card{_of(ids)} was given up: nothing to send again")
        raise typer.Exit(1)
    for here, unless, how in dict.fromkeys(o for c in cards if (o := _off(c.kind, hooks))):
        render.note(
            f"{here}, where this command runs: the workers send the cards put back at their "
            f"next pass {unless}; if not, {how} on the workers (`tickwork config` there shows "
            "the settings in force)"
        )


def _checked(sessions: list[str] | None) -> list[str] | None:
    """The session ids named, each checked as ids are; None if none was named."""
    if not sessions:
        return None
    return [options.session_id(s) for s in dict.fromkeys(sessions)]


def _named(ctx: Context, ids: list[str] | None) -> list[str] | None:
    """The sessions `ids` name, each its whole id (the start of one names it, as elsewhere);
    SessionNotFound for one that names none, so a mistyped id is not `none given up`."""
    if ids is None:
        return None
    return list(dict.fromkeys(ctx.reads.session_id(i) for i in ids))


def _of(ids: list[str] | None) -> str:
    return f" of {', '.join(ids)}" if ids else ""


def _hooks() -> WebhookSettings:
    """The webhook settings here, as the workers read them from the same variables."""
    from tickwork.worker.config.settings import WebhookSettings, read_settings

    return read_settings(WebhookSettings)


def _off(kind: str, hooks: WebhookSettings) -> tuple[str, str, str] | None:
    """What the settings here say against sending a card of `kind`, what the workers' own
    settings need for them to send it anyway, and what to set on them; None if these
    settings send it. The workers, not this command, send cards: theirs may differ."""
    if not hooks.webhook_url:
        return (
            "TICKWORK_WEBHOOK_URL is not set here",
            "if they have it set",
            "set TICKWORK_WEBHOOK_URL",
        )
    if hooks.sends_approvals if kind == "approval_requested" else hooks.sends_finished:
        return None
    name = "approval_requested" if kind == "approval_requested" else "finished"
    return (
        f"TICKWORK_WEBHOOK_EVENTS here ({hooks.webhook_events}) does not name {name}",
        f"if theirs names {name}",
        f"add {name} to TICKWORK_WEBHOOK_EVENTS",
    )


def _next(kind: str, hooks: WebhookSettings) -> str:
    """What a dispatcher does with a card put back, at its next pass."""
    off = _off(kind, hooks)
    if off is not None:
        return f"put back; {off[0]}: the workers send it at their next pass {off[1]}"
    if kind == "approval_requested":
        return "sent again at the next pass, if its session still waits (else dropped)"
    return "sent again at the next pass, where the workers send finished cards"


def _card(kind: str) -> str:
    return "approval card" if kind == "approval_requested" else f"finished card, {kind}"


def _view(card: GivenUp) -> dict[str, Any]:
    return {
        "card": card.key,
        "session_id": card.session_id,
        "version": card.version,
        "kind": card.kind,
        "tenant": card.tenant,
        "attempts": card.attempts,
        "last_error": card.last_error,
        "at": views.date(card.at),
    }


def _pending_view(card: Pending) -> dict[str, Any]:
    return {**_view(card), "next_attempt_at": views.date(card.next_attempt_at)}


def _pending_table(rows: list[dict[str, Any]]) -> Any:
    return _cards_table(
        "webhook cards to be sent, soonest first",
        rows,
        {
            "NEXT ATTEMPT": lambda row: render.when(row["next_attempt_at"]),
            "LAST ERROR": lambda row: row["last_error"],
        },
    )


def _table(rows: list[dict[str, Any]]) -> Any:
    why = {"WHY": lambda row: row["last_error"]}
    return _cards_table("webhook cards given up, oldest first", rows, why)


def _cards_table(
    title: str,
    rows: list[dict[str, Any]],
    more: dict[str, Callable[[dict[str, Any]], str]],
) -> Any:
    """The cards' table: card, kind, tenant and attempts, then the columns `more`, each
    shown by its function of the row, the last one wrapping."""
    table = render.listing_table(title)
    last = list(more)[-1]
    for name in ("CARD", "KIND", "TENANT", "ATTEMPTS", *more):
        table.add_column(name, no_wrap=name != last)
    for row in rows:
        shown = [how(row) for how in more.values()]
        table.add_row(row["card"], row["kind"], row["tenant"], str(row["attempts"]), *shown)
    return table
