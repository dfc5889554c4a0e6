"""A plain folder of tests (no packaging or requirements files) under `--setup auto`: an
empty environment, and the session's card says so and how to name what the tests need; a
noxfile.py is not read, and the card says that too."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from tickwork.fsm.values import Head, Status
from tickwork.worker.files.environments import NOXFILE

from tests.environments.projects import deployment
from tickwork import render
from tickwork.testing import SessionDriver, reply, running_worker


def test_a_plain_folder_of_tests_is_told_how_to_name_its_requirements(tmp_path: Path) -> None:
    """Its card said only "no packaging or requirements files: an empty environment": not
    what the tests then run with, nor where to say what they need."""
    plain, nox = tmp_path / "plain", tmp_path / "nox"
    for source in (plain, nox):
        source.mkdir()
        (source / "test_it.py").write_text("def test_it():\n    assert True\n")
    # a project that names its test tools in a noxfile.py only: `auto` says it did not read it
    (nox / "noxfile.py").write_text("import nox\n\n@nox.session\ndef t(s):\n    s.install('x')\n")
    # no sandbox: the empty environment is decided before any is needed
    settings = deployment(tmp_path / "deploy", sandbox="none")
    with running_worker(settings), SessionDriver(settings) as driver:
        heads = [
            driver.run(
                driver.submit(
                    "repair",
                    {"workspace": str(source), "test_command": "true"},
                    replies=[reply("done")],
                ),
                timeout=120,
            ).head
            for source in (plain, nox)
        ]
    for head in heads:
        assert head.status is Status.COMPLETED, head.error_message
        env = head.result["environment"]
        assert env["status"] == "empty" and env["key"] is None
    said = [_shown(head) for head in heads]
    assert "an empty environment, the tests run with the system's Python" in said[0]
    assert "name what they need in a requirements.txt at the source's root" in said[0]
    assert "`--setup` commands" in said[0] and "noxfile.py" not in said[0]
    assert "noxfile.py not read" in said[1]
    assert heads[1].result["environment"]["detected"] == [NOXFILE]


def _shown(head: Head) -> str:
    shown = Console(width=600, record=True)
    for part in render.outcome(head.model_dump(mode="json"), []):
        shown.print(part)
    return shown.export_text()
