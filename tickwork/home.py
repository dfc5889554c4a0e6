"""Where tickwork's code lives, kept ahead of the working directory on `sys.path`.

tickwork installs one top-level package, `tickwork` (its layers are `tickwork.fsm`,
`tickwork.store`, `tickwork.worker` and `tickwork.tasks`), so a `tickwork.py` or a
`tickwork/` folder in the directory a command starts in must not stand in for it.
`python -m` and Celery (while it imports an `-A` app or task modules) put that directory
first on `sys.path`; these take it off again, unless tickwork's own code is what lives there.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: tickwork's one top-level package: it may not come from the working directory
PACKAGES = ("tickwork",)


def home() -> Path:
    """The directory that holds tickwork's packages (site-packages, or a checkout)."""
    return Path(__file__).resolve().parents[1]


def shadows(entry: str) -> bool:
    """Whether the `sys.path` entry is the working directory, and not where tickwork lives."""
    try:
        where = Path(entry or ".").resolve()
        return where == Path.cwd().resolve() and where != home()
    except OSError:  # a working directory that was removed shadows nothing
        return False


def drop_cwd_entry() -> None:
    """Take off `sys.path` the working directory `python -m` put first, as `python -P` does."""
    if not sys.flags.safe_path and sys.path and shadows(sys.path[0]):
        del sys.path[0]


@contextmanager
def own_packages() -> Iterator[None]:
    """`sys.path` without the working directory for the block, so imports find tickwork's."""
    saved = list(sys.path)
    sys.path[:] = [entry for entry in sys.path if not shadows(entry)]
    try:
        yield
    finally:
        sys.path[:] = saved
