"""Decision commands: approve, edit, reject, provide-output, and cancel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from tickwork.fsm.errors import InvalidInput, TickworkError
from tickwork.fsm.values import Head

from . import cli_remote, options
from .cli_sessions import SessionId, print_head
from .context import Context

CallId = Annotated[str, typer.Argument(metavar="CALL_ID", help="The call id, e.g. s3c0.")]
Comment = Annotated[str, typer.Option(help="Why; recorded with the decision.")]
Fingerprint = Annotated[
    str | None,
    typer.Option(
        help="The call's whole fingerprint as `tickwork show` prints it; the decision is "
        "refused if the call differs."
    ),
]
VERBS = {
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
    "provide_output": "gave the output of",
}


def register(app: typer.Typer) -> None:
    app.command()(approve)
    app.command()(edit)
    app.command()(reject)
    app.command("provide-output")(provide_output)
    app.command()(cancel)


def approve(
    session_id: SessionId,
    call_id: CallId,
    approver: options.Approver = None,
    comment: Comment = "",
    fingerprint: Fingerprint = None,
    json_output: options.Json = False,
) -> None:
    """Approve a waiting call: it runs as proposed (an in-doubt call runs again)."""
    _decide(
        session_id,
        call_id,
        "approve",
        approver,
        json_output,
        comment=comment,
        fingerprint=fingerprint,
    )


def edit(
    session_id: SessionId,
    call_id: CallId,
    args: Annotated[
        str,
        typer.Option("--args", metavar="JSON", help="The new arguments: a JSON object, or @FILE."),
    ],
    approver: options.Approver = None,
    comment: Comment = "",
    fingerprint: Fingerprint = None,
    json_output: options.Json = False,
) -> None:
    """Edit a waiting call: it runs with new arguments."""
    arguments = options.json_object(args, option="--args")
    _decide(
        session_id,
        call_id,
        "edit",
        approver,
        json_output,
        comment=comment,
        fingerprint=fingerprint,
        arguments=arguments,
    )


def reject(
    session_id: SessionId,
    call_id: CallId,
    feedback: Annotated[
        str,
        typer.Option(
            help="What the model is told instead (without it: that the call did not run "
            "and is not to be made again)."
        ),
    ] = "",
    approver: options.Approver = None,
    comment: Comment = "",
    fingerprint: Fingerprint = None,
    json_output: options.Json = False,
) -> None:
    """Reject a waiting call: it does not run, and the model gets the feedback."""
    _decide(
        session_id,
        call_id,
        "reject",
        approver,
        json_output,
        comment=comment,
        fingerprint=fingerprint,
        feedback=feedback,
    )


def provide_output(
    session_id: SessionId,
    call_id: CallId,
    output: Annotated[
        str | None, typer.Option(help="The call's output, as if it had run.", show_default=False)
    ] = None,
    output_file: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Read the call's output from this UTF-8 file instead (for an output longer "
            "than a command line takes).",
        ),
    ] = None,
    approver: options.Approver = None,
    comment: Comment = "",
    fingerprint: Fingerprint = None,
    json_output: options.Json = False,
) -> None:
    """Give an in-doubt call's output by hand instead of running it again."""
    if output is not None and output_file is not None:
        raise InvalidInput("give the call's output once: --output TEXT or --output-file PATH")
    if output is None and output_file is None:
        raise InvalidInput("give the call's output with --output TEXT or --output-file PATH")
    if output_file is not None:
        output = options.text_file(output_file, option="--output-file")
    _decide(
        session_id,
        call_id,
        "provide_output",
        approver,
        json_output,
        comment=comment,
        fingerprint=fingerprint,
        output=output,
    )


def _decide(
    session_id: str, call_id: str, kind: str, approver: str | None, json_output: bool, **kw: Any
) -> None:
    kw["fingerprint"] = options.fingerprint(kw.get("fingerprint"))
    remote = cli_remote.client()
    if remote is not None:
        cli_remote.no_name(approver)
        with remote:
            session_id = cli_remote.acted_on(remote, session_id, "approver")
            name = remote.me().name
            head = remote.decide(session_id, call_id, kind, **kw)
    else:
        name = options.approver(approver)
        with Context() as ctx:
            session_id = ctx.reads.session_id(session_id)
            head = ctx.client.decide(session_id, call_id, kind, approver=name, **kw)
    line = f"{VERBS[kind]} {call_id} of {session_id} as {name}; the session is {head.status}"
    if head.awaiting:
        line += f"; still waiting on {', '.join(head.awaiting)}"
    print_head(head, json_output, line)


def cancel(
    session_id: SessionId, by: options.Approver = None, json_output: options.Json = False
) -> None:
    """Cancel a session: at once if it waits for a person, else at its next tick."""
    remote = cli_remote.client()
    if remote is not None:
        cli_remote.no_name(by)
        with remote:
            session_id = cli_remote.acted_on(remote, session_id, "approver or operator")
            already = _already_requested(lambda: remote.get(session_id))
            head = already or remote.cancel(session_id)
    else:
        # before the session is looked up, as --server refuses --as first: a wrong id must
        # not hide a bad --as, nor a cancel requested already skip its check
        name = options.approver(by, doing="cancelling")
        with Context() as ctx:
            session_id = ctx.reads.session_id(session_id)
            already = _already_requested(lambda: ctx.reads.get(session_id))
            head = already or ctx.client.cancel(session_id, by=name)
    if head.status.terminal:
        line = f"cancelled {session_id}"
    else:
        again = " already" if already is not None else ""
        line = f"cancel{again} requested for {session_id}; it stops at its next tick"
    print_head(head, json_output, line)


def _already_requested(read: Callable[[], Head]) -> Head | None:
    """The session's head if a cancel of it is requested already and waits for its next
    tick (asking again changes nothing; a suspended one's cancel ends it at once), else
    None; one that cannot be read is left to the cancel's own answer (a role, a 404)."""
    try:
        head = read()
    except TickworkError:
        return None
    return head if head.cancel_requested and head.status.runnable else None
