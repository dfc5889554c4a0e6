"""The agent's `spawn_agents` call in its EXECUTE tick (docs/DESIGN.md section 16).

The first time the call runs, the children are made (each an ordinary session of the
parent's job kind, with its role, its input, its model and its share of the budgets the
parent has left) and returned in the parent's change with the join: the store inserts
them, their first ticks and the join's row, and moves the parent to `waiting_children`,
in the parent's save. When the join wakes the parent, the call runs again: the join is
found, and the children's outcomes become the call's observation (`fsm.trees.joined`).
Bad arguments, an unknown role or model, an input the kind refuses: an error observation
the model can act on.

The tick counts the tree before it spawns, and the store counts it again as it saves the
children (`Change.tree_limit`): when another spawn in the tree was saved meanwhile and
left no room, the save raises TreeFull and the tick saves the same error observation
instead (`tree_full`).

A spawn with join `each` delivers its children's results one observation at a time
(`fsm.deliveries`): the spawn call's takes the first end, each `wait_children` call's the
ends since; a call with nothing to take yet suspends the parent on the join again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tickwork.fsm import deliveries, machine, trees
from tickwork.fsm.context import Policy, check_window
from tickwork.fsm.errors import (
    ArtifactsUnavailable,
    InvalidInput,
    InvalidToolArguments,
    TickworkError,
    TreeFull,
)
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import Budgets, Head, ToolCall
from tickwork.worker.config.settings import RoleSettings
from tickwork.worker.jobs import session_config
from tickwork.worker.jobs.kinds import Parent, Spawning, Submission
from tickwork.worker.jobs.roles import role_for
from tickwork.worker.models import check_spec, pricing
from tickwork.worker.models.scripted import script_of
from tickwork.worker.tick.frame import Tick

__all__ = ["allowed_child_model", "child_head", "spawn_or_join", "tree_full", "wait_children"]


def spawn_or_join(tick: Tick, call: ToolCall, arguments: Mapping[str, Any]) -> Change:
    """The `spawn_agents` call's change: the spawn, or the observation of its join."""
    rt, head = tick.rt, tick.head
    now = rt.clock()
    join = rt.store.join(head.id, call.call_id)
    if join is not None and join.mode is JoinMode.EACH:
        return _take_or_wait(tick, call, join)
    if join is not None:
        if not join.complete:  # woken by hand, or by a repair that raced: wait again
            return Change(head=trees.waiting_again(head, now=now))
        children = rt.store.children(head.id, call.call_id)
        ends = trees.child_ends(children)
        return trees.joined(
            head,
            tick.claimed.calls,
            call,
            join,
            ends,
            now=now,
            max_chars=rt.settings.max_output_chars,
        )
    try:
        spawn = trees.parse_spawn(arguments)
        trees.check_room(rt.store.place(head.id), len(spawn.children))
        prefix = uuid.uuid4().hex[:29]
        shares = trees.shares(spawn.children)
        held = _held(tick)
        children = [
            child_head(tick, call, spec, share=share, child_id=f"{prefix}-{n:02d}", held=held)
            for n, (spec, share) in enumerate(zip(spawn.children, shares, strict=True))
        ]
    except (InvalidToolArguments, InvalidInput) as exc:
        return machine.tool_finished(
            head, tick.claimed.calls, call, output=str(exc), is_error=True, now=now
        )
    join = Join(parent_id=head.id, call_id=call.call_id, mode=spawn.join, expected=len(children))
    return trees.spawned(head, call, join, children, now=now, limit=trees.MAX_TREE_SESSIONS)


def tree_full(tick: Tick, change: Change, refused: TreeFull) -> Change:
    """What the tick saves instead of its spawn (`change`) when the store found the tree
    full (another spawn in it saved since the tick counted): the spawn call's error
    observation, which the model can act on, as when the tick counted it full itself."""
    assert change.join is not None, "TreeFull refuses a spawn: a change with its join"
    [call] = [c for c in tick.claimed.calls if c.call_id == change.join.call_id]
    return machine.tool_finished(
        tick.head, tick.claimed.calls, call, output=str(refused), is_error=True, now=tick.rt.clock()
    )


def _held(tick: Tick) -> trees.Held:
    """What the parent's children of its open `each` joins hold (`trees.held_back`)."""
    joins = [j for j in tick.rt.store.joins(tick.head.id) if j.open]
    if not joins:
        return trees.Held()
    return trees.held_back(joins, tick.rt.store.children(tick.head.id))


def wait_children(tick: Tick, call: ToolCall, arguments: Mapping[str, Any]) -> Change:
    """The `wait_children` call's change: the results of its `each` join not yet
    delivered, or the parent suspended until the next; with no such join, an error
    observation that says so."""
    head = tick.head
    try:
        join = deliveries.waited_join(tick.rt.store.joins(head.id), arguments)
    except InvalidToolArguments as exc:
        return machine.tool_finished(
            head, tick.claimed.calls, call, output=str(exc), is_error=True, now=tick.rt.clock()
        )
    return _take_or_wait(tick, call, join)


def _take_or_wait(tick: Tick, call: ToolCall, join: Join) -> Change:
    """`call` takes the results of the `each` `join` it has not had, or waits."""
    rt, head = tick.rt, tick.head
    children = rt.store.children(head.id, join.call_id) if join.pending else []
    return deliveries.take(
        head,
        tick.claimed.calls,
        call,
        join,
        children,
        now=rt.clock(),
        max_chars=rt.settings.max_output_chars,
    )


def allowed_child_model(
    spec: str, *, parent: str, role: str | None, settings: RoleSettings, child: str
) -> str:
    """The model a spawn entry names for a child, if the deployment lets the model choose
    it: its parent's, its role's, a spec starting with one of `TICKWORK_CHILD_MODELS`, or
    a script (`scripted:PATH`, by its absolute path, symlinks resolved) inside the
    directory of the parent's own script or one of `TICKWORK_CHILD_SCRIPTED_ROOTS`. The
    entry is the model's writing, as untrusted as a submit over the API
    (`tickwork/api/models.py`): a script's path makes the host read that file. Else
    InvalidInput naming the child and what is allowed (never whether the file exists)."""
    if spec in (parent, role):
        return spec
    script = script_of(spec)
    if script is None:
        if any(spec.startswith(prefix) for prefix in settings.child_models):
            return spec
        allowed = [f"{parent!r} (yours)"]
        if role:
            allowed.append(f"{role!r} (its role's)")
        allowed += [f"a model starting with {p!r}" for p in settings.child_models]
        raise InvalidInput(
            f"child {child!r}: model {spec!r} is not allowed; allowed: {', '.join(allowed)}, "
            "or leave `model` out (an operator may allow more with TICKWORK_CHILD_MODELS)"
        )
    prefix, path = script
    roots = list(settings.child_scripted_roots)
    own = script_of(parent)
    if own is not None:
        roots.append(Path(os.path.abspath(own[1])).parent)  # its directory, as named
    refusal = InvalidInput(
        f"child {child!r}: model {spec!r} is not allowed; a scripted child must name a "
        "script file by its absolute path inside "
        + (", ".join(str(r) for r in roots) if roots else "no directory here")
        + " (an operator may allow more with TICKWORK_CHILD_SCRIPTED_ROOTS), or leave "
        "`model` out"
    )
    if not roots or not Path(path).is_absolute():
        raise refusal
    try:
        found = Path(path).resolve()
        inside = any(found.is_relative_to(root.resolve()) for root in roots)
    except (OSError, ValueError, RuntimeError):
        raise refusal from None
    if not inside:
        raise refusal
    return f"{prefix}{found}"


def child_head(
    tick: Tick,
    call: ToolCall,
    spec: trees.ChildSpec,
    *,
    share: float,
    child_id: str,
    held: trees.Held | None = None,
) -> Head:
    """The head of one child: its role's prompt, tools, model and budgets (the kind's
    roles, with the roles file's over them: `Jobs.roles`), its config from the kind (a
    `Parent` kind makes it from the parent, e.g. a repair child on its parent's files; any
    other kind configures the child's input as a submission from outside: the model wrote
    it), and its share of what the parent has left. A kind without roles takes any role
    name, as a label."""
    rt, parent = tick.rt, tick.head
    now = rt.clock()
    job = rt.jobs.get(parent.kind)
    roles = rt.jobs.roles(parent.kind)
    role = role_for(roles, spec.role, kind=parent.kind) if roles else None
    try:
        if role is not None and isinstance(job, Parent):
            spawning = Spawning(parent=parent, role=role, workspaces=rt.workspaces)
            config = job.child(dict(spec.input), spawning)
        else:
            submission = Submission(
                state_dir=rt.settings.state_dir,
                trusted=False,
                workspace_roots=tuple(rt.settings.workspace_roots),
                artifacts=None,
                roles=roles,
            )
            config = session_config(job, dict(spec.input), submission)
    except ArtifactsUnavailable:
        raise  # the store is away for now: the tick runs again
    except TickworkError as exc:
        raise InvalidInput(f"child {spec.role!r}: its input was refused: {exc}") from None
    config = {"system_prompt": job.system_prompt, **config}
    if role is not None:
        config.update(role.config())
    role_model = role.model if role is not None else None
    model = spec.model or role_model or parent.model
    try:
        check_spec(model, rt.providers)
    except TickworkError as exc:
        raise InvalidInput(f"child {spec.role!r}: model {model!r}: {exc}") from None
    if spec.model is not None:
        model = allowed_child_model(
            spec.model,
            parent=parent.model,
            role=role_model,
            settings=rt.settings.section(RoleSettings),
            child=spec.role,
        )
    given = parent.config.get("price")
    if given is not None and pricing.passes_on(
        given,
        parent=parent.model,
        child=model,
        overrides=rt.settings.prices,
        providers=rt.providers,
    ):
        config["price"] = given
    config.pop("default_model", None)
    try:
        window = check_window(
            pricing.context_window(model, rt.settings.prices, providers=rt.providers)
        )
    except (TickworkError, ValueError):
        window = None
    if window is not None:
        config["context"] = Policy(window=window).to_config()
    base = parent.budgets
    if role is not None and role.budgets:
        # checked when the roles were read (`tickwork.worker.jobs.roles`)
        base = Budgets(**{**base.model_dump(), **dict(role.budgets)})
    return Head(
        id=child_id,
        kind=parent.kind,
        created_at=now,
        updated_at=now,
        model=model,
        budgets=trees.child_budgets(parent, share, now=now, base=base, held=held),
        input=dict(spec.input),
        config=config,
        **trees.lineage(parent, call, spec.role),
    )
