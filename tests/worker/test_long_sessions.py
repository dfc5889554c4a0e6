"""Long sessions against a server with a context window (tests/context_server.py): what a
compaction, a graph node and a trace learn and record of the window the server states."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tickwork.fsm import context
from tickwork.fsm.values import EventKind, Head, Status, StepKind
from tickwork.worker.observers.report import TickReport
from tickwork.worker.tick.advance import advance

from tests.context_server import COMPLETION_TOKENS, WindowedChat, windowed_chat

from .test_context_window import PRICE, Long


@pytest.fixture
def long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Long]:
    monkeypatch.setenv(
        "TICKWORK_IMPORTS",
        '["tests.jobs:LONG", "tests.graphs:ASK", "tests.graphs:ASK_AROUND", '
        '"tests.graphs:ASK_MORE", "tests.graphs:PEEK_THEN_ASK"]',
    )
    deployment = Long(tmp_path)
    yield deployment
    deployment.close()


def test_a_compaction_refused_as_too_long_learns_the_stated_window_and_goes_on(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose window (6,000) is below the session's (16,384) refused a compaction's
    prompt itself as too long: the session failed CONTEXT ("compacting steps 1-N was
    refused as too long too") with the window the refusal stated forgotten, where a THINK
    refused so learns it and goes on. The compaction's refusal now teaches it too: a
    `context_overflow` event, the window on the card, and the next compaction fits it."""
    from tickwork import render, views

    chat = WindowedChat(window=32_768, steps=60, compaction_window=6_000)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    refused = [r for r in chat.log if r.refused]
    assert refused and refused[0].compaction and refused[0].tokens > 6_000
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 60 chunks"
    assert head.result[context.STATED_WINDOW] == 6_000
    # learned: no prompt after it passes the window (a cap may still be asked again within it)
    assert all(r.tokens < 6_000 for r in refused[1:])
    session = long.store.load(session_id)
    assert any(s.kind is StepKind.COMPACTION for s in session.steps)
    events = views.session(session)["events"]
    (overflow,) = [e for e in events if e["kind"] == EventKind.CONTEXT_OVERFLOW]
    assert (overflow["data"]["window"], overflow["data"]["stated_window"]) == (16_384, 6_000)
    assert "the model states 6,000" in render.event_line(overflow).plain


def test_a_compaction_refused_with_no_window_stated_fails_context_with_its_event(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction's prompt refused as too long by a server that states no window: there
    is nothing to learn, so the session fails `CONTEXT` as before, and the refusal is in
    its events (`context_overflow`) as a refused THINK's is."""
    chat = WindowedChat(window=32_768, steps=60, compaction_window=6_000, states_window=False)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    assert chat.log[-1].refused and chat.log[-1].compaction
    assert (head.status, head.error_code) == (Status.FAILED, "CONTEXT")
    assert "was refused as too long too" in head.error_message
    assert context.STATED_WINDOW not in head.result
    session = long.store.load(session_id)
    (overflow,) = [e for e in session.events if e.kind is EventKind.CONTEXT_OVERFLOW]
    assert (overflow.data["window"], overflow.data["stated_window"]) == (16_384, None)
    assert "The prompt is too long." in overflow.data["error"]


def test_a_window_a_graph_node_learns_stays_with_it_and_its_branches_when_it_fans_out(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node refused as too long learns the window the server states, and its later calls
    fit it; but a node that then fanned out saved the session's head as it was before the
    node ran: the window was lost from the card, and each branch, planned under the
    session's larger window, was refused once more to learn it again."""
    with windowed_chat(WindowedChat(window=9_000, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK_AROUND",
            {"size": 8_000},
            model="openai:long",
            price=PRICE,
            context_window=32_768,
        )
        done = long.run(head.id)
        for branch in long.store.children(head.id):
            long.run(branch.id)
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert [r.refused for r in chat.log] == [True, False, False, False], "one refusal taught all"
    assert done.result[context.STATED_WINDOW] == 9_000
    branches = long.store.children(head.id)
    assert len(branches) == 2
    assert all(b.result[context.STATED_WINDOW] == 9_000 for b in branches)


def test_a_graph_nodes_cap_asked_again_is_in_its_events_as_an_agents_is(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's call asked again with a lower cap says so in its `model_called` event
    (`tickwork show`: "cap lowered to N"); a graph node's said it in the worker's log only.
    A node's model calls are `model_called` events too, naming the node."""
    from tickwork import render, views

    with _undercounted(long, monkeypatch, "tests.graphs:ASK", 12_000) as (chat, head):
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    (refused,) = [i for i, r in enumerate(chat.log) if r.refused]
    lowered = chat.log[refused + 1].max_tokens
    assert lowered is not None
    session = long.store.load(head.id)
    events = views.session(session)["events"]
    (called,) = [e for e in events if e["kind"] == EventKind.MODEL_CALLED]
    (node,) = [s for s in session.steps if s.usage.total]
    assert called["data"]["node"] == "ask"
    assert called["data"]["step"] == node.step
    assert called["data"]["cap_lowered_to"] == lowered
    assert called["data"]["prompt_tokens"] == node.usage.prompt_tokens
    assert called["data"]["cost_usd"] == pytest.approx(node.cost_usd)
    shown = render.event_line(called).plain
    assert "node ask" in shown and f"cap lowered to {lowered:,}" in shown


def test_a_graph_nodes_prompts_are_fitted_as_the_server_counts_them(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's prompt was fitted to the policy's target, and its completion cap to the
    window, on the estimate alone, where an agent's THINK scales the estimate by what the
    server counted of its last prompt (`context.scale`): a tokenizer that counts a third
    more than the estimate read a node's second prompt, estimated just under the target, as
    nearly the whole window, refused it with its cap and left no room to ask again, and the
    session failed CONTEXT. A node's later calls are fitted and capped as the server
    counted its earlier ones."""
    with _undercounted(long, monkeypatch, "tests.graphs:ASK_MORE", 8_000) as (chat, head):
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert not [r for r in chat.log if r.refused], "no call passed the window"
    first, second = chat.log
    assert first.tokens > 1.3 * 2_000, "the server counts a third more than the estimate"
    assert second.tokens <= 0.75 * 16_384, "the second prompt, as counted, is under the target"
    assert all(r.tokens + (r.max_tokens or 0) <= 16_384 for r in chat.log)


def test_a_graph_nodes_first_prompt_is_fitted_as_the_server_counted_the_nodes_before(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's scale (`ctx.scale`) began at 1 on every node's run: what the server counted
    of the session's earlier nodes' prompts was forgotten, so a node's first prompt was
    fitted to the target, and its cap to the window, on the bare estimate, and against a
    tokenizer counting a third more a second node's prompt estimated just under the target
    was refused with its cap and the session failed CONTEXT. The scale a node learned is
    kept on the card for the next node's first call."""
    with _undercounted(long, monkeypatch, "tests.graphs:PEEK_THEN_ASK", 8_000) as (chat, head):
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert not [r for r in chat.log if r.refused], "no call passed the window"
    peeked, asked = chat.log
    assert peeked.tokens > 1.3 * 2_000, "the server counts a third more than the estimate"
    assert asked.tokens <= 0.75 * 16_384, "the second node's prompt, as counted, is fitted"
    assert all(r.tokens + (r.max_tokens or 0) <= 16_384 for r in chat.log)


def test_a_branchs_first_prompt_is_fitted_as_the_server_counted_its_parents(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch (a child session running one node) starts with what its parent's nodes
    learned of the server's count, as it starts under the window they learned: its first
    prompt, estimated just under the target, is fitted as the server will count it."""
    with _undercounted(
        long, monkeypatch, "tests.graphs:ASK_AROUND", 8_000, counts_completion=False
    ) as (chat, head):
        done = long.run(head.id)
        for branch in long.store.children(head.id):
            long.run(branch.id)
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    split, *parts = chat.log
    assert len(parts) == 2
    # the session's first call: nothing learned yet, counted past the target
    assert split.tokens > 0.75 * 16_384
    assert all(r.tokens <= 0.75 * 16_384 for r in parts), [r.tokens for r in parts]


def test_a_graph_node_refused_as_too_long_keeps_its_earlier_calls_on_the_bill(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose second prompt the server refused as too long, stating no window, fails
    the session `CONTEXT`; its first call, answered and charged, was dropped from the bill
    (the session's tokens and cost, the node's step) though its `model_called` event was
    kept."""
    chat = WindowedChat(window=9_000, steps=5, states_window=False)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK_MORE", {"size": 8_000}, model="openai:long", price=PRICE
        )
        done = long.run(head.id)
    assert (done.status, done.error_code) == (Status.FAILED, "CONTEXT")
    assert [r.refused for r in chat.log] == [False, True]
    (answered,) = chat.answered
    billed = (answered.tokens * PRICE[0] + COMPLETION_TOKENS * PRICE[1]) / 1e6
    assert done.tokens == answered.tokens + COMPLETION_TOKENS
    assert done.cost_usd == pytest.approx(billed)
    session = long.store.load(head.id)
    (node,) = [s for s in session.steps if any(c.name == "ask" for c in s.calls)]
    assert node.usage.prompt_tokens == answered.tokens and node.cost_usd == pytest.approx(billed)
    kinds = [e.kind for e in session.events]
    assert kinds.index(EventKind.MODEL_CALLED) < kinds.index(EventKind.CONTEXT_OVERFLOW)


def test_a_graph_nodes_prompt_refused_as_too_long_is_a_context_overflow_event(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's refused prompt is a `context_overflow` event (`show` and `watch`: "the
    model refused a prompt of about N tokens as too long · window W, the model states S");
    a graph node's was only a log line, or the session's failure."""
    from tickwork import render, views

    with windowed_chat(WindowedChat(window=9_000, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK",
            {"size": 8_000},
            model="openai:long",
            price=PRICE,
            context_window=32_768,
        )
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert [r.refused for r in chat.log] == [True, False]
    events = views.session(long.store.load(head.id))["events"]
    kinds = [e["kind"] for e in events]
    assert kinds.index(EventKind.CONTEXT_OVERFLOW) < kinds.index(EventKind.MODEL_CALLED)
    (overflow,) = [e for e in events if e["kind"] == EventKind.CONTEXT_OVERFLOW]
    data = overflow["data"]
    assert (data["node"], data["window"], data["stated_window"]) == ("ask", 32_768, 9_000)
    assert data["prompt_tokens_estimate"] == chat.log[0].tokens
    assert "maximum context length is 9000 tokens" in data["error"]
    shown = render.event_line(overflow).plain
    assert "node ask" in shown and "window 32,768, the model states 9,000" in shown


def _reports(long: Long, session_id: str) -> list[TickReport]:
    """The session ticked until it rests, and the report of each tick."""
    reports = []
    for _ in range(1_000):
        head = long.store.get(session_id)
        if not head.status.runnable:
            return reports
        reports.append(advance(long.rt, session_id, head.version))
    raise AssertionError(f"session {session_id} did not rest")


@pytest.mark.parametrize(
    ("chat", "window"),
    [
        (WindowedChat(window=4_096, steps=4, counts_completion=True, undercount=0.33), 4_096),
        (WindowedChat(window=32_768, steps=60, compaction_window=14_000), 16_384),
    ],
    ids=["think", "compaction"],
)
def test_a_traces_max_tokens_is_the_cap_the_call_was_sent_with(
    long: Long, monkeypatch: pytest.MonkeyPatch, chat: WindowedChat, window: int
) -> None:
    """A call asked again with a lower cap (the server refused the first for its window)
    was traced with the cap first asked (`gen_ai.request.max_tokens`), and a compaction's
    call with none: the report of each model call holds the cap of the request answered."""
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=window)
        reports = _reports(long, session_id)
    assert long.store.get(session_id).status is Status.COMPLETED
    assert [r for r in chat.log if r.refused], "a cap was refused and asked again"
    called = [r.model for r in reports if r.model is not None and r.model.outcome == "ok"]
    assert [c.max_tokens for c in called] == [r.max_tokens for r in chat.answered]


def test_a_graph_nodes_traced_max_tokens_is_the_cap_it_was_sent_with(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _undercounted(long, monkeypatch, "tests.graphs:ASK", 12_000) as (chat, head):
        reports = _reports(long, head.id)
    (refused,) = [r for r in chat.log if r.refused]
    (sent,) = chat.answered
    assert sent.max_tokens is not None and sent.max_tokens < refused.max_tokens
    (called,) = [r.model for r in reports if r.model is not None]
    assert called.max_tokens == sent.max_tokens


def test_the_model_calls_of_a_node_that_fans_out_are_billed(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that called the model and then returned `fan_out(...)` was charged nothing:
    its calls' tokens and cost were on no step and in no budget, so the session's bill
    was its branches' alone. They are charged to the node's step, as any node's are."""
    with windowed_chat(WindowedChat(window=32_768, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK_AROUND", {"size": 1_000}, model="openai:long", price=PRICE
        )
        long.run(head.id)
        for branch in long.store.children(head.id):
            long.run(branch.id)
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert len(chat.answered) == 3
    billed = sum(r.tokens * PRICE[0] + COMPLETION_TOKENS * PRICE[1] for r in chat.answered)
    assert done.cost_usd == pytest.approx(billed / 1e6)
    assert done.tokens == sum(r.tokens + COMPLETION_TOKENS for r in chat.answered)
    session = long.store.load(head.id)
    (split,) = [s for s in session.steps if any(c.name == "split" for c in s.calls)]
    assert split.usage.prompt_tokens == chat.answered[0].tokens
    assert split.cost_usd == pytest.approx(
        (chat.answered[0].tokens * PRICE[0] + COMPLETION_TOKENS * PRICE[1]) / 1e6
    )


def test_a_compactions_cap_asked_again_is_in_its_model_called_event(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A THINK's call asked again with a lower cap says so in its `model_called` event; a
    compaction's said it nowhere (not even in the log), and its event left out the cached
    tokens a THINK's has."""
    from tickwork import render, views

    chat = WindowedChat(window=32_768, steps=60, compaction_window=14_000)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    first = next(i for i, r in enumerate(chat.log) if r.refused)
    assert chat.log[first].compaction and chat.log[first + 1].compaction
    lowered = chat.log[first + 1].max_tokens
    events = views.session(long.store.load(session_id))["events"]
    compactions = [
        e for e in events if e["kind"] == EventKind.MODEL_CALLED and e["data"].get("compaction")
    ]
    assert compactions[0]["data"]["cap_lowered_to"] == lowered
    assert compactions[0]["data"]["cached_prompt_tokens"] == chat.log[first + 1].cached
    assert f"cap lowered to {lowered:,}" in render.event_line(compactions[0]).plain


def test_a_graph_nodes_model_call_waits_out_a_429_and_a_503_as_an_agents_does(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rate limit or a server error of the model failed a graph session `INTERNAL` at
    once, where an agent's waits and asks again: the node's call now waits within its run
    (a `model_retry` event naming the node each time) and the session completes."""
    from tests.fakes import FakeModel, fake_model_server

    with fake_model_server(FakeModel([{"content": "fine"}], fail={0: [429, 503]})) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        head = long.client.submit(
            "tests.graphs:ASK", {"size": 10}, model="openai:long", price=PRICE
        )
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert fake.requests[0] == 3
    retries = [e for e in long.store.load(head.id).events if e.kind is EventKind.MODEL_RETRY]
    assert [(e.data["node"], e.data["attempt"]) for e in retries] == [("ask", 1), ("ask", 2)]
    assert "fake 429" in retries[0].data["error"] and "fake 503" in retries[1].data["error"]


def test_a_graph_nodes_model_call_failing_past_its_retries_fails_model_error(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the session's `max_model_retries` the error goes to the node: the session fails
    `MODEL_ERROR` (a model's failure, as an agent's), not `INTERNAL` (a bug)."""
    from tests.fakes import FakeModel, fake_model_server

    with fake_model_server(FakeModel([{"content": "fine"}], fail={0: [503] * 5})) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        head = long.client.submit(
            "tests.graphs:ASK",
            {"size": 10},
            model="openai:long",
            price=PRICE,
            budgets={"max_model_retries": 1},
        )
        done = long.run(head.id)
    assert (done.status, done.error_code) == (Status.FAILED, "MODEL_ERROR")
    assert "fake 503" in (done.error_message or "")
    assert fake.requests[0] == 2


@contextmanager
def _undercounted(
    long: Long,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    size: int,
    *,
    counts_completion: bool = True,
) -> Iterator[tuple[WindowedChat, Head]]:
    """A session of graph `kind` (its input `size`) submitted under a window of 16,384 to a
    server whose tokenizer counts a third more than the estimate; yields the server and
    the session's head while the server answers."""
    chat = WindowedChat(
        window=16_384, steps=5, counts_completion=counts_completion, undercount=0.33
    )
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            kind, {"size": size}, model="openai:long", price=PRICE, context_window=16_384
        )
        yield chat, head
