"""A session's files as a git branch: its source's commit plus one commit with the files,
written as a git bundle (`tickwork patch --bundle`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tickwork.fsm.errors import NoPatch, TickworkError
from tickwork.fsm.values import Head
from tickwork.worker.files.workspaces import Workspaces

#: who the session's commit is by
GIT = ["git", "-c", "user.name=tickwork", "-c", "user.email=tickwork@localhost"]


def write_bundle(head: Head, files: Workspaces, dest: Path) -> str:
    """A git bundle at `dest` holding the branch `tickwork/<session id>`: the source's
    commit plus one commit with the session's files. Returns the branch name."""
    source = head.config.get("source")
    if not isinstance(source, dict) or source.get("kind") != "repo":
        raise NoPatch(
            f"session {head.id} has no bundle: it did not start from a git repository; use "
            f"`tickwork patch {head.id}` for its patch"
        )
    from tickwork.worker.files.sources import clone_at, no_filters

    before = files.base(head.config["files"])
    after, _ = files.manifest(head)
    branch = f"tickwork/{head.id}"
    untrusted = source.get("untrusted") is True
    with clone_at(str(source["url"]), str(source["commit"]), untrusted=untrusted) as clone:
        no_filters(clone)  # the session's files are the model's: its .gitattributes too
        for rel in before:
            if rel not in after:
                _place(clone, rel).unlink(missing_ok=True)
        blobs = files.blobs(value.split(" ", 1)[1] for value in after.values())
        for rel, value in after.items():
            target = _place(clone, rel)
            target.write_bytes(blobs[value.split(" ", 1)[1]])
            target.chmod(0o755 if value.startswith("100755") else 0o644)
        for args in (
            ["checkout", "--quiet", "-b", branch],
            ["add", "--all"],
            ["commit", "--quiet", "--allow-empty", "-m", f"tickwork session {head.id}"],
            ["bundle", "create", "--quiet", str(dest.absolute()), branch],
        ):
            done = subprocess.run([*GIT, *args], cwd=clone, capture_output=True, check=False)
            if done.returncode != 0:
                said = " ".join(done.stderr.decode(errors="replace").split())[:500]
                raise TickworkError(f"cannot write the bundle {dest}: git {args[0]}: {said}")
    return branch


def _place(clone: Path, rel: str) -> Path:
    """Where the session's file `rel` goes in `clone`, made a place of the clone's own: a
    session's files are never links, so a link of the source's commit on the way (a folder
    `out` pointing at the machine's home) or in its place is removed, as is a file where
    the session has a folder and a folder where it has a file; nothing is written or
    deleted through a link."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in ("..", ".", ".git") for p in parts):
        raise TickworkError(f"cannot write the bundle: the session's file {rel!r} is no path in it")
    place = clone
    for part in parts[:-1]:
        place = place / part
        if place.is_symlink() or (place.exists() and not place.is_dir()):
            place.unlink()
        if not place.exists():
            place.mkdir()
    target = place / parts[-1]
    if target.is_symlink():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)  # the session's file replaced the folder; rmtree follows no link
    return target
