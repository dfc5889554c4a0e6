"""The `repair` job kind: make a workspace's tests pass; the result is the patch it made.

`prepare` copies the workspace's text files into a baseline folder in the state dir, outside
the workspace, so `finish` can diff the workspace against its start (git-style unified diff:
new and deleted files too; binary files, files over 1 MB and changed files tickwork did
not copy show as `Binary files ... differ`; symlinks are not followed). `finish` also runs
the test command once more and records whether it passes.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import shutil
import stat
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsm.errors import ConfigurationError, InvalidInput
from fsm.values import Head

from .jobs import JobKind
from .settings import load_settings
from .tools.repair import MAX_COMMAND_S, default_registry
from .tools.runner import run_sandboxed, sandbox_of
from .tools.shell import command_env

#: directories neither copied into the baseline nor diffed: VCS data, caches, environments
SKIP_DIRS = frozenset(
    [
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".venv",
        "node_modules",
        ".tickwork",
    ]
)
#: larger files are not copied (nor diffed), like binary ones
MAX_FILE_BYTES = 1_000_000
#: a workspace with more text than this (or more files) is refused at submit
MAX_BASELINE_BYTES = 20_000_000
MAX_BASELINE_FILES = 20_000
#: a longer patch is cut in the stored result (`patch_truncated`)
MAX_PATCH_CHARS = 2_000_000
#: the final test run's limit, unless the input gives `test_timeout_s`
FINAL_TESTS_TIMEOUT_S = 600.0
#: how much of the final test run's output the result keeps (its end)
MAX_TEST_OUTPUT_CHARS = 4_000
INPUT_KEYS = ("workspace", "test_command", "goal", "test_timeout_s", "network")

_HERE = Path(__file__).resolve().parent
#: the examples: package data in an installed wheel (`worker/examples`), `examples/` in a checkout
EXAMPLES = next(
    (p for p in (_HERE / "examples", _HERE.parent / "examples") if p.is_dir()), _HERE / "examples"
)
#: the demo's project (copied before use, never changed in place) and its scripted model
DEMO_EXAMPLE = EXAMPLES / "buggy_calc"
DEMO_SCRIPT = EXAMPLES / "repair_demo.json"
DEMO_TEST_COMMAND = "python -m unittest -q"
DEMO_GOAL = "The test suite of this small calculator fails; find the bug and fix it."

SYSTEM_PROMPT = """\
You are a careful software engineer repairing a code base. You work inside one workspace \
directory through tools; every path you give is relative to the workspace root.

Tools:
- list_files, read_file, search: look at the code. They change nothing.
- run_tests: run the project's configured test command and see its output.
- run_command: run a shell command in the workspace, in a sandbox: the workspace is its \
current directory (/workspace), nothing outside it is writable, and there is no network \
unless the job allows it.
- write_file (whole file) and apply_patch (unified diff): change files.

write_file, apply_patch and destructive commands (deleting, moving or overwriting files, \
changing permissions, pushing, dropping data) wait for a person to approve them. A person \
may reject a call and say why: read the feedback and adjust your approach. Keep changes \
small and focused so they are easy to review.

How to work:
1. Reproduce the failure with run_tests before changing anything.
2. Read the failing tests and the code they exercise; find the cause, not just the symptom.
3. Make the smallest change that fixes the cause. Do not weaken, skip or delete tests.
4. Run the tests again; repeat until they pass or you are sure they cannot.
5. When you are done, answer without any tool call: say what was wrong, what you changed \
(files and why) and the last test result. If you could not fix it, say what you found and \
what is left.

Make one tool call at a time and read its result before the next. Do not repeat a call \
that gave the same result before; change approach instead."""


def _fail(message: str) -> InvalidInput:
    return InvalidInput(f"repair input: {message}")


def _workspace(value: Any) -> Path:
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise _fail(
            "`workspace` is required: the directory of the project to repair "
            "(`tickwork submit repair --workspace DIR`)"
        )
    path = Path(value).expanduser()
    if not path.exists():
        raise _fail(f"the workspace {str(value)!r} does not exist; give an existing directory")
    if not path.is_dir():
        raise _fail(f"the workspace {str(value)!r} is not a directory; give the project's folder")
    return path.resolve()


def _test_command(value: Any) -> str:
    if isinstance(value, list | tuple) and value and all(isinstance(p, str) for p in value):
        value = shlex.join(value)
    if not isinstance(value, str) or not value.strip():
        raise _fail(
            "`test_command` is required: the shell command that runs the tests in the "
            "workspace, e.g. 'python -m pytest -q' (`--test-cmd`)"
        )
    return value.strip()


def _optional_text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _fail(f"`{key}` must be text, got {type(value).__name__}")
    return value.strip()


def _timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _fail(f"`test_timeout_s` must be a positive number of seconds, got {value!r}")
    if value > MAX_COMMAND_S:
        raise _fail(
            f"`test_timeout_s` may be at most {MAX_COMMAND_S:g} seconds (a tick must end before "
            f"the broker's delivery timeout), got {value!r}"
        )
    return float(value)


def _network(value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _fail(f"`network` must be true or false, got {value!r}")
    return value


def user_prompt(workspace: Path, test_command: str, goal: str = "") -> str:
    """The task as the model first reads it."""
    return f"""\
Repair the project in the workspace so that its tests pass.

Goal: {goal or "make the failing tests pass"}
Workspace: {workspace} (tool paths are relative to it; commands see it as /workspace)
Test command: {test_command} (run_tests runs it)

Work in this order:
1. Reproduce: call run_tests and read the failures.
2. Read: find the code the failures point to (list_files, search, read_file).
3. Patch: make the smallest change that fixes the cause (apply_patch or write_file).
4. Re-run: call run_tests again; go back to 2 until the tests pass.
5. Answer without tool calls: a short summary of the cause, the change and the final test \
result."""


def prepare(data: Mapping[str, Any], *, state_dir: Path | None = None) -> dict[str, Any]:
    """Check the input, copy the workspace's baseline into `state_dir` (default: settings')."""
    unknown = sorted(set(data) - set(INPUT_KEYS))
    if unknown:
        raise _fail(f"unknown key(s) {', '.join(unknown)}; it takes {', '.join(INPUT_KEYS)}")
    workspace = _workspace(data.get("workspace"))
    command = _test_command(data.get("test_command"))
    goal = _optional_text(data, "goal")
    timeout = _timeout(data.get("test_timeout_s"))
    network = _network(data.get("network"))
    state = Path(state_dir if state_dir is not None else load_settings().state_dir)
    state = state.expanduser().resolve()
    baseline = take_baseline(workspace, state / "baselines" / uuid.uuid4().hex, exclude=state)
    config: dict[str, Any] = {
        "user_prompt": user_prompt(workspace, command, goal),
        "workspace": str(workspace),
        "test_command": command,
        "baseline": str(baseline),
    }
    if timeout is not None:
        config["test_timeout_s"] = timeout
    if network:
        config["network"] = True  # commands may reach the network (the sandbox's default: none)
    return config


@dataclass(frozen=True)
class _Scan:
    #: relative path -> file content, for text files up to MAX_FILE_BYTES
    text: dict[str, bytes] = field(default_factory=dict)
    #: relative path -> (size, mtime_ns), for binary and large files
    other: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: relative path -> st_mode, for every file
    modes: dict[str, int] = field(default_factory=dict)


def _walk(root: Path, exclude: Path | None) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of the regular files, sorted; no symlinks, no SKIP_DIRS."""
    for directory, subdirs, names in os.walk(root):
        here = Path(directory)
        subdirs[:] = sorted(
            d
            for d in subdirs
            if d not in SKIP_DIRS
            and not (here / d).is_symlink()
            and (exclude is None or (here / d) != exclude)
        )
        for name in sorted(names):
            path = here / name
            if not path.is_symlink() and path.is_file():
                yield path.relative_to(root).as_posix(), path


def _text(path: Path, size: int) -> bytes | None:
    """The file's bytes if it is UTF-8 text no larger than MAX_FILE_BYTES."""
    if size > MAX_FILE_BYTES:
        return None
    content = path.read_bytes()
    if b"\x00" in content[:8192]:
        return None
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return content


def _scan(root: Path, exclude: Path | None, *, limit: bool) -> _Scan:
    scan = _Scan()
    total = 0
    for rel, path in _walk(root, exclude):
        try:
            info = path.stat()
            content = _text(path, info.st_size)
        except OSError:
            continue  # vanished or unreadable: nothing to compare
        scan.modes[rel] = info.st_mode
        if content is None:
            scan.other[rel] = (info.st_size, info.st_mtime_ns)
            continue
        scan.text[rel] = content
        total += len(content)
        if limit and (total > MAX_BASELINE_BYTES or len(scan.modes) > MAX_BASELINE_FILES):
            raise _fail(
                f"the workspace {root} holds more than {MAX_BASELINE_BYTES // 1_000_000} MB of "
                f"text or {MAX_BASELINE_FILES} files (skipping {', '.join(sorted(SKIP_DIRS))}); "
                "point the workspace at the project itself, not a folder above it"
            )
    return scan


def _excluded(workspace: Path, exclude: Path | None) -> Path | None:
    """`exclude` if it lies inside the workspace (a state dir there must not be diffed)."""
    if exclude == workspace:
        raise _fail(f"the workspace {workspace} is tickwork's state dir; give the project's folder")
    if exclude is not None and workspace in exclude.parents:
        return exclude
    return None


def take_baseline(workspace: Path, dest: Path, *, exclude: Path | None = None) -> Path:
    """Copy the workspace's text files to `dest/files`, with a manifest; returns `dest`.

    `exclude` (tickwork's state dir) is skipped if it is inside the workspace.
    """
    workspace = workspace.resolve()
    skipped = _excluded(workspace, exclude)
    scan = _scan(workspace, skipped, limit=True)
    files = dest / "files"
    files.mkdir(parents=True)
    try:
        for rel, content in scan.text.items():
            target = files / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        manifest = {
            "workspace": str(workspace),
            "exclude": str(skipped) if skipped else None,
            "text": sorted(scan.text),
            "other": scan.other,
            "modes": scan.modes,
        }
        (dest / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _mode(mode: int | None) -> str:
    return "100755" if mode is not None and mode & stat.S_IXUSR else "100644"


def _lines(content: bytes) -> list[str]:
    """Lines with their endings, split at "\\n" only (`splitlines` also splits at form feeds)."""
    parts = content.decode("utf-8").split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _hunks(old: bytes, new: bytes, old_name: str, new_name: str) -> list[str]:
    """Unified-diff lines, with `\\ No newline at end of file` where a side lacks one."""
    out = []
    for line in difflib.unified_diff(_lines(old), _lines(new), old_name, new_name):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.extend((line + "\n", "\\ No newline at end of file\n"))
    return out


def diff_workspace(baseline: Path, workspace: Path) -> tuple[str, list[str]]:
    """(git-style unified diff, changed paths) of the workspace now against its baseline."""
    manifest = json.loads((baseline / "manifest.json").read_text(encoding="utf-8"))
    exclude = Path(manifest["exclude"]) if manifest.get("exclude") else None
    before_text = set(manifest["text"])
    before_other = {rel: tuple(v) for rel, v in manifest["other"].items()}
    before_modes: dict[str, int] = manifest["modes"]
    now = _scan(workspace.resolve(), exclude, limit=False)
    parts: list[str] = []
    changed: list[str] = []
    for rel in sorted(before_text | set(before_other) | set(now.modes)):
        if rel in before_other and before_other[rel] == now.other.get(rel):
            continue  # not copied, and its size and time are as they were
        old_mode, new_mode = before_modes.get(rel), now.modes.get(rel)
        old_name = "/dev/null" if old_mode is None else f"a/{rel}"
        new_name = "/dev/null" if new_mode is None else f"b/{rel}"
        old = (baseline / "files" / rel).read_bytes() if rel in before_text else None
        new = now.text.get(rel)
        if old is not None and old == new:
            continue
        parts.append(f"diff --git a/{rel} b/{rel}\n")
        if old_mode is None:
            parts.append(f"new file mode {_mode(new_mode)}\n")
        elif new_mode is None:
            parts.append(f"deleted file mode {_mode(old_mode)}\n")
        comparable = (old_mode is None or old is not None) and (new_mode is None or new is not None)
        if comparable:
            # an empty file created or deleted has no hunks: headers only, as git writes it
            parts.extend(_hunks(old or b"", new or b"", old_name, new_name))
        else:
            parts.append(f"Binary files {old_name} and {new_name} differ\n")
        changed.append(rel)
    return "".join(parts), changed


def run_final_tests(head: Head) -> dict[str, Any]:
    """Run the session's test command in its workspace once more; what it gave."""
    config = head.config
    command = str(config.get("test_command") or "")
    # a tick (this runs in the last THINK tick) must end before the broker's delivery timeout
    limit = min(MAX_COMMAND_S, load_settings().longest_call_s)
    timeout = min(float(config.get("test_timeout_s") or FINAL_TESTS_TIMEOUT_S), limit)
    env = command_env({**dict(config.get("env") or {}), "TICKWORK_SESSION_ID": head.id})
    result = run_sandboxed(
        command,
        workdir=Path(config["workspace"]),
        timeout_s=timeout,
        env=env,
        network=config.get("network") is True,
        sandbox=sandbox_of(load_settings()),
    )
    output = result.describe()
    return {
        "command": command,
        "exit_code": result.exit_code,
        "passed": result.exit_code == 0,
        "timed_out": result.timed_out,
        "output": output[-MAX_TEST_OUTPUT_CHARS:],
    }


def finish(head: Head) -> dict[str, Any]:
    """The patch the session made, the files it changed, and the tests' final result."""
    result: dict[str, Any] = {}
    try:
        baseline, workspace = Path(head.config["baseline"]), Path(head.config["workspace"])
        patch, changed = diff_workspace(baseline, workspace)
    except Exception as exc:  # the session's answer must not be lost for want of a patch
        result.update(patch=None, files_changed=[], patch_error=f"{type(exc).__name__}: {exc}")
    else:
        result.update(patch=patch[:MAX_PATCH_CHARS], files_changed=changed)
        if len(patch) > MAX_PATCH_CHARS:
            result["patch_truncated"] = True
    try:
        result["tests"] = run_final_tests(head)
    except Exception as exc:  # e.g. the workspace is gone
        result["tests"] = {
            "command": head.config.get("test_command"),
            "exit_code": None,
            "passed": False,
            "error": f"{type(exc).__name__}: {exc}",
        }
    return result


REPAIR = JobKind(
    name="repair",
    system_prompt=SYSTEM_PROMPT,
    tools=default_registry,
    prepare=prepare,
    finish=finish,
)


def prepare_demo_workspace(state_dir: Path) -> Path:
    """A fresh copy of the demo project under `state_dir/demo/`; the shipped one never changes."""
    if not DEMO_EXAMPLE.is_dir() or not DEMO_SCRIPT.is_file():
        raise ConfigurationError(
            f"the demo needs {DEMO_EXAMPLE} and {DEMO_SCRIPT}, which are not there; "
            "reinstall tickwork (the wheel ships them) or run from a checkout"
        )
    dest = Path(state_dir).expanduser().resolve() / "demo" / f"buggy_calc-{uuid.uuid4().hex[:8]}"
    shutil.copytree(
        DEMO_EXAMPLE, dest, ignore=shutil.ignore_patterns(*SKIP_DIRS, "*.pyc"), symlinks=True
    )
    return dest


def demo_input(workspace: Path, *, python: str = sys.executable) -> dict[str, str]:
    """The repair input of the demo on a workspace from `prepare_demo_workspace`.

    The tests run with `python` (default: this interpreter) rather than whatever `python`
    is on the PATH: a fresh Debian or macOS has only `python3`.
    """
    command = DEMO_TEST_COMMAND.replace("python", shlex.quote(python), 1)
    return {"workspace": str(workspace), "test_command": command, "goal": DEMO_GOAL}
