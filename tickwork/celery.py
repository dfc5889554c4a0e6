"""tickwork's Celery app for Celery's own command line, safe in any directory:

    celery -A tickwork worker --queues tickwork.ticks     # or -A tickwork.celery

`celery -A` imports the app with the working directory first on `sys.path`, where a
`worker.py` or `tasks.py` would stand in for tickwork's packages (so
`-A tickwork.worker.tick.app` is only safe where there is none); this module imports them
from where tickwork is installed. The app is built from the environment on first access,
not at import.
"""

from __future__ import annotations

from typing import Any

from .home import own_packages


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        with own_packages():
            from tickwork.worker.tick.app import make_app

            built = make_app()
        globals()["app"] = globals()["celery"] = built
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
