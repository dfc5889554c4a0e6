"""The chaos run's two file faults: a full workspaces filesystem and rotten cached blobs.

The workspaces folder gets a filesystem of its own, a tmpfs of `Plan.workspaces_mb`
mounted for the run (mounting needs root; elsewhere the run says so and leaves the
disk-full fault out). Filling it writes a file until the kernel says ENOSPC and keeps it
for the outage. Rot overwrites every blob of the workers' shared cache (`objects/`). The
file sessions' invariants: each completed, its patch turns the project's bug into the fix,
and no read of theirs ever showed rot.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tickwork.fsm.values import Status

from .plan import BUGGY, FIXED
from .report import Report

ROT = b"rot: this is not the content its hash names\n"
#: what a file tool's observation says when its write met the full disk: the kernel's
#: ENOSPC, or the tool's own check of the filesystem's reserve (worker/sandbox/quota.py)
FULL = ("No space left on device", "nothing was written")


class Disk:
    """The workspaces folder, on a tmpfs of its own when `size_mb` and root allow."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path, self.size_mb = path, size_mb
        path.mkdir(parents=True, exist_ok=True)
        self.mounted = False
        self.why_not = "no size asked"
        self.fills = self.rotted = 0
        if size_mb <= 0:
            return
        if os.geteuid() != 0:
            self.why_not = "not root: cannot mount a tmpfs"
            return
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        self.mounted = done.returncode == 0
        self.why_not = done.stderr.strip()

    def describe(self) -> str:
        if self.mounted:
            return f"workspaces on a tmpfs of {self.size_mb} MB ({self.path})"
        return f"workspaces on the state folder's filesystem ({self.why_not}): no disk-full fault"

    def fill(self, for_s: float) -> None:
        """Fill the filesystem to the last byte, hold it `for_s`, free it."""
        filler = self.path / ".chaos-filler"
        chunk = b"\0" * (1 << 20)
        with open(filler, "wb", buffering=0) as out:
            with contextlib.suppress(OSError):  # ENOSPC: full
                while True:
                    out.write(chunk)
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 4096)
        self.fills += 1
        time.sleep(for_s)
        filler.unlink(missing_ok=True)

    def rot(self) -> int:
        """Overwrite every cached blob; how many."""
        for blob in (self.path / "objects").glob("*/*"):
            with contextlib.suppress(OSError):
                blob.write_bytes(ROT)
                self.rotted += 1
        return self.rotted

    def release(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


def check_files(report: Report, client: Any, ids: list[str], disk: Disk) -> None:
    """The file sessions' invariants, each as a figure."""
    from tickwork.patches import apply_patch

    files = [i for i in ids if i.startswith("chaos-files-")]
    report.add("file sessions", len(files))
    report.add("workspaces filesystem filled (times)", disk.fills)
    report.add("cached blobs overwritten with rot", disk.rotted)
    wrong, rotten, told = [], [], []
    for session_id in files:
        session = client.load(session_id)
        head = session.head
        # its write landed while the disk was full: the model was told so (an error
        # observation), and the scripted one does not try again; nothing half written stays
        writes = [
            session.observation(c.call_id)
            for st in session.steps
            for c in st.calls
            if c.name == "write_file"
        ]
        full = disk.fills > 0 and any(
            o is not None and o.is_error and any(m in o.content for m in FULL) for o in writes
        )
        if full:
            told.append(session_id)
        if any("rot:" in o.content for o in session.observations):
            rotten.append(session_id)
        if head.status is not Status.COMPLETED:
            wrong.append(
                f"{session_id}: {head.status.value} {head.error_code} {head.error_message}"
            )
            continue
        patch = str((head.result or {}).get("patch", ""))
        if full and not patch.strip():
            continue  # refused, and nothing half written was kept
        project = Path(report.workdir) / f"check-{session_id}"
        project.mkdir(parents=True, exist_ok=True)
        (project / "calc.py").write_text(BUGGY)
        try:
            apply_patch(project, patch)
        except Exception as exc:
            wrong.append(f"{session_id}: its patch does not apply: {exc}")
            continue
        if full and (project / "calc.py").read_text() != BUGGY:
            wrong.append(f"{session_id}: its write was refused, yet its patch changes the file")
        elif not full and (project / "calc.py").read_text() != FIXED:
            wrong.append(f"{session_id}: its patch does not give the fix")
    report.add(
        "file sessions whose write met the full disk (told so, no patch)",
        f"{len(told)} {' '.join(told)}".strip(),
    )
    report.add(
        "file sessions completed with the fix as their patch (or none, told the disk was full)",
        len(files) - len(wrong),
        not wrong,
    )
    for line in wrong[:5]:
        report.add("  file session", line)
    report.add("file sessions that read rot", len(rotten), not rotten)
