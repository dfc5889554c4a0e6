"""Model calls through real ticks (`tickwork.worker.tick.advance.advance`) on SQLite and on
Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.store import make_engine, open_store
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Runtime

from tickwork.client import Tickwork

KIND = "tests.jobs:TEST"


class Ticks:
    def __init__(self, url: str, tmp: Path) -> None:
        self.settings = Settings(database_url=url, state_dir=tmp / "state")
        self.store = open_store(make_engine(url))
        self.client = Tickwork(self.settings, store=self.store)
        self.client.publish = lambda *_: None  # type: ignore[method-assign]
        self.rt = Runtime(
            settings=self.settings, store=self.store, jobs=Jobs(), publish_tick=lambda *_: None
        )

    def run(self, session_id: str) -> Head:
        """Tick the session until it rests, as workers would."""
        for _ in range(50):
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            advance(self.rt, session_id, head.version)
        raise AssertionError(f"session {session_id} did not rest in 50 ticks")

    def close(self) -> None:
        self.rt.close()
        self.store.engine.dispose()


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def _sent_ids(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    messages = body["messages"]
    offered = [c["id"] for m in messages if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return offered, answered


def test_a_server_that_checks_call_ids_gets_its_own_back(
    ticks: Ticks, mistral_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", mistral_server.base_url)
    ids = ["abcDEF123", "XyZ987654"]
    mistral_server.answer(
        "look", calls=[("echo", '{"text": "a"}'), ("echo", '{"text": "b"}')], ids=ids
    )
    mistral_server.answer("again", calls=[("echo", '{"text": "c"}')], ids=["Q1w2E3r4T"])
    mistral_server.answer("done")
    head = ticks.client.submit(KIND, {}, model="openai:mistral-small", price=(0.1, 0.3))

    done = ticks.run(head.id)

    assert done.status is Status.COMPLETED, done.error_message
    assert _sent_ids(mistral_server.requests[1].body) == (ids, ids)
    assert _sent_ids(mistral_server.requests[2].body) == ([*ids, "Q1w2E3r4T"],) * 2
    session = ticks.store.load(head.id)
    stored = [(c.call_id, c.provider_call_id) for s in session.steps for c in s.calls]
    assert stored == [("s1c0", ids[0]), ("s1c1", ids[1]), ("s2c0", "Q1w2E3r4T")]
    assert [o.content for o in session.observations] == ["a", "b", "c"]


def test_without_the_providers_ids_such_a_server_refuses_the_history(
    ticks: Ticks, mistral_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What happened to every session before ids were kept: our `s1c0` is refused."""
    monkeypatch.setenv("OPENAI_BASE_URL", mistral_server.base_url)
    mistral_server.answer("look", calls=[("echo", '{"text": "a"}')], ids=["call_0"])
    head = ticks.client.submit(KIND, {}, model="openai:mistral-small", price=(0.1, 0.3))

    done = ticks.run(head.id)

    assert done.error_code is ErrorCode.MODEL_ERROR
    assert "Tool call id was call_0 but must be a-z, A-Z, 0-9" in done.error_message


def _calls(n: int, server: Any, *, usage: tuple[int, int]) -> None:
    for i in range(n):
        server.answer(f"step {i}", calls=[("echo", f'{{"text": "{i}"}}')], usage=usage)


def test_a_cost_budget_stops_before_the_call_that_would_pass_it(
    ticks: Ticks, chat_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$0.40 a call against $1.00: two calls, not a third that would spend $1.20."""
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    _calls(5, chat_server, usage=(100_000, 0))
    head = ticks.client.submit(
        KIND, {}, model="openai:local", price=(4.0, 0.0), budgets={"max_cost_usd": 1.0}
    )

    done = ticks.run(head.id)

    assert done.error_code is ErrorCode.BUDGET_COST
    assert len(chat_server.requests) == 2
    assert done.cost_usd == pytest.approx(0.8) and done.cost_usd <= 1.0
    assert "the next model call's prompt is estimated at $0.4" in done.error_message


def test_a_token_budget_stops_before_the_call_that_would_pass_it(
    ticks: Ticks, chat_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    _calls(5, chat_server, usage=(90_000, 10_000))
    head = ticks.client.submit(
        KIND, {}, model="openai:local", budgets={"max_tokens": 250_000, "max_cost_usd": 0}
    )

    done = ticks.run(head.id)

    assert done.error_code is ErrorCode.BUDGET_TOKENS
    assert len(chat_server.requests) == 2 and done.tokens == 200_000


@pytest.mark.parametrize(
    ("submitted", "model_price"),
    [
        pytest.param({"price": (2.0, 8.0)}, (2.0, 8.0), id="price_given"),
        pytest.param({"budgets": {"max_cost_usd": 0}}, None, id="cost_budget_off"),
    ],
)
def test_a_model_without_a_price_runs_once_it_has_one_or_no_cost_budget(
    ticks: Ticks,
    chat_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    submitted: dict[str, Any],
    model_price: tuple[float, float] | None,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    chat_server.answer("done", usage=(1_000_000, 1_000_000), model="my-local-model")
    head = ticks.client.submit(KIND, {}, model="openai:my-local-model", **submitted)

    done = ticks.run(head.id)

    assert done.status is Status.COMPLETED
    assert done.cost_usd == (sum(model_price) if model_price else 0.0)


def test_a_model_without_a_price_is_refused_while_a_cost_budget_applies(ticks: Ticks) -> None:
    from tickwork.fsm.errors import UnpricedModel

    with pytest.raises(UnpricedModel) as refused:
        ticks.client.submit(KIND, {}, model="react:openai:my-local-model")
    message = str(refused.value)
    for part in ("'react:openai:my-local-model' has no price", "$10", "TICKWORK_PRICES", "--price"):
        assert part in message
    assert ticks.store.list_sessions() == []


def test_the_price_table_of_the_settings_prices_a_model(ticks: Ticks) -> None:
    ticks.settings.prices = {"my-local-model": (0.5, 1.5)}
    head = ticks.client.submit(KIND, {}, model="openai:my-local-model")
    assert head.budgets.max_cost_usd == 10.0


@pytest.mark.parametrize(
    "price", [pytest.param((-1, 1), id="negative"), pytest.param("12", id="text")]
)
def test_a_bad_price_is_refused(ticks: Ticks, price: Any) -> None:
    from tickwork.fsm.errors import InvalidInput

    with pytest.raises(InvalidInput, match="the price for 'openai:x'"):
        ticks.client.submit(KIND, {}, model="openai:x", price=price)


@pytest.mark.parametrize(
    "spec", ["gpt-4o", "gemini:pro", "openai:", "react:gpt-4o", "openai:a b", "scripted:"]
)
def test_a_model_spec_tickwork_cannot_run_is_refused_at_submit(ticks: Ticks, spec: str) -> None:
    from tickwork.fsm.errors import InvalidModelSpec

    with pytest.raises(InvalidModelSpec) as refused:
        ticks.client.submit(KIND, {}, model=spec, budgets={"max_cost_usd": 0})
    assert repr(spec) in str(refused.value)
    assert ticks.store.list_sessions() == []


def test_a_fork_may_not_give_a_model_without_a_price_a_cost_budget(ticks: Ticks) -> None:
    from tickwork.fsm.errors import UnpricedModel

    head = ticks.client.submit(KIND, {}, model="openai:local", budgets={"max_cost_usd": 0})
    with pytest.raises(UnpricedModel, match="'openai:local' has no price"):
        ticks.client.fork(head.id, from_step=0, by="bob", budgets={"max_cost_usd": 5})
    forked = ticks.client.fork(head.id, from_step=0, by="bob", budgets={"max_steps": 5})
    assert forked.budgets.max_cost_usd == 0


def test_show_says_a_session_has_no_cost_budget(ticks: Ticks) -> None:
    import io

    from rich.console import Console

    from tickwork import render, views

    head = ticks.client.submit(KIND, {}, model="openai:local", budgets={"max_cost_usd": 0})
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(render.timeline(views.session(ticks.store.load(head.id))))
    assert "cost $0.0000/no cost budget" in console.export_text()


def test_a_worker_without_the_model_s_key_retries_then_fails_model_error(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not INTERNAL with a traceback: the call is retried as a failed one (another worker may
    hold the key), then the session fails MODEL_ERROR saying what to set."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    head = ticks.client.submit(KIND, {}, model="openai:gpt-4o-mini")

    done = ticks.run(head.id)

    assert done.status is Status.FAILED
    assert done.error_code is ErrorCode.MODEL_ERROR
    assert "cannot call the model" in (done.error_message or "")
    assert "set OPENAI_API_KEY" in (done.error_message or "")
    retries = [e for e in ticks.store.load(head.id).events if e.kind == "model_retry"]
    assert len(retries) == done.budgets.max_model_retries
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a missing key"


def _shown(ticks: Ticks, session_id: str) -> str:
    """What `tickwork show` prints of the session."""
    import io

    from rich.console import Console

    from tickwork import render, views

    console = Console(width=300, file=io.StringIO(), record=True)
    console.print(render.timeline(views.session(ticks.store.load(session_id))))
    return console.export_text()


def test_a_fork_runs_its_next_call_on_the_model_it_names(ticks: Ticks, tmp_path: Path) -> None:
    from tickwork.fsm.context import policy_of
    from tickwork.worker.models.pricing import CONTEXT_WINDOWS

    from tickwork.testing import write_script

    echo = {"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}
    broken = {"error": {"transient": False, "message": "the first model is broken"}}
    first = write_script([echo, broken], tmp_path, name="first")
    second = write_script([echo, {"content": "the second model's answer"}], tmp_path, name="second")
    parent = ticks.client.submit(KIND, {}, model=first, context_window=16_384)
    assert ticks.run(parent.id).error_code is ErrorCode.MODEL_ERROR

    fork = ticks.client.fork(parent.id, from_step=1, by="olga", model=second)
    done = ticks.run(fork.id)

    assert done.status is Status.COMPLETED
    assert done.final_answer == "the second model's answer"
    assert done.model == second and ticks.store.get(parent.id).model == first
    # the new model's window, as a submit of it takes, not the one given for the first
    policy = policy_of(done.config)
    assert policy is not None and policy.window == CONTEXT_WINDOWS["scripted"]
    forked = next(e for e in ticks.store.load(fork.id).events if e.kind == "forked")
    assert forked.data["patch"]["model"] == second
    assert f"model: {second}" in _shown(ticks, fork.id)
    # a window given with the model is the one it runs under
    given = ticks.client.fork(
        parent.id, from_step=1, by="olga", model=second, context_window=9_000, again=True
    )
    assert (policy := policy_of(given.config)) is not None and policy.window == 9_000


def test_a_fork_onto_another_model_keeps_no_price_given_for_the_original(ticks: Ticks) -> None:
    from tickwork.fsm.errors import UnpricedModel

    parent = ticks.client.submit(KIND, {}, model="openai:local", price=(1, 2))
    assert parent.config["price"] == {"prompt": 1, "completion": 2}

    other = ticks.client.fork(parent.id, from_step=0, by="olga", model="openai:gpt-4o-mini")
    assert other.model == "openai:gpt-4o-mini" and "price" not in other.config
    # the original's price priced the original's model: another without one is refused, as
    # its submit would be while a cost budget applies, and nothing is stored
    with pytest.raises(UnpricedModel, match="'openai:other' has no price") as refused:
        ticks.client.fork(parent.id, from_step=0, by="olga", model="openai:other")
    assert "TICKWORK_PRICES" in str(refused.value) and "fork's `price`" in str(refused.value)
    assert len(ticks.store.list_sessions()) == 2
    same = ticks.client.fork(parent.id, from_step=0, by="olga", model="openai:local")
    assert same.config["price"] == parent.config["price"]


def test_a_fork_prices_its_model_as_a_submit_does(ticks: Ticks) -> None:
    """A fork onto a model the deployment has no price for was refused while a cost budget
    applied, with no way to price it but TICKWORK_PRICES: it takes `price`, checked as a
    submit's, and a refused one stores nothing."""
    from tickwork.fsm.errors import InvalidInput

    parent = ticks.client.submit(KIND, {}, model="openai:local", price=(1, 2))

    other = ticks.client.fork(
        parent.id, from_step=0, by="olga", model="openai:other", price=(3, 4, 0.5)
    )
    assert other.model == "openai:other"
    assert other.config["price"] == {"prompt": 3, "completion": 4, "cached": 0.5}
    forked = next(e for e in ticks.store.load(other.id).events if e.kind == "forked")
    assert forked.data["patch"]["price"] == other.config["price"]
    # no model given: it prices the original's
    again = ticks.client.fork(parent.id, from_step=0, by="olga", price=(5, 6), again=True)
    assert (again.model, again.config["price"]) == ("openai:local", {"prompt": 5, "completion": 6})
    for spec, price, said in (
        ("openai:gpt-4o-mini", (0.01, 0.02), "is below the configured price"),
        ("openai:other", (1,), "the price for 'openai:other': it has 1 number"),
        ("openai:other", (1, -2), "the price for 'openai:other' must be finite and not neg"),
    ):
        with pytest.raises(InvalidInput, match=said):
            ticks.client.fork(
                parent.id, from_step=0, by="olga", model=spec, price=price, again=True
            )
    # from outside (the API), a model without a configured price is not priced by the caller
    with pytest.raises(InvalidInput, match="a fork over the API may not price a model"):
        ticks.client.fork(
            parent.id,
            from_step=0,
            by="olga",
            model="openai:other",
            price=(3, 4),
            trusted=False,
            again=True,
        )
    assert len(ticks.store.list_sessions()) == 3


@pytest.mark.parametrize("spec", ["gemini:pro", "openai:", "openai:a b", "scripted:"])
def test_a_fork_naming_a_model_spec_tickwork_cannot_run_is_refused(ticks: Ticks, spec: str) -> None:
    from tickwork.fsm.errors import InvalidModelSpec

    parent = ticks.client.submit(KIND, {}, model="openai:local", budgets={"max_cost_usd": 0})

    with pytest.raises(InvalidModelSpec) as refused:
        ticks.client.fork(parent.id, from_step=0, by="olga", model=spec)

    assert str(refused.value).startswith("`model`: ")
    assert repr(spec) in str(refused.value)
    assert [h.id for h in ticks.store.list_sessions()] == [parent.id]


def test_show_says_a_model_call_is_being_retried(ticks: Ticks, tmp_path: Path) -> None:
    from tickwork.testing import write_script

    flaky = {"error": {"transient": True, "message": "503 from the server", "retry_after_s": 30}}
    head = ticks.client.submit(KIND, {}, model=write_script([flaky], tmp_path))

    advance(ticks.rt, head.id, head.version)

    retry = next(e for e in ticks.store.load(head.id).events if e.kind == "model_retry")
    due = (retry.at + timedelta(seconds=retry.data["delay_s"])).strftime("%Y-%m-%d %H:%M:%SZ")
    shown = _shown(ticks, head.id)
    assert f"retrying the model: attempt 2 of 6, next at {due} (attempt 1 failed: 503" in shown
    assert "retrying the model" not in _shown(ticks, ticks.run(head.id).id)


def test_show_writes_large_budgets_in_full_not_in_exponent_form(ticks: Ticks) -> None:
    import io

    from rich.console import Console

    from tickwork import render, views

    budgets = {"max_cost_usd": 1_000_000, "deadline_s": 1_209_600}
    head = ticks.client.submit(KIND, {}, model="openai:gpt-4o-mini", budgets=budgets)
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(render.timeline(views.session(ticks.store.load(head.id))))
    shown = console.export_text()
    assert "/$1000000 · deadline 1209600s" in shown, shown
