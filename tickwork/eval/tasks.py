"""A task set: repair tasks read from JSON Lines, one task a line.

A task set is untrusted text (it may come from anyone's repository): every line is one
JSON object with known keys only, every field checked for its type, size and text, and a
bad one is refused with an error naming the file, the line and the field. Nothing here runs
a task.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tickwork.fsm.errors import InvalidInput

from ..parsing import bad_text

#: a task set holds at most this many tasks (an evaluation submits one session each)
MAX_TASKS = 10_000
#: the longest line of a task set read (an expected patch may be long)
MAX_LINE_CHARS = 1_000_000
#: the longest text field, an expected patch excepted
MAX_FIELD_CHARS = 20_000
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: a `source` that is a git URL rather than a local path
GIT_URL = re.compile(r"^([a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)


class TaskSetError(InvalidInput):
    """A line of a task set is not a task: it names the file, the line and the field."""


@dataclass(frozen=True)
class Task:
    """One line of a task set."""

    id: str
    line: int
    source: str
    test_command: str
    ref: str | None = None
    setup: str | tuple[str, ...] | None = None
    goal: str = ""
    expected_patch: str | None = None
    #: a test command the session never sees, run on its result (`checks.py`)
    expected_tests: str | None = None
    #: the scripted model's replies for `--model scripted` (a file, absolute)
    script: str | None = None

    @property
    def is_repo(self) -> bool:
        return self.ref is not None or bool(GIT_URL.match(self.source))

    def repair_input(self) -> dict[str, Any]:
        """The input of the task's `repair` session."""
        data: dict[str, Any] = {"test_command": self.test_command}
        if self.is_repo:
            data["repo"] = self.source
            if self.ref is not None:
                data["ref"] = self.ref
        else:
            data["workspace"] = self.source
        if self.goal:
            data["goal"] = self.goal
        if self.setup is not None:
            data["setup"] = self.setup if isinstance(self.setup, str) else list(self.setup)
        return data

    def digest_fields(self) -> dict[str, Any]:
        """What the task set's hash covers: the task as given, not where its line stood."""
        given = asdict(self)
        given.pop("line")
        return given


@dataclass(frozen=True)
class TaskSet:
    path: str
    tasks: tuple[Task, ...]

    @property
    def digest(self) -> str:
        """sha256 of the tasks (canonical JSON): the same tasks hash the same whatever the
        file's spacing or key order."""
        text = json.dumps([t.digest_fields() for t in self.tasks], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


#: the keys a task line takes, with what each is
TASK_KEYS = {
    "id": "a unique name of the task (letters, digits, _ . -; up to 64)",
    "source": "a git URL or path, or a local directory (relative to the task file)",
    "ref": "the branch, tag or commit of a git source",
    "setup": '"auto", "none" or a list of shell commands building the environment',
    "test_command": "the shell command that runs the tests",
    "goal": "what to fix, as the model reads it",
    "expected_patch": "the reference patch, compared with the session's",
    "expected_tests": "a test command the session never sees, run on its result",
    "script": "the scripted model's replies for --model scripted (a file, relative)",
}


def read_tasks(path: Path, *, any_path: bool = False) -> TaskSet:
    """The task set in the JSON Lines file at `path`. Its local paths (`source`, `script`)
    must lie in the folder it confines them to (`confinement`), unless `any_path` (the
    operator's own task set, `--any-path`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read the task set {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TaskSetError(f"{path}:{line}: not UTF-8 text; save the task set as UTF-8") from None
    within = None if any_path else confinement(path)
    return parse_tasks(text, where=str(path), base=path.parent, within=within)


def confinement(path: Path) -> Path:
    """The folder a task set's local paths must lie in: the git work tree that holds the
    task file, else the task file's own folder. A task set is somebody's text: a `source`
    of `~/.ssh` would be packed into a session and shown to its model."""
    folder = path.parent.resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def parse_tasks(text: str, *, where: str, base: Path, within: Path | None = None) -> TaskSet:
    """The tasks of a JSON Lines text (blank lines and lines starting with `#` skipped);
    relative paths resolve against `base`, and each local one must lie in `within` (where
    given)."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        task = _task(line, number, where=where, base=base, within=within)
        if task.id in seen:
            raise TaskSetError(
                f"{where}:{number}: field `id`: {task.id!r} is already the id of line "
                f"{seen[task.id]}; give each task its own id"
            )
        seen[task.id] = number
        tasks.append(task)
        if len(tasks) > MAX_TASKS:
            raise TaskSetError(f"{where}: more than {MAX_TASKS} tasks; split the task set")
    if not tasks:
        raise TaskSetError(f"{where}: no tasks; write one JSON object a line")
    return TaskSet(path=where, tasks=tuple(tasks))


def _task(line: str, number: int, *, where: str, base: Path, within: Path | None) -> Task:
    at = f"{where}:{number}"

    def wrong(key: str, message: str) -> TaskSetError:
        return TaskSetError(f"{at}: field `{key}`: {message}")

    def inside(key: str, given: str, found: Path) -> str:
        real = found.resolve()
        if within is not None and not real.is_relative_to(within):
            raise wrong(
                key,
                f"{given[:200]!r} is {real}, outside {within} (the task set's git work tree "
                "or folder); keep a task set's projects and scripts beside it, or pass "
                "--any-path if the task set is your own",
            )
        return str(real)

    if len(line) > MAX_LINE_CHARS:
        raise TaskSetError(f"{at}: the line is longer than {MAX_LINE_CHARS:,} characters")
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise TaskSetError(f"{at}: not valid JSON ({exc}); write one JSON object a line") from None
    if not isinstance(data, dict):
        raise TaskSetError(f"{at}: a task is a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(TASK_KEYS))
    if unknown:
        raise TaskSetError(
            f"{at}: unknown field(s) {', '.join(map(repr, unknown))}; a task takes "
            + ", ".join(TASK_KEYS)
        )
    for key in ("id", "source", "test_command"):
        if data.get(key) is None:
            raise wrong(key, f"is required: {TASK_KEYS[key]}")

    def text(key: str, *, limit: int = MAX_FIELD_CHARS, empty: bool = False) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise wrong(key, f"must be text, got {type(value).__name__}: {json.dumps(value)[:80]}")
        if not empty and not value.strip():
            raise wrong(key, "is empty")
        if len(value) > limit:
            raise wrong(key, f"is longer than {limit:,} characters")
        problem = bad_text(value)
        if problem:
            raise wrong(key, f"{problem}; give UTF-8 text without NUL bytes")
        return value

    task_id = str(text("id"))
    if not TASK_ID.match(task_id):
        raise wrong("id", f"{task_id[:80]!r} may only hold letters, digits, _ . -, up to 64")
    source = str(text("source")).strip()
    ref = text("ref")
    if ref is not None:
        ref = ref.strip()
        if ref.startswith("-") or any(c.isspace() for c in ref):
            raise wrong("ref", f"{ref[:80]!r} is not a branch, tag or commit name")
    if not (ref is not None or GIT_URL.match(source)):
        folder = (base / source).expanduser()
        if not folder.is_dir():
            raise wrong("source", f"{source!r} is not a directory ({folder.absolute()})")
        source = inside("source", source, folder)
    elif not GIT_URL.match(source):
        local = (base / source).expanduser()  # a local repository
        inside("source", source, local)
        source = str(local.absolute())
    elif within is not None and source.lower().startswith("file:"):
        raise wrong(
            "source",
            f"{source[:200]!r} names a repository on this machine by URL; give its path "
            "(relative to the task set), or pass --any-path if the task set is your own",
        )
    test_command = str(text("test_command")).strip()
    setup = _setup(data.get("setup"), wrong)
    expected = text("expected_patch", limit=MAX_LINE_CHARS, empty=True)
    if expected is not None and expected.strip() and "\n+" not in f"\n{expected}":
        raise wrong("expected_patch", "is not a unified diff (no line starts with '+')")
    expected_tests = text("expected_tests")
    script = text("script")
    if script is not None:
        found = (base / script.strip()).expanduser()
        if not found.is_file():
            raise wrong("script", f"{script!r} is not a file ({found.absolute()})")
        script = inside("script", script, found)
    return Task(
        id=task_id,
        line=number,
        source=source,
        ref=ref,
        setup=setup,
        test_command=test_command,
        goal=(text("goal", empty=True) or "").strip(),
        expected_patch=expected or None,
        expected_tests=expected_tests.strip() if expected_tests else None,
        script=script,
    )


def _setup(value: Any, wrong: Any) -> str | tuple[str, ...] | None:
    from tickwork.worker.files.environment_plans import check_setup

    if value is None:
        return None
    try:
        checked = check_setup(value)
    except ValueError as exc:
        raise wrong("setup", str(exc).replace("`setup` ", "", 1)) from None
    return checked if isinstance(checked, str) else tuple(checked)


def changed_lines(patch: str) -> dict[str, list[str]]:
    """A unified diff's removed and added lines by file, without context or headers, each
    line's trailing space dropped: what a patch changes, however its hunks were cut."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            current = files.setdefault(line.split(" b/", 1)[-1], [])
        elif line.startswith("+++ ") and current is None:
            current = files.setdefault(line[4:].removeprefix("b/").split("\t")[0], [])
        elif line.startswith(("---", "+++", "@@", "\\")):
            continue
        elif line.startswith(("+", "-")):
            if current is None:
                current = files.setdefault("", [])
            current.append(line.rstrip())
    return {name: sorted(lines) for name, lines in files.items() if lines}


def patch_matches(patch: str | None, expected: str) -> bool:
    """Whether `patch` removes and adds the same lines in the same files as `expected`."""
    return bool(patch) and changed_lines(patch or "") == changed_lines(expected)
