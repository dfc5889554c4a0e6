"""All SQL takes bound parameters: hostile ids and texts go through every store operation on
Postgres and SQLite as data, and no code builds SQL text out of values."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, inspect, select
from tickwork.fsm import machine
from tickwork.fsm.approvals import ApprovalRule
from tickwork.fsm.errors import BlobMissing, CallNotFound, SessionNotFound
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.machine import RunTool
from tickwork.fsm.values import (
    Decision,
    DecisionKind,
    ErrorCode,
    Head,
    ModelReply,
    ProposedCall,
    Session,
    Status,
)
from tickwork.store import dead_letters as dl
from tickwork.store import deliveries
from tickwork.store.archive import DirectoryArchive
from tickwork.store.archived import ARCHIVED, archived_forks, archived_since, entry, load_archived
from tickwork.store.artifacts import DatabaseArtifacts
from tickwork.store.files import FileChange, blob_hash
from tickwork.store.relay import due_ticks, expired_leases
from tickwork.store.retention import Policy, archive_pass
from tickwork.store.schema import metadata, sessions

from tests.conftest import T0
from tests.security.conftest import Env
from tests.store.conftest import new_session
from tickwork.testing.store_contract.trees import finish, spawn
from tickwork.testing.store_ticks import Clock

ROOT = Path(__file__).resolve().parents[2]
#: hostile texts, each at most 64 characters (the id columns' width)
HOSTILE = [
    "x'); DROP TABLE tickwork_sessions; --",
    'y"; DELETE FROM tickwork_events; --',
    "z' OR '1'='1",
    "w\\'; UPDATE tickwork_sessions SET status='failed'; --",
    "%_*?[]{}$(rm -rf /)`id`",
    "../../etc/passwd",
]
RULES = {"danger": ApprovalRule(always=True)}


def tables(env: Env) -> set[str]:
    return set(inspect(env.store.engine).get_table_names())


def make(env: Env, session_id: str, text: str) -> Head:
    head = Head(
        id=session_id,
        kind=text,
        created_at=T0,
        updated_at=T0,
        model=text,
        input={text: text},
        config={"user_prompt": text, "files": {"base": "b" * 64}},
    )
    return env.store.create(Session(head=head), now=T0)


def test_hostile_ids_and_texts_through_every_store_operation(env: Env) -> None:
    store, engine = env.store, env.store.engine
    canary = make(env, "canary-session", "canary")
    expected_tables = tables(env)
    for n, hostile in enumerate(HOSTILE):
        sid = hostile[:60] + f"#{n}"
        owner = f"owner {hostile}"[:200]
        made = make(env, sid, hostile)
        assert store.get(sid) == made
        assert [h.id for h in store.list_sessions(kind=hostile)] == [sid]
        assert store.list_sessions(kind=hostile + "'--") == []
        assert store.list_sessions(status=[hostile]) == []
        assert store.list_sessions(error_code=hostile) == []
        assert store.list_sessions(submitted_by=hostile) == []
        assert store.list_sessions(parent_id=hostile) == []

        claimed = store.claim(sid, 0, owner=owner, now=T0, lease_s=30)
        assert claimed is not None and claimed.owner == owner
        assert store.renew(sid, 0, owner=owner, now=T0, lease_s=30)
        reply = ModelReply(
            content=hostile,
            calls=(
                ProposedCall(name=hostile[:50], arguments={"value": hostile}),
                ProposedCall(name="danger", arguments={hostile: hostile}),
            ),
        )
        change = machine.think(
            claimed.head, reply, now=T0, cost_usd=0.0, trace_id=hostile, recent=(), rules=RULES
        )
        head = store.save(change, version=0, owner=owner, now=T0)
        assert head.status is Status.WAITING_APPROVAL
        [card] = [
            c for c in deliveries.take(engine, now=T0, hold_s=5, limit=50) if c.session_id == sid
        ]
        assert "s1c1" in card.calls and card.key == f"{sid}:{head.version}"
        deliveries.failed(engine, card.event_id, error=hostile, retry_at=T0)
        state = deliveries.state(engine, sid, head.version)
        assert state is not None and state["last_error"] == hostile
        deliveries.delivered(engine, card.event_id, now=T0)
        assert deliveries.drop_moved_on(engine) == 0

        danger = store.load(sid).call("s1c1")
        assert danger is not None and danger.arguments == {hostile: hostile}
        with_bad_call = Decision(
            call_id=hostile[:60],
            kind=DecisionKind.APPROVE,
            approver=hostile,
            at=T0,
            fingerprint=danger.fingerprint,
        )
        try:
            store.decide(sid, with_bad_call, now=T0)
            raise AssertionError("a decision on a call that does not exist was taken")
        except CallNotFound:
            pass
        decision = Decision(
            call_id="s1c1",
            kind=DecisionKind.REJECT,
            approver=hostile,
            at=T0,
            fingerprint=danger.fingerprint,
            comment=hostile,
            feedback=hostile,
        )
        head = store.decide(sid, decision, now=T0)
        assert head.status is Status.EXECUTING

        claimed = store.claim(sid, head.version, owner=owner, now=T0, lease_s=30)
        assert claimed is not None
        plan = machine.start_execute(
            claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=T0
        )
        assert isinstance(plan, RunTool)
        store.start_call(sid, claimed.head.version, plan.call, owner=owner, now=T0)
        done = machine.tool_finished(
            claimed.head, claimed.calls, plan.call, output=hostile, is_error=True, now=T0
        )
        content = hostile.encode()
        assert DatabaseArtifacts(engine).put({blob_hash(content): content}) in (0, len(content))
        try:
            DatabaseArtifacts(engine).get([hostile])
            raise AssertionError("a hostile blob name found a blob")
        except BlobMissing:
            pass
        written = FileChange(
            step=1,
            call_id="s1c0",
            changes={hostile: f"100644 {blob_hash(content)}", f"{hostile}/gone": None},
            state=hostile[:64],
        )
        head = store.save(done, version=claimed.head.version, owner=owner, now=T0, files=written)
        [saved] = store.file_changes(sid)
        assert saved.changes == written.changes and store.files_state(sid) == hostile[:64]

        assert store.request_cancel(sid, now=T0, by=hostile).cancel_requested
        claimed = store.claim(sid, head.version, owner=owner, now=T0, lease_s=30)
        assert claimed is not None
        failed = machine.fail(
            claimed.head, ErrorCode.INTERNAL, hostile, now=T0, open_calls=claimed.calls
        )
        head = store.save(failed, version=claimed.head.version, owner=owner, now=T0)
        assert head.status is Status.FAILED and head.error_message == hostile

        session = store.load(sid)
        assert session.steps[0].thought == hostile and session.steps[0].trace_id == hostile
        assert session.observation("s1c0").content == hostile  # type: ignore[union-attr]
        assert session.decision("s1c1").feedback == hostile  # type: ignore[union-attr]
        assert [e for _, e in store.events_after(sid)] == list(session.events)
        assert any(e.data.get("by") == hostile for e in session.events)

        letter = dl.get_dead_letter(engine, sid)
        assert letter.message == hostile and letter.session().head.id == sid
        assert [d.session_id for d in dl.list_dead_letters(engine, kind=hostile)] == [sid]
        assert dl.list_dead_letters(engine, code=hostile) == []
        assert any(r["value"] == hostile for r in dl.stats(engine, by="kind"))
        # since inside T0's day: that part of it counted from the dead letters themselves
        assert any(r["value"] == hostile for r in dl.stats(engine, by="kind", since=T0))

        child = f"fork {hostile}"[:60] + f"#{n}"
        forked = store.fork(
            sid,
            new_id=child,
            from_step=1,
            by=hostile,
            now=T0,
            patch=ForkPatch(append_instruction=hostile, tool_outputs={"s1c0": hostile}),
            resolve_dead_letter=True,
        )
        assert forked.parent_id == sid and store.get(child).id == child
        assert store.file_changes(child)[0].changes == written.changes
        resolution = dl.get_dead_letter(engine, sid).resolution
        assert resolution is not None
        assert (resolution["fork"], resolution["by"]) == (child, hostile)
        assert [(f["fork"], f["by"]) for f in resolution["forks"]] == [(child, hostile)]

        later = T0 + timedelta(hours=1)
        assert store.claim(child, forked.version, owner=owner, now=T0, lease_s=1) is not None
        assert {d.session_id for d in expired_leases(engine, now=later)} >= {child}
        due = due_ticks(engine, now=later + timedelta(seconds=1), older_than_s=0)
        assert child in {d.session_id for d in due}

    try:
        store.get("x' OR '1'='1")
        raise AssertionError("a tautology found a session")
    except SessionNotFound:
        pass
    assert tables(env) == expected_tables
    assert store.get(canary.id) == canary
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(sessions)).scalar_one()
    assert total >= 1 + 2 * len(HOSTILE)


def test_hostile_ids_through_retention(env: Env, tmp_path: Path) -> None:
    """Archived, pruned, found in the archive's index and read back: each by its hostile id."""
    store, engine = env.store, env.store.engine
    archive = DirectoryArchive(tmp_path / "archive")
    ids = [hostile[:58] + f"@a{n}" for n, hostile in enumerate(HOSTILE)]
    for n, sid in enumerate(ids):
        parent = ids[n - 1] if n else None
        made = new_session(sid, now=T0, status=Status.COMPLETED, kind=HOSTILE[n])
        if parent is not None:
            made = made.model_copy(
                update={"head": made.head.model_copy(update={"parent_id": parent})}
            )
        store.create(made, now=T0)
    later = T0 + timedelta(days=2)
    report = archive_pass(engine, store.load, archive, Policy(completed_s=60), now=later)
    assert report.archived >= len(ids)
    for n, sid in enumerate(ids):
        found = entry(engine, sid)
        assert found is not None and found.state == ARCHIVED and found.kind == HOSTILE[n]
        back = load_archived(engine, archive, sid)
        assert back is not None and back.session.head.id == sid
        forks = [f["id"] for f in archived_forks(engine, sid)]
        assert forks == ([ids[n + 1]] if n + 1 < len(ids) else [])
        try:
            store.get(sid)
            raise AssertionError("an archived session is still live")
        except SessionNotFound:
            pass
    assert set(ids) <= set(archived_since(engine, later))
    assert entry(engine, "x' OR '1'='1") is None


SQL_CALLS = {"text", "exec_driver_sql", "execute", "executescript", "executemany"}


def _built_sql(node: ast.expr) -> bool:
    """An f-string, a %-format or a .format() call that puts values into SQL text."""
    if isinstance(node, ast.JoinedStr):
        # constants spelled in capitals (e.g. RUNNABLE_SQL in store/schema.py) are not values
        return any(
            isinstance(part, ast.FormattedValue)
            and not (isinstance(part.value, ast.Name) and part.value.id.isupper())
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
        return isinstance(node.left, ast.Constant | ast.JoinedStr) or _built_sql(node.left)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    )


def test_no_code_builds_sql_text_from_values() -> None:
    found = []
    for folder in ("fsm", "store", "worker", "tasks", "tickwork"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in SQL_CALLS and _built_sql(node.args[0]):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], f"SQL text built from values (use bound parameters): {found}"


def test_hostile_keys_and_ids_through_environments(env: Env) -> None:
    envs = env.store.environments
    for n, hostile in enumerate(HOSTILE):
        key, owner, sid = f"{hostile}#{n}", f"owner {hostile}", f"env{n} " + hostile[:56]
        make(env, sid, hostile)
        verdict, row = envs.claim(
            key, owner=owner, now=T0, lease_s=30, asked_at=T0, detail={"why": hostile}
        )
        assert row.key == key and row.owner == owner, verdict
        assert envs.renew(key, owner=owner, now=T0, lease_s=30)
        assert not envs.renew(key, owner=owner + "'--", now=T0, lease_s=30)
        assert envs.finish(key, owner=owner, now=T0, ok=True, log=hostile, chunks=(hostile,))
        envs.use(key, sid, now=T0)
        found = envs.get(key)
        assert found is not None and found.log == hostile and found.chunks == (hostile,)
        assert [e.key for e in envs.find(keys=(key,))] == [key]
        assert envs.get(key + "'--") is None
    assert len(envs.find(keys=tuple(f"{h}#{n}" for n, h in enumerate(HOSTILE)))) == len(HOSTILE)
    for n, hostile in enumerate(HOSTILE):
        assert envs.delete(f"{hostile}#{n}", force=True) is not None
    assert envs.find() == [] and {"tickwork_sessions", "tickwork_environments"} <= tables(env)


def test_hostile_ids_through_a_tree_and_its_join(env: Env) -> None:
    store = env.store
    for n, hostile in enumerate(HOSTILE):
        parent = f"tree{n} " + hostile[:50]
        clock = Clock()
        children = spawn(store, clock, parent, 2)
        assert [c.id for c in store.children(parent)] == children
        join = store.join(parent, store.children(parent)[0].spawn_call or "")
        assert join is not None and join.expected == 2 and not join.complete
        assert store.join(parent + "'--", "x' OR '1'='1") is None
        assert [j.call_id for j in store.joins(parent)] == [join.call_id]
        assert store.joins(parent + "' OR '1'='1") == []
        for child in children:
            finish(store, clock, child)
        assert store.get(parent).status is Status.EXECUTING  # woken once, by the last child
        assert {h.id for h in store.tree(parent)} == set(children)
        assert store.tree(parent + "' OR '1'='1") == []
    assert store.missed_wakes(now=T0 + timedelta(days=1)) == []
    assert store.settle_ended(now=T0 + timedelta(days=1)) == []
    assert store.to_cancel() == []


def test_every_table_is_covered() -> None:
    """A new table must get its operations into the hostile-id test above, then here."""
    assert {t.name for t in metadata.sorted_tables} == {
        "tickwork_sessions",
        "tickwork_steps",
        "tickwork_calls",
        "tickwork_observations",
        "tickwork_decisions",
        "tickwork_events",
        "tickwork_outbox",
        "tickwork_dead_letters",
        "tickwork_dead_letter_counts",
        "tickwork_dead_letter_totals",
        "tickwork_blobs",
        "tickwork_file_changes",
        "tickwork_deliveries",
        "tickwork_environments",
        "tickwork_environment_uses",
        "tickwork_archived",
        "tickwork_joins",
    }
