"""Compaction steps in the store (fsm/context.py): stored whole on every backend, and a THINK
claim that misses the transcript cache reads from the latest compaction, not every step."""

from __future__ import annotations

from tickwork.fsm import machine
from tickwork.fsm.context import READ_WHOLE_BYTES
from tickwork.fsm.values import ModelReply, StepKind, Usage
from tickwork.store import Store, open_store

from tests.conftest import Clock
from tests.store.conftest import claim, execute, reply, think

OWNER = "worker-1"


def _steps(
    store: Store, session_id: str, clock: Clock, count: int, output: str = "output {n}"
) -> None:
    for n in range(count):
        think(store, session_id, reply(("read_file", {"path": f"f{n}"})), now=clock())
        execute(store, session_id, now=clock(), output=output.format(n=n))


def _compact(store: Store, session_id: str, clock: Clock, through: int) -> None:
    claimed = claim(store, session_id, now=clock())
    summary = ModelReply(content=f"summary of 1-{through}", usage=Usage(prompt_tokens=900))
    change = machine.compacted(
        claimed.head, summary, through=through, now=clock(), cost_usd=0.5, trace_id="t-c"
    )
    store.save(change, version=claimed.head.version, owner=OWNER, now=clock())


def test_a_compaction_step_is_stored_with_its_kind_cut_tokens_and_cost(
    store: Store, clock: Clock, session_id: str
) -> None:
    _steps(store, session_id, clock, 3)
    _compact(store, session_id, clock, through=2)
    session = store.load(session_id)
    last = session.steps[-1]
    assert (last.step, last.kind, last.compacted_through, last.masked_through) == (
        4,
        StepKind.COMPACTION,
        2,
        2,
    )
    assert last.thought == "summary of 1-2" and last.calls == ()
    assert session.head.cost_usd == 3 * 0.01 + 0.5
    assert session.head.step == 4, "a compaction counts as a step: it is a model call"
    assert [e.data["through"] for e in session.events if e.kind == "compacted"] == [2]
    assert store.observation(session_id, "s1c0").content == "output 0"  # type: ignore[union-attr]
    assert store.observation(session_id, "s9c0") is None


def test_a_cold_think_claim_reads_from_the_latest_compaction_on(
    store: Store, clock: Clock, session_id: str
) -> None:
    _steps(store, session_id, clock, 30)
    _compact(store, session_id, clock, through=28)
    _steps(store, session_id, clock, 2)
    # a worker that never read this session: its claim misses the transcript cache
    cold = open_store(store.engine, core=type(store).__name__ == "CoreStore")
    claimed = claim(cold, session_id, now=clock())
    first = min(s.step for s in claimed.steps)
    whole = store.load(session_id)
    replies = [s.step for s in whole.steps if s.kind is StepKind.REPLY]
    assert first == replies[-16], "from the 16 replies loop detection needs (the cut is later)"
    assert claimed.steps[-1].step == 33
    assert any(s.kind is StepKind.COMPACTION for s in claimed.steps)
    assert all(c.call_id in claimed.observations for s in claimed.steps for c in s.calls)
    assert claimed.steps == tuple(s for s in whole.steps if s.step >= first)
    assert (
        claimed.recent
        == tuple(s.fingerprint for s in whole.steps if s.kind is StepKind.REPLY)[-16:]
    )


def test_a_charge_adds_model_use_to_a_stored_step(
    store: Store, clock: Clock, session_id: str
) -> None:
    from tickwork.fsm.transitions import StepCharge

    _steps(store, session_id, clock, 2)
    claimed = claim(store, session_id, now=clock())
    charge = StepCharge(
        step=1, usage=Usage(prompt_tokens=1000, completion_tokens=50), cost_usd=0.25
    )
    change = machine.start_think(claimed.head, now=clock())
    assert not isinstance(change, machine.Change)
    idle = machine.Change(head=claimed.head.model_copy(update={"updated_at": clock()}))
    store.save(
        idle.model_copy(update={"charged": charge}),
        version=claimed.head.version,
        owner=OWNER,
        now=clock(),
    )
    first = store.load(session_id).steps[0]
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (1100, 70)
    assert first.cost_usd == 0.01 + 0.25


def test_a_charge_keeps_the_cached_tokens_of_the_model_use_it_adds(
    store: Store, clock: Clock, session_id: str
) -> None:
    """A graph node's model calls, charged to its step, added their prompt and completion
    tokens and cost but not the prompt tokens read from or written to the provider's cache:
    `tickwork show` and the session's totals said none of a node's prompt was cached. They
    are added too, on a step whose columns a worker before 0013 left NULL as well."""
    from sqlalchemy import update
    from tickwork.fsm.transitions import StepCharge
    from tickwork.store.schema import steps

    _steps(store, session_id, clock, 2)
    with store.engine.begin() as conn:  # a step written before the cache was counted
        conn.execute(
            update(steps)
            .where(steps.c.session_id == session_id, steps.c.step == 2)
            .values(cached_prompt_tokens=None, cache_creation_tokens=None)
        )
    for step in (1, 2, 1):
        claimed = claim(store, session_id, now=clock())
        usage = Usage(
            prompt_tokens=1000,
            completion_tokens=50,
            cached_prompt_tokens=600,
            cache_creation_tokens=300,
        )
        idle = machine.Change(head=claimed.head.model_copy(update={"updated_at": clock()}))
        charged = StepCharge(step=step, usage=usage, cost_usd=0.25)
        store.save(
            idle.model_copy(update={"charged": charged}),
            version=claimed.head.version,
            owner=OWNER,
            now=clock(),
        )
    first, second = store.load(session_id).steps[:2]
    assert (first.usage.cached_prompt_tokens, first.usage.cache_creation_tokens) == (1200, 600)
    assert (second.usage.cached_prompt_tokens, second.usage.cache_creation_tokens) == (600, 300)
    assert first.usage.prompt_tokens == 2100 and second.usage.prompt_tokens == 1100


def _mask(store: Store, session_id: str, clock: Clock, through: int) -> None:
    """A THINK whose prompt masked the observations of steps 1 to `through`."""
    claimed = claim(store, session_id, now=clock())
    change = machine.think(
        claimed.head,
        reply(("read_file", {"path": "g"})),
        now=clock(),
        cost_usd=0.0,
        trace_id="t-mask",
        recent=claimed.recent,
        rules={},
        masked_through=through,
    )
    store.save(change, version=claimed.head.version, owner=OWNER, now=clock())


def test_a_masked_observation_is_sized_in_bytes_whatever_it_holds(
    store: Store, clock: Clock, session_id: str
) -> None:
    """Source code and Windows paths are full of backslashes, which Postgres reads as
    escapes when text is cast to bytea: a cold THINK's read of such a masked observation
    failed ("invalid input syntax for type bytea") and the session could not go on."""
    output = "C:\\new\\table {n}: re.compile(r'\\d+\\x') \\ é" * 20
    _steps(store, session_id, clock, 2, output=output)
    _mask(store, session_id, clock, through=2)
    execute(store, session_id, now=clock())
    cold = open_store(store.engine, core=type(store).__name__ == "CoreStore")
    seen = claim(cold, session_id, now=clock()).observations
    assert [(seen[f"s{n}c0"].content, seen[f"s{n}c0"].elided) for n in (1, 2)] == [
        ("", len(output.format(n=n).encode())) for n in (0, 1)
    ]


def test_a_cold_claim_reads_masked_observations_by_their_size_only(
    store: Store, clock: Clock, session_id: str
) -> None:
    long = "output {n} " + "x" * READ_WHOLE_BYTES
    _steps(store, session_id, clock, 4, output=long)
    _mask(store, session_id, clock, through=3)
    execute(store, session_id, now=clock(), output="é" * 10)
    cold = open_store(store.engine, core=type(store).__name__ == "CoreStore")
    seen = claim(cold, session_id, now=clock()).observations
    assert [(seen[f"s{n}c0"].content, seen[f"s{n}c0"].elided) for n in (1, 2, 3)] == [
        ("", len(long.format(n=n))) for n in (0, 1, 2)
    ]
    assert (seen["s4c0"].content, seen["s4c0"].elided) == (long.format(n=3), None)
    assert (seen["s5c0"].content, seen["s5c0"].size) == ("é" * 10, 20)


def test_a_cold_claim_reads_short_masked_observations_whole(
    store: Store, clock: Clock, session_id: str
) -> None:
    """A masked observation shorter than its stub stays whole in the prompt
    (`tickwork.fsm.context`), so a claim that reads masked ones by their size reads the
    short ones' text: up to READ_WHOLE_BYTES, longer than any stub."""
    short = "é" * (READ_WHOLE_BYTES // 2)
    _steps(store, session_id, clock, 2, output=short)
    _mask(store, session_id, clock, through=2)
    execute(store, session_id, now=clock())
    cold = open_store(store.engine, core=type(store).__name__ == "CoreStore")
    seen = claim(cold, session_id, now=clock()).observations
    assert [(seen[f"s{n}c0"].content, seen[f"s{n}c0"].elided) for n in (1, 2)] == [
        (short, None),
        (short, None),
    ]


def test_a_cold_think_claim_reads_each_replys_prompt_estimate(
    store: Store, clock: Clock, session_id: str
) -> None:
    """The next THINK's scale reads the estimate the last reply's prompt was sent with
    (`Step.prompt_estimate`) from the steps its claim read; a worker that never read the
    session reads them from the database, on every backend's claim."""
    for n, sent in enumerate((900, None, 1_100)):
        asked = reply(("read_file", {"path": f"f{n}"}))
        think(store, session_id, asked, now=clock(), prompt_estimate=sent)
        execute(store, session_id, now=clock())
    cold = open_store(store.engine, core=type(store).__name__ == "CoreStore")
    claimed = claim(cold, session_id, now=clock())
    assert [s.prompt_estimate for s in claimed.steps] == [900, None, 1_100]
