"""Stored snapshots of whole sessions, versioned, with upcasters for old versions.

To change the snapshot format: bump `SNAPSHOT_SCHEMA_VERSION`, and add an upcaster
`UPCASTERS[old] = function(old document) -> document of version old + 1`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tickwork.fsm.errors import UnknownSchemaVersion
from tickwork.fsm.tenants import DEFAULT_TENANT
from tickwork.fsm.values import SNAPSHOT_SCHEMA_VERSION, Session

Document = dict[str, Any]


def _v1_to_v2(document: Document) -> Document:
    """1 -> 2: the head records who submitted the session (earlier ones did not know);
    calls gained `provider_call_id` and `approval_reason` (old calls have neither)."""
    session = dict(document["session"])
    session["head"] = {"submitted_by": "", **session["head"]}
    session["steps"] = [
        {
            **step,
            "calls": [
                {"provider_call_id": None, "approval_reason": None, **call}
                for call in step.get("calls") or ()
            ],
        }
        for step in session.get("steps") or ()
    ]
    return {**document, "schema_version": 2, "session": session}


def _v2_to_v3(document: Document) -> Document:
    """2 -> 3: the head records the runtime level it needs; earlier sessions needed 1."""
    session = dict(document["session"])
    session["head"] = {"runtime_level": 1, **session["head"]}
    return {**document, "schema_version": 3, "session": session}


def _v3_to_v4(document: Document) -> Document:
    """3 -> 4: the head records its tenant; earlier sessions all belong to `default`."""
    session = dict(document["session"])
    session["head"] = {"tenant": DEFAULT_TENANT, **session["head"]}
    return {**document, "schema_version": 4, "session": session}


UPCASTERS: dict[int, Callable[[Document], Document]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
}


def dump(session: Session) -> Document:
    return {"schema_version": SNAPSHOT_SCHEMA_VERSION, "session": session.model_dump(mode="json")}


def load(document: Document) -> Session:
    version = document.get("schema_version")
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or not 1 <= version <= SNAPSHOT_SCHEMA_VERSION
    ):
        raise UnknownSchemaVersion(
            f"snapshot schema_version {version!r} is not one this tickwork reads "
            f"(1..{SNAPSHOT_SCHEMA_VERSION}); upgrade tickwork to read it"
        )
    while version < SNAPSHOT_SCHEMA_VERSION:
        if version not in UPCASTERS:
            raise UnknownSchemaVersion(f"no upcaster from snapshot schema_version {version}")
        document = UPCASTERS[version](document)
        upcast = int(document["schema_version"])
        if upcast <= version:
            raise UnknownSchemaVersion(f"the upcaster from {version} left it at {upcast}")
        version = upcast
    return Session.model_validate(document["session"])
