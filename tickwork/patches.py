"""A session's patch: made from its stored files (or its archived record's), said why it
is empty, and applied to a folder."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tickwork.fsm.errors import InvalidInput, NoPatch, PatchDoesNotApply, ToolError
from tickwork.fsm.values import Head
from tickwork.store.files import Saved, applied
from tickwork.worker.files.workspaces import Workspaces, session_files


def patch_text(head: Head, files: Workspaces, saved: Sequence[Saved] | None = None) -> str:
    """The patch from the session's source to its files: its result's patch once it has
    finished, else made from its files as stored now, or from `saved` (an archived
    session's file changes, as its record holds them); `NoPatch` for a session without
    files (another job kind)."""
    stored = head.result.get("patch")
    if isinstance(stored, str) and not head.result.get("patch_truncated"):
        return stored
    from tickwork.worker.jobs.repair import diff_manifests, legacy, session_patch

    base = session_files(head)
    if base is None and not legacy.is_legacy(head):
        raise NoPatch(f"session {head.id} has no patch: a {head.kind} job has no files")
    if base is None or saved is None:
        return session_patch(head, files)[0]
    before = after = files.base(base)
    for change in saved:
        after = applied(after, change.changes)
    return diff_manifests(before, after, files.blobs)[0]


def unchanged(head: Head) -> str:
    """Why a session's patch is empty, in a few words."""
    if head.status.terminal:
        outcome = head.result.get("outcome")
        error = head.result.get("patch_error")
        if error:
            return f"it could not be made ({error})"
        return f"it changed no files ({head.status.value}{f', {outcome}' if outcome else ''})"
    return f"it has changed no files yet ({head.status.value}, step {head.step})"


#: how a patch names a binary file whose content it does not carry (`diff_manifests`)
_BINARY = re.compile(r"^Binary files (.+) and (.+) differ$")


def _without_binaries(patch: str) -> tuple[str, list[str]]:
    """`patch` without the diffs of binary files (a test run's `.coverage`, an image),
    which carry no content and which neither `git apply` nor the built-in applier takes,
    and their paths."""
    kept, binaries = [], []
    for block in re.split(r"(?m)^(?=diff --git )", patch):
        # a hunk's lines start with " ", "+" or "-": only a header line can match
        found = next(filter(None, map(_BINARY.match, block.splitlines()[1:])), None)
        if found is None:
            kept.append(block)
            continue
        old, new = found.groups()
        name = new if new != "/dev/null" else old
        binaries.append(name[2:] if name[:2] in ("a/", "b/") else name)
    return "".join(kept), binaries


def apply_patch(directory: Path, patch: str) -> str:
    """Apply a session's patch to `directory` (with `git apply` if git is installed);
    all of it or nothing, but for binary files, whose content a patch does not carry: they
    are left out and named. Returns what was done; `PatchDoesNotApply` if nothing could be
    (exit 1: the command was right), InvalidInput if `directory` is no folder."""
    if not directory.is_dir():
        raise InvalidInput(f"{directory} is not a directory; give the project's folder")
    if not patch:
        return "the patch is empty: nothing to apply"
    patch, binaries = _without_binaries(patch)
    left_out = (
        "left out, as a patch does not carry a binary file's content: "
        f"{', '.join(binaries)} (a --repo job's `tickwork patch ID --bundle FILE` has them)"
        if binaries
        else ""
    )
    if not patch.strip():
        raise PatchDoesNotApply(
            f"the patch changes only binary files, nothing was applied: {left_out}"
        )
    if shutil.which("git"):
        done = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            cwd=directory,
            input=patch.encode(),
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            reverse = subprocess.run(
                ["git", "apply", "--reverse", "--check", "-"],
                cwd=directory,
                input=patch.encode(),
                capture_output=True,
                check=False,
            )
            if reverse.returncode == 0:  # it applies backwards: it is in the files already
                raise PatchDoesNotApply(
                    f"the patch is applied to {directory} already: nothing was changed"
                )
            raise PatchDoesNotApply(
                f"the patch does not apply to {directory}: "
                + " ".join(done.stderr.decode(errors="replace").split())[:500]
            )
        return f"applied the patch to {directory}" + (f"; {left_out}" if left_out else "")
    from tickwork.worker.tools import patches

    try:
        done_by_hand = patches.apply_patch(directory, patch)
    except ToolError as exc:  # worded for the model; the user is told as git's refusal is
        raise PatchDoesNotApply(f"the patch does not apply to {directory}: {exc.message}") from None
    return done_by_hand + (f"\n{left_out}" if left_out else "")
