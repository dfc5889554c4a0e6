"""`tickwork demo --agents`: a best-of-3 repair of the example project, offline.

A planner (a `repair` session in the `planner` role) runs the tests, spawns three explorers
on its files, each with a scripted model of its own strategy (`examples/agents_demo/`): two
leave failing tests, one repairs the bug. The planner adopts the passing patch
(`adopt_patch`), runs the tests and finishes `repaired`; its cost is the tree's. Every
approval of the tree (the explorers' `write_file`, the planner's `adopt_patch`) is asked
here, or granted with `--yes`.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from tickwork.fsm.errors import ConfigurationError, InvalidInput, TickworkError
from tickwork.fsm.values import Head, Status
from tickwork.fsm.wording import counted

from . import demos, render
from .context import Context, state_folder

#: the scripts of the planner and the explorers (package data in a wheel)
AGENTS_SCRIPTS = demos.EXAMPLES / "agents_demo"
PLANNER = "planner.json"
#: what the planner's script names the folder of the explorers' scripts by
SCRIPTS_MARK = "{SCRIPTS}"
#: the demo prices its scripted models (USD per million prompt and completion tokens) so
#: that the tree's cost shows; a TICKWORK_PRICES of your own wins
DEMO_PRICES = {"scripted": [3.0, 15.0]}


def write_scripts(folder: Path) -> Path:
    """Copies of the shipped scripts in `folder`, the planner's naming the explorers' there;
    the planner's script."""
    if not (AGENTS_SCRIPTS / PLANNER).is_file():
        raise ConfigurationError(
            f"the agents demo needs its scripts in {AGENTS_SCRIPTS}, which are not there; "
            "reinstall tickwork (the wheel ships them) or run from a checkout"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for script in sorted(AGENTS_SCRIPTS.glob("*.json")):
        text = script.read_text(encoding="utf-8")
        # the path goes into JSON text: escaped as JSON escapes it
        text = text.replace(SCRIPTS_MARK, json.dumps(str(folder.resolve()))[1:-1])
        (folder / script.name).write_text(text, encoding="utf-8")
    return folder / PLANNER


def run(*, yes: bool, new: bool, timeout: float) -> None:
    """The agents demo on the embedded default (`tickwork demo --agents`)."""
    from tickwork.worker.sandbox.runner import DEMO_UNCONFINED

    with Context(creates=True) as ctx:
        settings = ctx.settings
        folder = state_folder(settings, "demo")
        marker = folder / "agents-session"
        if not yes and not sys.stdin.isatty():
            raise InvalidInput(
                "the demo asks at each approval and there is no terminal to ask in; pass "
                "--yes to approve everything"
            )
        root_id = None if new else demos.resumable(ctx, marker, yes)
        if root_id is None:
            workspace = demos.prepare_demo_workspace(settings.state_dir)
            planner = write_scripts(folder / f"agents-{uuid.uuid4().hex[:8]}")
            data = {**demos.demo_input(workspace), "role": "planner"}
            head = ctx.client.submit(
                "repair", data, model=f"scripted:{planner}", own_config={DEMO_UNCONFINED: True}
            )
            marker.write_text(head.id)
            root_id = head.id
            render.show(
                Text.assemble(
                    ("tickwork demo --agents", "bold"),
                    f": a planner ({head.id}) repairs a copy of examples/buggy_calc in "
                    f"{workspace} with three explorers working in parallel",
                ),
                Text(
                    "Their models are scripted (replies written in advance: no network, no "
                    "key), each explorer with a strategy of its own.",
                    style="dim",
                ),
            )
        demos.sandbox_banner(ctx, root_id)
        prices = os.environ.get("TICKWORK_PRICES") or json.dumps(DEMO_PRICES)
        worker = demos.start_worker(
            folder / "worker.log", concurrency=4, env={"TICKWORK_PRICES": prices}
        )
        try:
            follow_tree(ctx, root_id, yes=yes, deadline=time.monotonic() + timeout, worker=worker)
        except KeyboardInterrupt:
            render.show(
                Text(
                    f"\ninterrupted: the tree of {root_id} is saved as it was; run "
                    "`tickwork demo --agents` again to resume it",
                    style="yellow",
                )
            )
            raise typer.Exit(130) from None
        finally:
            demos.stop_worker(worker)
        finish(ctx, root_id)


def _label(head: Head, root_id: str) -> str:
    return "planner" if head.id == root_id else f"{head.role or 'child'} {head.id[-2:]}"


def follow_tree(ctx: Context, root_id: str, *, yes: bool, deadline: float, worker: Any) -> None:
    """Print the events of every session of the tree until its root finishes, deciding
    each call that waits for a person on the way."""
    seen: dict[str, int] = {}
    shown = ""  # whose events were printed last
    while True:
        tree = [ctx.store.get(root_id), *ctx.store.tree(root_id)]
        for head in tree:
            events = ctx.store.events_after(head.id, seen.get(head.id, 0))
            if not events:
                continue
            whole = ctx.store.load(head.id)
            label = _label(head, root_id)
            for event_id, event in events:
                seen[head.id] = event_id
                if label != shown:
                    render.show(Text(f"\n[{label}]", style="bold magenta"))
                    shown = label
                demos.show_event(whole, event.kind.value, event.data)
                if event.kind.value == "children_spawned":
                    names = ", ".join(
                        f"{c.get('role')} {str(c.get('id'))[-2:]}"
                        for c in event.data.get("children", [])
                    )
                    render.show(Text(f"[{label}] started {names}; waits for them", style="bold"))
                elif event.kind.value == "completed":
                    outcome = event.data.get("outcome") or "-"
                    render.show(
                        Text.assemble(
                            f"[{label}] completed, outcome ", render.outcome_text(str(outcome))
                        )
                    )
        root = tree[0]
        if root.status.terminal:
            return
        for head in tree:
            if head.status is Status.WAITING_APPROVAL:
                whole = ctx.store.load(head.id)
                for call_id in head.awaiting:
                    call = whole.call(call_id)
                    if call is not None:
                        shown = _label(head, root_id)
                        render.show(Text(f"\n[{shown}]", style="bold magenta"))
                        demos.decide(ctx, whole, call, yes=yes)
        if worker.poll() is not None:
            raise TickworkError(
                f"the demo's worker stopped (exit {worker.returncode}); see "
                f"{ctx.settings.state_dir.absolute() / 'demo' / 'worker.log'}"
            )
        if time.monotonic() > deadline:
            raise TickworkError(
                f"the tree of {root_id} did not finish in time; it is saved, run `tickwork "
                "demo --agents` again to resume"
            )
        time.sleep(0.1)


def finish(ctx: Context, root_id: str) -> None:
    """The tree's children with their outcomes and costs, the root's patch, outcome and cost."""
    root = ctx.store.get(root_id)
    children = ctx.store.tree(root_id)
    render.show(Text("\nthe tree:", style="bold"))
    for child in children:
        outcome = child.result.get("outcome") or "-"
        render.show(
            Text.assemble(
                f"  {child.role or 'child'} {child.id}: {child.status.value}, outcome ",
                render.outcome_text(str(outcome)),
                f", {counted(child.step, 'step')}, ${child.cost_usd:.6f}",
            )
        )
    own = sum(s.cost_usd for s in ctx.store.load(root_id).steps)
    spent = sum(c.cost_usd for c in children if c.parent_id == root_id)
    style = "bold green" if root.status is Status.COMPLETED else "bold red"
    render.show(Text(f"\nplanner {root_id}: {root.status.value}", style=style))
    if root.final_answer:
        render.show(Text(root.final_answer))
    patch = root.result.get("patch")
    if patch:
        render.show(Text("\nthe adopted patch:", style="bold"), render.diff(str(patch)))
    outcome = root.result.get("outcome")
    if outcome:
        render.show(Text.assemble("outcome: ", render.outcome_text(str(outcome))))
    render.show(
        Text(
            f"cost of the tree: ${root.cost_usd:.6f} (the planner's own steps ${own:.6f} + "
            f"its children's ${spent:.6f})"
        )
    )
    if root.error_code:
        render.show(
            Text(f"{root.error_code.value}: {render.reason_said(root.error_message)}", style="red")
        )
    hint = f"; print the patch with `tickwork patch {root_id}`" if patch else ""
    render.show(Text(f"\nSee the tree with `tickwork show {root_id}`{hint}.", style="dim"))
    if root.status is not Status.COMPLETED:
        raise typer.Exit(1)
