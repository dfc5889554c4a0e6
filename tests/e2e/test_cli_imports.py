"""The `tickwork` command builds its CLI without importing Celery's app or prometheus_client:
a prefork `tickwork worker` must set PROMETHEUS_MULTIPROC_DIR before prometheus_client is
first imported, or its children's metrics are lost."""

from __future__ import annotations

import json
import subprocess
import sys


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
