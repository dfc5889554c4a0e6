"""A tenant's quotas at submit: each over-quota submit is 429 naming the quota, with
Retry-After, and stores nothing; the tenants file is read again without a restart; 50
submits racing for the last slots on Postgres admit exactly the quota.

No worker runs: the submitted sessions wait to start (never ticked), which is what
`max_queued` counts before admission holds them as `queued`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from tickwork.fsm.errors import InvalidInput, QuotaExceeded, UnpricedModel
from tickwork.fsm.values import Status
from tickwork.store import quotas
from tickwork.store.migrate import upgrade
from tickwork.store.schema import events, outbox, sessions
from tickwork.worker.config.settings import Settings

from tests.api.conftest import TEST_KIND, Server
from tests.services import postgres_database
from tickwork.api import ApiSettings, make_api
from tickwork.client import Tickwork
from tickwork.testing.store_contract.trees import finish, spawn, take_join
from tickwork.testing.store_ticks import Clock, reply, run_step, think

TOKENS = {
    "ann-team-a-token-00000001": {"name": "ann", "roles": ["submitter"], "tenant": "team-a"},
    "bob-team-b-token-00000001": {"name": "bob", "roles": ["submitter"], "tenant": "team-b"},
    "olga-team-a-operator-0001": {"name": "olga", "roles": ["operator"], "tenant": "team-a"},
}
TOKEN = {spec["name"]: token for token, spec in TOKENS.items()}


def write(path: Path, data: object) -> None:
    """Write the tenants file and move its mtime on (a rewrite within one clock tick)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(json.dumps(data), encoding="utf-8")
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


@dataclass
class Fleet:
    client: Tickwork
    tenants_file: Path
    script: str
    url: str = ""

    def submit(self, tenant: str, session_id: str | None = None) -> str:
        head = self.client.submit(
            TEST_KIND,
            {},
            model=self.script,
            tenant=tenant,
            session_id=session_id,
            submitted_by="t",
        )
        return head.id

    def count(self, table: Any = sessions, **where: str) -> int:
        query = select(func.count()).select_from(table)
        for column, value in where.items():
            query = query.where(table.c[column] == value)
        with self.client.store.engine.connect() as conn:  # type: ignore[attr-defined]
            return int(conn.execute(query).scalar_one())


@pytest.fixture
def fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Fleet]:
    tenants_file = tmp_path / "tenants.json"
    write(tenants_file, {})
    monkeypatch.setenv("TICKWORK_TENANTS_FILE", str(tenants_file))
    backend = getattr(request, "param", "sqlite")
    common: dict[str, Any] = dict(
        state_dir=tmp_path / "state",
        queue=f"tickwork.ticks.{uuid.uuid4().hex[:8]}",
        imports=[TEST_KIND],
    )
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            # a database of its own: this process's shared one is the package's running
            # `stack`'s (tests/api/conftest.py), whose relay would republish these
            # sessions' ticks to its worker, and which a truncation would empty under it
            url = stack.enter_context(postgres_database())
            upgrade(url)
            settings = Settings(database_url=url, **common)
        else:
            settings = Settings(**common)
            settings.state_dir.mkdir(parents=True)
            upgrade(settings.db_url)
        script = tmp_path / "script.json"
        script.write_text(json.dumps([{"content": "done"}]))
        client = stack.enter_context(contextlib.closing(Tickwork(settings)))
        yield Fleet(client, tenants_file, f"scripted:{script}")


def test_max_queued_refuses_the_submit_past_it_and_stores_nothing(fleet: Fleet) -> None:
    write(fleet.tenants_file, {"team-a": {"max_queued": 2}})
    fleet.submit("team-a")
    fleet.submit("team-a")
    before = (fleet.count(), fleet.count(outbox), fleet.count(events))

    with pytest.raises(QuotaExceeded, match="`max_queued` of 2: wait for some to start") as refused:
        fleet.submit("team-a", session_id="refused-one")

    assert refused.value.quota == "max_queued" and refused.value.used == 2
    # what else to do: the quota is the operator's, in the tenants file
    assert str(refused.value).endswith(
        "wait for some to start, or cancel some, or ask the operator to raise it (in "
        "TICKWORK_TENANTS_FILE, read again when it changes)"
    ), refused.value
    assert (fleet.count(), fleet.count(outbox), fleet.count(events)) == before
    fleet.submit("team-b")  # another tenant is not limited by team-a's quota
    fleet.submit("default")


def test_the_tenants_file_is_read_again_without_a_restart(fleet: Fleet) -> None:
    write(fleet.tenants_file, {"*": {"max_queued": 1}})
    fleet.submit("team-a")
    with pytest.raises(QuotaExceeded):
        fleet.submit("team-a")
    write(fleet.tenants_file, {"*": {"max_queued": 1}, "team-a": {"max_queued": 3}})
    fleet.submit("team-a")
    fleet.submit("team-a")
    with pytest.raises(QuotaExceeded, match="`max_queued` of 3"):
        fleet.submit("team-a")
    with pytest.raises(QuotaExceeded, match="`max_queued` of 1"):
        fleet.submit("team-c", session_id="c1") and fleet.submit("team-c")


def test_dollars_per_day_count_todays_sessions(fleet: Fleet) -> None:
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 1.5}})
    spent = fleet.submit("team-a")
    fleet.submit("team-a")  # nothing spent yet
    with fleet.client.store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(update(sessions).where(sessions.c.id == spent).values(cost_usd=1.5))

    # read before the refusal: the wait it names (to midnight from when it was made) is
    # at most this one, however long a loaded machine takes from the refusal to here
    now = datetime.now(UTC)
    with pytest.raises(QuotaExceeded, match="max_usd_per_day") as refused:
        fleet.submit("team-a")

    to_midnight = 86400 - (now.hour * 3600 + now.minute * 60 + now.second)
    assert 0 < refused.value.retry_after_s <= to_midnight + 2
    assert refused.value.used == 1.5 and refused.value.limit == 1.5
    # what was spent in cents, the quota as the tenants file gives it (a quota of
    # 0.00001234 read $0.000012, rounded as a spend is), the reset as every date tickwork
    # gives ends in Z
    assert re.fullmatch(
        r"tenant team-a spent \$1\.50 today \(UTC\), its quota `max_usd_per_day` is "
        r"\$1\.5: try again after \d{4}-\d\d-\d\dT00:00:00Z, when the quota resets "
        r"\(or ask the operator to raise it\)",
        str(refused.value),
    ), str(refused.value)
    fleet.submit("team-b")


def test_a_model_without_a_price_is_refused_where_the_tenant_has_a_dollar_quota(
    fleet: Fleet,
) -> None:
    """Its calls would count $0 against the quota, though the session has no cost budget."""
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 5}})
    free = {"model": "openai:my-local", "budgets": {"max_cost_usd": 0}, "submitted_by": "t"}

    with pytest.raises(UnpricedModel, match="`max_usd_per_day` \\(\\$5\\) of tenant 'team-a'"):
        fleet.client.submit(TEST_KIND, {}, tenant="team-a", session_id="unpriced", **free)
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 0.5}})
    with pytest.raises(UnpricedModel, match="`max_usd_per_day` \\(\\$0\\.5\\) of tenant"):
        fleet.client.submit(TEST_KIND, {}, tenant="team-a", session_id="unpriced", **free)
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 5}})

    assert fleet.count(id="unpriced") == 0
    fleet.client.submit(TEST_KIND, {}, tenant="team-b", **free)  # no quota: its own choice
    fleet.client.submit(TEST_KIND, {}, tenant="team-a", price=(1, 2), **free)  # priced


@pytest.mark.parametrize("fleet", ["sqlite", "postgres"], indirect=True)
def test_a_tree_s_spend_counts_once_though_its_root_carries_the_children_s(
    fleet: Fleet,
) -> None:
    store = fleet.client.store
    clock = Clock(datetime.now(UTC))
    ids = spawn(store, clock, "tree", 2)  # the root's spawn step costs 0.01
    for child in ids:
        finish(store, clock, child)  # 0.01 each
    _, root = take_join(store, clock, "tree")
    assert root.cost_usd == pytest.approx(0.03)  # the root's cost is the tree's

    engine = store.engine  # type: ignore[attr-defined]
    used = quotas.usage(engine, "default", now=clock(), stored=quotas.StoredBytes())
    assert used["max_usd_per_day"] == pytest.approx(0.03)
    write(fleet.tenants_file, {"default": {"max_usd_per_day": 0.035}})
    fleet.submit("default")  # the tree's 0.03 once, not 0.05
    write(fleet.tenants_file, {"default": {"max_usd_per_day": 0.03}})
    with pytest.raises(QuotaExceeded) as refused:
        fleet.submit("default")
    assert refused.value.used == pytest.approx(0.03)


@pytest.mark.parametrize("fleet", ["sqlite", "postgres"], indirect=True)
def test_a_cancelled_tree_s_spend_counts_once_though_its_root_is_charged_late(
    fleet: Fleet,
) -> None:
    """A root cancelled while its children ran is charged their cost as they end (and by
    the relay's `settle_ended` for those before): the day's spend takes each once."""
    store = fleet.client.store
    clock = Clock(datetime.now(UTC))
    ids = spawn(store, clock, "cancelled-tree", 2)  # the root's spawn step costs 0.01
    finish(store, clock, ids[0])  # 0.01, before the cancel
    store.request_cancel("cancelled-tree", now=clock(), by="ann")
    store.settle_ended(now=clock())
    finish(store, clock, ids[1])  # asked to cancel: it ends at its tick, no model call
    cost = 0.01 + sum(c.cost_usd for c in store.children("cancelled-tree"))
    assert cost == pytest.approx(0.02)
    assert store.get("cancelled-tree").cost_usd == pytest.approx(cost)

    engine = store.engine  # type: ignore[attr-defined]
    used = quotas.usage(engine, "default", now=clock(), stored=quotas.StoredBytes())
    assert used["max_usd_per_day"] == pytest.approx(cost)  # not 0.03: the charge is taken off


@pytest.mark.parametrize("fleet", ["sqlite", "postgres"], indirect=True)
def test_a_fork_counts_only_what_it_spent_itself(fleet: Fleet) -> None:
    """A fork's `cost_usd` starts at the cost of the steps it kept, which its parent spent
    and which counts already: the day's spend takes it once."""
    store = fleet.client.store
    clock = Clock(datetime.now(UTC))
    parent = fleet.submit("team-a", "spender")
    for number in (1, 2, 3):
        run_step(store, parent, number, now=clock())  # 0.01 a step
    fork = fleet.client.fork(parent, from_step=2, by="ann", new_id="spender-fork")
    assert fork.cost_usd == pytest.approx(0.02)  # its budget counts the kept steps
    think(store, fork.id, reply(("read_file", {"path": "other.py"})), now=clock())  # its own

    engine = store.engine  # type: ignore[attr-defined]
    used = quotas.usage(engine, "team-a", now=clock(), stored=quotas.StoredBytes())
    assert used["max_usd_per_day"] == pytest.approx(0.04)  # 0.03 + 0.01, not 0.06
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 0.045}})
    fleet.submit("team-a")
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 0.04}})
    with pytest.raises(QuotaExceeded) as refused:
        fleet.submit("team-a")
    assert "spent $0.04 today" in str(refused.value) and "is $0.04:" in str(refused.value)


def test_a_fork_is_held_to_the_tenant_s_quotas_as_a_submit_is(fleet: Fleet) -> None:
    """A fork is a new session of the tenant: a tenant past its day's dollars, or its
    queue, could fork from step 0 what it could not submit. Over a quota it is refused as a
    submit is and stores nothing; past the in-flight limit it waits `queued`."""
    store = fleet.client.store
    spender = fleet.submit("team-a", "fork-spender")
    run_step(store, spender, 1, now=datetime.now(UTC))  # 0.01
    write(fleet.tenants_file, {"team-a": {"max_usd_per_day": 0.01}})
    before = (fleet.count(), fleet.count(outbox), fleet.count(events))

    with pytest.raises(QuotaExceeded, match="max_usd_per_day") as refused:
        fleet.client.fork(spender, from_step=0, by="olga", new_id="over-fork")

    assert refused.value.tenant == "team-a" and refused.value.used == pytest.approx(0.01)
    assert (fleet.count(), fleet.count(outbox), fleet.count(events)) == before
    write(fleet.tenants_file, {"team-a": {"max_queued": 1}})
    fleet.submit("team-a")  # waits to start: the tenant's queue of one is full
    with pytest.raises(QuotaExceeded, match="`max_queued` of 1"):
        fleet.client.fork(spender, from_step=0, by="olga", new_id="over-fork")
    write(fleet.tenants_file, {"team-a": {"max_in_flight": 1}})
    held = fleet.client.fork(spender, from_step=0, by="olga", new_id="held-fork")
    assert held.status is Status.QUEUED and fleet.count(outbox, session_id="held-fork") == 0


def test_the_api_answers_a_fork_over_a_quota_429_as_a_submit(fleet: Fleet, tmp_path: Path) -> None:
    parent = fleet.submit("team-a", "fork-parent")
    _dead_letter(fleet, parent)
    fleet.submit("team-a")  # waits to start: the tenant's queue is full
    write(fleet.tenants_file, {"team-a": {"max_queued": 1}})
    app = make_api(
        fleet.client.settings,
        ApiSettings(api_tokens=TOKENS, api_scripted_roots=[tmp_path]),  # type: ignore[arg-type]
        client=fleet.client,
    )
    olga = {"Authorization": f"Bearer {TOKEN['olga']}"}
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for path in (f"/api/v1/sessions/{parent}/fork", f"/api/v1/dead-letters/{parent}/fork"):
            over = http.post(path, json={"from_step": 0, "id": "fork-over"}, headers=olga)
            assert over.status_code == 429, (path, over.text)
            assert int(over.headers["Retry-After"]) > 0
            said = over.json()
            assert said["code"] == "quota_exceeded" and said["quota"] == "max_queued", said
            assert said["tenant"] == "team-a" and said["limit"] == 1, said
            assert said["used"] == 1 and "has 1 session waiting to start" in said["message"]
            assert "or ask the operator to raise it (in TICKWORK_TENANTS_FILE" in said["message"]
            assert fleet.count(id="fork-over") == 0
        assert fleet.client.dead_letter(parent).resolution is None  # nothing resolved it


REPO = "github.com/org/repo"


def test_a_fork_keeps_its_parent_s_priority_and_concurrency_key(fleet: Fleet) -> None:
    """A fork got priority 0 and no key: a fork of a repair keyed to its repository ran
    beside the ones it had to wait for, and an urgent session's fork lost its place. It
    takes its parent's unless given others (a new key alone: one at a time)."""
    keyed = {"tenant": "team-a", "submitted_by": "t", "priority": 5, "concurrency_key": REPO}
    for name in ("keyed", "beside"):  # the key's two slots, both taken
        fleet.client.submit(
            TEST_KIND, {}, model=fleet.script, session_id=name, max_per_key=2, **keyed
        )

    fork = fleet.client.fork("keyed", from_step=0, by="olga", new_id="keyed-fork")

    assert (fork.priority, fork.concurrency_key, fork.max_per_key) == (5, REPO, 2)
    assert fork.status is Status.QUEUED  # it waits for its key, as a submit of it would
    other = fleet.client.fork(
        "keyed", from_step=0, by="olga", new_id="other-fork", priority=-3, concurrency_key="o"
    )
    assert (other.priority, other.concurrency_key, other.max_per_key) == (-3, "o", 1)
    assert other.status is Status.READY
    wider = fleet.client.fork("keyed", from_step=0, by="olga", new_id="wide", max_per_key=3)
    assert (wider.concurrency_key, wider.max_per_key, wider.status) == (REPO, 3, Status.READY)
    unkeyed = fleet.submit("team-a", "unkeyed")
    with pytest.raises(InvalidInput, match="unkeyed has none: give `concurrency_key` with"):
        fleet.client.fork(unkeyed, from_step=0, by="olga", new_id="x", max_per_key=2)
    with pytest.raises(InvalidInput, match="priority 5000 is out of bounds"):
        fleet.client.fork(unkeyed, from_step=0, by="olga", new_id="x", priority=5000)
    assert fleet.count(id="x") == 0


def test_the_api_forks_with_the_parent_s_priority_and_key_or_the_body_s(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.client.submit(
        TEST_KIND, {}, model=fleet.script, session_id="api-parent", tenant="team-a",
        submitted_by="t", priority=7, concurrency_key=REPO,
    )  # fmt: skip
    _dead_letter(fleet, "api-parent")
    app = make_api(
        fleet.client.settings,
        ApiSettings(api_tokens=TOKENS, api_scripted_roots=[tmp_path]),  # type: ignore[arg-type]
        client=fleet.client,
    )
    olga = {"Authorization": f"Bearer {TOKEN['olga']}"}
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        kept = http.post(
            "/api/v1/dead-letters/api-parent/fork", json={"from_step": 0}, headers=olga
        )
        assert kept.status_code == 201, kept.text
        head = kept.json()
        assert (head["priority"], head["concurrency_key"], head["max_per_key"]) == (7, REPO, 1)
        given = {"from_step": 0, "again": True, "priority": -2, "concurrency_key": "k2"}
        given["max_per_key"] = 4
        changed = http.post("/api/v1/sessions/api-parent/fork", json=given, headers=olga)
        assert changed.status_code == 201, changed.text
        head = changed.json()
        assert (head["priority"], head["concurrency_key"], head["max_per_key"]) == (-2, "k2", 4)
        view = http.get(f"/api/v1/sessions/{head['id']}", headers=olga).json()
        assert view["forked_from"]["patch"] == {
            "priority": -2,
            "concurrency_key": "k2",
            "max_per_key": 4,
        }
        bad = http.post(
            "/api/v1/sessions/api-parent/fork",
            json={"from_step": 0, "priority": 1001},
            headers=olga,
        )
        assert bad.status_code == 422 and "priority" in bad.text


def _dead_letter(fleet: Fleet, session_id: str) -> None:
    """Fail the session and dead-letter it, as a tick does."""
    from tickwork.fsm import machine
    from tickwork.fsm.values import ErrorCode

    from tickwork.testing.store_ticks import claim

    store, now = fleet.client.store, datetime.now(UTC)
    claimed = claim(store, session_id, now=now)
    change = machine.fail(claimed.head, ErrorCode.LOOP, "looped", now=now)
    store.save(change, version=claimed.head.version, owner="worker-1", now=now)


def test_stored_bytes_count_the_transcripts(fleet: Fleet) -> None:
    """The refusal said to run `tickwork gc`, which archives nothing until a retention age
    is set (the default keeps every session): it names the settings, and the bytes read
    as the token budgets' counts do."""
    talker = fleet.submit("team-a")
    think(fleet.client.store, talker, reply(content="x" * 4000), now=datetime.now(UTC))
    write(fleet.tenants_file, {"team-a": {"max_stored_bytes": 3000}})

    with pytest.raises(QuotaExceeded, match="`max_stored_bytes` is 3,000: ") as refused:
        fleet.submit("team-a")

    assert refused.value.used >= 4000 and refused.value.retry_after_s > 0
    said = str(refused.value)
    assert said.startswith("tenant team-a stores 4,"), said
    assert "past their retention age, TICKWORK_RETENTION_COMPLETED_S" in said, said
    assert "with none set, none is ever archived), or ask the operator" in said, said
    fleet.submit("team-b")


def test_the_api_answers_429_naming_the_quota(fleet: Fleet, tmp_path: Path) -> None:
    write(fleet.tenants_file, {"team-a": {"max_queued": 1}})
    app = make_api(
        fleet.client.settings,
        ApiSettings(api_tokens=TOKENS, api_scripted_roots=[tmp_path]),  # type: ignore[arg-type]
        client=fleet.client,
    )
    body = {"kind": TEST_KIND, "input": {}, "model": fleet.script}
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        ann = {"Authorization": f"Bearer {TOKEN['ann']}"}
        first = http.post("/api/v1/sessions", json=body, headers=ann)
        assert first.status_code == 201, first.text
        assert first.json()["tenant"] == "team-a"
        over = http.post("/api/v1/sessions", json={**body, "id": "over-1"}, headers=ann)
        assert over.status_code == 429, over.text
        assert int(over.headers["Retry-After"]) > 0
        said = over.json()
        assert said["code"] == "quota_exceeded" and said["quota"] == "max_queued"
        assert said["tenant"] == "team-a" and said["limit"] == 1 and said["used"] == 1
        assert http.get("/api/v1/sessions/over-1", headers=ann).status_code == 404
        bob = {"Authorization": f"Bearer {TOKEN['bob']}"}
        assert http.post("/api/v1/sessions", json=body, headers=bob).status_code == 201


def test_the_cli_says_which_quota_and_exits_non_zero(fleet: Fleet) -> None:
    write(fleet.tenants_file, {"team-a": {"max_queued": 0}})
    env = {
        **os.environ,
        "TICKWORK_STATE_DIR": str(fleet.client.settings.state_dir),
        "TICKWORK_IMPORTS": json.dumps([TEST_KIND]),
        "TICKWORK_TENANTS_FILE": str(fleet.tenants_file),
    }
    submit = ["submit", TEST_KIND, "--model", fleet.script, "--tenant", "team-a"]
    run = subprocess.run(
        [sys.executable, "-m", "tickwork", *submit, "--id", "cli-over"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "max_queued" in run.stderr + run.stdout and "team-a" in run.stderr + run.stdout
    # a quota of 0 is no queue that is full: it says the tenant may not queue at all
    assert "may not queue sessions at all; ask the operator to raise it (in " in run.stderr
    assert "TICKWORK_TENANTS_FILE" in run.stderr
    assert fleet.count(id="cli-over") == 0


@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_fifty_submits_race_for_the_last_slots(fleet: Fleet) -> None:
    """Three slots left of ten; 50 threads submit at once: exactly three get in."""
    write(fleet.tenants_file, {"team-a": {"max_queued": 10}})
    for _ in range(7):
        fleet.submit("team-a")

    def attempt(n: int) -> str:
        try:
            fleet.submit("team-a", session_id=f"race-{n}")
        except QuotaExceeded as exc:
            assert exc.quota == "max_queued"
            return "refused"
        return "admitted"

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(attempt, range(50)))

    assert results.count("admitted") == 3 and results.count("refused") == 47
    assert fleet.count(tenant="team-a") == 10
    with fleet.client.store.engine.connect() as conn:  # type: ignore[attr-defined]
        raced = (
            conn.execute(select(sessions.c.id).where(sessions.c.id.like("race-%"))).scalars().all()
        )
        ticks = conn.execute(
            select(func.count()).select_from(outbox).where(outbox.c.session_id.in_(raced))
        ).scalar_one()
        created = conn.execute(
            select(func.count()).select_from(events).where(events.c.session_id.like("race-%"))
        ).scalar_one()
    assert len(raced) == 3 and ticks == 3 and created == 3  # nothing half-created
    assert [fleet.client.get(i).status for i in raced] == [Status.READY] * 3
