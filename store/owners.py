"""A lease's owner as `lease_owner` stores it, read and written here alone: the worker's
`node:pid:thread` (`tickwork.worker.config.process.owner_name`), then `@K` when it holds
sign of life K (`tickwork.store.liveness`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: a lease's owner that names its sign: `<owner>@<key>`
_SIGNED = re.compile(r"@([0-9]{1,18})$")


def signed(owner: str, key: int) -> str:
    """The lease owner `owner` holding sign `key`."""
    return f"{owner}@{key}"


def key_of(owner: str | None) -> int | None:
    """The sign a lease's owner names, or None (a lease without one)."""
    found = _SIGNED.search(owner or "")
    return None if found is None else int(found[1])


def of_nodes(owner: str | None, nodes: Iterable[str]) -> bool:
    """Whether the lease `owner` is a worker's of one of `nodes` (its `node:` start)."""
    return owner is not None and any(owner == n or owner.startswith(f"{n}:") for n in nodes)
