"""`tickwork demo`: the example repair job end to end on the embedded default.

It copies `examples/buggy_calc` into the state folder, submits a `repair` session driven
by a scripted model (or the model you name), starts a worker and stops it at the end,
shows each step as it happens, and asks you at the approval. Ctrl-C leaves the session
where it is; running the demo again offers to resume it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from tickwork.fsm.errors import InvalidInput, TickworkError
from tickwork.fsm.values import Status

from . import render
from .context import Context, state_folder
from .demos import (
    DEMO_EXAMPLE,
    DEMO_GOAL,
    DEMO_SCRIPT,
    DEMO_TEST_COMMAND,
    EXAMPLES,
    WORKER_START_S,
    decide,
    demo_input,
    prepare_demo_workspace,
    resumable,
    sandbox_banner,
    show_event,
    start_worker,
    stop_worker,
)

__all__ = [
    "DEMO_EXAMPLE",
    "DEMO_GOAL",
    "DEMO_SCRIPT",
    "DEMO_TEST_COMMAND",
    "EXAMPLES",
    "WORKER_START_S",
    "demo",
    "demo_input",
    "prepare_demo_workspace",
    "register",
    "start_worker",
    "stop_worker",
]


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Approve every call without asking.")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model spec.", show_default="the scripted demo model"),
    ] = None,
    new: Annotated[
        bool, typer.Option("--new", help="Start a new demo even if one can be resumed.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="Give up after this many seconds.")
    ] = 600.0,
    graph: Annotated[
        bool,
        typer.Option(
            "--graph",
            help="Run the example graph instead: a refund's approval pipeline "
            "(examples/refund_graph.py).",
        ),
    ] = False,
    agents: Annotated[
        bool,
        typer.Option(
            "--agents",
            help="Run a best-of-3 repair instead: a planner, three explorers in parallel "
            "on its files (scripted), the passing patch adopted.",
        ),
    ] = False,
) -> None:
    """Repair the example project end to end on the embedded default (no server needed)."""
    if graph and agents:
        raise InvalidInput("choose --graph or --agents, not both")
    if agents:
        if model is not None:
            raise InvalidInput(
                "--agents runs its own scripted models (a planner and three explorers); "
                "leave out --model"
            )
        from .demo_agents import run

        run(yes=yes, new=new, timeout=timeout)
        return
    if model is not None:
        _callable_here(model)
    if graph:
        _graph_demo(yes=yes, model=model, new=new, timeout=timeout)
        return
    with Context(creates=True) as ctx:
        settings = ctx.settings
        folder = state_folder(settings, "demo")
        marker = folder / "session"
        if not yes and not sys.stdin.isatty():
            raise InvalidInput(
                "the demo asks at the approval and there is no terminal to ask "
                "in; pass --yes to approve everything"
            )
        session_id = None if new else resumable(ctx, marker, yes)
        if session_id is None:
            workspace = prepare_demo_workspace(settings.state_dir)
            spec = model or f"scripted:{DEMO_SCRIPT}"
            # our own example and scripted model may run unconfined where bubblewrap cannot
            from tickwork.worker.sandbox.runner import DEMO_UNCONFINED

            own = {DEMO_UNCONFINED: True} if model is None else {}
            head = ctx.client.submit("repair", demo_input(workspace), model=spec, own_config=own)
            marker.write_text(head.id)
            session_id = head.id
            render.show(
                Text.assemble(
                    ("tickwork demo", "bold"),
                    f": session {head.id} repairs a copy of examples/buggy_calc in {workspace}",
                )
            )
            if spec.startswith("scripted:"):
                render.show(
                    Text(
                        "The model is a scripted one: its replies were written in advance (no "
                        "network, no key). Use a real one with --model openai:MODEL.",
                        style="dim",
                    )
                )
        sandbox_banner(ctx, session_id)
        worker = start_worker(folder / "worker.log")
        try:
            _follow(ctx, session_id, yes=yes, deadline=time.monotonic() + timeout, worker=worker)
        except KeyboardInterrupt:
            render.show(
                Text(
                    f"\ninterrupted: session {session_id} is saved as it was; run "
                    "`tickwork demo` again to resume it",
                    style="yellow",
                )
            )
            raise typer.Exit(130) from None
        finally:
            stop_worker(worker)
        _finish(ctx, session_id, settings.state_dir)


#: the note the example graph's scripted model writes
GRAPH_NOTE = "Dear customer, we are sorry your order arrived broken; your refund is on its way."


def _callable_here(spec: str) -> None:
    """ConfigurationError if the demo's worker, which runs here, could not call `spec` (its
    API key unset, say): said before a session is made, not as the session's failure."""
    from tickwork.worker.models import make_model

    make_model(spec)


def _graph_demo(*, yes: bool, model: str | None, new: bool, timeout: float) -> None:
    """The example refund graph: draft (a scripted model writes the note), check, a person
    approves before the money moves, the payment (once, by its idempotency key), report."""
    import json

    # the example is a module of examples/ (tickwork/examples in a wheel); workers import it too
    sys.path.insert(0, str(EXAMPLES))
    kind = "refund_graph:KIND"
    with Context(creates=True) as ctx:
        folder = state_folder(ctx.settings, "demo")
        marker = folder / "graph-session"
        if not yes and not sys.stdin.isatty():
            raise InvalidInput(
                "the demo asks at the approval and there is no terminal to ask "
                "in; pass --yes to approve everything"
            )
        session_id = None if new else resumable(ctx, marker, yes)
        if session_id is None:
            script = folder / "refund_note.json"
            script.write_text(json.dumps([{"content": GRAPH_NOTE}]))
            state = {
                "order_id": "A-1042",
                "amount": 42.5,
                "reason": "the order arrived broken",
                "ledger": str(folder / "ledger.jsonl"),
            }
            head = ctx.client.submit(kind, state, model=model or f"scripted:{script}")
            marker.write_text(head.id)
            session_id = head.id
            render.show(
                Text.assemble(
                    ("tickwork demo --graph", "bold"),
                    f": session {head.id} runs the refund graph (draft, check, refund after a "
                    "person approves, report); payments go to "
                    f"{state['ledger']}",
                )
            )
        worker = start_worker(folder / "worker.log", pythonpath=EXAMPLES)
        try:
            _follow(ctx, session_id, yes=yes, deadline=time.monotonic() + timeout, worker=worker)
        except KeyboardInterrupt:
            render.show(
                Text(
                    f"\ninterrupted: session {session_id} is saved as it was; run "
                    "`tickwork demo --graph` again to resume it",
                    style="yellow",
                )
            )
            raise typer.Exit(130) from None
        finally:
            stop_worker(worker)
        head = ctx.store.get(session_id)
        style = "bold green" if head.status is Status.COMPLETED else "bold red"
        render.show(Text(f"\nsession {session_id}: {head.status.value}", style=style))
        if head.error_code:
            render.show(
                Text(
                    f"{head.error_code.value}: {render.reason_said(head.error_message)}",
                    style="red",
                )
            )
        report = (head.result.get("state") or {}).get("report")
        if report:
            render.show(Text(str(report)))
        render.show(
            Text(
                f"See every node's run with `tickwork show {session_id}`; fork it from a step "
                "with a state patch (the fork, and the workers that run it, import the example "
                f"from its folder): `PYTHONPATH={shlex.quote(str(EXAMPLES))} tickwork fork "
                f"""{session_id} --from-step 2 --state '{{"amount": 20}}'`.""",
                style="dim",
            )
        )
        if head.status is not Status.COMPLETED:
            raise typer.Exit(1)


def _follow(
    ctx: Context, session_id: str, *, yes: bool, deadline: float, worker: subprocess.Popen[bytes]
) -> None:
    """Print the session's events until it finishes, deciding its calls on the way."""
    last = 0
    while True:
        events = ctx.store.events_after(session_id, last)
        if events:
            whole = ctx.store.load(session_id)
            for event_id, event in events:
                last = event_id
                show_event(whole, event.kind.value, event.data)
        head = ctx.store.get(session_id)
        if head.status.terminal:
            return
        if head.status is Status.WAITING_APPROVAL:
            whole = ctx.store.load(session_id)
            for call_id in head.awaiting:
                call = whole.call(call_id)
                if call is not None:
                    decide(ctx, whole, call, yes=yes)
            continue
        if worker.poll() is not None:
            raise TickworkError(
                f"the demo's worker stopped (exit {worker.returncode}); see "
                f"{ctx.settings.state_dir.absolute() / 'demo' / 'worker.log'}"
            )
        if time.monotonic() > deadline:
            raise TickworkError(
                f"session {session_id} did not finish in time; it is saved, "
                "run `tickwork demo` again to resume"
            )
        time.sleep(0.1)


#: what the demo's last line says of a repair that did not pass, by outcome
UNREPAIRED = {
    "tests_failing": "its tests still fail",
    "tests_not_run": "its tests could not run",
    "no_changes": "it changed nothing",
}


def _finish(ctx: Context, session_id: str, state_dir: Path) -> None:
    whole = ctx.store.load(session_id)
    head = whole.head
    outcome = head.result.get("outcome")
    # a repair that completed without passing tests is no success: its line says so
    good = head.status is Status.COMPLETED and outcome in (None, "repaired")
    said = (
        f", but {UNREPAIRED.get(str(outcome), outcome)} ({outcome})" if not good and outcome else ""
    )
    style = "bold green" if good else "bold red"
    render.show(Text(f"\nsession {session_id}: {head.status.value}{said}", style=style))
    if head.final_answer:
        render.show(Text(head.final_answer))
    result = dict(head.result)
    patch = result.get("patch")
    if patch:
        render.show(Text("\nthe patch:", style="bold"), render.diff(str(patch)))
    tests = result.get("tests") or {}
    if tests:
        verdict = "pass" if tests.get("passed") else "still fail"
        render.show(
            Text(
                f"the tests ({tests.get('command')}) {verdict}",
                style="green" if tests.get("passed") else "red",
            )
        )
    if result.get("outcome"):
        render.show(Text.assemble("outcome: ", render.outcome_text(str(result["outcome"]))))
    if head.error_code:
        render.show(
            Text(f"{head.error_code.value}: {render.reason_said(head.error_message)}", style="red")
        )
    copy = Path(str((head.config.get("source") or {}).get("path", "")))
    if patch and head.status is Status.COMPLETED and state_dir.resolve() / "demo" in copy.parents:
        # the session never touched the demo's copy: applying its result is the user's step
        from .patches import apply_patch

        apply_patch(copy, str(patch))
        render.show(
            Text(f"\napplied the patch to the demo's copy {copy}", style="green" if good else "")
        )
    hints = f"See it again with `tickwork show {session_id}`"
    if patch:
        hints += (
            f"; print the patch with `tickwork patch {session_id}` or apply it with "
            f"`tickwork patch {session_id} --apply DIR`"
        )
    if head.status is Status.FAILED:
        hints += (
            f"; its dead letter: `tickwork dlq show {session_id}`, and a new try from one of "
            f"its steps: `tickwork fork {session_id} --from-step K`"
        )
    render.show(
        Text(
            f"\nstate kept in {state_dir.absolute()} (SQLite + broker folder).\n{hints}.",
            style="dim",
        )
    )
    if head.status is not Status.COMPLETED:
        raise typer.Exit(1)
