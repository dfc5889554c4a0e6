"""The repair job's toolkit: look at, search, change and test one workspace.

Every tool works inside `ctx.workspace` only; paths go through `sandbox.resolve`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import regex
from pydantic import Field
from tickwork.fsm.errors import ToolError
from tickwork.fsm.outcomes import (
    cut_short,
    hidden_failure,
    lacking_fixtures,
    why_tests_did_not_run,
)
from tickwork.worker.config.settings import load_settings
from tickwork.worker.files import environments, imports, versions
from tickwork.worker.sandbox import quota
from tickwork.worker.sandbox.egress import offline_note, policy_for
from tickwork.worker.sandbox.runner import (
    WORKDIR,
    Sandbox,
    run_sandboxed,
    sandbox_for,
    sandbox_of,
)
from tickwork.worker.sandbox.shell import ShellResult, Stop
from tickwork.worker.tools import patches
from tickwork.worker.tools.commands import command_needs_approval
from tickwork.worker.tools.confinement import (
    is_inside,
    kind_of,
    read_regular,
    relative,
    resolve,
    workspace_root,
    write_text,
)
from tickwork.worker.tools.registry import Tool, ToolContext, ToolRegistry, tool
from tickwork.worker.tools.spawn import SPAWN_TOOL, WAIT_TOOL

#: most paths `list_files` shows
MAX_LISTED = 500
#: most lines `read_file` shows at once
MAX_READ_LINES = 2_000
#: files larger than this are not text to the repair kind: `search` skips them, `read_file`
#: refuses them and the job's patch (`job.py`) shows them as binary
MAX_FILE_BYTES = 5_000_000
#: the longest a command may run, whatever the model asks: below RabbitMQ's default
#: delivery timeout (30 minutes) by the tick's margin, see Settings.delivery_timeout_s
MAX_COMMAND_S = 1_500.0
#: the longest command line: Linux passes at most 128 KiB to /bin/sh as one argument
#: (MAX_ARG_STRLEN), and this many characters stay below it in any UTF-8; a longer one could
#: never start, so it is refused with the other invalid arguments (an edit at once)
MAX_COMMAND_CHARS = 32_000
#: the longest `search` pattern: the model's, compiled on the worker
MAX_PATTERN_CHARS = 2_000
#: the seconds one `search` call may spend matching: the pattern is the model's, and one
#: that backtracks exponentially would match a line for ever (the `regex` module, unlike
#: the standard library's `re`, stops at a timeout and lets the worker's other threads run)
SEARCH_MATCH_S = 20.0


def _root(ctx: ToolContext) -> Path:
    return workspace_root(ctx.workspace)


def _text_of(data: bytes, shown: str) -> str:
    """`data` (at most MAX_FILE_BYTES + 1 bytes of a file) as text, newlines as `open` reads
    them; a `ToolError` for a larger or binary file."""
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"{shown} is larger than {MAX_FILE_BYTES} bytes; use search on it")
    if b"\x00" in data[:8192]:
        raise ToolError(f"{shown} is a binary file and is not shown")
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _read_text(path: Path, shown: str) -> str:
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; use list_files to see inside it")
    return _text_of(read_regular(path, shown, limit=MAX_FILE_BYTES + 1), shown)


def _lines(text: str) -> list[str]:
    """Lines as editors number them (no split at form feeds, unlike `str.splitlines`)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _files(ctx: ToolContext, root: Path, base: Path) -> Iterator[Path]:
    """Regular files under `base`, skipping `.git`, symlinks that lead out of the workspace,
    and FIFOs, sockets and devices (never opened). Stops when the call must (`ctx.check`)."""
    if base.is_file():
        yield base
        return
    for directory, subdirs, names in os.walk(base):
        ctx.check()
        subdirs[:] = sorted(d for d in subdirs if d != ".git")
        for name in sorted(names):
            path = Path(directory, name)
            try:
                real = path.resolve() if path.is_symlink() else path
                regular = stat.S_ISREG(real.stat().st_mode)
            except (OSError, RuntimeError):  # gone, or a symlink loop
                continue
            if regular and is_inside(root, real):
                yield path


#: a character that would break a listing's one-path-a-line (a newline, a tab) or that a
#: terminal obeys: a path holding one is shown as a JSON string (`_shown`)
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _shown(rel: str) -> str:
    """`rel` as a listing shows it: as it is, or quoted as JSON when it holds a newline or
    another control (or starts with a quote, which would read as quoted), so that one path
    stays one line and the model can pass the quoted text back as the `path` of a call."""
    quote = _UNPRINTABLE.search(rel) or rel.startswith('"')  # else `"a"` reads as quoted
    return json.dumps(rel, ensure_ascii=False) if quote else rel


def _existing(root: Path, path: str) -> Path:
    found = resolve(root, path)
    if not found.exists():
        raise ToolError(f"{path!r} does not exist in the workspace; use list_files")
    return found


@tool(idempotent=True, timeout_s=60.0, paths=("path",))
def list_files(ctx: ToolContext, path: str = ".", pattern: str = "*") -> str:
    """List the files under a directory of the workspace, recursively, sorted (skips .git).

    Args:
        path: directory relative to the workspace root, "." for the root.
        pattern: shell-style pattern on the file name, or on the relative path when it
            contains "/", e.g. "*.py" or "src/*/test_*.py".
    """
    root = _root(ctx)
    base = _existing(root, path)
    patterns = {pattern, pattern.removeprefix("**/")}  # "**/x" also matches x at the top
    shown = []
    for file in _files(ctx, root, base):
        rel = relative(root, file)
        target = rel if "/" in pattern else file.name
        if any(fnmatch.fnmatchcase(target, p) for p in patterns):
            shown.append(_shown(rel))
    if not shown:
        return f"no files match {pattern!r} under {path!r}"
    more = len(shown) - MAX_LISTED
    listing = "\n".join(shown[:MAX_LISTED])
    return listing + (f"\n... and {more} more; narrow the path or pattern" if more > 0 else "")


@tool(idempotent=True, timeout_s=60.0, paths=("path",))
def read_file(
    ctx: ToolContext,
    path: str,
    start_line: Annotated[int, Field(ge=1)] = 1,
    end_line: Annotated[int | None, Field(ge=1)] = None,
) -> str:
    """Read a text file of the workspace, with line numbers.

    Args:
        path: file path relative to the workspace root.
        start_line: first line to show (1-based).
        end_line: last line to show (inclusive); omit for up to 2000 lines.
    """
    root = _root(ctx)
    file = resolve(root, path)
    shown = relative(root, file)
    lines = _lines(_read_text(file, shown))
    if not lines:
        return f"{shown} is empty"
    if start_line > len(lines):
        raise ToolError(f"{shown} has {len(lines)} lines; start_line {start_line} is past the end")
    if end_line is not None and end_line < start_line:
        raise ToolError(f"end_line {end_line} is before start_line {start_line}")
    last = min(
        len(lines), end_line or start_line + MAX_READ_LINES - 1, start_line + MAX_READ_LINES - 1
    )
    numbered = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start_line, last + 1))
    more = (
        f"\n... {len(lines) - last} more lines; read on with start_line={last + 1}"
        if last < len(lines)
        else ""
    )
    return f"{shown} (lines {start_line}-{last} of {len(lines)})\n{numbered}{more}"


@tool(idempotent=True, timeout_s=120.0, paths=("path",))
def search(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    max_results: Annotated[int, Field(ge=1, le=1000)] = 100,
) -> str:
    """Search text files of the workspace for a Python regular expression.

    Prints one "file:line: text" per matching line (skips .git and binary files).

    Args:
        pattern: Python regular expression, e.g. "def \\w+_total" or "TODO".
        path: file or directory relative to the workspace root.
        max_results: stop after this many matching lines.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(
            f"the pattern has {len(pattern):,} characters; search takes at most "
            f"{MAX_PATTERN_CHARS:,}: search for a shorter, distinctive part"
        )
    try:
        compiled = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise ToolError(
            f"invalid regular expression {pattern!r}: {exc}; escape special "
            "characters such as ( [ . * + ? with a backslash"
        ) from exc
    root = _root(ctx)
    base = _existing(root, path)
    found: list[str] = []
    spent = [0.0]  # seconds spent matching, of SEARCH_MATCH_S
    for file in _files(ctx, root, base):
        rel = relative(root, file)
        try:
            text = _text_of(read_regular(file.resolve(), rel, limit=MAX_FILE_BYTES + 1), rel)
        except (OSError, ToolError):
            continue  # too large, binary, not a regular file (any more), unreadable
        for number, line in enumerate(_lines(text), 1):
            if number % 1000 == 0:
                ctx.check()
            if _matches(compiled, line, spent, pattern=pattern, where=f"{rel}:{number}"):
                found.append(f"{_shown(rel)}:{number}: {line.strip()[:300]}")
                if len(found) >= max_results:
                    return "\n".join(found) + (
                        f"\n(stopped after {max_results} results; narrow the pattern or path)"
                    )
    return "\n".join(found) if found else f"no matches for {pattern!r} under {path!r}"


def _matches(compiled: Any, line: str, spent: list[float], *, pattern: str, where: str) -> bool:
    """Whether `compiled` matches `line`, adding the time it took to `spent`; a `ToolError`
    naming the pattern once the call has spent `SEARCH_MATCH_S` matching."""
    started = time.monotonic()
    try:
        left = SEARCH_MATCH_S - spent[0]
        if left <= 0:
            raise TimeoutError
        return compiled.search(line, timeout=left, concurrent=True) is not None
    except TimeoutError:
        raise ToolError(
            f"the pattern {pattern!r} took more than {SEARCH_MATCH_S:g}s to match (stopped at "
            f"{where}): it backtracks too much; use a simpler pattern, e.g. a literal part "
            "of the text, without nested or overlapping repeats such as (x+)+ or (a|a)*"
        ) from None
    finally:
        spent[0] += time.monotonic() - started


@tool(requires_approval=True, idempotent=True, timeout_s=60.0, paths=("path",))
def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Create or replace a file of the workspace with the given content.

    Args:
        path: file path relative to the workspace root; missing directories are created.
        content: the complete new content of the file.
    """
    root = _root(ctx)
    file = resolve(root, path)
    if file == root or file.is_dir():
        raise ToolError(f"{path!r} is a directory; give a file path")
    wrong = kind_of(file.stat().st_mode) if file.exists() else None
    if wrong:
        raise ToolError(f"{path!r} is {wrong}, not a regular file; it is not replaced")
    size = len(content.encode("utf-8", errors="surrogatepass"))
    _room(ctx, root, size - (file.stat().st_size if file.is_file() else 0))
    write_text(file, content)
    return (
        f"wrote {len(content)} characters ({len(_lines(content))} lines) to {relative(root, file)}"
    )


def _check_patch(arguments: Mapping[str, Any]) -> None:
    if isinstance(arguments.get("patch"), str):
        patches.check_patch(arguments["patch"])


@tool(requires_approval=True, timeout_s=60.0, check=_check_patch)
def apply_patch(ctx: ToolContext, patch: str) -> str:
    """Apply a unified diff to the workspace; all files change or none does.

    Use '--- a/path' and '+++ b/path' headers and '@@ -start,count +start,count @@'
    hunks with a few lines of unchanged context; '--- /dev/null' creates a file and
    '+++ /dev/null' deletes one. Context lines must match the file's current text.

    Args:
        patch: the unified diff text.
    """
    root = _root(ctx)
    _room(ctx, root, len(patch.encode("utf-8", errors="surrogatepass")))  # what it can add, at most
    return patches.apply_patch(root, patch)


def _room(ctx: ToolContext, root: Path, adding: int) -> None:
    """A `ToolError` unless `adding` bytes more fit the session's disk quota and leave the
    workspaces filesystem its reserve (worker/sandbox/quota.py)."""
    lim = (ctx.sandbox or sandbox_of(load_settings())).limits
    quota.check_write(
        root,
        adding,
        disk_bytes=lim.disk_bytes,
        disk_files=lim.disk_files,
        reserve=lim.reserve_bytes,
    )


def _command_timeout(ctx: ToolContext, wanted: float) -> float:
    """What is left of the call's time, less a margin to report the timeout ourselves."""
    limit = ctx.timeout_s if ctx.timeout_s is not None else MAX_COMMAND_S
    return max(0.1, min(wanted, limit - min(1.0, limit * 0.1)))


def run_in_workspace(
    command: str,
    *,
    config: Mapping[str, Any],
    workdir: Path,
    timeout_s: float,
    env: Mapping[str, str],
    sandbox: Sandbox | None = None,
    stop: Stop | None = None,
    environment: Path | None = None,
    installed: bool = False,
) -> ShellResult:
    """Run a command of a session (`config`: its `env`, `network` and `egress_allow`) in its
    working copy, in the sandbox (default: the settings'), with `env` over its environment and
    the session's `environment` (this host's copy) read-only at /env. It reaches the network
    (through the egress proxy) only if the session's `network` is "all"; setup commands ask
    `policy_for(config, settings, setup=True)`. Without an environment, the working copy's
    src/ comes first on PYTHONPATH (`imports.search_path`): nothing installed it, and its
    tests must not import another copy of the project; `installed`: the session has an
    environment that installed it, not mounted here (an eval's expected tests), so its
    commands ran without that path and this one does too."""
    settings = load_settings()
    chosen = sandbox_for(config, sandbox or sandbox_of(settings))
    given = {**dict(config.get("env") or {}), **env}
    if environment is None and not installed:
        seen_as = str(workdir.absolute()) if chosen.mode == "none" else WORKDIR
        given = imports.search_path(workdir, seen_as, given)
    return run_sandboxed(
        command,
        workdir=workdir,
        timeout_s=timeout_s,
        env=given,
        egress=policy_for(config, settings),
        offline=offline_note(config, settings),
        sandbox=chosen,
        stop=stop,
        environment=environment,
    )


#: folders `own_modules` does not look into: tools' caches and environments, not the
#: project's code
_NOT_CODE = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})
#: the most entries `own_modules` reads: past them, what it found so far
_OWN_MODULES_SCAN = 20_000


def own_modules(root: Path) -> frozenset[str]:
    """The names the project's code and tests may import as their own: every folder, `.py`
    file and extension module in its tree (hidden folders and tools' caches left out), not
    only those at its root and in `src/`: a `lib/pkg` layout, a subproject's tests run with
    `cd sub && pytest`, or a test helper imported by its bare name (`import helpers`) are
    the project's as well. At most _OWN_MODULES_SCAN entries are read."""
    names: set[str] = set()
    seen = 0
    for _folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _NOT_CODE]
        names.update(dirs)
        names.update(f.split(".")[0] for f in files if f.endswith((".py", ".so", ".pyd")))
        seen += len(dirs) + len(files)
        if seen >= _OWN_MODULES_SCAN:
            break
    return frozenset(names)


def why_not_run(
    command: str,
    exit_code: int | None,
    output: str,
    *,
    timed_out: bool = False,
    config: Mapping[str, Any],
    root: Path | None,
    environment: Mapping[str, Any] | None,
) -> str | None:
    """`why_tests_did_not_run` of a session's test command run in its working copy `root`
    (None: the project's own modules are not known, so a module missing at collection is
    not asked), `environment` its environment record (None or empty for a session without
    one). The tree is walked, and the settings read, only for a run that stopped at
    collection for want of a module. `run_tests` asks it of its run, the final test run of
    its own, and the run before any change (`baseline.py`) of a `run_command` of the test
    command. A run whose output names a file of an installed copy of one of the project's
    own packages (`imports.installed_copy`) tested that copy, not the working copy."""
    why = why_tests_did_not_run(
        command,
        exit_code,
        output,
        timed_out=timed_out,
        environment=environment,
        own=None if root is None else lambda: own_modules(root),
        setup_online=lambda: policy_for(config, load_settings(), setup=True) is not None,
        # `--setup none` leaves both empty: no record (`run_tests` has {}), and no
        # environment in the config
        without_environment=not environment and not config.get("environment"),
    )
    if why is None and root is not None and "-packages/" in output:
        found = imports.installed_copy(output, imports.packages(root))
        if found is not None:
            return imports.installed_copy_note(*found, environment=environments.ready(environment))
    return why


def _shell(ctx: ToolContext, command: str, timeout_s: float) -> ShellResult:
    result = run_in_workspace(
        command,
        config=ctx.config,
        workdir=_root(ctx),
        timeout_s=timeout_s,
        env={
            "TICKWORK_SESSION_ID": ctx.session_id,
            "TICKWORK_IDEMPOTENCY_KEY": ctx.idempotency_key,
        },
        sandbox=ctx.sandbox,
        stop=ctx.stop,
        environment=ctx.environment,
    )
    if result.timed_out:
        raise ToolError(
            f"the command timed out after {timeout_s:g}s and was killed\n" + result.describe()
        )
    if result.killed:
        raise ToolError(f"the command was killed: {result.killed}\n" + result.describe())
    return result


#: a blank command line runs `sh -c ""` and reports exit 0, as if a command had run
EMPTY_COMMAND = "the command is empty: give the shell command line to run (e.g. 'ls build')"


def _check_command(arguments: Mapping[str, Any]) -> None:
    command = arguments.get("command")
    if isinstance(command, str) and not command.strip():
        raise ToolError(f"{EMPTY_COMMAND}, or reject the call so it does not run")


@tool(approval_policy=command_needs_approval, timeout_s=MAX_COMMAND_S, check=_check_command)
def run_command(
    ctx: ToolContext,
    command: Annotated[str, Field(max_length=MAX_COMMAND_CHARS)],
    timeout_s: Annotated[float, Field(gt=0, le=MAX_COMMAND_S)] = 60.0,
) -> str:
    """Run a shell command (/bin/sh) in the workspace root; shows exit code, stdout, stderr.

    It runs in a sandbox: the workspace is /workspace (the current directory), nothing
    outside it is writable, and there is no network unless the job allows it (then only the
    allowed hosts, through the HTTP proxy that HTTP_PROXY and HTTPS_PROXY name). Commands that
    delete, move or overwrite files, change permissions, push, or drop data need a
    person's approval first.

    Args:
        command: the shell command line.
        timeout_s: seconds before the command is killed.
    """
    if not command.strip():  # the model's own blank call; a person's edit is refused sooner
        raise ToolError(EMPTY_COMMAND)
    return _shell(ctx, command, _command_timeout(ctx, timeout_s)).describe()


@tool(idempotent=True, timeout_s=MAX_COMMAND_S)
def run_tests(ctx: ToolContext) -> str:
    """Run the project's test suite (the session's configured test command) in the workspace."""
    command = ctx.config.get("test_command")
    if isinstance(command, list | tuple) and all(isinstance(part, str) for part in command):
        command = shlex.join(command)
    if not isinstance(command, str) or not command.strip():
        raise ToolError(
            "this session has no test_command configured; run the tests with run_command instead"
        )
    wanted = float(ctx.config.get("test_timeout_s") or MAX_COMMAND_S)
    result = _shell(ctx, command, _command_timeout(ctx, wanted))
    verdict = "tests passed" if result.exit_code == 0 else "tests FAILED"
    output = result.describe()
    why = why_not_run(
        command,
        result.exit_code,
        output,
        timed_out=result.timed_out,
        config=ctx.config,
        root=_root(ctx),
        environment=ctx.setup,
    )
    if why:
        return f"tests did NOT run: {why} ({command})\n{output}"
    if hidden := hidden_failure(result.exit_code, output):
        return f"tests FAILED: {hidden} ({command})\n{output}"
    if stale := _unrebuilt(ctx):
        output += f"\n--- extension modules not rebuilt ---\n{stale}"
    if result.exit_code != 0 and (lacking := lacking_fixtures(output)):
        output += f"\n--- pytest plugins missing ---\n{lacking}"
    if cut := cut_short(command, result.exit_code, output):
        return f"tests FAILED: {cut} ({command})\n{output}"
    return f"{verdict} ({command})\n{output}"


def _unrebuilt(ctx: ToolContext) -> str | None:
    """Why the run said nothing of the session's change to C code (`versions.unrebuilt`):
    the model would otherwise mend it again and again, its tests failing as before."""
    env = ctx.environment
    if env is None or ctx.changed is None or not (env / versions.GENERATED).is_dir():
        return None
    changed = ctx.changed()
    stale = versions.unrebuilt(env, _root(ctx), changed)
    return versions.unrebuilt_note(changed, stale) if stale else None


def repair_tools() -> list[Tool]:
    """The repair toolkit, in the order the model sees it."""
    return [list_files, read_file, search, write_file, apply_patch, run_command, run_tests]


#: what a repair that works alone (no role) is offered: the toolkit, no team tools
SOLO_TOOLS = tuple(t.name for t in repair_tools())
#: the team's tools, offered only to a role that lists them (a kind's own tools stay offered)
TEAM_TOOLS = (SPAWN_TOOL.name, WAIT_TOOL.name, "adopt_patch")


def default_registry() -> ToolRegistry:
    """A new registry holding the repair toolkit and the team's tools (`spawn_agents`,
    `wait_children`, `adopt_patch`); which a session is offered its config says (`tools`:
    its role's, or its kind's tools but the team's, `TEAM_TOOLS`)."""
    from tickwork.worker.jobs.repair.adoption import adopt_patch

    return ToolRegistry([*repair_tools(), SPAWN_TOOL, WAIT_TOOL, adopt_patch])
