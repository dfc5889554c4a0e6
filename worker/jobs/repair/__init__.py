"""The built-in `repair` job kind (`job.py`) and the toolkit its sessions use (`toolkit.py`)."""

from tickwork.worker.jobs.repair.job import (
    REPAIR,
    RepairKind,
    diff_manifests,
    finish,
    prepare,
    session_patch,
)
from tickwork.worker.jobs.repair.toolkit import default_registry, repair_tools, run_in_workspace

__all__ = [
    "REPAIR",
    "RepairKind",
    "default_registry",
    "diff_manifests",
    "finish",
    "prepare",
    "repair_tools",
    "run_in_workspace",
    "session_patch",
]
