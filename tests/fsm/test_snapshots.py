"""Versioned snapshots of whole sessions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tickwork.fsm import snapshots
from tickwork.fsm.errors import UnknownSchemaVersion
from tickwork.fsm.snapshots import dump, load
from tickwork.fsm.values import SNAPSHOT_SCHEMA_VERSION, Session


@pytest.fixture(scope="module")
def session(build: Any) -> Session:
    return build.failed_session()


def test_round_trip_through_json(session: Session) -> None:
    document = json.loads(json.dumps(dump(session)))
    assert document["schema_version"] == SNAPSHOT_SCHEMA_VERSION
    assert load(document) == session


def test_round_trip_keeps_every_part(session: Session) -> None:
    loaded = load(json.loads(json.dumps(dump(session))))
    assert loaded.head == session.head
    assert loaded.steps == session.steps
    assert loaded.observations == session.observations
    assert loaded.decisions == session.decisions
    assert [e.kind for e in loaded.events] == [e.kind for e in session.events]
    assert loaded.head.created_at.tzinfo is not None


@pytest.mark.parametrize(
    "version",
    [
        pytest.param(SNAPSHOT_SCHEMA_VERSION + 1, id="newer"),
        pytest.param(0, id="zero"),
        pytest.param(-1, id="negative"),
        pytest.param("1", id="text"),
        pytest.param(1.5, id="float"),
        pytest.param(None, id="none"),
    ],
)
def test_unknown_schema_version_is_refused(session: Session, version: Any) -> None:
    document = {**dump(session), "schema_version": version}
    with pytest.raises(UnknownSchemaVersion, match="upgrade tickwork"):
        load(document)


def test_missing_schema_version_is_refused(session: Session) -> None:
    with pytest.raises(UnknownSchemaVersion):
        load({"session": dump(session)["session"]})


def _v1_to_v2(document: dict[str, Any]) -> dict[str, Any]:
    """Version 1 (in this test) kept the job kind as `head.job`."""
    head = dict(document["session"]["head"])
    head["kind"] = head.pop("job")
    return {"schema_version": 2, "session": {**document["session"], "head": head}}


def _v2_to_v3(document: dict[str, Any]) -> dict[str, Any]:
    head = {**document["session"]["head"], "kind": document["session"]["head"]["kind"] + "-v3"}
    return {"schema_version": 3, "session": {**document["session"], "head": head}}


def old_document(session: Session) -> dict[str, Any]:
    document = json.loads(json.dumps(dump(session)))
    document["schema_version"] = 1
    document["session"]["head"]["job"] = document["session"]["head"].pop("kind")
    return document


def test_upcaster_for_an_older_version_is_applied(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = old_document(session)
    monkeypatch.setattr(snapshots, "SNAPSHOT_SCHEMA_VERSION", 2)
    monkeypatch.setattr(snapshots, "UPCASTERS", {1: _v1_to_v2})
    assert load(document) == session
    assert dump(session)["schema_version"] == 2


def test_upcasters_chain(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "SNAPSHOT_SCHEMA_VERSION", 3)
    monkeypatch.setattr(snapshots, "UPCASTERS", {1: _v1_to_v2, 2: _v2_to_v3})
    assert load(old_document(session)).head.kind == session.head.kind + "-v3"


def test_missing_upcaster_is_named(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "SNAPSHOT_SCHEMA_VERSION", 3)
    monkeypatch.setattr(snapshots, "UPCASTERS", {1: _v1_to_v2})
    with pytest.raises(UnknownSchemaVersion, match="no upcaster from snapshot schema_version 2"):
        load(old_document(session))


def test_a_version_1_snapshot_of_a_call_reads_without_the_new_fields(session: Session) -> None:
    document = json.loads(json.dumps(dump(session)))
    document["schema_version"] = 1
    for step in document["session"]["steps"]:
        for call in step["calls"]:
            del call["provider_call_id"], call["approval_reason"]
    assert any(step["calls"] for step in document["session"]["steps"])
    loaded = load(document)
    assert loaded == session.model_copy(
        update={
            "steps": tuple(
                s.model_copy(
                    update={
                        "calls": tuple(
                            c.model_copy(update={"provider_call_id": None, "approval_reason": None})
                            for c in s.calls
                        )
                    }
                )
                for s in session.steps
            )
        }
    )


def test_a_version_1_snapshot_is_upcast_with_no_submitter(session: Session) -> None:
    document = json.loads(json.dumps(dump(session)))
    document["schema_version"] = 1
    del document["session"]["head"]["submitted_by"]
    assert load(document).head == session.head.model_copy(update={"submitted_by": ""})
