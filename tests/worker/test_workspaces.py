"""Working copies: made from the store on any host, brought up to date when stale, restored
when a crash left them dirty, and each tool's change found from a stat snapshot."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tickwork.fsm.errors import ConfigurationError, InvalidInput
from tickwork.fsm.values import Head, Session
from tickwork.store import Store, make_engine, open_store
from tickwork.store.artifacts import DatabaseArtifacts, DirectoryArtifacts, open_artifacts
from tickwork.store.files import FileChange
from tickwork.store.migrate import upgrade
from tickwork.worker.files import sources
from tickwork.worker.files.filetree import Ignore
from tickwork.worker.files.workspaces import Workspaces

from tests.conftest import Clock
from tests.store.conftest import claim, execute_change, new_session, reply, think


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'files.db'}"
    upgrade(url)
    store = open_store(make_engine(url))
    yield store
    store.engine.dispose()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "README").write_text("calc\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"\x00junk")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\x00obj")
    (root / "notes.log").write_text("log\n")
    (root / ".gitignore").write_text("# comments\nbuild/\n*.log\n")
    return root


def _session(store: Store, clock: Clock, base: str, session_id: str = "ws-1") -> Head:
    session = new_session(session_id, now=clock())
    config = {**session.head.config, "files": {"base": base}}
    head = session.head.model_copy(update={"config": config})
    store.create(Session(head=head), now=clock())
    return head


def _host(tmp_path: Path, store: Store, name: str) -> Workspaces:
    return Workspaces(tmp_path / name, store, DatabaseArtifacts(store.engine))


def _tick(store: Store, clock: Clock, host: Workspaces, head: Head, edit: object) -> FileChange:
    """One step whose tool runs `edit(path)` in the host's working copy; saved."""
    think(store, head.id, reply(("run_command", {"command": "edit"})), now=clock.advance(1))
    claimed = claim(store, head.id, now=clock.advance(1))
    copy = host.checkout(claimed.head)
    try:
        copy.begin()
        edit(copy.path)  # type: ignore[operator]
        files = copy.record(step=claimed.head.step, call_id=claimed.calls[0].call_id)
        assert files is not None
        change = execute_change(store, claimed, now=clock())
        store.save(change, version=claimed.head.version, owner="worker-1", now=clock(), files=files)
        copy.saved()
    finally:
        copy.release()
    return files


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_a_packed_directory_skips_caches_and_ignored_files_and_is_stored_once(
    store: Store, project: Path
) -> None:
    artifacts = DatabaseArtifacts(store.engine)
    before = _tree(project)
    base, count = sources.pack(project, artifacts)
    manifest = sources.read_manifest(artifacts, base)
    assert sorted(manifest) == [".gitignore", "README", "pkg/calc.py", "run.sh"] and count == 4
    assert manifest["run.sh"].startswith("100755 ") and manifest["README"].startswith("100644 ")
    assert _tree(project) == before  # the user's directory is never changed
    again, _ = sources.pack(project, artifacts)
    assert again == base
    assert artifacts.put({base: artifacts.get([base])[base]}) == 0


def test_a_workspace_says_what_its_gitignore_left_out_and_keeps_what_it_re_includes(
    store: Store, project: Path, tmp_path: Path
) -> None:
    """A project's tests may need files its .gitignore names (hatch-vcs's `_version.py`,
    compiled `.mo` translations): the session never sees them, and its tests failed with
    nothing saying why. The source names them; `!` re-includes, as git does."""
    (project / "pkg" / "_version.py").write_text("VERSION = '1.0'\n")
    (project / "pkg" / "keep.log").write_text("kept\n")
    (project / ".gitignore").write_text(
        "# comments\nbuild/\n*.log\n!pkg/keep.log\npkg/_version.py\n"
    )
    artifacts = DatabaseArtifacts(store.engine)
    found = sources.directory(project, artifacts, trusted=True, roots=[], state_dir=tmp_path)
    manifest = sources.read_manifest(artifacts, found["base"])
    assert "pkg/keep.log" in manifest and "notes.log" not in manifest
    assert found["gitignored"] == {"count": 3, "first": ["build/", "notes.log", "pkg/_version.py"]}
    line = sources.describe(found)
    assert line.endswith("its .gitignore left out 3: build/, notes.log, pkg/_version.py)"), line
    (project / ".gitignore").unlink()
    whole = sources.directory(project, artifacts, trusted=True, roots=[], state_dir=tmp_path)
    assert "gitignored" not in whole and "left out" not in sources.describe(whole)


def test_a_leading_double_star_in_the_gitignore_matches_at_any_depth(tmp_path: Path) -> None:
    """`**/NAME` is NAME in every folder, as in git (it was read as anchored at the root:
    `**/generated.py` left out only the top one); `**/A/B` is A/B in every folder."""
    (tmp_path / ".gitignore").write_text("**/generated.py\n**/out/\n**/docs/_build\n")
    ignore = Ignore.of(tmp_path)
    assert ignore.skips("generated.py", is_dir=False)
    assert ignore.skips("pkg/sub/generated.py", is_dir=False)
    assert ignore.skips("pkg/out", is_dir=True) and not ignore.skips("pkg/out", is_dir=False)
    assert ignore.skips("docs/_build", is_dir=True) and ignore.skips("a/docs/_build", is_dir=True)
    assert not ignore.skips("pkg/generated.pyc", is_dir=False)
    assert not ignore.skips("docs", is_dir=True)


def test_a_double_star_between_folders_matches_no_folder_too(tmp_path: Path) -> None:
    """`a/**/b` is b in a or in any folder below it, as in git: `a/b` too (it needed one
    folder between them)."""
    (tmp_path / ".gitignore").write_text("src/**/gen.py\nx/**/y/**/z\n")
    ignore = Ignore.of(tmp_path)
    assert ignore.skips("src/gen.py", is_dir=False)
    assert ignore.skips("src/pkg/sub/gen.py", is_dir=False)
    assert not ignore.skips("gen.py", is_dir=False) and not ignore.skips("lib/gen.py", is_dir=False)
    for path in ("x/y/z", "x/1/y/z", "x/y/2/z", "x/1/y/2/z"):
        assert ignore.skips(path, is_dir=False), path


def test_a_host_without_a_copy_makes_one_from_the_store(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    copy = _host(tmp_path, store, "host-a").checkout(head)
    try:
        assert _tree(copy.path) == {
            p: c
            for p, c in _tree(project).items()
            if p in (".gitignore", "README", "pkg/calc.py", "run.sh")
        }
        assert os.access(copy.path / "run.sh", os.X_OK)
        assert copy.record(step=1, call_id="c") is None  # nothing changed
    finally:
        copy.release()


def test_every_kind_of_change_is_found_even_right_after_the_copy_was_made(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host = _host(tmp_path, store, "host-a")

    def edit(root: Path) -> None:
        # same size, same second as the copy: only a hash tells it changed
        (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (root / "README").unlink()
        (root / "new" / "deep").mkdir(parents=True)
        (root / "new" / "deep" / "f.txt").write_text("new\n")
        (root / "run.sh").chmod(0o644)
        (root / "__pycache__").mkdir(exist_ok=True)
        (root / "__pycache__" / "y.pyc").write_bytes(b"cache")
        (root / "debug.log").write_text("ignored\n")

    files = _tick(store, clock, host, head, edit)
    assert sorted(files.changes) == ["README", "new/deep/f.txt", "pkg/calc.py", "run.sh"]
    assert files.changes["README"] is None
    assert str(files.changes["run.sh"]).startswith("100644 ")
    assert store.files_state(head.id) == files.state


def test_a_stale_copy_is_brought_up_to_date_writing_only_what_differs(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host_a, host_b = _host(tmp_path, store, "host-a"), _host(tmp_path, store, "host-b")
    copy = host_b.checkout(head)
    readme = (copy.path / "README").stat().st_ino
    copy.release()

    _tick(store, clock, host_a, head, lambda r: (r / "pkg" / "calc.py").write_text("fixed\n"))

    copy = host_b.checkout(store.get(head.id))
    try:
        assert (copy.path / "pkg" / "calc.py").read_text() == "fixed\n"
        assert (copy.path / "README").stat().st_ino == readme  # untouched
    finally:
        copy.release()


def test_a_copy_a_crash_left_dirty_is_restored_to_the_saved_files(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host = _host(tmp_path, store, "host-a")
    _tick(store, clock, host, head, lambda r: (r / "pkg" / "calc.py").write_text("fixed\n"))
    copy = host.checkout(store.get(head.id))
    saved = _tree(copy.path)
    copy.begin()
    (copy.path / "pkg" / "calc.py").write_text("half writ")
    (copy.path / "README").unlink()
    (copy.path / "partial.tmp").write_text("x")
    copy.release()  # the worker died: nothing saved

    copy = host.checkout(store.get(head.id))
    try:
        assert _tree(copy.path) == saved
    finally:
        copy.release()


def test_a_second_tick_on_one_host_gets_a_copy_of_its_own_while_the_first_holds_it(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host = _host(tmp_path, store, "host-a")
    first = host.checkout(head)
    second = host.checkout(head)
    try:
        assert first.path != second.path
        assert _tree(first.path) == _tree(second.path)
    finally:
        second.release()
        first.release()
    assert not second.path.exists()


def test_an_ended_sessions_copy_is_dropped_and_the_cache_pruned_by_size(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host = _host(tmp_path, store, "host-a")
    copy = host.checkout(head)
    copy.release()
    assert copy.path.exists()
    host.drop(head.id)
    assert not copy.folder.exists()

    host.checkout(head).release()
    host.max_bytes = 0
    assert host.prune() > 0
    assert not list((tmp_path / "host-a").glob("objects/*/*"))


def test_a_directory_artifact_store(tmp_path: Path, store: Store) -> None:
    artifacts = open_artifacts(f"file://{tmp_path / 'shared'}", store.engine)
    assert isinstance(artifacts, DirectoryArtifacts)
    blob = {"0" * 64: b""}
    with pytest.raises(ValueError, match="does not hold"):
        artifacts.put(blob)
    from tickwork.store.files import blob_hash

    assert artifacts.put({blob_hash(b"abc"): b"abc"}) == 3
    assert artifacts.put({blob_hash(b"abc"): b"abc"}) == 0
    assert artifacts.get([blob_hash(b"abc")]) == {blob_hash(b"abc"): b"abc"}
    with pytest.raises(ConfigurationError, match="TICKWORK_ARTIFACTS_URL"):
        open_artifacts("ftp://x", store.engine)


def test_untrusted_sources_must_lie_under_the_roots(tmp_path: Path, project: Path) -> None:
    with pytest.raises(InvalidInput, match="does not accept local paths"):
        sources.check_local(project, what="workspace", trusted=False, roots=())
    with pytest.raises(InvalidInput, match="outside the directories"):
        sources.check_local(project, what="workspace", trusted=False, roots=[tmp_path / "other"])
    sources.check_local(project, what="workspace", trusted=False, roots=[tmp_path])
    link = tmp_path / "other"
    link.mkdir()
    (link / "escape").symlink_to(project)
    with pytest.raises(InvalidInput, match="outside the directories"):
        sources.check_local(link / "escape", what="workspace", trusted=False, roots=[link])


def test_a_same_size_rewrite_in_the_same_clock_tick_as_the_last_record_is_found(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host = _host(tmp_path, store, "host-a")
    first = _tick(store, clock, host, head, lambda r: (r / "a.txt").write_text("aaaa"))
    second = _tick(store, clock, host, head, lambda r: (r / "a.txt").write_text("bbbb"))
    assert first.changes != second.changes and list(second.changes) == ["a.txt"]


def test_a_rebuild_never_writes_through_a_symlink_a_command_left(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    host = _host(tmp_path, store, "host-a")
    outside = tmp_path / "outside"
    outside.mkdir()
    copy = host.checkout(head)
    copy.begin()
    shutil.rmtree(copy.path / "pkg")
    (copy.path / "pkg").symlink_to(outside)
    copy.release()  # the worker died mid-command

    copy = host.checkout(head)
    try:
        assert not (copy.path / "pkg").is_symlink()
        assert (copy.path / "pkg" / "calc.py").read_text().startswith("def add")
    finally:
        copy.release()
    assert list(outside.iterdir()) == []


def test_a_tool_that_names_what_it_wrote_is_checked_on_those_paths_only(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    copy = _host(tmp_path, store, "host-a").checkout(head)
    try:
        copy.begin()
        (copy.path / "README").write_text("named\n")
        (copy.path / "link.md").symlink_to("pkg/calc.py")
        (copy.path / "pkg" / "calc.py").write_text("through the link\n")
        (copy.path / "other.txt").write_text("not named: found by the next full look\n")
        files = copy.record(step=1, call_id="c", paths=["README", "./link.md", "../x"])
        assert files is not None and sorted(files.changes) == ["README", "pkg/calc.py"]
    finally:
        copy.release()


def test_a_file_over_the_limit_is_not_kept(
    store: Store, clock: Clock, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tickwork.worker.files import working_copy

    monkeypatch.setattr(working_copy, "MAX_TRACKED_FILE_BYTES", 100)
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    copy = _host(tmp_path, store, "host-a").checkout(head)
    try:
        copy.begin()
        (copy.path / "dump.bin").write_bytes(b"x" * 101)
        (copy.path / "small.txt").write_text("kept\n")
        files = copy.record(step=1, call_id="c")
        assert files is not None and list(files.changes) == ["small.txt"]
    finally:
        copy.release()


def test_an_artifact_store_that_is_away_retries_the_tick_and_fails_nothing(
    tmp_path: Path, project: Path
) -> None:
    from tickwork.fsm.errors import ArtifactsUnavailable
    from tickwork.fsm.values import CallState, Status

    from tests.security.conftest import Env

    url = f"sqlite:///{tmp_path / 'away.db'}"
    upgrade(url)
    shared = tmp_path / "shared"
    env = Env(url, tmp_path, artifacts_url=f"file://{shared}", lease_s=0.2)
    try:
        command = {"name": "run_command", "arguments": {"command": "printf x >> new.txt"}}
        replies = [{"content": "go", "tool_calls": [command]}, {"content": "done"}]
        session_id = env.submit(
            replies, kind="repair", data={"workspace": str(project), "test_command": "true"}
        )
        env.tick(session_id)  # THINK: no files needed
        shared.rename(tmp_path / "elsewhere")
        shared.write_text("not a folder")
        with pytest.raises(ArtifactsUnavailable, match="cannot read blobs"):
            env.tick(session_id)
        head = env.store.get(session_id)
        assert head.status is Status.EXECUTING
        call = env.load(session_id).call("s1c0")
        assert call is not None and call.state is CallState.PENDING  # never started

        shared.unlink()
        (tmp_path / "elsewhere").rename(shared)
        time.sleep(0.3)  # the lease of the tick that raised runs out, as after a crash
        done = env.run(session_id)
        assert done.status is Status.COMPLETED, done.error_message
        assert "+x" in done.result["patch"]
    finally:
        env.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs for the workspaces")
def test_a_full_workspaces_disk_puts_the_tick_back_and_fails_nothing(
    tmp_path: Path, project: Path
) -> None:
    """Issue 24: a host whose workspaces filesystem is full (another session, another
    program) failed the session `INTERNAL`; the tick is now put back like one whose artifact
    store is away, and runs once there is room."""
    import subprocess

    from tickwork.fsm.values import CallState, Status
    from tickwork.worker.observers.report import Outcome

    from tests.security.conftest import Env

    disk = tmp_path / "workspaces"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    url = f"sqlite:///{tmp_path / 'full.db'}"
    upgrade(url)
    env = Env(url, tmp_path, workspaces_dir=disk, lease_s=0.2)
    try:
        command = {"name": "run_command", "arguments": {"command": "printf x >> new.txt"}}
        replies = [{"content": "go", "tool_calls": [command]}, {"content": "done"}]
        session_id = env.submit(
            replies, kind="repair", data={"workspace": str(project), "test_command": "true"}
        )
        env.tick(session_id)  # THINK: no files needed
        filler = disk / "filler"
        with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as out:
            while True:
                out.write(b"\0" * 4096)
        assert env.tick(session_id) is Outcome.DROPPED  # nothing saved, the lease runs out
        assert env.store.get(session_id).status is Status.EXECUTING
        call = env.load(session_id).call("s1c0")
        assert call is not None and call.state is CallState.PENDING  # never started

        filler.unlink()
        time.sleep(0.3)  # the lease of the tick that raised runs out, as after a crash
        done = env.run(session_id)
        assert done.status is Status.COMPLETED, done.error_message
    finally:
        env.close()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _test_run_leftovers(root: Path) -> None:
    """What a pytest run with Hypothesis and pytest-cov's HTML report leaves behind, each
    tool marking its folder with a `.gitignore` of `*`."""
    (root / "pkg" / "calc.py").write_text("fixed\n")
    examples = root / ".hypothesis" / "examples" / "04e6b3400353b141"
    examples.mkdir(parents=True)
    (examples / "1a11219524732f06").write_bytes(b"\x00\x81binary example")
    (root / ".hypothesis" / ".gitignore").write_text("# made by Hypothesis\n\n*\n")
    (root / "htmlcov").mkdir()
    (root / "htmlcov" / "index.html").write_text("<html>coverage</html>\n")
    (root / "htmlcov" / ".gitignore").write_text("# Created by coverage.py\n*\n")
    (root / ".coverage").write_bytes(b"SQLite format 3\x00 coverage data")  # coverage.py's
    (root / ".coverage.host.1234.XyZ").write_bytes(b"SQLite format 3\x00 parallel")
    (root / ".coveragerc").write_text("[run]\nbranch = true\n")  # the project's own
    (root / "data").mkdir()  # a .gitignore that leaves out only some of its folder
    (root / "data" / ".gitignore").write_text("*.tmp\n")
    (root / "data" / "cases.csv").write_text("a,b\n")


def test_a_c_extension_built_in_place_is_left_out_of_the_session_files(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    """markupsafe from its sdist (no .gitignore), tested with `python3 setup.py build_ext
    --inplace && python3 -m pytest`: the extension module and the object files the build
    wrote were saved with the session's files, and its patch for a one-line fix held four
    binary files. What a build compiles is left out, as caches are; a compiled file the
    source holds stays one of its files."""
    (project / ".gitignore").unlink()
    (project / "pkg" / "vendored.so").write_bytes(b"\x7fELF shipped")
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    so = "_speedups.cpython-311-x86_64-linux-gnu.so"

    def build_and_fix(root: Path) -> None:
        (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (root / "pkg" / so).write_bytes(b"\x7fELF built")
        (root / "build" / "lib.linux-x86_64-cpython-311" / "pkg").mkdir(parents=True)
        (root / "build" / "lib.linux-x86_64-cpython-311" / "pkg" / so).write_bytes(b"\x7fELF")
        (root / "build" / "temp" / "pkg").mkdir(parents=True)
        (root / "build" / "temp" / "pkg" / "_speedups.o").write_bytes(b"\x7fELF object")
        (root / "pkg" / "vendored.so").write_bytes(b"\x7fELF rebuilt")

    change = _tick(store, clock, _host(tmp_path, store, "host-a"), head, build_and_fix)
    assert sorted(change.changes) == ["pkg/calc.py", "pkg/vendored.so"], change.changes


def test_a_folder_whose_own_gitignore_is_a_star_is_left_out_of_the_session_files(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    """A test run with Hypothesis wrote `.hypothesis/examples/...` (binary) and one with
    pytest-cov's HTML report `htmlcov/` into the session's files, so a repair's patch held
    them (a 1 MB patch for a one-line fix) and `--apply` met binary files; git leaves such
    folders out by their own `.gitignore`, and so does the session, and a packed source.
    So is coverage.py's data file, which a project without a .gitignore (an sdist) held."""
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    change = _tick(store, clock, _host(tmp_path, store, "host-a"), head, _test_run_leftovers)
    assert sorted(change.changes) == [
        ".coveragerc",
        "data/.gitignore",
        "data/cases.csv",
        "pkg/calc.py",
    ], change.changes

    source = tmp_path / "with-leftovers"
    shutil.copytree(project, source)
    _test_run_leftovers(source)
    artifacts = DatabaseArtifacts(store.engine)
    found = sources.directory(source, artifacts, trusted=True, roots=[], state_dir=tmp_path)
    manifest = sources.read_manifest(artifacts, found["base"])
    assert not any(p.startswith((".hypothesis/", "htmlcov/", ".coverage.")) for p in manifest)
    assert ".coverage" not in manifest and ".coveragerc" in manifest
    assert "data/cases.csv" in manifest


def test_a_gitignore_too_large_to_match_against_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each file of a tree is matched against every rule of its `.gitignore`: one of a
    million rules (a session's command writes it into its copy in a second) held the
    worker's walk after that command for hours, and one of a GiB (a sparse file) was read
    whole into memory. Past `MAX_GITIGNORE_RULES` rules or `MAX_GITIGNORE_BYTES` bytes, as
    git does past its own size, the file is not read, and the log says so."""
    from tickwork.worker.files import filetree

    many = tmp_path / "many"
    many.mkdir()
    rules = [f"rule{i}" for i in range(filetree.MAX_GITIGNORE_RULES)]
    (many / ".gitignore").write_text("\n".join(["secret.txt", *rules]) + "\n")
    assert not Ignore.of(many).skips("secret.txt", is_dir=False)
    assert "not read" in caplog.text and str(filetree.MAX_GITIGNORE_RULES) in caplog.text

    big = tmp_path / "big"
    big.mkdir()
    with (big / ".gitignore").open("w") as handle:
        handle.write("secret.txt\n")
        handle.truncate(filetree.MAX_GITIGNORE_BYTES + 1)  # sparse: nothing more to write
    assert not Ignore.of(big).skips("secret.txt", is_dir=False)

    fine = tmp_path / "fine"
    fine.mkdir()
    (fine / ".gitignore").write_text("\n".join(["secret.txt", *rules[:-1]]) + "\n")
    assert Ignore.of(fine).skips("secret.txt", is_dir=False)


def test_a_shipped_egg_info_is_not_named_among_what_the_gitignore_left_out(
    store: Store, project: Path, tmp_path: Path
) -> None:
    """An sdist ships its `*.egg-info` folder, which its .gitignore names: it is left out of
    the session's files as before, but naming it in the submit note and the source's line
    was noise before what matters (python-dateutil's `_version.py`)."""
    info = project / "src" / "python_dateutil.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text("Name: python-dateutil\n")
    (project / "pkg" / "_version.py").write_text("VERSION = '1.0'\n")
    (project / ".gitignore").write_text("*.egg-info/\npkg/_version.py\n")
    artifacts = DatabaseArtifacts(store.engine)
    found = sources.directory(project, artifacts, trusted=True, roots=[], state_dir=tmp_path)
    manifest = sources.read_manifest(artifacts, found["base"])
    assert not any("egg-info" in path for path in manifest)  # still left out of the copy
    assert found["gitignored"] == {"count": 1, "first": ["pkg/_version.py"]}
    assert "egg-info" not in sources.describe(found)
    (project / "pkg" / "_version.py").unlink()
    only = sources.directory(project, artifacts, trusted=True, roots=[], state_dir=tmp_path)
    assert "gitignored" not in only and "left out" not in sources.describe(only)


SIMPLEJSON_PKG_INFO = b"""Metadata-Version: 2.1
Name: simplejson
Version: 4.3.0
Summary: Simple, fast, extensible JSON encoder/decoder for Python

Name: not-this-one (its description)
"""


def test_a_sources_project_is_named_by_its_packaging_else_by_the_source() -> None:
    """What `tickwork env ls` says an environment was built for."""
    pyproject = {"pyproject.toml": b'[project]\nname = "humanize"\n'}
    cfg = {"setup.cfg": b"[metadata]\nname = python-dateutil\n"}
    where = {"kind": "workspace", "path": "/tmp/sd/python-dateutil-2.9.0"}
    assert sources.project_name(where, pyproject) == "humanize"
    assert sources.project_name(where, cfg) == "python-dateutil"
    assert sources.project_name(where, {}) == "python-dateutil-2.9.0"
    # simplejson's sdist: setup.py holds its name, PKG-INFO says it
    sdist = {"setup.cfg": b"[egg_info]\ntag_build = \n", "PKG-INFO": SIMPLEJSON_PKG_INFO}
    assert sources.project_name(where, sdist) == "simplejson"
    repo = {"kind": "repo", "url": "https://u:secret@example.com/org/calc.git?token=x"}
    assert sources.project_name(repo, {}) == "calc"
    assert sources.project_name({"url": "git@example.com:org/tool.git"}, {}) == "tool"
    # untrusted: a name that is no distribution's is not taken, nor a broken file's
    bad = {"pyproject.toml": b'[project]\nname = "x\\u001b[31m y"\n', "setup.cfg": b"[[["}
    assert sources.project_name(where, bad) == "python-dateutil-2.9.0"
    odd = {"kind": "workspace", "path": "/tmp/a\x1b[31m" + "b" * 300}
    name = sources.project_name(odd, {})
    assert name.isprintable() and len(name) == sources.MAX_NAME_CHARS
