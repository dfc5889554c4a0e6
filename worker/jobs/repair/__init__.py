"""The built-in `repair` job kind (`job.py`) and the toolkit its sessions use (`toolkit.py`)."""

from tickwork.worker.jobs.repair.job import REPAIR, diff_manifests, finish, prepare, session_patch
from tickwork.worker.jobs.repair.toolkit import default_registry, repair_tools, run_in_workspace

__all__ = [
    "REPAIR",
    "default_registry",
    "diff_manifests",
    "finish",
    "prepare",
    "repair_tools",
    "run_in_workspace",
    "session_patch",
]
