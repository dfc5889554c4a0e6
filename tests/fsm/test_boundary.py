"""The fsm layer stays pure: no database, broker or HTTP library reaches it
(docs/DESIGN.md section 1)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FSM = ROOT / "fsm"
FORBIDDEN = frozenset({"sqlalchemy", "celery", "kombu", "redis", "httpx", "psycopg", "psycopg2"})


def forbidden_imports(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, module) for every import of a forbidden top-level package in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ast.unparse(node.func) in {"__import__", "importlib.import_module", "import_module"}
        ):
            names = [node.args[0].value]
        else:
            continue
        found.extend((node.lineno, n) for n in names if n.split(".")[0] in FORBIDDEN)
    return found


def fsm_files() -> list[Path]:
    return sorted(FSM.rglob("*.py"))


def test_the_walk_sees_every_fsm_module() -> None:
    names = {p.stem for p in fsm_files()}
    assert {
        "values",
        "machine",
        "approvals",
        "loops",
        "budgets",
        "forks",
        "transcript",
        "snapshots",
        "fingerprints",
        "errors",
    } <= names


@pytest.mark.parametrize(
    "source",
    [
        "import sqlalchemy",
        "import sqlalchemy.orm as orm",
        "from celery import Celery",
        "from kombu.utils import json",
        "import os, redis",
        "def f():\n    import httpx\n",
        "from psycopg import sql",
        "import importlib\nimportlib.import_module('celery.app')",
        "__import__('redis')",
    ],
)
def test_the_checker_catches_forbidden_imports(source: str) -> None:
    assert forbidden_imports(source)


@pytest.mark.parametrize(
    "source",
    [
        "import json",
        "from .values import Head",
        "from pydantic import BaseModel",
        "import redistribute",
        "from celeryish import x",
    ],
)
def test_the_checker_lets_other_imports_through(source: str) -> None:
    assert forbidden_imports(source) == []


@pytest.mark.parametrize("path", fsm_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_fsm_module_imports_no_io_library(path: Path) -> None:
    assert forbidden_imports(path.read_text(encoding="utf-8"), str(path)) == []


def test_importing_fsm_loads_no_io_library() -> None:
    script = (
        "import importlib, json, pkgutil, sys\n"
        "import tickwork.fsm as fsm\n"
        "for info in pkgutil.walk_packages(fsm.__path__, 'tickwork.fsm.'):\n"
        "    importlib.import_module(info.name)\n"
        f"forbidden = {sorted(FORBIDDEN)!r}\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & set(forbidden))\n"
        "print(json.dumps({'loaded': loaded, 'fsm': sorted(m for m in sys.modules"
        " if m.startswith('tickwork.fsm.'))}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)
    assert "tickwork.fsm.machine" in report["fsm"] and "tickwork.fsm.forks" in report["fsm"]
    assert report["loaded"] == []
