"""What the demos share (`tickwork demo`, `--graph`, `--agents`; `tickwork eval --demo`):
the shipped examples, a worker started and stopped for them, the events shown as they
happen, and the approvals asked at the terminal."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from rich.panel import Panel
from rich.prompt import Confirm, Prompt
from rich.text import Text

from tickwork.fsm.errors import ConfigurationError, InvalidInput, TickworkError
from tickwork.fsm.kinds import SessionKind, kind_of
from tickwork.fsm.values import Session, ToolCall
from tickwork.fsm.wording import usd
from tickwork.worker.files.filetree import SKIP_DIRS

from . import render
from .context import Context
from .options import json_object

WORKER_START_S = 60.0

_HERE = Path(__file__).resolve().parent
#: the examples: package data in an installed wheel (`tickwork/examples`), `examples/` in a
#: checkout
EXAMPLES = next(
    (p for p in (_HERE / "examples", _HERE.parent / "examples") if p.is_dir()), _HERE / "examples"
)
#: the demo's project (copied before use, never changed in place) and its scripted model
DEMO_EXAMPLE = EXAMPLES / "buggy_calc"
DEMO_SCRIPT = EXAMPLES / "repair_demo.json"
#: `python3`, as the sandbox's PATH finds it (the system's; a fresh Debian or macOS has no
#: `python`), not the worker's own interpreter: the worker's venv is not in the sandbox
DEMO_TEST_COMMAND = "python3 -m unittest -q"
DEMO_GOAL = "The test suite of this small calculator fails; find the bug and fix it."


def prepare_demo_workspace(state_dir: Path) -> Path:
    """A fresh copy of the demo project under `state_dir/demo/`; the shipped one never changes."""
    if not DEMO_EXAMPLE.is_dir() or not DEMO_SCRIPT.is_file():
        raise ConfigurationError(
            f"the demo needs {DEMO_EXAMPLE} and {DEMO_SCRIPT}, which are not there; "
            "reinstall tickwork (the wheel ships them) or run from a checkout"
        )
    dest = Path(state_dir).expanduser().resolve() / "demo" / f"buggy_calc-{uuid.uuid4().hex[:8]}"
    shutil.copytree(
        DEMO_EXAMPLE, dest, ignore=shutil.ignore_patterns(*SKIP_DIRS, "*.pyc"), symlinks=True
    )
    return dest


def demo_input(workspace: Path, *, python: str = "python3") -> dict[str, str]:
    """The repair input of the demo on a workspace from `prepare_demo_workspace`; its tests
    run with `python` (default: the sandbox's python3; it needs only the standard library)."""
    command = DEMO_TEST_COMMAND.replace("python3", shlex.quote(python), 1)
    return {"workspace": str(workspace), "test_command": command, "goal": DEMO_GOAL}


def sandbox_banner(ctx: Context, session_id: str) -> None:
    """Say plainly when the sandbox cannot run here: the demo's own session then runs its
    commands unconfined; any other session's (a real model's) are refused."""
    from tickwork.worker.sandbox.runner import BWRAP_INSTALL, DEMO_UNCONFINED, check, sandbox_of

    sandbox = sandbox_of(ctx.settings)
    why = None if sandbox.mode == "none" else check(sandbox)
    if why is None:
        return
    if ctx.store.get(session_id).config.get(DEMO_UNCONFINED) is True:
        lines = (
            f"NO SANDBOX: {why}.",
            "The demo runs its own shipped example (a copy of examples/buggy_calc, driven by "
            "a scripted model whose replies were written in advance) UNCONFINED on this "
            "machine, as your user.",
            f"Every other session's commands are refused until the sandbox runs: {BWRAP_INSTALL}.",
        )
    else:
        lines = (
            f"NO SANDBOX: {why}.",
            "This session's commands will be refused (only the demo's own scripted example "
            f"runs without the sandbox) until you install bubblewrap: {BWRAP_INSTALL}.",
        )
    render.show(Panel(Text("\n".join(lines)), style="bold yellow", title="sandbox"))


def resumable(ctx: Context, marker: Path, yes: bool) -> str | None:
    if not marker.exists():
        return None
    session_id = marker.read_text().strip()
    try:
        head = ctx.store.get(session_id)
    except TickworkError:
        return None
    if head.status.terminal:
        return None
    question = f"Resume demo session {session_id} ({head.status.value}, step {head.step})?"
    if yes or Confirm.ask(question, default=True):
        return session_id
    ctx.client.cancel(session_id, by="demo")
    return None


def start_worker(
    log: Path,
    *,
    pythonpath: Path | None = None,
    concurrency: int = 2,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`tickwork worker` (threads pool) as a process of its own group, its output in `log`;
    for commands that run sessions on the embedded default (the demo, `tickwork eval`)."""
    # -P: the working directory is not put on sys.path, so nothing there stands in for tickwork
    command = [
        sys.executable,
        "-P",
        "-m",
        "tickwork",
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "WARNING",
    ]
    environ = {**os.environ, **(env or {})}
    if pythonpath is not None:
        environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(pythonpath), environ.get("PYTHONPATH")) if p
        )
    with open(log, "ab") as out:
        worker = subprocess.Popen(
            command,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _endings.worker_started()
    return worker


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """Stop a worker from `start_worker`: SIGTERM to its group, SIGKILL after 30 s (or at
    once if this command is interrupted meanwhile)."""
    try:
        if worker.poll() is not None:
            return
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(30)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
    finally:
        _endings.worker_stopped()


class _Endings:
    """While workers of `start_worker` run, SIGTERM and SIGHUP (the terminal closed) end
    this command as Ctrl-C does, so that it stops them (each in a process group of its own,
    which neither signal reaches) instead of leaving them running. The handlers they
    replace are put back when the last of them stops."""

    def __init__(self) -> None:
        self.running = 0
        self.replaced: dict[signal.Signals, Any] = {}

    def worker_started(self) -> None:
        self.running += 1
        if self.running == 1 and threading.current_thread() is threading.main_thread():
            # (only the main thread may set handlers: not a command run in a test's thread)
            self.replaced = {
                ending: signal.signal(ending, _interrupt)
                for ending in (signal.SIGTERM, signal.SIGHUP)
            }

    def worker_stopped(self) -> None:
        self.running = max(0, self.running - 1)
        if self.running == 0:
            for ending, handler in self.replaced.items():
                with contextlib.suppress(ValueError):  # not the main thread: cannot
                    signal.signal(ending, handler)
            self.replaced = {}


_endings = _Endings()


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"ended by {signal.Signals(signum).name}")


def show_event(whole: Session, kind: str, data: dict[str, Any]) -> None:
    if kind == "step_recorded":
        step = next((s for s in whole.steps if s.step == data.get("step")), None)
        if step is None:
            return
        render.show(Text(f"\nstep {step.step}", style="bold cyan"))
        if step.thought:
            render.show(Text(render.clip(step.thought, 400), style="italic"))
        for call in step.calls:
            render.show(Text(f"  → {call.name}({render.clip(call.raw_arguments, 160)})"))
        if kind_of(whole.head) is SessionKind.AGENT:  # a node is recorded before it runs
            render.show(Text(f"  {step.usage.total:,} tokens · {usd(step.cost_usd)}", style="dim"))
    elif kind == "tool_finished":
        seen = whole.observation(str(data.get("call_id")))
        if seen is not None:
            style = "red" if seen.is_error else "green"
            text = render.clip(seen.content.strip(), 300)
            render.show(Text(f"  ← {data.get('name')}: {text}", style=style))
    elif kind in ("loop_intervention", "failed", "cancelled", "approval_decided", "model_retry"):
        render.show(render.event_line({"at": None, "kind": kind, "data": data}))


#: the feedback a reject at the demo's prompt gives the model when Enter keeps the default
REJECTED = "not this way"


def decide(ctx: Context, whole: Session, call: ToolCall, *, yes: bool) -> None:
    render.show(Text(f"\n{call.call_id} {call.name} needs your decision", style="bold yellow"))
    _preview(ctx, whole, call)
    if yes:
        ctx.client.approve(
            whole.head.id, call.call_id, approver="demo --yes", fingerprint=call.fingerprint
        )
        render.show(Text("  approved (--yes)", style="green"))
        return
    choice = Prompt.ask(r"  \[a]pprove, \[e]dit or \[r]eject", choices=["a", "e", "r"], default="a")
    approver = os.environ.get("USER") or "demo"
    if choice == "a":
        ctx.client.approve(
            whole.head.id, call.call_id, approver=approver, fingerprint=call.fingerprint
        )
    elif choice == "r":
        # the default shown as what Enter sends, not in parentheses that read as an aside
        feedback = Prompt.ask(
            f'  feedback for the model \\[default: "{REJECTED}"]',
            default=REJECTED,
            show_default=False,
        )
        ctx.client.reject(
            whole.head.id, call.call_id, feedback, approver=approver, fingerprint=call.fingerprint
        )
    else:
        while True:
            text = Prompt.ask("  new arguments (JSON)", default=call.raw_arguments)
            try:
                arguments = json_object(text, option="arguments")
                if arguments == call.arguments:  # Enter kept them: run it as proposed
                    ctx.client.approve(
                        whole.head.id, call.call_id, approver=approver, fingerprint=call.fingerprint
                    )
                    render.show(Text("  arguments unchanged: approved", style="green"))
                    break
                ctx.client.edit(
                    whole.head.id,
                    call.call_id,
                    arguments,
                    approver=approver,
                    fingerprint=call.fingerprint,
                )
                break
            except InvalidInput as exc:
                render.show(Text(f"  {exc}", style="red"))


def _preview(ctx: Context, whole: Session, call: ToolCall) -> None:
    """What the call would do, as the API's approval card shows it (a diff for a file
    write, the patch, the named child's patch), else the call itself."""
    from .api.previews import preview  # the page's diff, shown alike; loads the API only here

    read, decided = ctx.reads.file_reader(whole.head), whole.decision(call.call_id)
    shown = preview(call, read, lambda: ctx.reads.children(whole.head), decided)
    if shown is None:
        render.show(Text(f"  {call.name} {call.raw_arguments}"))
    else:
        render.show(render.diff(f"# {shown['note']}\n{shown['diff'] or '(no change)'}"))
