"""A client opened where there is no database: it refuses to read, as the CLI does, and a
submit makes the database whole."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tickwork.fsm.errors import NoDatabase, SessionFinished, TickworkError
from tickwork.fsm.values import Status
from tickwork.store.files import parse_entry
from tickwork.worker.config.settings import Settings
from tickwork.worker.config.stores import build_store
from tickwork.worker.files.sources import read_manifest

from tickwork import Tickwork, deployment
from tickwork.testing import embedded_settings, running_worker, write_script


def test_a_client_opened_where_there_is_no_database_makes_no_empty_one(tmp_path: Path) -> None:
    """It made an empty SQLite file, after which every command said "no tickwork schema"."""
    settings = Settings(state_dir=tmp_path / "state")
    client = Tickwork(settings)
    with pytest.raises(NoDatabase, match=r"no tickwork database at .*`tickwork submit`"):
        client.sessions()
    assert not settings.state_dir.exists()
    client.close()
    # a submit makes it whole, as `tickwork submit` does
    client = Tickwork(settings)
    model = write_script([{"content": "done"}], tmp_path)
    head = client.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=model)
    assert [h.id for h in client.sessions()] == [head.id]
    client.close()


def test_a_wait_for_a_status_a_finished_session_will_never_have_ends_at_once(
    tmp_path: Path,
) -> None:
    """Waiting for `failed` on a completed session polled the whole timeout, then asked
    whether a worker ran; it says at once what the session is and what was waited for."""
    settings = embedded_settings(tmp_path)
    client = Tickwork(settings)
    model = write_script([{"content": "done"}], tmp_path)
    head = client.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=model)
    with running_worker(settings):
        assert client.wait(head.id, until="completed").status is Status.COMPLETED
    with pytest.raises(SessionFinished) as ended:
        client.wait(head.id, until=["failed", "cancelled"], timeout=30)
    assert str(ended.value) == (
        f"session {head.id} has finished: it is completed and will never be cancelled or "
        "failed (fork it to go on)"
    )
    client.close()


def test_threads_using_a_client_first_at_once_open_one_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads could both find no store yet and open one each, one never closed; the
    client's twin taking whole ids (`whole_ids`, as the API uses it) opens no other."""
    settings = Settings(state_dir=tmp_path / "state")
    first = Tickwork(settings)
    first.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=write_script([], tmp_path))
    first.close()
    opened: list[object] = []

    def build(given: Settings) -> object:
        time.sleep(0.01)  # widens the window two threads could both open one in
        opened.append(store := build_store(given))
        return store

    monkeypatch.setattr(deployment, "build_store", build)
    for _ in range(20):
        opened.clear()
        client = Tickwork(settings)
        users = [client, client.whole_ids()] * 2
        start = threading.Barrier(len(users))

        def use(user: Tickwork, start: threading.Barrier) -> None:
            start.wait()
            user.sessions()

        threads = [threading.Thread(target=use, args=(u, start)) for u in users]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(opened) == 1
        client.close()


def test_a_refused_first_submit_makes_no_database(tmp_path: Path) -> None:
    """The first submit of a client where there is no database made it before checking
    what it was given: a mistyped model or budget, a workspace that is no folder, or a
    model without a price (refused after the workspace was packed) left a database behind.
    The first that passes stores the workspace it packed."""
    settings = Settings(state_dir=tmp_path / "state")
    model = write_script([{"content": "done"}], tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n")
    repair = {"workspace": str(project), "test_command": "pytest"}
    client = Tickwork(settings)
    refused = [
        ("tests.jobs:TEST", {"sink": str(tmp_path)}, {"model": "opneai:gpt-4o"}),
        ("tests.jobs:TEST", {"sink": str(tmp_path)}, {"budgets": {"max_steps": -3}}),
        ("repair", {**repair, "workspace": str(tmp_path / "nope")}, {}),
        ("repair", repair, {"model": "openai:my-local"}),  # no price, a cost budget
    ]
    for kind, given, more in refused:
        with pytest.raises(TickworkError):
            client.submit(kind, given, **{"model": model, **more})
        assert not settings.state_dir.exists(), (kind, more)
    head = client.submit("repair", repair, model=model)
    files = read_manifest(client.artifacts, head.config["files"]["base"])
    assert list(files) == ["calc.py"]
    blob = parse_entry(files["calc.py"])[1]
    assert client.artifacts.get([blob]) == {blob: b"x = 1\n"}
    client.close()


def test_a_dead_letter_asked_of_a_session_that_has_not_failed_says_what_it_is(
    tmp_path: Path,
) -> None:
    """`tickwork dlq show ID` (or `dlq fork`) of a queued, running or waiting session said
    "no dead letter has id or session id ...; list them with `tickwork dlq ls`", as for an id
    nobody made: it says the session is there, what it is, and that only a failed one has
    a dead letter, by its whole id or a start of it."""
    client = Tickwork(embedded_settings(tmp_path))
    model = write_script([{"content": "done"}], tmp_path)
    head = client.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=model)
    for key in (head.id, head.id[:8]):
        with pytest.raises(LookupError) as refused:
            client.dead_letter(key)
        assert str(refused.value) == (
            f"session {head.id} has no dead letter: it is ready, and only a failed session "
            "has one; read it, or fork it from a step, as a session"
        )
    with pytest.raises(LookupError, match="no dead letter has id or session id 'nobody-s'"):
        client.dead_letter("nobody-s")
    client.close()


def test_a_first_submits_files_are_held_on_disk_and_stored_once_it_is_taken(
    tmp_path: Path,
) -> None:
    """What a first submit's kind stores before the database is made (its packed workspace)
    was held in memory, up to the pack's 200 MB, and a read of a blob not held made the
    database before the submit's checks: they are held in a temporary folder, a read of
    another blob finds none (there is no database, so no blob anywhere else), and once the
    checks pass they are stored in the store; the folder goes either way."""
    import hashlib

    from tickwork.fsm.errors import BlobMissing
    from tickwork.store.artifacts import DirectoryArtifacts

    from tickwork.writes import _Held

    store = DirectoryArtifacts(tmp_path / "store")
    opened: list[int] = []

    def open_store() -> DirectoryArtifacts:
        opened.append(1)
        return store

    blobs = {hashlib.sha256(data).hexdigest(): data for data in (b"one", b"two")}
    held = _Held(open_store, hold=True)
    assert held.put(blobs) == 6
    assert held.get(list(blobs)) == blobs
    with pytest.raises(BlobMissing):
        held.get([hashlib.sha256(b"elsewhere").hexdigest()])
    with pytest.raises(ValueError, match="does not hold the content"):
        held.put({hashlib.sha256(b"x").hexdigest(): b"y"})
    assert not opened and not (tmp_path / "store").exists()
    folder = Path(held_name(held))
    assert len(list(folder.rglob("*"))) >= 2, "the files are held on disk"
    held.keep()
    assert store.get(list(blobs)) == blobs
    held.close()
    assert not folder.exists()

    refused = _Held(open_store, hold=True)
    refused.put(blobs)
    folder = Path(held_name(refused))
    refused.close()  # a refused submit: nothing stored, the folder gone
    assert not folder.exists()


def held_name(held: object) -> str:
    """The temporary folder a `_Held` keeps its files in."""
    return str(held._folder.name)  # type: ignore[attr-defined]
