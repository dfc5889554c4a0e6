"""Graph workflows: the definition, its validation, routing and state updates
(docs/DESIGN.md section 12).

A graph is named nodes (plain functions of the state returning a partial update), edges
and conditional edges between them, from `START` to `END`, over a typed state (a pydantic
model). `Graph.compile()` refuses an invalid graph when it is defined, not when a session
runs it. Nothing here does I/O; `tickwork.worker.tick.graphs` runs the nodes and
`tickwork.fsm.graph_machine` turns a node's run into the session's next step.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError
from tickwork.fsm.approvals import Policy
from tickwork.fsm.errors import InvalidGraph, InvalidStateUpdate
from tickwork.fsm.fingerprints import call_fingerprint

START = "__start__"
END = "__end__"
#: a step whose call is `node + PROPOSAL` holds the update `node` proposed, for a person
PROPOSAL = "#update"

#: a node: `fn(state, ctx) -> dict` (a partial update of the state), or `fn(state)`; or
#: `Branches` (`fan_out`) to run a node in parallel branches
NodeFn = Callable[..., "Mapping[str, Any] | Branches | None"]
#: a conditional edge: `fn(state) -> the next node's name (or END)`
Router = Callable[[Any], str]
#: a state reducer: `fn(value so far, a branch's value) -> merged value`
Reducer = Callable[[Any, Any], Any]


def append(old: Any, new: Any) -> list[Any]:
    """The reducer that appends a branch's list (or single value) to the list so far."""
    head = list(old) if isinstance(old, list | tuple) else ([] if old is None else [old])
    return head + (list(new) if isinstance(new, list | tuple) else [new])


def add(old: Any, new: Any) -> Any:
    """The reducer that sums a branch's number into the number so far."""
    return (old or 0) + new


@dataclass(frozen=True)
class Branches:
    """What a node returns to fan out (docs/DESIGN.md section 16): node `node` runs once per
    input, each in a child session on the state with that input applied, all in
    parallel; their updates merge into the state through the graph's reducers, in the
    order of `inputs`, and the graph goes on from the node that fanned out."""

    node: str
    inputs: tuple[Mapping[str, Any], ...]


def fan_out(node: str, inputs: Iterable[Mapping[str, Any]]) -> Branches:
    """Run `node` once per input, in parallel (a node returns this instead of an update)."""
    return Branches(node=node, inputs=tuple(dict(i) for i in inputs))


@dataclass(frozen=True)
class Node:
    name: str
    fn: NodeFn
    #: a person approves before the node runs (its input state is the "call" they decide)
    interrupt_before: bool = False
    #: `policy(state as a dict) -> reason | True | None`: a conditional `interrupt_before`
    approval_policy: Policy | None = None
    #: may run again after a worker died in it (its effects use the idempotency key);
    #: if False such a run waits for a person, as a tool call in doubt does
    idempotent: bool = False
    #: where the graph goes when a person rejects the node (END: the session completes)
    on_reject: str = END
    #: the state keys the node may return, when declared (checked against the schema at
    #: `compile()`); None: only checked when it returns
    writes: frozenset[str] | None = None
    #: `policy(update) -> reason | True | None`: a person approves the update the node
    #: proposes before it enters the state (approve, edit = another update, reject)
    approve_update: Policy | None = None

    #: `fn(state, ctx)` (True) or `fn(state)`: read from its signature once, when the node
    #: is added, so a run never asks
    takes_context: bool = True
    #: a branch node: run only in the branches another node fans out to (`fan_out`), each
    #: branch ending after it; it needs no edges
    branch: bool = False

    def run(self, state: Any, ctx: Any) -> Mapping[str, Any] | Branches | None:
        """The node's update of `state` (`ctx`: the `NodeContext` it runs with)."""
        return self.fn(state, ctx) if self.takes_context else self.fn(state)


def _takes_context(fn: NodeFn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return len(params) >= 2


@dataclass(frozen=True)
class Conditional:
    fn: Router
    targets: frozenset[str]


@dataclass
class Graph:
    """A graph being defined; `compile()` checks it and returns the runnable `CompiledGraph`."""

    name: str
    version: str
    state: type[BaseModel]
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: dict[str, str] = field(default_factory=dict)
    conditionals: dict[str, Conditional] = field(default_factory=dict)
    #: how branches' updates of a field merge (`append`, `add`, or any `Reducer`); a field
    #: without one takes the value of the last branch (in their order) that gives it
    reducers: dict[str, Reducer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidGraph("a graph needs a name (the job kind sessions are submitted as)")
        self.version = str(self.version)
        if not self.version.strip():
            raise InvalidGraph(f"graph {self.name!r} needs a version (e.g. '1')")
        if not (isinstance(self.state, type) and issubclass(self.state, BaseModel)):
            raise InvalidGraph(
                f"the state of graph {self.name!r} must be a pydantic model class, "
                f"not {self.state!r}"
            )

    def add_node(
        self,
        name: str,
        fn: NodeFn,
        *,
        interrupt_before: bool = False,
        approval_policy: Policy | None = None,
        idempotent: bool = False,
        on_reject: str = END,
        writes: Iterable[str] | None = None,
        approve_update: Policy | None = None,
        branch: bool = False,
    ) -> Graph:
        if not isinstance(name, str) or not name or name in (START, END) or PROPOSAL in name:
            raise InvalidGraph(
                f"graph {self.name!r}: {name!r} is not a usable node name "
                f"(not empty, not START or END, no {PROPOSAL!r})"
            )
        if name in self.nodes:
            raise InvalidGraph(f"graph {self.name!r} has a node {name!r} already")
        if not callable(fn):
            raise InvalidGraph(f"node {name!r} of graph {self.name!r} is not a function")
        declared = _declared_writes(fn) if writes is None else frozenset(writes)
        self.nodes[name] = Node(
            name=name,
            fn=fn,
            interrupt_before=interrupt_before,
            approval_policy=approval_policy,
            idempotent=idempotent,
            on_reject=on_reject,
            writes=declared,
            approve_update=approve_update,
            takes_context=_takes_context(fn),
            branch=branch,
        )
        return self

    def add_edge(self, a: str, b: str) -> Graph:
        if a == END:
            raise InvalidGraph(f"graph {self.name!r}: no edge may leave END")
        if a in self.edges or a in self.conditionals:
            raise InvalidGraph(
                f"graph {self.name!r}: {a!r} has an edge already; "
                "to branch, use add_conditional_edges"
            )
        self.edges[a] = b
        return self

    def add_conditional_edges(
        self, a: str, fn: Router, targets: Iterable[str] | None = None
    ) -> Graph:
        """After `a`, go where `fn(state)` says, one of `targets` (or those of `fn`'s return
        annotation, `Literal["x", "y"]`): declared, so the graph can be checked."""
        if a == END:
            raise InvalidGraph(f"graph {self.name!r}: no edge may leave END")
        if a in self.edges or a in self.conditionals:
            raise InvalidGraph(f"graph {self.name!r}: {a!r} has an edge already")
        found = frozenset(targets) if targets is not None else _literal_targets(fn)
        if not found:
            raise InvalidGraph(
                f"graph {self.name!r}: the conditional edges after {a!r} must declare where "
                "they may go: pass targets=[...] or annotate the function -> Literal[...]"
            )
        self.conditionals[a] = Conditional(fn=fn, targets=found)
        return self

    def compile(self) -> CompiledGraph:
        """The checked graph; raises InvalidGraph naming what is wrong."""
        where = f"graph {self.name!r} v{self.version}"
        known = set(self.nodes) | {START, END}
        fields = set(self.state.model_fields)
        problems: list[str] = []
        for a, b in self.edges.items():
            for end in (a, b):
                if end not in known:
                    problems.append(f"the edge {a!r} -> {b!r} names a missing node {end!r}")
        for a, cond in self.conditionals.items():
            if a not in known:
                problems.append(f"conditional edges leave a missing node {a!r}")
            for b in sorted(cond.targets - known):
                problems.append(f"a conditional edge after {a!r} may go to a missing node {b!r}")
        for node in self.nodes.values():
            if node.on_reject not in known - {START}:
                problems.append(
                    f"node {node.name!r} goes on reject to a missing node {node.on_reject!r}"
                )
            extra = sorted((node.writes or frozenset()) - fields)
            if extra:
                problems.append(
                    f"node {node.name!r} returns {', '.join(extra)}, not in the state "
                    f"{self.state.__name__} ({', '.join(sorted(fields))})"
                )
        for name, reducer in self.reducers.items():
            if name not in fields:
                problems.append(f"a reducer is declared for {name!r}, not in the state")
            elif not callable(reducer):
                problems.append(f"the reducer of {name!r} is not a function")
        if problems:
            raise InvalidGraph(f"{where}: " + "; ".join(problems))
        if START not in self.edges and START not in self.conditionals:
            raise InvalidGraph(f"{where}: nothing leaves START; add_edge(START, 'first node')")
        branches = {n for n, node in self.nodes.items() if node.branch}
        for name in self.nodes:
            if name in branches:
                continue
            if name not in self.edges and name not in self.conditionals:
                raise InvalidGraph(
                    f"{where}: node {name!r} has no edge out; add_edge({name!r}, ...) "
                    "(END to finish there)"
                )
        successors = {a: {b} | self._rejected(a) for a, b in self.edges.items()}
        for a, cond in self.conditionals.items():
            successors[a] = set(cond.targets) | self._rejected(a)
        reachable = _closure({START}, successors)
        unreachable = sorted(set(self.nodes) - reachable - branches)
        if unreachable:
            raise InvalidGraph(f"{where}: no path from START reaches {', '.join(unreachable)}")
        if END not in reachable:
            raise InvalidGraph(f"{where}: no path from START to END")
        predecessors: dict[str, set[str]] = {}
        for a, bs in successors.items():
            for b in bs:
                predecessors.setdefault(b, set()).add(a)
        finishing = _closure({END}, predecessors)
        stuck = sorted(set(self.nodes) - finishing - branches)
        if stuck:
            raise InvalidGraph(f"{where}: no path from {', '.join(stuck)} to END")
        return CompiledGraph(
            name=self.name,
            version=self.version,
            state=self.state,
            nodes=dict(self.nodes),
            edges=dict(self.edges),
            conditionals=dict(self.conditionals),
            reducers=dict(self.reducers),
        )

    def _rejected(self, name: str) -> set[str]:
        """Where a person's rejection of `name` leads, if a person is asked before it runs."""
        node = self.nodes.get(name)
        if node is None or not (
            node.interrupt_before or node.approval_policy or node.approve_update
        ):
            return set()
        return {node.on_reject}


def _closure(start: set[str], successors: Mapping[str, set[str]]) -> set[str]:
    seen = set(start)
    todo = list(start)
    while todo:
        for b in successors.get(todo.pop(), ()):
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {}


def _literal_targets(fn: Router) -> frozenset[str]:
    returned = _hints(fn).get("return")
    if get_origin(returned) is Literal:
        return frozenset(str(a) for a in get_args(returned))
    return frozenset()


def _declared_writes(fn: NodeFn) -> frozenset[str] | None:
    """The keys a node's return annotation (a TypedDict) names, or None."""
    returned = _hints(fn).get("return")
    keys = getattr(returned, "__annotations__", None) if typing.is_typeddict(returned) else None
    return frozenset(keys) if keys else None


@dataclass(frozen=True)
class CompiledGraph:
    """A checked graph: what workers run, found by its name and version."""

    name: str
    version: str
    state: type[BaseModel]
    nodes: Mapping[str, Node]
    edges: Mapping[str, str]
    conditionals: Mapping[str, Conditional]
    reducers: Mapping[str, Reducer] = field(default_factory=dict)

    def merge(
        self, state: Mapping[str, Any], updates: Iterable[Mapping[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state after the branches' `updates`, in order, merged through the reducers;
        and the merged update itself (what the fanning node's run changed)."""
        delta: dict[str, Any] = {}
        for update in updates:
            for key, value in update.items():
                reducer = self.reducers.get(key)
                if reducer is None:
                    delta[key] = value
                else:
                    delta[key] = reducer(delta[key] if key in delta else state.get(key), value)
        return self.update(state, delta, by="the branches' merged update"), delta

    def node(self, name: str) -> Node:
        """The node `name` (of a proposal's call too: the node that proposed it)."""
        try:
            return self.nodes[name.removesuffix(PROPOSAL)]
        except KeyError:
            raise InvalidGraph(
                f"graph {self.name!r} v{self.version} has no node {name!r}"
            ) from None

    def typed(self, state: Mapping[str, Any]) -> BaseModel:
        """The state as its schema's model; InvalidStateUpdate if it does not fit."""
        try:
            return self.state.model_validate(dict(state))
        except ValidationError as exc:
            raise InvalidStateUpdate(
                f"the state does not fit {self.state.__name__} of graph {self.name!r}: "
                f"{_first(exc)}"
            ) from None

    def initial(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The first state from a submission, as JSON values."""
        unknown = sorted(set(data) - set(self.state.model_fields))
        if unknown:
            raise InvalidStateUpdate(
                f"{', '.join(unknown)} not in the state of graph {self.name!r}; "
                f"its fields: {', '.join(self.state.model_fields)}"
            )
        return self.typed(data).model_dump(mode="json")

    def update(self, state: Mapping[str, Any], delta: Any, *, by: str) -> dict[str, Any]:
        """The state after `delta` (a partial update: its keys replace the state's), checked
        against the schema; InvalidStateUpdate naming `by` (a node, an edit) otherwise."""
        if delta is None:
            return dict(state)
        if not isinstance(delta, Mapping):
            raise InvalidStateUpdate(
                f"{by} of graph {self.name!r} gives a {type(delta).__name__}; "
                "a node returns a dict of the state fields it changes"
            )
        fields = self.state.model_fields
        unknown = sorted(str(k) for k in delta if k not in fields)
        if unknown:
            raise InvalidStateUpdate(
                f"{by} of graph {self.name!r} gives {', '.join(unknown)}, which the state "
                f"{self.state.__name__} does not have (its fields: {', '.join(fields)})"
            )
        try:
            typed = self.state.model_validate({**state, **delta})
        except ValidationError as exc:
            raise InvalidStateUpdate(
                f"{by} of graph {self.name!r} gives an update that does not fit "
                f"{self.state.__name__}: {_first(exc)}"
            ) from None
        return typed.model_dump(mode="json")

    def next(self, after: str, state: Mapping[str, Any]) -> str:
        """The node that follows `after` (START for the first) in `state`, or END."""
        if after in self.edges:
            return self.edges[after]
        cond = self.conditionals.get(after)
        if cond is None:
            raise InvalidGraph(f"graph {self.name!r} v{self.version}: no edge leaves {after!r}")
        chosen = cond.fn(self.typed(state))
        if chosen not in cond.targets:
            raise InvalidGraph(
                f"graph {self.name!r}: the conditional edge after {after!r} chose {chosen!r}, "
                f"not one of its targets ({', '.join(sorted(cond.targets))})"
            )
        return chosen


def state_fingerprint(node: str, state: Mapping[str, Any]) -> str:
    """The fingerprint of running `node` on `state`: what loop detection compares and what a
    person's decision before the node is bound to (docs/DESIGN.md sections 4 and 5)."""
    return call_fingerprint(node, state)


def delta_text(delta: Mapping[str, Any]) -> str:
    """A state update as stored in the node's observation."""
    return json.dumps(dict(delta), sort_keys=True, ensure_ascii=False)


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error.get("loc", ())) or "the state"
    return f"{where}: {error.get('msg', 'invalid')}"
