"""Where evaluation runs are kept: one JSON file a run under the state folder's `evals/`.

A run holds what compares it later (the task set's hash, the model configuration, each
task's session id and figures); the sessions themselves stay in the store, where `tickwork
show ID` finds them. A file is written whole under a temporary name and renamed into place,
so a reader never sees half a run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from datetime import datetime
from pathlib import Path

from tickwork.fsm.errors import InvalidInput, TickworkError

from .model import Run

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class RunNotFound(TickworkError):
    """No stored run has that id (or id prefix)."""


def new_id(now: datetime) -> str:
    """A run id that sorts by time: `20261201-203112-3f9a`."""
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class Runs:
    """The runs stored in `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def save(self, run: Run) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{run.id}.json"
        text = json.dumps(run.to_json(), indent=1, ensure_ascii=False)
        handle, scratch = tempfile.mkstemp(dir=self.folder, prefix=f".{run.id}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(scratch, path)
        except BaseException:
            Path(scratch).unlink(missing_ok=True)
            raise
        return path

    def ids(self) -> list[str]:
        """Every stored run's id, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(p.stem for p in self.folder.glob("*.json") if RUN_ID.match(p.stem))

    def load(self, key: str) -> Run:
        """The run with id `key`, or the one run whose id starts with it (or `last`)."""
        ids = self.ids()
        if key == "last":
            if not ids:
                raise RunNotFound(f"no runs are stored in {self.folder}; run `tickwork eval`")
            key = ids[-1]
        if not RUN_ID.match(key):
            raise InvalidInput(f"{key[:80]!r} is not a run id; list them with `tickwork eval ls`")
        found = [i for i in ids if i == key] or [i for i in ids if i.startswith(key)]
        if not found:
            raise RunNotFound(f"no run {key!r} in {self.folder}; list them with `tickwork eval ls`")
        if len(found) > 1:
            raise InvalidInput(
                f"{key!r} is the start of {len(found)} run ids ({', '.join(found[:5])}); "
                "give more of it"
            )
        path = self.folder / f"{found[0]}.json"
        try:
            return Run.from_json(json.loads(path.read_text(encoding="utf-8")))
        except KeyError as exc:
            raise TickworkError(
                f"the run file {path} is damaged (no field {exc}); remove it"
            ) from None
        except (ValueError, TypeError) as exc:
            raise TickworkError(f"the run file {path} is damaged ({exc}); remove it") from None

    def all(self) -> list[Run]:
        return [self.load(i) for i in self.ids()]
