"""The `tickwork` command builds its CLI without importing Celery's app or prometheus_client:
a prefork `tickwork worker` must set PROMETHEUS_MULTIPROC_DIR before prometheus_client is
first imported, or its children's metrics are lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_building_the_cli_imports_neither_the_celery_app_nor_prometheus() -> None:
    code = (
        "import json, sys\n"
        "from tickwork.cli import make_cli\n"
        "make_cli()\n"
        "print(json.dumps([m for m in ('tickwork.worker.tick.app', 'prometheus_client')"
        " if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []


def test_the_read_facade_imports_no_celery(tmp_path: Path) -> None:
    """`tickwork show` and `tickwork patch` read through `Context.reads` (tickwork/reads.py):
    sessions and the archive are read without the Celery app being imported."""
    code = (
        "import json, sys\n"
        "from tickwork.context import Context\n"
        "from tickwork.worker.config.settings import Settings\n"
        f"with Context(Settings(state_dir={str(tmp_path)!r}), creates=True) as ctx:\n"
        "    assert ctx.reads.sessions() == [] and ctx.reads.archived('s1') is None\n"
        "print(json.dumps([m for m in ('celery', 'tickwork.worker.tick.app')"
        " if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
