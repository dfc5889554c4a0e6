"""What a chaos run does: its size and hostility (`Plan`), and each session's script."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: the test suite's job kind: every tool appends "<idempotency key> <value>" to a sink file
KIND = "tests.jobs:TEST"
#: the repair kind with the test suite's tools: the file sessions'
FILES_KIND = "tests.jobs:FILES"
#: the test kind whose sessions may spawn children: the tree sessions' roots and children
TREE_KIND = "tests.jobs:TREE"
#: the tree sessions' price, USD per million prompt and completion tokens, and each of
#: their replies' usage: every reply costs 1000 * 1 + 100 * 10 = 2000 millionths
TREE_PRICE = (1.0, 10.0)
TREE_USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
TREE_REPLY_COST = 0.002
#: each tree's join, by the root's number, cycling
TREE_JOINS = ("all", "each")
#: the tools of each step, cycling: one call, or two in one step
STEP_TOOLS = (
    ("idem_effect",),
    ("effect",),
    ("danger",),
    ("idem_effect", "effect"),
    ("echo", "danger"),
)
#: the sink file each tool with an effect appends to
SINKS = {"idem_effect": "idem.log", "effect": "effect.log", "danger": "danger.log"}


@dataclass(frozen=True)
class Plan:
    """How big and how hostile a chaos run is."""

    sessions: int = 200
    steps: int = 10
    #: worker processes alive at any time; the first one is never killed (the survivor)
    workers: int = 4
    #: threads per worker (`--pool threads`)
    concurrency: int = 4
    #: seconds during which workers are killed
    chaos_s: float = 120.0
    #: mean seconds between two kills (each is followed by the start of a new worker)
    kill_every_s: float = 3.0
    #: submissions are spread over this many seconds from the start of the chaos
    submit_over_s: float = 90.0
    #: when (fraction of `chaos_s`) Redis and Postgres are restarted; None: never
    redis_restart_at: float | None = 0.35
    postgres_restart_at: float | None = 0.7
    #: how long each server stays down
    down_s: float = 2.0
    model_delay_s: float = 0.1
    tool_sleep_s: float = 0.2
    lease_s: float = 5.0
    relay_period_s: float = 0.5
    #: the production default; much lower and a backlog makes the relay flood the queue
    relay_after_s: float = 10.0
    #: after the chaos, how long the sessions have to settle
    drain_timeout_s: float = 300.0
    #: after settling, decide in-doubt calls as an operator would (from the sink) and let
    #: those sessions finish too
    resolve_in_doubt: bool = True
    seed: int = 7
    #: repair sessions (the `files` kind) on one small project, beside the others: they
    #: read and write its file, so the two faults below hit them
    file_sessions: int = 0
    #: when (fraction of `chaos_s`) every blob in the workers' shared cache is overwritten
    #: with rot; None: never
    corrupt_cache_at: float | None = None
    #: the workspaces' own filesystem (a tmpfs mounted for the run, root only), in MB;
    #: 0: the state folder's, and no disk-full fault
    workspaces_mb: int = 0
    #: when (fraction of `chaos_s`) that filesystem is filled to the last byte, for
    #: `down_s`; None: never
    disk_full_at: float | None = None
    #: tree sessions: roots that spawn `tree_children` children each, joined `all` and
    #: `each` in turn; the children's scripts are one file, so they end at one instant
    trees: int = 20
    tree_children: int = 4
    #: how long a child's last reply takes: the window a kill aimed at its end lands in
    child_answer_delay_s: float = 0.5
    #: aim some kills at the trees: at a child's end, at the worker that just saved it, at
    #: a parent woken by its join (`ops/chaos/trees.py`, `Aim`); each takes the place of
    #: the next planned kill, up to a period before it (a second after the last at least)
    aim_at_trees: bool = True


#: the run of the CI suite: small, and sure to finish on a loaded two-core machine
CI_PLAN = Plan(
    sessions=20,
    workers=3,
    concurrency=2,
    chaos_s=30.0,
    kill_every_s=3.0,
    # sessions keep arriving for most of the chaos, and each lasts several seconds, so the
    # kills and both restarts always hit sessions in flight, however fast the machine
    submit_over_s=24.0,
    redis_restart_at=0.3,
    postgres_restart_at=0.65,
    down_s=1.5,
    model_delay_s=0.05,
    tool_sleep_s=0.6,
    lease_s=4.0,
    relay_after_s=5.0,
    drain_timeout_s=75.0,
    file_sessions=4,
    corrupt_cache_at=0.45,
    workspaces_mb=32,
    disk_full_at=0.55,
    trees=4,
    tree_children=3,
)


#: the CI run on RabbitMQ (the machine's own, never restarted): fewer sessions, shorter
#: chaos, the same kills and a Postgres restart
CI_RABBITMQ_PLAN = replace(
    CI_PLAN,
    sessions=12,
    chaos_s=20.0,
    submit_over_s=15.0,
    redis_restart_at=None,
    postgres_restart_at=0.6,
    drain_timeout_s=60.0,
    trees=2,
)


def script(session_id: str, plan: Plan) -> list[dict[str, Any]]:
    """The scripted model's replies: `plan.steps` steps of tool calls, then an answer."""
    replies: list[dict[str, Any]] = []
    for i in range(plan.steps):
        calls = []
        for j, name in enumerate(STEP_TOOLS[i % len(STEP_TOOLS)]):
            value = f"{session_id}/{i + 1}/{j}"
            arguments: dict[str, Any] = {"text": value} if name == "echo" else {"value": value}
            if name in ("idem_effect", "effect"):
                arguments["sleep_s"] = plan.tool_sleep_s
            calls.append({"name": name, "arguments": arguments})
        replies.append(
            {
                "content": f"step {i + 1}",
                "tool_calls": calls,
                "delay_s": plan.model_delay_s,
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        )
    replies.append({"content": "done", "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    return replies


#: the file sessions' project: a bug their script fixes
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def files_script(plan: Plan) -> list[dict[str, Any]]:
    """A file session's replies: read the file, fix it (asks approval), read it again."""

    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return {
            "content": f"call {name}",
            "tool_calls": [{"name": name, "arguments": arguments}],
            "delay_s": plan.model_delay_s,
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }

    return [
        call("read_file", path="calc.py"),
        call("write_file", path="calc.py", content=FIXED),
        call("read_file", path="calc.py"),
        {"content": "fixed", "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
    ]


def child_script(plan: Plan) -> list[dict[str, Any]]:
    """A tree child's replies, the same for every child of a root: an idempotent effect,
    then the answer (which takes `child_answer_delay_s`)."""
    work = {"name": "idem_effect", "arguments": {"value": "child", "sleep_s": plan.tool_sleep_s}}
    return [
        {
            "content": "work",
            "tool_calls": [work],
            "delay_s": plan.model_delay_s,
            "usage": TREE_USAGE,
        },
        {"content": "child done", "delay_s": plan.child_answer_delay_s, "usage": TREE_USAGE},
    ]


def tree_script(plan: Plan, *, join: str, child: dict[str, Any]) -> list[dict[str, Any]]:
    """A tree root's replies: spawn `plan.tree_children` copies of `child` (a spawn entry)
    with `join`; with `each`, call `wait_children` once for each child after the first
    (one that finds every result delivered already is an error observation, harmless);
    then the answer."""
    spawn = {"children": [child] * plan.tree_children, "join": join}
    replies = [{"content": "split", "tool_calls": [{"name": "spawn_agents", "arguments": spawn}]}]
    if join == "each":
        wait = {"content": "next", "tool_calls": [{"name": "wait_children", "arguments": {}}]}
        replies += [wait] * (plan.tree_children - 1)
    replies.append({"content": "joined"})
    return [{**r, "delay_s": plan.model_delay_s, "usage": TREE_USAGE} for r in replies]
