"""The context policy end to end (issue 23): long sessions over the OpenAI wire format
against a server with a context window, ticked in this process (the tick without Celery)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm import context
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import ErrorCode, EventKind, Head, Session, Status, StepKind, Usage
from tickwork.store import open_store
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.models.base import estimate_schemas
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Runtime, utc_now

from tests.context_server import COMPLETION_TOKENS, WindowedChat, windowed_chat, without_policy
from tickwork.client import Tickwork

KIND = "tests.jobs:LONG"
#: USD per million tokens, prompt and completion, given at submit
PRICE = (1.0, 2.0)


class Long:
    """A deployment whose ticks run here one after another, on SQLite."""

    def __init__(self, tmp: Path) -> None:
        self.settings = Settings(state_dir=tmp / "state")
        self.settings.state_dir.mkdir(parents=True)
        from tickwork.store.migrate import upgrade

        upgrade(self.settings.db_url)
        self.store = open_store(self.settings.db_url)
        self.client = Tickwork(self.settings, store=self.store)
        self.client.publish = lambda *_: None  # type: ignore[method-assign]
        self.rt = Runtime(
            settings=self.settings, store=self.store, jobs=Jobs(), publish_tick=lambda *_: None
        )

    def submit(
        self, *, budgets: dict[str, float] | None = None, kind: str = KIND, **kw: object
    ) -> str:
        budgets = {"max_steps": 5000, "max_tokens": 10**9, "max_cost_usd": 0, **(budgets or {})}
        return self.client.submit(
            kind, {"task": "read every chunk"}, model="openai:long", budgets=budgets, **kw
        ).id

    def run(self, session_id: str, *, ticks: int = 10_000) -> Head:
        for _ in range(ticks):
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            advance(self.rt, session_id, head.version)
        raise AssertionError(f"session {session_id} did not rest in {ticks} ticks")

    def close(self) -> None:
        self.rt.close()
        self.store.engine.dispose()


@pytest.fixture
def long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Long]:
    monkeypatch.setenv(
        "TICKWORK_IMPORTS", '["tests.jobs:LONG", "tests.jobs:WIDE", "tests.graphs:ASK"]'
    )
    deployment = Long(tmp_path)
    yield deployment
    deployment.close()


@pytest.mark.slow  # about 2 minutes: 2,000 ticks, each committing twice to SQLite
def test_a_thousand_steps_of_8_kb_stay_under_a_32k_window_cheaply_and_cached(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with windowed_chat(WindowedChat(window=32_768, steps=1000)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768, price=PRICE)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 1000 chunks"
    session = long.store.load(session_id)
    replies = [s for s in session.steps if s.kind is StepKind.REPLY]
    compactions = [s for s in session.steps if s.kind is StepKind.COMPACTION]
    assert len(replies) == 1001
    assert compactions, "a thousand 8 KB observations do not fit 32k tokens"
    assert [e.data["step"] for e in session.events if e.kind == "compacted"] == [
        s.step for s in compactions
    ]
    assert not [r for r in chat.log if r.refused], "no prompt passed the window"
    assert max(r.tokens for r in chat.log) <= 32_768
    sent = sum(r.tokens for r in chat.answered)
    assert sent == sum(s.usage.prompt_tokens for s in session.steps)
    assert sent <= 0.2 * without_policy(session)
    assert sum(r.cached for r in chat.answered) >= 0.6 * sent
    billed = sum(r.tokens * PRICE[0] + 12 * PRICE[1] for r in chat.answered) / 1e6
    assert head.cost_usd == pytest.approx(billed)
    assert head.tokens == sum(r.tokens + 12 for r in chat.answered)


def test_a_window_smaller_than_the_policy_says_compacts_on_the_refusal_and_goes_on(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with windowed_chat(WindowedChat(window=9_000, steps=40)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    refused = [r for r in chat.log if r.refused]
    assert refused and not any(r.compaction for r in refused)
    session = long.store.load(session_id)
    compactions = [s for s in session.steps if s.kind is StepKind.COMPACTION]
    # each refusal compacted at once, and the next prompt fitted
    assert len(compactions) >= len(refused)
    assert head.final_answer == "done: read 40 chunks"


def test_show_says_a_compaction_was_made_because_the_model_refused_the_prompt(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show` named a compaction made at once on a refusal as any other, and two in a row
    (a refused prompt after a compaction) read as one too many: the refusal was only in
    the events, which `watch` prints and `show` does not."""
    from rich.console import Console

    from tickwork import render, views

    with windowed_chat(WindowedChat(window=9_000, steps=20, states_window=False)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        long.run(session_id)
    view = views.session(long.store.load(session_id))
    overflow = next(e["data"] for e in view["events"] if e["kind"] == "context_overflow")
    shown = next(s for s in view["steps"] if s["step"] == overflow["step"])
    assert shown["kind"] == "compaction"
    assert shown["refused_prompt"] == {
        "prompt_tokens_estimate": overflow["prompt_tokens_estimate"],
        "window": 32_768,
        "stated_window": overflow["stated_window"],
    }
    out = Console(width=300, record=True)
    out.print(render.timeline(view))
    assert (
        f"step {shown['step']} · compaction of steps 1-{shown['compacted_through']} (the model "
        f"refused the prompt of about {overflow['prompt_tokens_estimate']:,} tokens in a "
        "window of 32,768 as too long)"
    ) in out.export_text()
    refused = {e["data"]["step"] for e in view["events"] if e["kind"] == "context_overflow"}
    for step in view["steps"]:
        made_on_refusal = step["kind"] == "compaction" and step["step"] in refused
        assert ("refused_prompt" in step) is made_on_refusal


def test_the_completion_cap_leaves_the_prompt_room_in_a_window_that_counts_both(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM, OpenAI and Anthropic refuse a call whose prompt and completion cap together pass
    the model's window: a cap of the model's 8,192 tokens in a 16k window would be refused
    from the first prompt past half the window, and a session with its window set right would
    compact at every refusal instead of going on, masked, to the 0.75 target. The server's
    tokenizer counts more than the worker's estimate, as a real one does."""
    chat = WindowedChat(window=16_384, steps=30, counts_completion=True, undercount=0.08)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 30 chunks"
    assert not [r for r in chat.log if r.refused], "no call passed the window"
    assert all(r.tokens + (r.max_tokens or 0) <= 16_384 for r in chat.log)
    assert max(r.tokens for r in chat.log) > 16_384 - 8_192, "the prompts grew past half"
    session = long.store.load(session_id)
    assert not [s for s in session.steps if s.kind is StepKind.COMPACTION]


def test_the_tools_schemas_count_against_the_target_with_the_transcript(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call sends the tools' schemas beside the messages (here all the repair tools',
    about 1,900 tokens), and the server counts them in its window: a prompt whose transcript alone
    is under the 0.75 target but is past it with them is masked, so no prompt the model reads
    passes the target while masking can bring it under."""
    chat = WindowedChat(window=16_384, steps=30, counts_tools=True, record=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(kind="tests.jobs:WIDE", context_window=16_384)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 30 chunks"
    schemas = estimate_schemas(chat.log[0].tools or [])
    assert schemas > 1_800, "the repair tools' schemas are sent"
    assert max(r.tokens for r in chat.log) <= int(16_384 * context.DEFAULT_TARGET)
    assert max(r.tokens for r in chat.log) > int(16_384 * context.DEFAULT_TARGET) - 2_048


def test_the_call_after_a_compaction_has_the_room_of_its_own_prompt(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the compaction read (the whole transcript before it) is no floor for the shorter
    prompt after it: the next call's cap is the room its own prompt leaves."""
    chat = WindowedChat(window=16_384, steps=60, counts_completion=True, record=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    after = [i + 1 for i, r in enumerate(chat.log) if r.compaction and not r.refused]
    assert after, "60 replies pass the span of 50: a compaction"
    for i in after:
        r = chat.log[i]
        room = 16_384 - (r.tokens + r.tokens // 8) - 200  # the tools' schemas: 200 at most
        assert r.max_tokens is not None and r.max_tokens >= min(8_192, room)


def test_a_cap_refused_for_a_prompt_that_fits_is_asked_again_not_compacted(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tokenizer that counts a third more than the estimate from the middle of a session
    on (the worker scales its estimate by the server's count of the last prompt, so only
    a change of it surprises the worker): the server refuses caps the worker thought fit,
    saying how long the prompt is; the call is asked again within the room left, and the
    session goes on without compacting at each refusal."""
    chat = WindowedChat(window=16_384, steps=30, counts_completion=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        while len(chat.log) < 4:
            advance(long.rt, session_id, long.store.get(session_id).version)
        chat.undercount = 0.33
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 30 chunks"
    refused = [i for i, r in enumerate(chat.log) if r.refused]
    assert refused, "the server refused some caps"
    for i in refused:
        again = chat.log[i + 1]
        assert not again.refused and again.tokens == chat.log[i].tokens
        assert again.max_tokens == 16_384 - again.tokens
    session = long.store.load(session_id)
    assert not [s for s in session.steps if s.kind is StepKind.COMPACTION]


def test_a_cap_asked_again_within_the_window_is_in_the_sessions_events(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model asked again with a lower cap where the server refused one for the window,
    and nothing in the session said so: its `model_called` event names the cap it was
    lowered to, and the timeline shows it."""
    from tickwork import render, views

    chat = WindowedChat(window=4_096, steps=2, counts_completion=True, undercount=0.33)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=4_096)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    refused = [i for i, r in enumerate(chat.log) if r.refused]
    assert refused, "the server refused a cap"
    lowered_to = [chat.log[i + 1].max_tokens for i in refused]
    events = views.session(long.store.load(session_id))["events"]
    called = [e for e in events if e["kind"] == EventKind.MODEL_CALLED]
    assert [e["data"]["cap_lowered_to"] for e in called if "cap_lowered_to" in e["data"]] == (
        lowered_to
    )
    shown = render.event_line(next(e for e in called if "cap_lowered_to" in e["data"])).plain
    assert f"cap lowered to {lowered_to[0]:,}" in shown


def test_a_prompt_no_compaction_fits_fails_with_code_context(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with windowed_chat(WindowedChat(window=10, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        head = long.run(session_id)
    assert head.status is Status.FAILED
    assert head.error_code is ErrorCode.CONTEXT
    assert "context window" in head.error_message
    assert long.client.dead_letter(session_id).code == "CONTEXT"
    assert chat.log[-1].refused


def test_a_session_stored_without_a_policy_refused_as_too_long_fails_context(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session of 0.1.0 (no `context` in its config) has nothing to compact under: a
    refusal fails it CONTEXT, not INTERNAL."""
    from sqlalchemy import text

    with windowed_chat(WindowedChat(window=10, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        with long.store.engine.begin() as conn:
            conn.execute(
                text("UPDATE tickwork_sessions SET config = json_remove(config, '$.context')")
            )
        assert context.policy_of(long.store.get(session_id).config) is None
        head = long.run(session_id)
    assert head.status is Status.FAILED
    assert head.error_code is ErrorCode.CONTEXT, head.error_message
    assert "no context policy" in head.error_message


def test_recall_gives_back_an_elided_observation_from_the_store(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.jobs import chunk

    with windowed_chat(WindowedChat(window=32_768, steps=12, record=True)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=10_000)
        long.run(session_id)
        sent = chat.log[-1].messages
    assert sent is not None
    stub = context.elided("s1c0", "read_chunk", 8192)
    assert any(m.get("content") == stub for m in sent), "chunk 1 is masked by the end"
    assert any(t["function"]["name"] == "recall" for t in _tools(long, session_id))
    head = long.store.get(session_id)
    found, is_error = _recall(long, head, "s1c0")
    assert (found, is_error) == (chunk(1), False)
    missing, is_error = _recall(long, head, "s99c0")
    assert is_error and "no call 's99c0'" in missing


def _tools(long: Long, session_id: str) -> list[dict[str, object]]:
    from tickwork.worker.tick.agent import schemas_for as _schemas

    head = long.store.get(session_id)
    return _schemas(long.rt.jobs.tools(head.kind), head)


def _recall(long: Long, head: Head, call_id: str) -> tuple[str, bool]:
    from tickwork.worker.tick.agent import recall

    return recall(long.rt, head, {"call_id": call_id})


def test_a_fork_after_a_compaction_sends_what_the_parent_sent_at_that_step(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with windowed_chat(WindowedChat(window=32_768, steps=30, record=True)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        parent_id = long.submit(context_window=8_800)
        assert long.run(parent_id).status is Status.COMPLETED
        parent = long.store.load(parent_id)
        sent = [r.messages for r in chat.answered]
        assert len(sent) == len(parent.steps), "one request per step, none refused"
        compaction = next(s for s in parent.steps if s.kind is StepKind.COMPACTION)
        # a step after the compaction whose next prompt also masks (the view keeps moving)
        for at in (compaction.step + 1, compaction.step + 2, len(parent.steps) - 3):
            fork = long.client.fork(parent_id, from_step=at, by="tests")
            asked = len(chat.answered)
            head = long.run(fork.id)
            assert head.status is Status.COMPLETED, (head.error_code, head.error_message)
            assert chat.answered[asked].messages == sent[at], f"fork from step {at}"


def _scripted(long: Long, tmp: Path, steps: int, *, window: int | None = None) -> str:
    """A session whose scripted model reads chunks 1..`steps`, then answers."""
    replies: list[dict[str, object]] = [
        {
            "content": f"reading chunk {n}",
            "tool_calls": [{"name": "read_chunk", "arguments": {"n": n}}],
        }
        for n in range(1, steps + 1)
    ]
    replies.append({"content": f"done: read {steps} chunks"})
    path = tmp / f"read-{steps}.json"
    path.write_text(json.dumps(replies))
    return long.client.submit(
        KIND,
        {"task": "read every chunk"},
        model=f"scripted:{path}",
        budgets={"max_steps": 5000, "max_tokens": 10**9},
        context_window=window,
    ).id


def _played(session: Session) -> list[str]:
    return [s.thought for s in session.steps if s.kind is StepKind.REPLY]


@pytest.mark.parametrize(
    ("steps", "window"),
    [
        pytest.param(120, None, id="past_the_span"),
        pytest.param(40, 8_800, id="past_the_window"),
    ],
)
def test_a_scripted_session_plays_its_script_in_order_across_compactions(
    long: Long, tmp_path: Path, steps: int, window: int | None
) -> None:
    """The scripted model answers a compaction itself, without using a reply of its
    script, and counts the replies a summary stands for: every reply is played once."""
    session_id = _scripted(long, tmp_path, steps, window=window)
    done = long.run(session_id)
    assert done.status is Status.COMPLETED, done.error_message
    assert done.final_answer == f"done: read {steps} chunks"
    session = long.store.load(session_id)
    assert _played(session) == [f"reading chunk {n}" for n in range(1, steps + 1)] + [
        f"done: read {steps} chunks"
    ]
    compactions = [s for s in session.steps if s.kind is StepKind.COMPACTION]
    assert len(compactions) >= 2
    assert all(s.thought.startswith("[scripted summary] replies 1-") for s in compactions)


def test_a_fork_of_a_scripted_session_after_a_compaction_plays_on_from_its_step(
    long: Long, tmp_path: Path
) -> None:
    parent_id = _scripted(long, tmp_path, 120)
    assert long.run(parent_id).status is Status.COMPLETED
    parent = long.store.load(parent_id)
    first, second = [s.step for s in parent.steps if s.kind is StepKind.COMPACTION][:2]
    for at in (first, first + 1, second + 3):
        fork = long.client.fork(parent_id, from_step=at, by="tests")
        head = long.run(fork.id)
        assert head.status is Status.COMPLETED, (at, head.error_message)
        assert _played(long.store.load(fork.id)) == _played(parent), f"fork from step {at}"


def test_a_react_session_compacts_with_its_text_summary(long: Long, tmp_path: Path) -> None:
    """A text model (ReAct) answers a compaction in plain text: it is the summary, not a
    nameless call (which left the summary empty and the compaction retried forever)."""
    steps = 60  # past the span: at least one compaction
    replies = [
        {"content": f'Thought: chunk {n}\nAction: read_chunk\nAction Input: {{"n": {n}}}'}
        for n in range(1, steps + 1)
    ]
    replies.append({"content": f"Final Answer: read {steps} chunks"})
    path = tmp_path / "react.json"
    path.write_text(json.dumps(replies))
    head = long.client.submit(
        KIND,
        {"task": "read every chunk"},
        model=f"react:scripted:{path}",
        budgets={"max_steps": 500, "max_tokens": 10**9},
    )
    done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert done.final_answer == f"read {steps} chunks"
    session = long.store.load(head.id)
    compactions = [s for s in session.steps if s.kind is StepKind.COMPACTION]
    assert compactions and all(s.thought.startswith("[scripted summary]") for s in compactions)
    assert _played(session)[:2] == ["chunk 1", "chunk 2"] and len(_played(session)) == steps + 1


def test_a_graph_nodes_model_calls_land_on_its_step_under_the_policy(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with windowed_chat(WindowedChat(window=32_768, steps=5, record=True)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK",
            {"size": 8_000},
            model="openai:long",
            price=PRICE,
            context_window=8_000,
        )
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    (sent,) = chat.answered
    assert sent.messages is not None
    tools = [m["content"] for m in sent.messages if m["role"] == "tool"]
    assert tools[:3] == ["[tool output elided: 8000 bytes]"] * 3, "past the target: masked"
    assert tools[3:] == [f"{i}" * 8_000 for i in (3, 4, 5)], "the newest three stay whole"
    session = long.store.load(head.id)
    node = next(s for s in session.steps if any(c.name == "ask" for c in s.calls))
    assert node.usage.prompt_tokens == sent.tokens
    assert node.usage.completion_tokens == 12
    assert node.cost_usd == pytest.approx((sent.tokens * PRICE[0] + 12 * PRICE[1]) / 1e6)
    assert done.tokens == sum(s.usage.total for s in session.steps) == sent.tokens + 12
    assert done.cost_usd == pytest.approx(sum(s.cost_usd for s in session.steps))


def test_a_graph_node_fits_its_prompt_under_the_window_its_model_stated(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's policy is its config's under the window its model stated, where smaller
    (`context.policy_for`): a node's completion cap was planned under that window, but its
    prompt was fitted to the config's, so it went out whole, as if the window were larger."""
    from tickwork.worker.tick.graphs import NodeContext, node_key

    with windowed_chat(WindowedChat(window=32_768, steps=5, record=True)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        submitted = long.client.submit(
            "tests.graphs:ASK",
            {"size": 8_000},
            model="openai:long",
            price=PRICE,
            context_window=32_768,
        )
        stated = {**submitted.result, context.STATED_WINDOW: 8_000}
        head = long.store.get(submitted.id).model_copy(update={"result": stated})
        policy = context.policy_for(head)
        assert policy is not None and policy.window == 8_000
        ctx = NodeContext(
            session_id=head.id,
            step=1,
            node="ask",
            idempotency_key=node_key(head.id, 1, "ask"),
            config=head.config,
            rt=long.rt,
            head=head,
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": "what do these say?"}]
        messages += [
            {"role": "tool", "tool_call_id": f"t{i}", "content": f"{i}" * 8_000} for i in range(6)
        ]
        ctx.generate(messages)
    (sent,) = chat.answered
    assert sent.messages is not None
    tools = [m["content"] for m in sent.messages if m["role"] == "tool"]
    assert tools[:3] == ["[tool output elided: 8000 bytes]"] * 3, "past the stated target"
    assert tools[3:] == [f"{i}" * 8_000 for i in (3, 4, 5)]
    assert sent.max_tokens is not None and sent.tokens + sent.max_tokens <= 8_000


def test_a_graph_nodes_completion_cap_leaves_its_prompt_room_in_the_window(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's call asks for what its prompt leaves of the window, as an agent's does: with
    the model's whole cap beside a prompt masked to the target, a server that counts both
    refused it (the model then asked again with the room the server stated: a call lost)."""
    chat = WindowedChat(window=16_384, steps=5, counts_completion=True, record=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK",
            {"size": 12_000},
            model="openai:long",
            price=PRICE,
            context_window=16_384,
        )
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    (sent,) = chat.answered
    assert not [r for r in chat.log if r.refused], "no call passed the window"
    assert sent.max_tokens is not None and sent.tokens + sent.max_tokens <= 16_384
    assert sent.tokens > 16_384 - 8_192, "the prompt leaves less than the model's own cap"


def test_a_graph_nodes_cap_asked_again_within_the_window_is_logged(
    long: Long, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's log says that a node's call was asked again with a lower cap, and
    which (its `model_called` event says it too: tests/worker/test_long_sessions.py)."""
    chat = WindowedChat(window=16_384, steps=5, counts_completion=True, undercount=0.33)
    with windowed_chat(chat), caplog.at_level("WARNING", logger="tickwork.graph"):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK",
            {"size": 12_000},
            model="openai:long",
            price=PRICE,
            context_window=16_384,
        )
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    (refused,) = [i for i, r in enumerate(chat.log) if r.refused]
    lowered = chat.log[refused + 1].max_tokens
    said = [r.getMessage() for r in caplog.records if "asked again" in r.getMessage()]
    assert said == [
        f"session {head.id}: node 'ask': the server refused a completion cap of "
        f"{chat.log[refused].max_tokens:,} tokens for its window; asked again with {lowered:,}"
    ]


def test_a_graph_node_whose_prompt_is_refused_as_too_long_fails_with_context(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    with windowed_chat(WindowedChat(window=1_000, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK", {"size": 8_000}, model="openai:long", price=PRICE
        )
        done = long.run(head.id)
    assert chat.log[-1].refused
    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.CONTEXT)
    assert "node 'ask'" in done.error_message
    # the window the model stated is on the card, and the message says what to do
    assert done.result[context.STATED_WINDOW] == 1_000
    assert "the model states a context window of 1,000 tokens" in done.error_message
    assert "(`context_window`)" in done.error_message


def test_a_graph_node_found_started_and_run_again_reads_failed_when_refused_as_too_long(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that may run twice, found started (its worker died in it), runs again; refused
    as too long, it failed the session CONTEXT closing the node's call as interrupted ("it
    may or may not have run"). It ran again, and raised: it reads as failed with the
    refusal, as a node that raised anything else does (a cancel and the deadline, which stop
    it before it runs again, close it as not run)."""
    with windowed_chat(WindowedChat(window=1_000, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.client.submit(
            "tests.graphs:ASK", {"size": 8_000}, model="openai:long", price=PRICE
        ).id
        advance(long.rt, session_id, long.store.get(session_id).version)  # the node chosen
        head = long.store.get(session_id)
        assert head.status is Status.EXECUTING
        # a worker took the node's tick, started the node and died: its lease ran out
        then = utc_now() - timedelta(hours=1)
        dead = long.store.claim(session_id, head.version, owner="dead", now=then, lease_s=1)
        assert dead is not None
        (call,) = dead.calls
        long.store.start_call(session_id, head.version, call, owner="dead", now=then)

        done = long.run(session_id)
    assert chat.log[-1].refused
    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.CONTEXT)
    observed = long.store.load(session_id).observation(call.call_id)
    assert observed is not None and observed.content == f"failed: {done.error_message}"
    assert "node 'ask': the model refused its prompt as too long" in observed.content


def test_a_graph_node_refused_as_too_long_is_fitted_under_the_stated_window_once(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's prompt refused as too long by a server whose window is below the session's
    failed the session with CONTEXT at once, the window the refusal stated forgotten, where
    an agent's session learns it and goes on: the node's call is fitted under the stated
    window and asked once more, and the window is recorded on the card."""
    with windowed_chat(WindowedChat(window=9_000, steps=5, record=True)) as chat:
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
    assert done.result[context.STATED_WINDOW] == 9_000
    (sent,) = chat.answered
    assert sent.messages is not None
    tools = [m["content"] for m in sent.messages if m["role"] == "tool"]
    assert tools[:3] == ["[tool output elided: 8000 bytes]"] * 3, "fitted under 9,000"


@pytest.mark.parametrize("window", [0, 100, 10**8, True])
def test_a_context_window_out_of_bounds_is_refused_at_submit(long: Long, window: int) -> None:
    from tickwork.fsm.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"^`context_window` must be"):
        long.submit(context_window=window)


def test_the_policy_is_stored_in_the_config_from_the_model_table_or_the_submit(
    long: Long,
) -> None:
    table = long.client.submit(KIND, {}, model="openai:gpt-4o-2024-08-06")
    assert table.config["context"] == {"window": 128_000, "target": 0.75, "keep": 3, "span": 50}
    unknown = long.client.submit(KIND, {}, model="openai:my-local-llm", price=PRICE)
    assert unknown.config["context"]["window"] == 16_384
    given = long.client.submit(KIND, {}, model="openai:gpt-4o", context_window=50_000)
    assert given.config["context"]["window"] == 50_000
    forked = long.client.fork(given.id, from_step=0, by="tests")
    assert forked.config["context"] == given.config["context"]


@pytest.mark.parametrize(
    ("code", "message", "too_long"),
    [
        ("context_length_exceeded", "", True),
        ("", "This model's maximum context length is 8192 tokens. However, you requested", True),
        ("", "the prompt is too long: 40000 tokens > 32768", True),
        ("invalid_request_error", "'messages' must contain the word 'json'", False),
    ],
)
def test_the_openai_client_knows_a_prompt_refused_as_too_long(
    code: str, message: str, too_long: bool
) -> None:
    from tickwork.worker.models.openai import _too_long

    assert _too_long(code, message) is too_long


def test_show_and_watch_name_a_compaction(long: Long, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from tickwork import render, views

    with windowed_chat(WindowedChat(window=32_768, steps=12)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_800)
        long.run(session_id)
    session = long.store.load(session_id)
    compaction = next(s for s in session.steps if s.kind is StepKind.COMPACTION)
    view = views.session(session)
    shown = next(s for s in view["steps"] if s["step"] == compaction.step)
    assert (shown["kind"], shown["compacted_through"]) == (
        "compaction",
        compaction.compacted_through,
    )
    out = Console(width=200, record=True)
    out.print(render.timeline(view))
    assert f"step {compaction.step} · compaction of steps 1-{compaction.compacted_through}" in (
        out.export_text()
    )
    event = next(e for e in view["events"] if e["kind"] == "compacted")
    line = render.event_line(event).plain
    assert f"steps 1-{compaction.compacted_through} summarised" in line


def test_show_says_where_the_model_began_to_see_stubs(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only `masked_through` in `show --json` said which observations the model read as
    stubs at a step: its line in `show` says so where that moves on (a compaction's line
    names its own cut, and the steps after it start from there)."""
    from rich.console import Console

    from tickwork import render, views

    with windowed_chat(WindowedChat(window=32_768, steps=12)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_800)
        long.run(session_id)
    view = views.session(long.store.load(session_id))
    out = Console(width=300, record=True)
    out.print(render.timeline(view))
    lines = {
        int(line.split()[1]): line.rstrip("─ ")
        for line in out.export_text().splitlines()
        if line.startswith("step ")
    }
    before, moved = 0, []
    for step in view["steps"]:
        through = step["masked_through"]
        if step["kind"] == "reply" and through > before:
            moved.append(step["step"])
            assert lines[step["step"]].endswith(
                f" · observations of steps ≤{through} shown as stubs"
            ), lines[step["step"]]
        else:
            assert "shown as stubs" not in lines[step["step"]]
        before = through
    assert moved, "the session was masked"


def test_a_compaction_is_a_tick_of_its_own_in_the_traces(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from tickwork.worker.observers.tracing import SessionTracer

    exporter = InMemorySpanExporter()
    tracer = SessionTracer(
        exporter,
        masker=long.rt.masker,
        heads=long.store.get,
        capture_content=False,
        batch=False,
    )
    long.rt.observers.add(tracer)
    with windowed_chat(WindowedChat(window=32_768, steps=12)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_800)
        long.run(session_id)
    session = long.store.load(session_id)
    cuts = [s.compacted_through for s in session.steps if s.kind is StepKind.COMPACTION]
    spans = exporter.get_finished_spans()
    ticks = [s for s in spans if s.name == "tick compact"]
    assert len(ticks) == len(cuts)
    chats = [
        dict(s.attributes or {})
        for s in spans
        if "tickwork.context.compacted_through" in (s.attributes or {})
    ]
    assert [c["tickwork.context.compacted_through"] for c in chats] == cuts
    assert all(c["gen_ai.usage.input_tokens"] > 0 for c in chats)


def test_a_window_the_refusal_states_is_recorded_logged_and_then_planned_under(
    long: Long, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server whose window is below the configured one was refused every few calls, each
    time compacting a step or two, and nothing said so (found by an outside run): its
    stated window is recorded with an event and a warning, and the session goes on under
    it, refused once."""
    with windowed_chat(WindowedChat(window=9_000, steps=40)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        with caplog.at_level("WARNING", logger="tickwork.tick"):
            head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert len([r for r in chat.log if r.refused]) == 1
    assert head.result[context.STATED_WINDOW] == 9_000
    session = long.store.load(session_id)
    overflows = [e.data for e in session.events if e.kind == "context_overflow"]
    assert len(overflows) == 1
    assert overflows[0]["window"] == 32_768 and overflows[0]["stated_window"] == 9_000
    assert overflows[0]["prompt_tokens_estimate"] > 9_000
    assert "maximum context length is 9000 tokens" in overflows[0]["error"]
    from tickwork.render import summary

    assert summary("context_overflow", overflows[0]).endswith(
        "as too long · window 32,768, the model states 9,000"
    )
    warned = [r.getMessage() for r in caplog.records if "refused the prompt" in r.getMessage()]
    assert len(warned) == 1 and session_id in warned[0]
    assert "window is 32,768 tokens, the model states 9,000" in warned[0]
    assert max(r.tokens for r in chat.answered) <= 9_000


def test_a_context_dead_letter_is_forked_onto_a_larger_window(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CONTEXT dead letter could only be submitted again, every step lost (found by an
    outside run): a fork takes a context window, recorded in its patch."""
    with windowed_chat(WindowedChat(window=10, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        failed = long.run(session_id)
        assert failed.error_code is ErrorCode.CONTEXT, failed.error_message
        chat.window = 9_000
        again = long.client.fork(session_id, from_step=0, by="tests")
        assert again.config["context"]["window"] == 10, "the window the model stated"
        with pytest.raises(InvalidInput, match=r"^`context_window` must be between 1,024"):
            long.client.fork(session_id, from_step=0, by="tests", context_window=10)
        fork = long.client.fork(
            session_id, from_step=0, by="tests", context_window=9_000, again=True
        )
        assert fork.config["context"] == {**failed.config["context"], "window": 9_000}
        head = long.run(fork.id)
    assert head.status is Status.COMPLETED, head.error_message
    forked = [e for e in long.store.load(fork.id).events if e.kind == "forked"]
    assert forked[0].data["patch"] == {"context_window": 9_000}


def test_an_operator_sets_a_models_context_window_next_to_its_price(tmp_path: Path) -> None:
    """Every model the built-in table does not know (vLLM, Ollama) ran at 16,384 unless
    each submitter gave its window (found by an outside run)."""
    settings = Settings(
        state_dir=tmp_path / "state",
        prices={
            "my-vllm": {"prompt": 0, "completion": 0, "context_window": 131_072},
            "my-ollama": [0, 0, None, None, None, 8_192],
        },
    )
    settings.state_dir.mkdir(parents=True)
    from tickwork.store.migrate import upgrade

    upgrade(settings.db_url)
    client = Tickwork(settings)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    try:
        windows = [
            client.submit(KIND, {}, model=model, **given).config["context"]["window"]
            for model, given in [
                ("openai:my-vllm", {}),
                ("openai:my-ollama", {}),
                ("openai:my-vllm", {"context_window": 50_000}),
            ]
        ]
        with pytest.raises(InvalidInput, match="give it as context_window"):
            client.submit(
                KIND,
                {},
                model="openai:gpt-4o",
                price={"prompt": 9, "completion": 99, "context_window": 50_000},
            )
    finally:
        client.close()
    assert windows == [131_072, 8_192, 50_000]


def test_a_compaction_answered_with_a_tool_call_says_so_and_is_billed(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request offers the tools (the cached prefix): a model that calls one instead of
    writing the summary is retried, each attempt billed, and the dead letter names the
    call, not an empty summary."""
    with windowed_chat(WindowedChat(window=32_768, steps=30, calls_for_summary=True)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_800, budgets={"max_model_retries": 2})
        done = long.run(session_id)
    assert done.error_code is ErrorCode.MODEL_ERROR
    assert done.error_message == (
        "after 3 attempts: the model called read_chunk instead of writing the summary a "
        "compaction asks for"
    )
    assert sum(r.compaction for r in chat.log) == 3
    assert done.tokens == sum(r.tokens + COMPLETION_TOKENS for r in chat.log)


def test_a_summary_with_a_tool_call_beside_it_is_kept_and_the_call_named_not_run(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction answered with its summary and a tool call: the summary is the
    compaction's, and the call, which does not run, is named on its event and in `show`
    (it was dropped without a word)."""
    from rich.console import Console

    from tickwork import render, views

    chat = WindowedChat(window=32_768, steps=12, calls_beside_summary=True)
    with windowed_chat(chat) as served:
        monkeypatch.setenv("OPENAI_BASE_URL", served.url)
        session_id = long.submit(context_window=8_800)
        done = long.run(session_id)
    assert done.status is Status.COMPLETED, done.error_message
    session = long.store.load(session_id)
    compaction = next(s for s in session.steps if s.kind is StepKind.COMPACTION)
    assert compaction.thought.startswith("Summary: read chunks up to n=")
    assert not compaction.calls
    event = next(e for e in session.events if e.kind is EventKind.COMPACTED)
    assert event.data["ignored_calls"] == ["read_chunk"]
    view = views.session(session)
    out = Console(width=300, record=True)
    out.print(render.timeline(view))
    note = "(the model also called read_chunk: not run, a compaction runs none)"
    assert (
        f"step {compaction.step} · compaction of steps 1-{compaction.compacted_through} {note}"
        in out.export_text()
    )
    shown = next(e for e in view["events"] if e["kind"] == "compacted")
    assert render.event_line(shown).plain.endswith(note)


def test_a_tokenizer_that_counts_a_third_more_does_not_end_a_long_session(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose tokenizer counts a third more than the estimate (code and JSON do):
    past the window's end the prompt's estimate was still under the target, so the session
    neither masked nor compacted until the server refused a prompt with too little room for
    an answer, and then refused the compaction's request too: the session failed CONTEXT.
    The estimate is scaled to what the server counted for the last prompt, so the session
    masks and compacts in time, and no prompt the server reads passes the window."""
    chat = WindowedChat(window=11_000, steps=70, counts_completion=True, undercount=0.33)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 70 chunks"
    assert all(r.tokens <= 11_000 for r in chat.log), "no prompt passed the window"


def test_the_prompt_after_a_compaction_is_planned_as_the_server_counts_it(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tokenizer that counts a third more than the estimate: no reply follows a
    compaction yet, so the prompt after it, with the three observations it keeps whole,
    was planned at four characters a token; the server refused it as past its window, and
    a second compaction summarised the observations the model had just read. The
    compaction's request, which the server counted, scales the prompt after it."""
    chat = WindowedChat(window=8_192, steps=40, undercount=0.33, counts_tools=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_192)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 40 chunks"
    assert [r for r in chat.log if r.compaction], "it compacted"
    assert not [r for r in chat.log if r.refused], "no prompt passed the window"
    kinds = [s.kind for s in long.store.load(session_id).steps]
    assert (StepKind.COMPACTION, StepKind.COMPACTION) not in set(itertools.pairwise(kinds))


def test_a_prompt_near_the_window_is_capped_at_its_room_not_refused_at_every_call(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An 8k window whose target the prompts pass (the observations kept whole fill it):
    the room a prompt left, with an eighth more than its scaled estimate, was under 1,024
    tokens at almost every call, so the call was sent with the model's own cap, which a
    server counting prompt and cap within the window refused, and asked again within the
    room it named: two requests a call. The room the estimate leaves is the cap there."""
    chat = WindowedChat(window=8_192, steps=30, counts_completion=True, counts_tools=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_192)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 30 chunks"
    refused = [r for r in chat.log if r.refused]
    assert len(refused) <= 2, f"{len(refused)} of {len(chat.log)} requests refused"


def test_a_compaction_made_on_a_refusal_is_capped_at_the_room_of_its_own_request(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt that left too little room for an answer went with the model's own cap and
    was refused; the compaction made at once was sent with that same cap, which the
    server refused for its shorter request too, and it was asked again within the room."""
    chat = WindowedChat(window=8_192, steps=60, counts_completion=True, counts_tools=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_192)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    events = long.store.load(session_id).events
    assert [e for e in events if e.kind is EventKind.CONTEXT_OVERFLOW], "a prompt was refused"
    assert [r for r in chat.log if r.compaction], "it compacted"
    assert not [r for r in chat.log if r.compaction and r.refused]


def test_a_compaction_on_a_refusal_that_its_budget_cannot_hold_ends_the_session(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compaction made at once on a refused prompt shows whole the newest observations
    that prompt may have masked, so its request can be the longer one: where the tokens
    left could not hold it, its cap was under one token, which ModelSettings refuses: the
    tick raised and the session failed INTERNAL. It ends on its budget, as a THINK does."""
    plan = context.plan

    def longer_when_forced(*args: Any, **kw: Any) -> context.Plan:
        made = plan(*args, **kw)
        return dataclasses.replace(made, unscaled=10**9) if kw.get("force") else made

    monkeypatch.setattr(context, "plan", longer_when_forced)
    chat = WindowedChat(window=8_192, steps=60, counts_completion=True, counts_tools=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=8_192)
        head = long.run(session_id)
    assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.BUDGET_TOKENS)
    events = long.store.load(session_id).events
    assert [e for e in events if e.kind is EventKind.CONTEXT_OVERFLOW], "a prompt was refused"
    assert not [r for r in chat.log if r.compaction], "no compaction was asked"


def test_a_window_stated_in_a_refused_cap_is_the_sessions_from_then_on(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose window is below the session's refuses a cap that passes it, saying
    its window ("maximum context length is 12000 tokens ... (P in the messages, C in the
    completion)"): the call is asked again within the room, and the stated window was
    learned only once a prompt alone passed it, so every call until then was refused
    once. The window a refused cap states is the session's from then on."""
    chat = WindowedChat(window=12_000, steps=20, counts_completion=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.result["context_window"] == 12_000
    assert len([r for r in chat.log if r.refused]) == 1, "one refused cap taught the window"


def test_a_compactions_request_leaves_room_for_its_summary(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window the newest observations kept whole nearly fill (here three 8 KB chunks,
    counted a third over the estimate, in 10,000 tokens): a compaction's request was masked
    only where it passed the window itself, so one that left the summary less than 1,024
    tokens of room was refused, and the session failed CONTEXT ("compacting steps 1-19 was
    refused as too long too"). Its request now leaves that room, masking the newest too."""
    chat = WindowedChat(window=10_000, steps=40, counts_completion=True, undercount=0.33)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=10_000)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 40 chunks"
    assert [r for r in chat.log if r.compaction and not r.refused], "it compacted"


def test_a_window_stated_in_refusing_a_compactions_cap_is_the_sessions_from_then_on(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose window is below the session's refused the cap of a compaction's
    request, stating its window: the compaction was asked again within the room, but only
    an ordinary call learned a stated window, so the calls after it were planned, and
    capped, under the session's larger one. The compaction's refusal teaches it too."""
    chat = WindowedChat(window=32_768, steps=60, compaction_window=14_000)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    refused = [i for i, r in enumerate(chat.log) if r.refused]
    assert refused and chat.log[refused[0]].compaction, "the compaction's cap was refused"
    assert head.result[context.STATED_WINDOW] == 14_000
    session = long.store.load(session_id)
    assert any(s.kind is StepKind.COMPACTION for s in session.steps)
    after = [r for r in chat.log[refused[0] + 2 :] if not r.compaction]
    assert after, "the session called the model after the compaction"
    assert all(r.max_tokens is not None and r.tokens + r.max_tokens <= 14_000 for r in after)


def test_each_reply_keeps_the_estimate_its_prompt_was_sent_with(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context policy's scale divides the server's count of the last reply's prompt
    by that prompt's estimate, which each THINK found by building the prompt again: each
    reply's step now keeps the estimate of the prompt and tools' schemas it was sent with,
    and the scale it gives is the one the rebuilt prompt gave, masked and compacted."""
    from tickwork.worker.models.base import estimate_prompt

    chat = WindowedChat(window=11_000, steps=30, record=True, undercount=0.33)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    session = long.store.load(session_id)
    assert {s.kind for s in session.steps} == {StepKind.REPLY, StepKind.COMPACTION}
    assert any(s.masked_through for s in session.steps if s.kind is StepKind.REPLY), "masked"
    assert len(chat.answered) == len(session.steps), "one request per step"
    for request, step in zip(chat.answered, session.steps, strict=True):
        assert request.messages is not None and request.tools is not None
        sent = estimate_prompt(request.messages) + estimate_schemas(request.tools)
        assert step.prompt_estimate == sent

    schemas = estimate_schemas(_tools(long, session_id))
    # a compaction's request is never built again: only a reply's estimate may be missing
    stripped = [
        s.model_copy(update={"prompt_estimate": None}) if s.kind is StepKind.REPLY else s
        for s in session.steps
    ]
    seen = {o.call_id: o for o in session.observations}

    def scales(steps: list[Any]) -> list[float]:
        return [
            context.scale(
                session.head,
                steps[:n],
                seen,
                estimate=estimate_prompt,
                tools=schemas,
            )
            for n in range(len(steps) + 1)
        ]

    stored = scales(list(session.steps))
    assert stored == scales(stripped)
    assert max(stored) > 1.2, "the server counted about a third more than the estimate"


def test_a_think_builds_its_prompt_once(long: Long, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each THINK built the last reply's prompt again, only to estimate it for the scale:
    two prompts a tick, each as long as the transcript. It builds the one it sends."""
    built: list[int] = []
    build = context.build

    def counting(*args: Any, **kw: Any) -> list[dict[str, Any]]:
        built.append(1)
        return build(*args, **kw)

    monkeypatch.setattr(context, "build", counting)
    with windowed_chat(WindowedChat(window=131_072, steps=6, undercount=0.33)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=131_072)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert len(chat.log) == 7
    assert len(built) == len(chat.log)


def test_a_think_estimates_each_prompt_once(long: Long, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan estimated the prompt a THINK sends, and the THINK estimated it again,
    unscaled, for the estimate its step keeps: the plan hands its unscaled estimate back.
    Each prompt a tick tries is estimated once, and each reply keeps the estimate of the
    request the server received."""
    from tickwork.worker.models.base import estimate_prompt
    from tickwork.worker.tick import agent

    tried: list[str] = []
    estimate = agent.estimate

    def counting(messages: Any) -> int:
        tried.append(json.dumps(list(messages), sort_keys=True))
        return estimate(messages)

    monkeypatch.setattr(agent, "estimate", counting)
    chat = WindowedChat(window=11_000, steps=30, record=True, undercount=0.33)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000)
        for _ in range(1_000):
            head = long.store.get(session_id)
            if not head.status.runnable:
                break
            tried.clear()
            advance(long.rt, session_id, head.version)
            assert tried or head.status is not Status.READY, "a THINK plans its prompt"
            assert len(tried) == len(set(tried)), "a prompt was estimated twice in one tick"
    assert head.status is Status.COMPLETED, head.error_message
    session = long.store.load(session_id)
    assert {s.kind for s in session.steps} == {StepKind.REPLY, StepKind.COMPACTION}
    for request, step in zip(chat.answered, session.steps, strict=True):
        assert request.messages is not None and request.tools is not None
        sent = estimate_prompt(request.messages) + estimate_schemas(request.tools)
        assert step.prompt_estimate == sent


def test_a_thinks_budget_check_takes_the_plans_estimate(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate of the next call (budgets, completion cap) turned the transcript the
    plan had just estimated into text and estimated it again, and the schemas too: it
    takes the plan's estimate and the THINK's schemas' tokens instead (the figures are the
    same: tests/worker/models/test_models_pricing.py)."""
    from tickwork.worker.models import pricing

    passes: list[int] = []
    text, schemas = pricing.transcript_text, pricing.estimate_schemas

    def counted_text(messages: Any) -> str:
        passes.append(1)
        return text(messages)

    def counted_schemas(tools: Any) -> int:
        passes.append(2)
        return schemas(tools)

    monkeypatch.setattr(pricing, "transcript_text", counted_text)
    monkeypatch.setattr(pricing, "estimate_schemas", counted_schemas)
    chat = WindowedChat(window=11_000, steps=30, record=True, undercount=0.33)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert passes == []


def test_a_think_prices_its_session_once(long: Long, monkeypatch: pytest.MonkeyPatch) -> None:
    """A THINK found the session's price for the budgets' check, then again to bill the
    reply: it bills at the price it found, and the bills are those of the price."""
    from tickwork.worker.models import pricing
    from tickwork.worker.tick import agent

    thinks: list[int] = []
    priced: list[str] = []
    think, price = agent.think, long.rt.providers.price

    def counting_think(tick: Any) -> Any:
        thinks.append(1)
        return think(tick)

    def counting_price(spec: str, *args: Any, **kw: Any) -> Any:
        priced.append(spec)
        return price(spec, *args, **kw)

    monkeypatch.setattr(agent, "think", counting_think)
    monkeypatch.setattr(long.rt.providers, "price", counting_price)
    with windowed_chat(WindowedChat(window=32_768, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=32_768, price=PRICE)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert len(priced) == len(thinks) == 6
    given = pricing.as_price("openai:long", PRICE)
    for step in long.store.load(session_id).steps:
        assert step.cost_usd == pytest.approx(pricing.charge(given, step.usage))


def test_a_refused_prompts_compaction_is_planned_with_the_thinks_estimator(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt the model refuses as too long is compacted at once, planned with the
    estimator (scaled to the server's count) and the schemas' tokens the THINK planned it
    with, not worked out again: the tools' schemas are estimated once a THINK."""
    from tickwork.worker.tick import agent

    thinks: list[int] = []
    estimated: list[int] = []
    think, estimate = agent.think, agent.estimate_schemas

    def counting_think(tick: Any) -> Any:
        thinks.append(1)
        return think(tick)

    def counting_estimate(schemas: Any) -> int:
        estimated.append(1)
        return estimate(schemas)

    monkeypatch.setattr(agent, "think", counting_think)
    monkeypatch.setattr(agent, "estimate_schemas", counting_estimate)
    chat = WindowedChat(window=9_000, steps=12)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=9_000)
        while len(chat.log) < 2:
            advance(long.rt, session_id, long.store.get(session_id).version)
        chat.undercount = 2.0  # a tokenizer that counts thrice the estimate from here on
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    refused = [i for i, r in enumerate(chat.log) if r.refused and not r.compaction]
    assert refused and all(chat.log[i + 1].compaction for i in refused), "compacted at once"
    assert len(estimated) == len(thinks)


def test_a_think_builds_no_tool_schema_a_kind_built_before(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each THINK built every tool's schema again (a JSON copy of each), though they never
    change for a kind: the registry builds them once, and every call sends the same."""
    from tickwork.worker.tick import agent
    from tickwork.worker.tools.registry import Tool

    thinks: list[int] = []
    built: list[str] = []
    think, schema = agent.think, Tool.openai_schema

    def counting_think(tick: Any) -> Any:
        thinks.append(1)
        return think(tick)

    def counting_schema(self: Tool) -> dict[str, Any]:
        built.append(self.name)
        return schema(self)

    monkeypatch.setattr(agent, "think", counting_think)
    monkeypatch.setattr(Tool, "openai_schema", counting_schema)
    chat = WindowedChat(window=11_000, steps=12, record=True)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert len(thinks) > 10
    assert built and len(built) == len(set(built)), "a tool's schema was built twice"
    sent = [request.tools for request in chat.answered]
    assert sent[0] and all(tools == sent[0] for tools in sent)


def test_a_compaction_prices_its_session_once(long: Long, monkeypatch: pytest.MonkeyPatch) -> None:
    """A THINK that compacts found the session's price for the budgets' check, then again
    to bill the summary: it bills at the price it found, and the bills are the price's."""
    from tickwork.worker.models import pricing
    from tickwork.worker.tick import agent

    thinks: list[int] = []
    priced: list[str] = []
    think, price = agent.think, long.rt.providers.price

    def counting_think(tick: Any) -> Any:
        thinks.append(1)
        return think(tick)

    def counting_price(spec: str, *args: Any, **kw: Any) -> Any:
        priced.append(spec)
        return price(spec, *args, **kw)

    monkeypatch.setattr(agent, "think", counting_think)
    monkeypatch.setattr(long.rt.providers, "price", counting_price)
    with windowed_chat(WindowedChat(window=11_000, steps=30, undercount=0.33)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000, price=PRICE)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    steps = long.store.load(session_id).steps
    assert any(step.kind is StepKind.COMPACTION for step in steps)
    assert len(priced) == len(thinks)
    given = pricing.as_price("openai:long", PRICE)
    for step in steps:
        assert step.cost_usd == pytest.approx(pricing.charge(given, step.usage))


def test_a_think_finds_its_stored_view_once(long: Long, monkeypatch: pytest.MonkeyPatch) -> None:
    """A THINK found the view its stored steps were made under, and the plan found it
    again from the same steps: the THINK hands it to the plan."""
    from tickwork.worker.tick import agent

    thinks: list[int] = []
    found: list[int] = []
    think, stored_view = agent.think, context.stored_view

    def counting_think(tick: Any) -> Any:
        thinks.append(1)
        return think(tick)

    def counting(steps: Any) -> context.View:
        found.append(1)
        return stored_view(steps)

    monkeypatch.setattr(agent, "think", counting_think)
    monkeypatch.setattr(context, "stored_view", counting)
    with windowed_chat(WindowedChat(window=11_000, steps=30, undercount=0.33)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=11_000)
        head = long.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert any(s.kind is StepKind.COMPACTION for s in long.store.load(session_id).steps)
    assert len(found) == len(thinks)


def test_a_summary_retried_is_billed_at_the_price_its_think_found(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction answered with no summary is retried and billed: at the price its THINK
    found for the budgets' check, not looked up again, and the bill is that price's."""
    from tickwork.worker.models import pricing
    from tickwork.worker.tick import agent

    thinks: list[int] = []
    priced: list[str] = []
    think, price = agent.think, long.rt.providers.price

    def counting_think(tick: Any) -> Any:
        thinks.append(1)
        return think(tick)

    def counting_price(spec: str, *args: Any, **kw: Any) -> Any:
        priced.append(spec)
        return price(spec, *args, **kw)

    monkeypatch.setattr(agent, "think", counting_think)
    monkeypatch.setattr(long.rt.providers, "price", counting_price)
    with windowed_chat(WindowedChat(window=32_768, steps=30, calls_for_summary=True)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(
            context_window=8_800, budgets={"max_model_retries": 2}, price=PRICE
        )
        done = long.run(session_id)
    assert done.error_code is ErrorCode.MODEL_ERROR
    assert sum(r.compaction for r in chat.log) == 3
    assert len(priced) == len(thinks)
    given = pricing.as_price("openai:long", PRICE)
    billed = sum(
        pricing.charge(
            given,
            Usage(
                prompt_tokens=r.tokens,
                completion_tokens=COMPLETION_TOKENS,
                cached_prompt_tokens=r.cached,
            ),
        )
        for r in chat.log
    )
    assert done.cost_usd == pytest.approx(billed)
