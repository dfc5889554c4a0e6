"""Who owns a working copy while a root worker's command runs in it.

Commands run as an unprivileged user (`runner.Sandbox.uid`); a root worker hands the
working copy to that user for the run, so the command can write it, and takes it back
after, so the host's owners are as they were and what the command made belongs to the
working copy's owner.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def handed_over(root: Path, uid: int, gid: int, *, skip: tuple[str, ...] = ()) -> Iterator[None]:
    """The working copy owned by the sandbox's user while it runs, then by its owners again.

    What the sandbox's user made, or owned before, goes to the working copy's owner (its
    parent's, if the sandbox's user owned it). Symlinks are not followed; a file with
    several hard links is left as it is (it may be linked from outside the working copy),
    so the command cannot write it. `skip`: directories left out (hidden from the command).
    """
    before = list(_entries(root, skip))
    owners = {path: (info.st_uid, info.st_gid) for path, info in before}
    for path, info in before:
        if not _shared(info):
            os.lchown(path, uid, gid)
    default = owners[str(root)]
    if default == (uid, gid):  # left so by a worker killed during a command
        parent = root.parent.stat()
        default = (parent.st_uid, parent.st_gid)
    try:
        yield
    finally:
        for path, info in _entries(root, skip):
            owner = owners.get(path, default)
            owner = default if owner == (uid, gid) else owner
            if (info.st_uid, info.st_gid) != owner:
                os.lchown(path, *owner)


def _shared(info: os.stat_result) -> bool:
    return not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1


def _entries(root: Path, skip: tuple[str, ...]) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `root` (itself first) but `skip`, with its lstat, symlinks not
    followed."""
    yield str(root), os.lstat(root)
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if os.path.join(directory, d) not in skip]
        for name in subdirs + names:
            path = os.path.join(directory, name)
            try:
                yield path, os.lstat(path)
            except FileNotFoundError:
                continue
