"""A prefork `tickwork worker` serves the ticks its children ran on TICKWORK_METRICS_PORT, with
no PROMETHEUS_MULTIPROC_DIR set, and consumes the dead-letter queue by default."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import ROOT, TEST_KIND, Cli, Deployment, call, stop, until
from tests.ports import free_port


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_a_prefork_worker_shows_its_childrens_ticks_and_dead_letters(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    env = {k: v for k, v in deployment.env().items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    cli = Cli(
        {**env, "TICKWORK_METRICS_PORT": str(port), "TICKWORK_METRICS_ADDR": "127.0.0.1"},
        deployment.tmp,
    )
    worker, log = cli.start("worker", "--pool", "prefork", "--concurrency", "2")
    try:
        done = deployment.submit(
            [{"content": "look", "tool_calls": [call("echo", text="1")]}, {"content": "fixed"}]
        )
        broken = deployment.client.submit(
            TEST_KIND,
            {},
            model=deployment.script([{"error": {"transient": False, "message": "400 no"}}]),
        ).id
        assert deployment.client.wait(done, timeout=60).status.value == "completed"
        assert deployment.client.wait(broken, timeout=60).status.value == "failed"
        until(lambda: "dead letter: session" in log.read_text(), timeout=30, what="the notice")
        found = until(
            lambda: (
                (got := samples(port)).get(
                    ("tickwork_dead_letters_received_total", (("code", "MODEL_ERROR"),))
                )
                and got
            ),
            timeout=30,
            what="the dead letter to be counted on /metrics",
        )
    finally:
        stop(worker)

    saved = (("outcome", "saved"), ("phase", "think"), ("tenant", "default"))
    assert found[("tickwork_ticks_total", saved)] >= 2  # both THINK ticks of `done`
    executed = (("outcome", "saved"), ("phase", "execute"), ("tenant", "default"))
    assert found[("tickwork_ticks_total", executed)] >= 1
    folder = deployment.settings.state_dir / "metrics"
    assert [p.name for p in folder.iterdir()] == [f"tickwork-{worker.pid}@{socket.gethostname()}"]
    assert worker.returncode == 0, log.read_text()[-2000:]


def test_the_command_line_loads_no_metrics_before_the_worker_chooses_their_folder() -> None:
    # prometheus_client picks its multiprocess mode at import: loaded by any command's
    # module, a prefork worker's /metrics was empty (its children counted in memory)
    code = (
        "import sys, tickwork.cli as cli; cli.make_cli(); "
        "assert 'prometheus_client' not in sys.modules, 'loaded'"
    )
    subprocess.run([sys.executable, "-P", "-c", code], check=True, cwd=ROOT)


def test_a_worker_that_cannot_listen_on_its_metrics_port_names_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It runs on without metrics (its ticks matter more), saying which port and setting."""
    from tickwork.worker.observers import metrics

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setenv("TICKWORK_METRICS_PORT", str(port))
        monkeypatch.setenv("TICKWORK_METRICS_ADDR", "127.0.0.1")
        try:
            with caplog.at_level("ERROR", logger="tickwork"):
                metrics._serve_with_worker()
        finally:
            metrics.stop_serving()  # had it listened after all, not left to later tests
    said = caplog.text
    assert f"cannot listen on 127.0.0.1:{port}" in said and "TICKWORK_METRICS_PORT" in said
