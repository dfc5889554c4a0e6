"""tickwork.store.dead_letters: listing, fetching, statistics and signatures of failed sessions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
from rich.console import Console
from sqlalchemy import update
from tickwork.fsm import machine
from tickwork.fsm.errors import DeadLetterClosed, InvalidInput, UnknownSchemaVersion
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import SNAPSHOT_SCHEMA_VERSION, ErrorCode, Status
from tickwork.store import Store
from tickwork.store.dead_letters import (
    Closing,
    DeadLetter,
    DeadLetterNotFound,
    close,
    describe,
    error_signature,
    get_dead_letter,
    list_dead_letters,
    stats,
)
from tickwork.store.schema import dead_letters

from tests.conftest import T0, Clock
from tests.store.conftest import claim, execute, new_session, reply, run_step, think
from tickwork import render, views


def _fail(
    store: Store,
    session_id: str,
    code: ErrorCode,
    message: str,
    *,
    now: datetime,
    kind: str = "repair",
    model: str = "gpt-test",
    tool: str | None = None,
) -> None:
    store.create(new_session(session_id, now=now, kind=kind, model=model), now=now)
    if tool is not None:
        run_step(store, session_id, 1, now=now, tool=tool)
    claimed = claim(store, session_id, now=now)
    head = store.save(
        machine.fail(claimed.head, code, message, now=now),
        version=claimed.head.version,
        owner="worker-1",
        now=now,
    )
    assert head.status is Status.FAILED


@pytest.fixture
def failed(store: Store, clock: Clock) -> list[str]:
    """Five dead letters a minute apart from T0 + 1 min, oldest first."""
    _fail(
        store,
        "d1",
        ErrorCode.LOOP,
        "stagnation loop at step 4 after 2 interventions",
        now=clock.advance(60),
        tool="read_file",
    )
    _fail(
        store,
        "d2",
        ErrorCode.LOOP,
        "ping_pong loop at step 9 after 2 interventions",
        now=clock.advance(60),
        kind="review",
        tool="run_tests",
    )
    _fail(
        store,
        "d3",
        ErrorCode.MODEL_ERROR,
        "permanent error: HTTP 401 for key abcdef0123456789",
        now=clock.advance(60),
        model="other-model",
    )
    _fail(
        store,
        "d4",
        ErrorCode.MODEL_ERROR,
        "permanent error: HTTP 404 for key 9876543210fedcba",
        now=clock.advance(60),
        model="other-model",
        tool="run_tests",
    )
    _fail(
        store,
        "d5",
        ErrorCode.LOOP,
        "stagnation loop at step 12 after 2 interventions",
        now=clock.advance(60),
        tool="run_tests",
    )
    return ["d1", "d2", "d3", "d4", "d5"]


def _ids(found: Sequence[DeadLetter]) -> list[str]:
    return [d.session_id for d in found]


def test_list_is_newest_first_and_filters(store: Store, clock: Clock, failed: list[str]) -> None:
    engine = store.engine
    assert _ids(list_dead_letters(engine)) == ["d5", "d4", "d3", "d2", "d1"]
    assert _ids(list_dead_letters(engine, code="LOOP")) == ["d5", "d2", "d1"]
    assert _ids(list_dead_letters(engine, kind="review")) == ["d2"]
    assert _ids(list_dead_letters(engine, code="MODEL_ERROR", kind="review")) == []
    assert _ids(list_dead_letters(engine, since=T0 + timedelta(minutes=3))) == ["d5", "d4", "d3"]
    assert _ids(list_dead_letters(engine, limit=2)) == ["d5", "d4"]

    store.fork(
        "d2",
        new_id="d2-fix",
        from_step=1,
        patch=ForkPatch(append_instruction="stop alternating"),
        by="eve",
        now=clock(),
        resolve_dead_letter=True,
    )
    assert _ids(list_dead_letters(engine, unresolved=True)) == ["d5", "d4", "d3", "d1"]
    assert _ids(list_dead_letters(engine, code="LOOP", unresolved=True)) == ["d5", "d1"]
    assert len(list_dead_letters(engine)) == 5


def test_list_leaves_out_the_snapshot_unless_asked(store: Store, failed: list[str]) -> None:
    assert all(d.snapshot == {} for d in list_dead_letters(store.engine))
    [full] = list_dead_letters(store.engine, kind="review", with_snapshot=True)
    assert full.session() == store.load("d2")


def test_get_by_id_and_by_session_id(store: Store, clock: Clock, failed: list[str]) -> None:
    by_session = get_dead_letter(store.engine, "d3")
    by_id = get_dead_letter(store.engine, by_session.id)

    assert by_id == by_session
    assert (by_id.code, by_id.kind, by_id.model, by_id.last_tool) == (
        "MODEL_ERROR",
        "repair",
        "other-model",
        None,
    )
    assert by_id.message == "permanent error: HTTP 401 for key abcdef0123456789"
    assert by_id.schema_version == SNAPSHOT_SCHEMA_VERSION
    assert by_id.at == store.get("d3").updated_at
    assert by_id.session() == store.load("d3")


def test_get_of_an_unknown_dead_letter_raises(store: Store, failed: list[str]) -> None:
    with pytest.raises(DeadLetterNotFound, match="nope"):
        get_dead_letter(store.engine, "nope")
    with pytest.raises(DeadLetterNotFound, match="12345"):
        get_dead_letter(store.engine, 12345)


def test_a_session_that_did_not_fail_has_no_dead_letter(
    store: Store, clock: Clock, session_id: str
) -> None:
    run_step(store, session_id, 1, now=clock())
    with pytest.raises(DeadLetterNotFound):
        get_dead_letter(store.engine, session_id)


STATS: dict[str, list[tuple[str | None, int]]] = {
    "code": [("LOOP", 3), ("MODEL_ERROR", 2)],
    "kind": [("repair", 4), ("review", 1)],
    "model": [("gpt-test", 3), ("other-model", 2)],
    "last_tool": [("run_tests", 3), (None, 1), ("read_file", 1)],
    "error_signature": [
        ("LOOP: stagnation loop at step N after N interventions", 2),
        ("LOOP: ping_pong loop at step N after N interventions", 1),
        # an HTTP status is a cause, not a particular: 401 and 404 are two
        ("MODEL_ERROR: permanent error: HTTP 401 for key <id>", 1),
        ("MODEL_ERROR: permanent error: HTTP 404 for key <id>", 1),
    ],
}


def test_stats_group_by_each_column_largest_first(
    store: Store, clock: Clock, failed: list[str]
) -> None:
    for by, expected in STATS.items():
        found = stats(store.engine, by=by)

        got = [(g["value"], g["count"]) for g in found]
        assert [c for _, c in got] == sorted((c for _, c in got), reverse=True), by
        assert sorted(got, key=str) == sorted(expected, key=str), by
        assert max(g["latest"] for g in found) == clock(), by

    recent = stats(store.engine, by="code", since=T0 + timedelta(minutes=4))
    assert [(g["value"], g["count"]) for g in recent] == [("LOOP", 1), ("MODEL_ERROR", 1)]
    with pytest.raises(ValueError, match="snapshot"):
        stats(store.engine, by="snapshot")


def test_a_snapshot_of_an_unknown_schema_version_is_refused(
    store: Store, failed: list[str]
) -> None:
    snapshot = get_dead_letter(store.engine, "d1").snapshot
    with store.engine.begin() as conn:
        conn.execute(
            update(dead_letters)
            .where(dead_letters.c.session_id == "d1")
            .values(snapshot={**snapshot, "schema_version": 99})
        )

    dead = get_dead_letter(store.engine, "d1")
    assert dead.session_id == "d1"
    with pytest.raises(UnknownSchemaVersion, match="99"):
        dead.session()


class TestErrorSignature:
    def test_keeps_the_code_and_the_words(self) -> None:
        assert error_signature("LOOP", "stagnation loop at step 4 after 2 interventions") == (
            "LOOP: stagnation loop at step N after N interventions"
        )

    @pytest.mark.parametrize(
        ("one", "other"),
        [
            ("12 steps made, `max_steps` is 12", "50 steps made, `max_steps` is 50"),
            ("1 step made, `max_steps` is 1", "2 steps made, `max_steps` is 2"),
            ("$10.0012 spent, `max_cost_usd` is $10.0", "$3.5 spent, `max_cost_usd` is $3"),
            (
                "21600s since creation, `deadline_s` is 21600",
                "61s since creation, `deadline_s` is 60",
            ),
            (
                "session 9f86d081884c7d659a2feaa0c55ad015 timed out",
                "session 0123456789abcdef0123456789abcdef timed out",
            ),
            ("call s3c1 of deadbeef01 failed", "call s12c0 of cafebabe99 failed"),
            ("unknown tool 'frobnicate'", 'unknown tool "delete_everything now"'),
        ],
    )
    def test_strips_numbers_ids_and_quoted_values(self, one: str, other: str) -> None:
        assert error_signature("X", one) == error_signature("X", other)
        assert not any(ch.isdigit() for ch in error_signature("X", one).replace("X: ", ""))

    def test_an_apostrophe_inside_a_word_is_no_quote(self) -> None:
        """An ENV_SETUP signature read `the environment'…'hatch-fancy-pypi-r…`: the
        apostrophe opened a quote that swallowed which command stopped the setup."""
        message = (
            "the environment's setup failed (environment 0026823e2138): setup stopped at "
            "`/env/bin/python -m pip install hatchling 'hatch-fancy-pypi-r…`: it exited 1; "
            "the operator's list"
        )
        assert error_signature("ENV_SETUP", message) == (
            "ENV_SETUP: the environment's setup failed (environment <id>): setup stopped at "
            "`<path> -m pip install hatchling 'hatch-fancy-pypi-r…`: it exited N; "
            "the operator's list"
        )
        assert error_signature("X", "model 'gpt-4o' can't answer: don't retry") == (
            "X: model '…' can't answer: don't retry"
        )

    def test_a_quote_a_cut_command_left_open_does_not_swallow_the_next_lines(self) -> None:
        """toolz's ENV_SETUP signature read `--upgrade '…' '…'#!<path>\\nexec <path> ...`:
        the stopped command, cut at 120 characters inside a quote, left it open, and it
        closed in the setup log below, swallowing "it exited 1. Next: ..." and taking the
        log's lines into `dlq stats --by error_signature`."""
        first = (
            "the environment's setup failed (environment f57d1def3899): setup stopped at "
            "`/env/bin/python -m pip install --upgrade 'setuptools >=77' 'setuptools-git-"
            "versi…`: it exited 1. Next: give `--setup` commands"
        )
        log = "$ printf '#!/bin/sh\\nexec /env/bin/python -m pip' > /env/bin/pip\nexit code: 0"
        said = error_signature("ENV_SETUP", f"{first}\n{log}")
        assert said.startswith(
            "ENV_SETUP: the environment's setup failed (environment <id>): setup stopped at "
            "`<path> -m pip install --upgrade '…' 'setuptools-git-versi…`: it exited N. "
            "Next: give `--setup` commands\n"
        ), said
        assert error_signature("X", 'a "b\nc" d') == 'X: a "b\nc" d'

    def test_strips_uuids(self) -> None:
        one = "job 4f1c2a9e-8b3d-4c7f-a1e2-93b0c4d5e6f7 failed"
        other = "job 0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f failed"
        assert error_signature("X", one) == error_signature("X", other) == "X: job <id> failed"

    @pytest.mark.parametrize(
        ("one", "other"),
        [
            (  # an OpenAI-compatible 400 with a request id, a dated model, a time, a path
                "permanent error: 400 Bad Request: Invalid schema for function 'read_file' "
                "(request id: req_3f2ab1c9e0d4) model=gpt-4o-2024-08-06 at "
                "2026-12-05T11:54:09Z (scripted error: /work/qa4/scripts/err_req_1.json)",
                "permanent error: 400 Bad Request: Invalid schema for function 'read_file' "
                "(request id: req_b7e2d9f4a1) model=gpt-4o-2024-08-06 at "
                "2026-12-05T12:01:44.123+00:00 (scripted error: /tmp/err_req_2.json)",
            ),
            (
                "anthropic: 529 overloaded_error (request_id "
                "req_011CVabcDEFghi2345JKLmno) at 11:54:09",
                "anthropic: 529 overloaded_error (request_id "
                "req_011CWxyzPQRstu6789UVWabc) at 08:01:02",
            ),
            (
                "transient error: HTTP 429 Too Many Requests (Retry-After: 30) from "
                "https://api.example.com/v1/chat/completions?trace=4f1c",
                "transient error: HTTP 429 Too Many Requests (Retry-After: 7) from "
                "http://10.0.0.3:8000/v1/chat/completions",
            ),
            (
                "tool raised: <Sandbox object at 0x7f3a2b1c9d80> lost /var/lib/x/9f86d081",
                "tool raised: <Sandbox object at 0x55d0c2e1a4b0> lost ~/work/y",
            ),
            (
                "the prompt of step 4 is about 6,778 tokens, the window is 5,000",
                "the prompt of step 12 is about 12,001 tokens, the window is 8,192",
            ),
        ],
    )
    def test_takes_out_ids_paths_urls_and_times(self, one: str, other: str) -> None:
        assert error_signature("MODEL_ERROR", one) == error_signature("MODEL_ERROR", other)

    def test_keeps_status_codes_model_names_and_error_types(self) -> None:
        overloaded = error_signature("MODEL_ERROR", "permanent error: 503 upstream overloaded")
        invalid = error_signature("MODEL_ERROR", "permanent error: 400 invalid request")
        assert (overloaded, invalid) == (
            "MODEL_ERROR: permanent error: 503 upstream overloaded",
            "MODEL_ERROR: permanent error: 400 invalid request",
        )
        assert error_signature(
            "MODEL_ERROR",
            'Error code: 400 - {"error": {"message": "This model\'s maximum context length '
            'is 8192 tokens", "type": "invalid_request_error", "code": '
            '"context_length_exceeded"}} from claude-3-5-sonnet-20241022 via gpt-4o-mini',
        ) == (
            'MODEL_ERROR: Error code: 400 - {"error": {"message": \'…\', "type": '
            '"invalid_request_error", "code": "context_length_exceeded"}} from '
            "claude-3-5-sonnet-20241022 via gpt-4o-mini"
        )
        assert error_signature("X", "HTTP/1.1 404 Not Found; status: 502") == (
            "X: HTTP/N 404 Not Found; status: 502"
        )
        # a number of that size elsewhere is still a count
        assert error_signature("X", "after 400 steps and 12.5s") == "X: after N steps and Ns"

    def test_request_ids_of_digits_are_ids(self) -> None:
        """`req_<digits>` was a word kept whole: each request made a group of its own."""
        one = error_signature("MODEL_ERROR", "HTTP 500 from upstream (request id: req_1234567)")
        other = error_signature("MODEL_ERROR", "HTTP 500 from upstream (request id: req_987)")
        assert one == other == "MODEL_ERROR: HTTP 500 from upstream (request id: <id>)"
        # a name with a short number still tells causes apart
        assert error_signature("X", "node step_2 failed") == "X: node step_2 failed"

    def test_long_numbers_are_numbers(self) -> None:
        assert error_signature(
            "BUDGET_TOKENS", "20000123 tokens used, `max_tokens` is 20000000"
        ) == error_signature("BUDGET_TOKENS", "2000123 tokens used, `max_tokens` is 2000000")

    @pytest.mark.parametrize(
        ("old", "new"),
        [
            (
                "NodeFailed: node 'charge' raised LookupError: ledger 12 is closed",
                "node 'refund' raised LookupError: ledger 7 is closed",
            ),
            (
                "branch 3f9a2b1c0d4e5f6a7b8c9d0e1f2a3-000 of node 'split' failed: INTERNAL: "
                "NodeFailed: node 'part' raised KeyError: 'n'",
                "branch 0c1d2e3f4a5b6c7d8e9f0a1b2c3d4-001 of node 'split' failed: INTERNAL: "
                "node 'part' raised KeyError: 'm'",
            ),
            (
                "NodeFailed: the branches of node 'split' name 'sum', not a branch node of "
                "the graph (add_node(..., branch=True))",
                "the branches of node 'split' name 'sum', not a branch node of the graph "
                "(add_node(..., branch=True))",
            ),
            (
                "InvalidStateUpdate: node 'paint' of graph 'sloppy' gives colour, which the "
                "state Poll does not have",
                "node 'paint' of graph 'sloppy' gives colour, which the state Poll does not have",
            ),
            (
                "TypeError: object of type 'generator' has no len()",
                "node 'split' failed: TypeError: object of type 'generator' has no len()",
            ),
            (
                "branch 3f9a2b1c0d4e5f6a7b8c9d0e1f2a3-000 of node 'split' failed: INTERNAL: "
                "OSError: disk full",
                "branch 0c1d2e3f4a5b6c7d8e9f0a1b2c3d4-001 of node 'split' failed: INTERNAL: "
                "node 'part' failed: OSError: disk full",
            ),
        ],
    )
    def test_a_graph_node_failure_groups_with_its_older_wording(self, old: str, new: str) -> None:
        """A node's failure once began with tickwork's exception class: a dead letter stored
        then groups with one of the same cause stored now (after `dlq stats --recount`)."""
        assert error_signature("INTERNAL", old) == error_signature("INTERNAL", new)
        assert "NodeFailed" not in error_signature("INTERNAL", old)

    def test_a_branch_s_failure_keeps_the_node_that_fanned_out(self) -> None:
        """Only a node's own failure drops the node it names: a branch's keeps its parent's
        node and the code it failed with."""
        said = error_signature(
            "INTERNAL", "branch 3f9a2b1c0d4e-000 of node 'split' failed: MODEL_ERROR: HTTP 503"
        )
        assert said == "INTERNAL: branch <id>-N of node '…' failed: MODEL_ERROR: HTTP 503"

    def test_is_at_most_300_characters(self) -> None:
        assert len(error_signature("INTERNAL", "word " * 200)) == 300


def test_a_dead_letter_is_closed_once_with_who_when_and_why(
    store: Store, clock: Clock, failed: list[str]
) -> None:
    hostile = "x'); DROP TABLE tickwork_dead_letters; --"
    letter = get_dead_letter(store.engine, "d1")

    closed = close(
        store.engine, letter.id, state=Closing.DISMISSED, by=hostile, reason=hostile, now=clock()
    )

    assert closed.resolved_at == clock()
    assert closed.resolution == {
        "state": "dismissed",
        "by": hostile,
        "at": clock().isoformat(),
        "reason": hostile,
    }
    assert [d.session_id for d in list_dead_letters(store.engine, unresolved=True)] == [
        "d5",
        "d4",
        "d3",
        "d2",
    ]
    with pytest.raises(DeadLetterClosed, match="already dismissed by x'"):
        close(store.engine, "d1", state=Closing.RESOLVED, by="erin", reason="x", now=clock())
    with pytest.raises(InvalidInput, match=r"give a reason \(reason\), not a blank one"):
        close(store.engine, "d2", state=Closing.RESOLVED, by="erin", reason=" ", now=clock())
    with pytest.raises(DeadLetterNotFound):
        close(store.engine, 999, state=Closing.RESOLVED, by="erin", reason="x", now=clock())


def test_a_resolution_recorded_before_forks_were_listed_is_still_described() -> None:
    legacy = {"fork": "try-1", "by": "dave"}

    assert describe(legacy) == "was already forked as try-1 by dave at ?"


def test_calls_a_loop_blocked_show_as_blocked_not_done(store: Store, clock: Clock) -> None:
    """A call loop detection closed has its observation, the intervention, so its state is
    done; the timeline says blocked, as it never ran (found by an outside run)."""
    now = clock()
    store.create(new_session("lp", now=now), now=now)
    same = reply(("read_file", {"path": "src/a.py"}))
    for _ in range(2):
        think(store, "lp", same, now=now)
        execute(store, "lp", now=now, output="contents of a")
    think(store, "lp", same, now=now)  # the third time: a loop, its call not run

    view = views.session(store.load("lp"))
    calls = [c for s in view["steps"] for c in s["calls"]]
    assert [(c["state"], c["blocked"]) for c in calls] == [
        ("done", False),
        ("done", False),
        ("done", True),
    ]
    console = Console(width=200, record=True)
    console.print(render.timeline(view))
    shown = console.export_text()
    assert "blocked" in shown and "Loop detected" in shown
