"""`tickwork worker --pool threads`: a model-bound worker keeps hundreds of ticks in flight
per process unless `-c` says otherwise; the embedded broker keeps the CPU count."""

from __future__ import annotations

import os
import re

from tests.e2e.conftest import Cli, Deployment, stop, until
from tickwork.cli_ops import MODEL_BOUND_THREADS


def _concurrency(cli: Cli, *args: str) -> str:
    worker, log = cli.start("worker", *args)
    try:
        banner = until(
            lambda: re.search(r"concurrency: (\d+ \(\w+\))", log.read_text()),
            timeout=60,
            what=f"the worker's banner in {log}",
        )
        return banner.group(1)
    finally:
        stop(worker)


def test_threads_default_to_a_model_bound_concurrency(deployment: Deployment, cli: Cli) -> None:
    default = _concurrency(cli, "--pool", "threads")
    if deployment.name == "embedded":
        assert default == f"{os.cpu_count()} (thread)"
    else:
        assert default == f"{MODEL_BOUND_THREADS} (thread)"
    assert _concurrency(cli, "--pool", "threads", "-c", "7") == "7 (thread)"
