"""The `repair` job kind: make a project's tests pass; the result is the patch it made.

`prepare` stores the job's source once in the artifact store (a git repository at a ref,
resolved to a commit, or a directory packed at submit; `worker/files/sources.py`), so the user's
files are never changed and every worker can reach them. The session works on its own copy
(`worker/files/workspaces.py`) with the toolkit of `toolkit.py`. `finish` diffs the session's
final files against the source, both read from the store (git-style unified diff: new and
deleted files too; binary files and files over 5 MB show as `Binary files ... differ`),
then runs the test command once more and records whether it passes, which tests fail
(and which of them failed before any change too: `baseline.py`), and the session's
`outcome` (`fsm/outcomes.py`: repaired, tests_failing, tests_not_run, no_changes).
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickwork.fsm.errors import ArtifactsUnavailable, ConfigurationError, InvalidInput
from tickwork.fsm.failures import failed_before, failing_tests
from tickwork.fsm.outcomes import (
    changed_tests,
    cut_short,
    hidden_failure,
    lacking_fixtures,
    repair_outcome,
)
from tickwork.fsm.values import Head
from tickwork.store.artifacts import Artifacts
from tickwork.store.files import Manifest, parse_entry
from tickwork.worker.config.allowlist import AllowList
from tickwork.worker.config.settings import load_settings
from tickwork.worker.files import sources, versions
from tickwork.worker.files.environment_plans import NONE, check_setup
from tickwork.worker.files.working_copy import session_files
from tickwork.worker.files.workspaces import disk_full
from tickwork.worker.jobs.kinds import Ending, Spawning, Submission
from tickwork.worker.jobs.repair import baseline, legacy, team
from tickwork.worker.jobs.repair.toolkit import (
    MAX_COMMAND_S,
    MAX_FILE_BYTES,
    TEAM_TOOLS,
    default_registry,
    run_in_workspace,
    why_not_run,
)
from tickwork.worker.jobs.roles import Role, role_for
from tickwork.worker.sandbox import egress
from tickwork.worker.sandbox.runner import sandbox_of
from tickwork.worker.tools.patches import quote_path
from tickwork.worker.tools.registry import ToolRegistry

__all__ = ["REPAIR", "RepairKind", "diff_manifests", "finish", "prepare"]

#: a longer patch is cut in the stored result (`patch_truncated`)
MAX_PATCH_CHARS = 2_000_000
#: the final test run's limit, unless the input gives `test_timeout_s`
FINAL_TESTS_TIMEOUT_S = 600.0
#: how much of the final test run's output the result keeps (its end)
MAX_TEST_OUTPUT_CHARS = 4_000
INPUT_KEYS = (
    *("workspace", "repo", "ref", "test_command", "goal", "test_timeout_s"),
    *("network", "egress_allow"),
    "setup",
    # the session's role (`RepairKind.configure`: e.g. "planner"); none: it works alone
    "role",
)
#: other names an input may use for a key: the CLI's (`--test-cmd`)
ALIASES = {"test_cmd": "test_command"}
#: the longest test command and goal taken: each goes into every prompt of the session
MAX_TEST_COMMAND_CHARS = 10_000
MAX_GOAL_CHARS = 20_000

SYSTEM_PROMPT = """\
You are a careful software engineer repairing a code base. You work inside one workspace \
directory through tools; every path you give is relative to the workspace root.

Tools:
- list_files, read_file, search: look at the code. They change nothing.
- run_tests: run the project's configured test command and see its output.
- run_command: run a shell command in the workspace, in a sandbox: the workspace is its \
current directory (/workspace), nothing outside it is writable, and there is no network \
unless the job allows it (then only allowed hosts, through HTTP_PROXY).
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


def _named(data: Mapping[str, Any]) -> dict[str, Any]:
    """The input with each alias under its key's own name; both at once is refused."""
    named = dict(data)
    for alias, key in ALIASES.items():
        if alias in named:
            if key in named:
                raise _fail(f"give `{key}` or `{alias}` (the same thing), not both")
            named[key] = named.pop(alias)
    return named


def _test_command(value: Any) -> str:
    if isinstance(value, list | tuple) and value and all(isinstance(p, str) for p in value):
        value = shlex.join(value)
    if not isinstance(value, str) or not value.strip():
        raise _fail(
            "`test_command` is required: the shell command that runs the tests in the "
            "project, e.g. 'python -m pytest -q'"
        )
    return _bounded("test_command", value.strip(), MAX_TEST_COMMAND_CHARS)


def _optional_text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _fail(f"`{key}` must be text, got {type(value).__name__}")
    return _bounded(key, value.strip(), MAX_GOAL_CHARS)


def _bounded(key: str, text: str, most: int) -> str:
    """`text` if it is at most `most` characters and has no NUL, else InvalidInput naming
    `key`: the input is untrusted, and a test command or goal goes into every prompt."""
    if len(text) > most:
        raise _fail(
            f"`{key}` is {len(text):,} characters long; at most {most:,} are taken "
            "(put a long test command in a script of the project and run that)"
            if key == "test_command"
            else f"`{key}` is {len(text):,} characters long; at most {most:,} are taken"
        )
    if "\x00" in text:
        raise _fail(f"`{key}` holds a NUL character; give it as plain text")
    return text


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


def _network(value: Any) -> str:
    """ "setup" (the default: only the environment's setup reaches the network), "all" or
    "none"; true and false, as submitted before there were modes, mean "all" and "none"."""
    if value is None:
        return "setup"
    if isinstance(value, bool):
        return "all" if value else "none"
    if value not in egress.MODES:
        raise _fail(
            f'`network` must be "setup" (the default: setup commands only), "all" (every '
            f'command, through the egress proxy) or "none", got {value!r}'
        )
    return str(value)


def _egress_allow(value: Any, operator: str) -> list[str] | None:
    """A submitter's allow-list: within the operator's (TICKWORK_EGRESS_ALLOW), never wider."""
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise _fail(f"`egress_allow` must be a list of host or host:port patterns, got {value!r}")
    allowed = AllowList.of(operator)
    try:
        wider = allowed.wider(value)
    except ValueError as exc:
        raise _fail(f"`egress_allow`: {exc}") from None
    if wider:
        shown = str(allowed) if allowed.patterns else "empty: TICKWORK_EGRESS_ALLOW is not set"
        raise _fail(
            f"`egress_allow` may only narrow this server's allow-list ({shown}), and "
            f"{', '.join(wider)} is not within it; ask the operator to add it to "
            "TICKWORK_EGRESS_ALLOW, or leave it out"
        )
    return [str(p) for p in allowed.narrowed(value).patterns]


#: the goal a repair without one (no `--goal`, or an empty one) gives the model
DEFAULT_GOAL = "make the failing tests pass"


def user_prompt(source: str, test_command: str, goal: str = "") -> str:
    """The task as the model first reads it."""
    return f"""\
Repair the project in the workspace so that its tests pass.

Goal: {goal or DEFAULT_GOAL}
Source: {source} (tool paths are relative to the workspace root; commands see it as /workspace)
Test command: {test_command} (run_tests runs it)

Work in this order:
1. Reproduce: call run_tests and read the failures.
2. Read: find the code the failures point to (list_files, search, read_file).
3. Patch: make the smallest change that fixes the cause (apply_patch or write_file).
4. Re-run: call run_tests again; go back to 2 until the tests pass.
5. Answer without tool calls: a short summary of the cause, the change and the final test \
result."""


def _source(
    data: Mapping[str, Any],
    artifacts: Artifacts,
    *,
    trusted: bool,
    roots: Sequence[Path],
    state_dir: Path | None,
) -> dict[str, Any]:
    workspace, repo = data.get("workspace"), data.get("repo")
    if repo is not None and workspace is not None:
        raise _fail("give either `repo` (with `ref`) or `workspace`, not both")
    if repo is not None:
        if not isinstance(repo, str) or not repo.strip():
            raise _fail("`repo` must be a git URL or path (any URL git clones)")
        return sources.repository(repo, data.get("ref"), artifacts, trusted=trusted, roots=roots)
    if data.get("ref") is not None:
        raise _fail("`ref` goes with `repo`; a `workspace` is packed as it is")
    if not isinstance(workspace, str) or not workspace.strip():
        raise _fail(
            "a source is required: `repo` and `ref` (a git URL or path at a branch, tag or "
            "commit) or `workspace` (a directory packed at submit)"
        )
    return sources.directory(
        workspace, artifacts, trusted=trusted, roots=roots, state_dir=state_dir
    )


def prepare(
    data: Mapping[str, Any],
    *,
    state_dir: Path | None = None,
    artifacts: Artifacts | None = None,
    trusted: bool = True,
    workspace_roots: Sequence[Path] = (),
) -> dict[str, Any]:
    """Check the input and store the job's source in `artifacts` (default: the settings').

    An untrusted submission (the HTTP API) may name local paths under `workspace_roots` only.
    """
    data = _named(data)
    unknown = sorted(set(data) - set(INPUT_KEYS))
    if unknown:
        raise _fail(f"unknown key(s) {', '.join(unknown)}; it takes {', '.join(INPUT_KEYS)}")
    command = _test_command(data.get("test_command"))
    goal = _optional_text(data, "goal")
    timeout = _timeout(data.get("test_timeout_s"))
    network = _network(data.get("network"))
    egress_allow = _egress_allow(data.get("egress_allow"), load_settings().egress_allow)
    try:
        setup = check_setup(data.get("setup"))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    with ExitStack() as stack:
        if artifacts is None:
            artifacts = _settings_artifacts(stack)
        state = Path(state_dir if state_dir is not None else load_settings().state_dir)
        source = _source(data, artifacts, trusted=trusted, roots=workspace_roots, state_dir=state)
    base = source.pop("base")
    config: dict[str, Any] = {
        "user_prompt": user_prompt(sources.describe(source), command, goal),
        "source": source,
        "files": {"base": base},
        "test_command": command,
        "goal": goal,
    }
    if timeout is not None:
        config["test_timeout_s"] = timeout
    config["network"] = network
    if egress_allow is not None:
        config["egress_allow"] = egress_allow
    if setup != NONE:
        # built before the first model call (worker/files/environments.py), mounted at /env
        config["environment"] = {"setup": setup}
    return config


def _settings_artifacts(stack: ExitStack) -> Artifacts:
    """The artifact store of the settings (for a `prepare` called without one)."""
    from tickwork.worker.config.stores import build_store

    settings = load_settings()
    store = build_store(settings)
    stack.callback(store.close)
    return store.artifacts(settings.artifacts_url)


def _mode(entry: str | None) -> str:
    return parse_entry(entry)[0] if entry else "100644"


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


def _is_text(content: bytes) -> bool:
    if len(content) > MAX_FILE_BYTES or b"\x00" in content[:8192]:
        return False
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def diff_manifests(
    before: Manifest, after: Manifest, blobs: Callable[[Iterable[str]], Mapping[str, bytes]]
) -> tuple[str, list[str]]:
    """(git-style unified diff, changed paths) turning the files of `before` into `after`;
    `blobs` gives the contents by hash."""
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    keys = {parse_entry(m[p])[1] for p in changed for m in (before, after) if p in m}
    contents = blobs(keys) if keys else {}
    parts: list[str] = []
    for rel in changed:
        old_entry, new_entry = before.get(rel), after.get(rel)
        old = None if old_entry is None else contents[parse_entry(old_entry)[1]]
        new = None if new_entry is None else contents[parse_entry(new_entry)[1]]
        # quoted as git quotes them: a name with a newline cannot forge a header line
        old_name = "/dev/null" if old is None else quote_path(f"a/{rel}")
        new_name = "/dev/null" if new is None else quote_path(f"b/{rel}")
        parts.append(f"diff --git {quote_path(f'a/{rel}')} {quote_path(f'b/{rel}')}\n")
        if old is None:
            parts.append(f"new file mode {_mode(new_entry)}\n")
        elif new is None:
            parts.append(f"deleted file mode {_mode(old_entry)}\n")
        elif _mode(old_entry) != _mode(new_entry):
            parts.append(f"old mode {_mode(old_entry)}\nnew mode {_mode(new_entry)}\n")
        if old == new:
            continue  # the mode alone changed
        if all(c is None or _is_text(c) for c in (old, new)):
            # an empty file created or deleted has no hunks: headers only, as git writes it
            parts.extend(_hunks(old or b"", new or b"", old_name, new_name))
        else:
            parts.append(f"Binary files {old_name} and {new_name} differ\n")
    return "".join(parts), changed


def run_final_tests(
    head: Head, workspace: Path, environment: Path | None = None, changed: Sequence[str] = ()
) -> dict[str, Any]:
    """Run the session's test command in its working copy once more; what it gave.
    `changed`: the session's changed files, to say when it changed the C source of an
    extension module the run did not rebuild (`stale_build`)."""
    config = head.config
    command = str(config.get("test_command") or "")
    settings = load_settings()
    # a tick (this runs in the last THINK tick) must end before the broker's delivery timeout
    limit = min(MAX_COMMAND_S, settings.longest_call_s)
    timeout = min(float(config.get("test_timeout_s") or FINAL_TESTS_TIMEOUT_S), limit)
    result = run_in_workspace(
        command,
        config=config,
        workdir=workspace,
        timeout_s=timeout,
        env={"TICKWORK_SESSION_ID": head.id},
        sandbox=sandbox_of(settings),
        environment=environment,
    )
    output = result.describe()
    record: dict[str, Any] = {
        "command": command,
        "exit_code": result.exit_code,
        "passed": result.exit_code == 0,
        "timed_out": result.timed_out,
        "output": output_end(output),
    }
    if result.killed:
        record["killed"] = result.killed
    setup = head.result.get("environment")
    why = why_not_run(
        command,
        result.exit_code,
        output,
        timed_out=result.timed_out,
        config=config,
        root=workspace,
        environment=setup if isinstance(setup, Mapping) else None,
    )
    if why:
        record["not_run"] = why
        record["passed"] = False  # no test passed: a run of none must not read as a pass
    elif hidden := hidden_failure(result.exit_code, output):
        record["failed"] = hidden
        record["passed"] = False
    elif cut := cut_short(command, result.exit_code, output):
        record["cut_short"] = cut  # it failed, and its output names only what it reached
    # a passing run has none failing, whatever its output prints (an inner run's summary)
    if not why and not record["passed"] and (failing := failing_tests(output)):
        record["failing"] = failing
    if not why and not record["passed"] and (lacking := lacking_fixtures(output)):
        record["lacking_plugins"] = lacking
    if not why and (stale := versions.unrebuilt(environment, workspace, changed)):
        record["stale_build"] = versions.unrebuilt_note(changed, stale)
    return record


def output_end(output: str, most: int = MAX_TEST_OUTPUT_CHARS) -> str:
    """The end of a run's output in whole lines, saying how much came before: pyparsing's
    final run was kept from the middle of a line (`llaneousExceptionBits`), with nothing
    to say that the rest was cut."""
    if len(output) <= most:
        return output
    kept = output[-(most - 64) :]  # room for the line saying so: `show` cuts at `most`
    kept = kept[kept.find("\n") + 1 :]  # from a line's start; all of it if it holds none
    return f"(its first {len(output) - len(kept):,} chars are not kept) …\n{kept}"


def session_patch(head: Head, workspaces: Any) -> tuple[str, list[str]]:
    """The patch from the session's source to its files as stored now (a legacy session's:
    its project folder now against its baseline, `legacy.py`)."""
    if legacy.is_legacy(head):
        before, now, contents = legacy.manifests(head)
        return diff_manifests(before, now, lambda keys: {k: contents[k] for k in keys})
    files = head.config.get("files") or {}
    before = workspaces.base(files)
    after, _ = workspaces.manifest(head)
    return diff_manifests(before, after, workspaces.blobs)


def finish(head: Head, ending: Ending) -> dict[str, Any]:
    """The patch the session made, the files it changed, and the tests' final result.

    The final test run is part of the tick: what it changes in the files is saved with it.
    """
    result: dict[str, Any] = {}
    files = ending.files
    try:
        patch, changed = session_patch(head, ending.workspaces)
    except ArtifactsUnavailable:
        raise  # the store is away for now: the tick runs again
    except Exception as exc:  # the session's answer must not be lost for want of a patch
        if disk_full(exc):
            raise  # the workspaces disk is full, not the session's doing: the tick runs again
        why = str(exc) if isinstance(exc, ConfigurationError) else f"{type(exc).__name__}: {exc}"
        result.update(patch=None, files_changed=[], patch_error=why)
    else:
        result.update(patch=patch[:MAX_PATCH_CHARS], files_changed=changed)
        if touched := changed_tests(changed):
            # passing tests the patch changed may say more of the tests than of the code
            result["tests_changed"] = touched
        if len(patch) > MAX_PATCH_CHARS:
            result["patch_truncated"] = True
    workspace = None
    try:
        workspace = files.open(changes=True)
        if workspace is None:
            raise ConfigurationError("the session has no files to test")
        result["tests"] = run_final_tests(
            head, workspace, files.environment(head), result.get("files_changed") or ()
        )
        files.record(step=head.step, call_id="")
    except ArtifactsUnavailable:
        raise
    except Exception as exc:  # e.g. a blob of the session's files is gone
        if disk_full(exc):
            raise
        result["tests"] = {
            "command": head.config.get("test_command"),
            "exit_code": None,
            "passed": False,
            "error": f"{type(exc).__name__}: {exc}",
            "not_run": str(exc),
        }
    result.update(_before_any_change(head, ending, result["tests"], workspace))
    result["outcome"] = repair_outcome(
        patch=result.get("patch"), tests=result.get("tests"), setup_failed=_setup_failed(result)
    ).value
    return result


def _before_any_change(
    head: Head, ending: Ending, tests: Mapping[str, Any], workspace: Path | None
) -> dict[str, Any]:
    """The session's test run before any change (`baseline.py`: `tests_before`) and which
    of the final run's failing tests failed there too (`failed_before`); {} when there was
    no such run. The outcome stays what the final run says. `workspace`: the session's
    working copy (its project's own modules), None if it could not be opened."""
    if ending.history is None or legacy.is_legacy(head) or session_files(head) is None:
        return {}
    setup = head.result.get("environment")
    first = baseline.first_run(
        ending.history(),
        ending.workspaces.store.file_changes(head.id),
        root=workspace,
        environment=setup if isinstance(setup, Mapping) else None,
    )
    if first is None:
        return {}
    found: dict[str, Any] = {"tests_before": first}
    if first.get("partial"):
        return found  # its output was cut: which tests failed there is not known
    both = failed_before(first["failing"], tests.get("failing") or [])
    if both is not None:
        found["failed_before"] = both
    return found


def _setup_failed(result: Mapping[str, Any]) -> bool:
    """Whether the session's environment could not be built (worker/files/environments.py records
    it under `environment`; such a session normally fails `ENV_SETUP` before finishing)."""
    environment = result.get("environment")
    return isinstance(environment, Mapping) and environment.get("status") == "failed"


@dataclass(frozen=True)
class RepairKind:
    """The repair job kind (`tickwork.worker.jobs.Kind`): `prepare` with the submission's
    context, `finish` on the session's files; another toolkit makes a kind of its own. Its
    `roles` (planner, explorer, reviewer: `team.py`) are those its children take, and a
    root may take one too (`role` in the input, as the submission's roles configure it);
    `child` starts a child on its parent's files (`tickwork.worker.jobs.Parent`)."""

    name: str = "repair"
    system_prompt: str = SYSTEM_PROMPT
    tools: Callable[[], ToolRegistry] = default_registry
    budgets: Mapping[str, Any] = field(default_factory=dict)
    roles: Mapping[str, Role] = field(default_factory=lambda: dict(team.ROLES))

    def configure(self, data: Mapping[str, Any], submission: Submission) -> dict[str, Any]:
        role = data.get("role")
        config = prepare(
            data,
            state_dir=submission.state_dir,
            artifacts=submission.artifacts,
            trusted=submission.trusted,
            workspace_roots=submission.workspace_roots,
        )
        if role is None:
            # a repair without a role works alone: its kind's tools (a toolkit of its own
            # included), no children
            config["tools"] = [n for n in self.tools().names() if n not in TEAM_TOOLS]
            return config
        roles = self.roles if submission.roles is None else submission.roles
        try:
            chosen = role_for(roles, role, kind=self.name)
        except InvalidInput as exc:
            raise _fail(f"`role`: {exc}") from None
        return {**config, **chosen.config()}

    def child(self, data: Mapping[str, Any], spawning: Spawning) -> dict[str, Any]:
        files = spawning.workspaces.start_from(spawning.parent)
        return team.child_config(spawning.parent, spawning.role, data, files)

    def completed(self, head: Head, ending: Ending) -> dict[str, Any]:
        return finish(head, ending)


REPAIR = RepairKind()
