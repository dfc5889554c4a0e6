"""A task's expected tests: a command the session never saw (the project's whole suite, or
tests a reference solution passes), run once the session has completed, on its source with
its changes, in the same sandbox and under the same network policy as its own commands.

It runs in the eval's process, not a worker: the patched copy is made from the client's
public reads (`bundle`, `read_file`). The session's environment (/env, built by its `setup`) is
not there, so expected tests suit projects whose tests need nothing installed, or a command
that installs what it needs where the session's network policy lets it. As in the session's
own commands, the working copy's src/ (or root) comes first on PYTHONPATH only where the
session had no environment (`had_environment`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tickwork.fsm.errors import TickworkError
from tickwork.fsm.outcomes import NOT_FOUND_EXIT_CODES, hidden_failure
from tickwork.fsm.values import Head

if TYPE_CHECKING:
    from tickwork.client import Tickwork

#: the longest an expected-tests command may run
MAX_CHECK_S = 600.0
#: how much of its output the result keeps (its end)
MAX_OUTPUT_CHARS = 2_000


@dataclass(frozen=True)
class Checked:
    #: "pass", "fail" (it ran and failed, or ran out of time, or exited 0 though its
    #: runner's summary counted failures: `hidden_failure`) or "not_run"
    verdict: str
    #: the end of its output, or why it could not run
    detail: str


def run_expected_tests(client: Tickwork, head: Head, command: str, *, timeout_s: float) -> Checked:
    """Run `command` on the session's files as it left them."""
    from tickwork.worker.config.settings import load_settings
    from tickwork.worker.files.filetree import SKIP_DIRS
    from tickwork.worker.files.sources import no_filters
    from tickwork.worker.jobs.repair.toolkit import run_in_workspace
    from tickwork.worker.sandbox.runner import sandbox_of

    source = head.config.get("source") or {}
    # outside the state dir: the sandbox hides it from commands
    scratch = Path(tempfile.mkdtemp(prefix="tickwork-eval-"))
    try:
        copy = scratch / "workspace"
        if source.get("kind") == "repo":
            bundle = scratch / "session.bundle"
            branch = client.bundle(head.id, bundle)
            cloned = ["clone", "--quiet", "--no-checkout", "--branch", branch, str(bundle)]
            subprocess.run(
                ["git", *cloned, str(copy)],
                check=True,
                capture_output=True,
            )
            no_filters(copy)  # the session's .gitattributes pick none of this machine's
            subprocess.run(
                ["git", "reset", "--quiet", "--hard"], cwd=copy, check=True, capture_output=True
            )
        elif source.get("kind") == "workspace" and Path(str(source.get("path"))).is_dir():
            shutil.copytree(
                str(source["path"]),
                copy,
                ignore=shutil.ignore_patterns(*SKIP_DIRS, "*.pyc"),
                symlinks=True,
            )
            _write_changes(client, head, copy)
        else:
            return Checked("not_run", f"the session's source is not here to test: {source}")
        # the sandbox's user reads the copy and writes in it; a link is not followed, so a
        # link in the task's source to a folder elsewhere never opens that folder up
        inside = (p for p in copy.rglob("*") if p.is_dir() and not p.is_symlink())
        for folder in (scratch, *inside, copy):
            folder.chmod(0o755)
        settings = load_settings()
        result = run_in_workspace(
            command,
            config=head.config,
            workdir=copy,
            timeout_s=min(timeout_s, MAX_CHECK_S),
            env={"TICKWORK_SESSION_ID": head.id},
            sandbox=sandbox_of(settings),
            # as the session's own test runs: its src/ (or root) first on PYTHONPATH only
            # where it had no environment to install the project in
            installed=had_environment(head),
        )
    except (TickworkError, OSError, subprocess.CalledProcessError) as exc:
        why = exc.message if isinstance(exc, TickworkError) else str(exc)
        return Checked("not_run", f"the expected tests could not run: {why}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    said = result.describe()
    output = said[-MAX_OUTPUT_CHARS:]
    if result.exit_code in NOT_FOUND_EXIT_CODES:
        return Checked("not_run", f"the expected tests' command was not found: {output}")
    if hidden := hidden_failure(result.exit_code, said):
        # `pytest -q | tail -3` exits as `tail`: the runner's own summary decides
        return Checked("fail", f"{hidden}\n{output}")
    return Checked("pass" if result.exit_code == 0 and not result.timed_out else "fail", output)


def had_environment(head: Head) -> bool:
    """Whether the session's commands ran with its environment (built by its `setup`,
    mounted at /env), which installed the project, rather than with none (TICKWORK_SANDBOX=
    none, `--setup none`), where the working copy's src/ came first on their PYTHONPATH."""
    from tickwork.worker.files.environments import ready

    return ready(head.result.get("environment"))


def _write_changes(client: Tickwork, head: Head, copy: Path) -> None:
    """Write the files the session changed (its result's `files_changed`, as stored now)
    over the copy of its source; a file it deleted is deleted."""
    changed = head.result.get("files_changed")
    if not isinstance(changed, list):
        why = head.result.get("patch_error") or "no files_changed in its result"
        raise OSError(f"session {head.id} recorded no changed files: {why}")
    root = copy.resolve()
    for rel in changed:
        target = (copy / str(rel)).resolve()
        if not isinstance(rel, str) or root not in target.parents:
            raise OSError(f"session {head.id} changed a path outside its workspace: {rel!r}")
        content = client.read_file(head.id, rel)
        if content is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
