"""`tickwork.testing` and the client: the examples in docs/PYTHON.md run as written, the
driver fails loudly, and the module imports without pytest (users' tests may run under
another runner)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tickwork.fsm.values import Status

from tests.tasks.conftest import ROOT, TEST_KIND
from tickwork.testing import (
    SessionDriver,
    call,
    embedded_settings,
    reply,
    running_worker,
    write_script,
)


def docs_example() -> str:
    text = (ROOT / "docs" / "PYTHON.md").read_text(encoding="utf-8")
    section = text.split("## Testing your own job kinds and tools", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/PYTHON.md: the testing section has no python example"
    return found[1]


def test_the_docs_example_runs(tmp_path: Path) -> None:
    name = "docs_greeter_example"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{name}.py").write_text(docs_example(), encoding="utf-8")
    sys.path.insert(0, str(tmp_path / "code"))
    try:
        module = importlib.import_module(name)
        tests = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
        assert len(tests) == 1
        (tmp_path / "run").mkdir()
        tests[0](tmp_path / "run")
    finally:
        sys.path.remove(str(tmp_path / "code"))
        sys.modules.pop(name, None)


def client_example() -> str:
    text = (ROOT / "docs" / "PYTHON.md").read_text(encoding="utf-8")
    section = text.split("## The client\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/PYTHON.md: the client section has no python example"
    return found[1]


def test_the_docs_client_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the example's Tickwork() reads the environment: point it at this test's deployment
    state, queue = tmp_path / "state", "tickwork.test.client-example"
    environment = {"STATE_DIR": state, "QUEUE": queue, "DEAD_LETTER_QUEUE": queue + ".dead"}
    for name, value in environment.items():
        monkeypatch.setenv(f"TICKWORK_{name}", str(value))
    settings = embedded_settings(tmp_path, queue=queue, dead_letter_queue=queue + ".dead")
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n")
    fix = call("write_file", path="calc.py", content="x = 2\n")  # waits for a person
    script = write_script([reply("fix it", fix), reply("fixed")], tmp_path)
    written = client_example()
    code = written.replace('"/src/project"', repr(str(project)))
    code = code.replace('"openai:gpt-4o-mini"', repr(script))
    assert code.count(str(project)) == 1 and code.count(script) == 1, written
    with running_worker(settings):
        exec(compile(code, "docs/PYTHON.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("completed "), printed
    assert "-x = 1\n+x = 2" in printed
    assert (project / "calc.py").read_text() == "x = 1\n"  # the source is never changed


def test_the_driver_says_when_a_session_ends_otherwise(tmp_path: Path) -> None:
    settings = embedded_settings(tmp_path)
    with running_worker(settings), SessionDriver(settings, timeout=60) as driver:
        done = driver.submit(TEST_KIND, {}, replies=[reply("nothing to do")])
        with pytest.raises(AssertionError, match=r"is completed, expected waiting_approval"):
            driver.run_until(done, Status.WAITING_APPROVAL)
        rejected = driver.submit(
            TEST_KIND,
            {"sink": str(tmp_path)},
            replies=[reply("", call("danger", value="prod")), reply("gave up")],
        )

        def refuse(driver: SessionDriver, session: object, waiting: object) -> None:
            driver.decide(rejected, "s1c0", reject="not prod")

        session = driver.run(rejected, decide=refuse)
    assert session.head.status is Status.COMPLETED
    assert session.observation("s1c0").content == "rejected by tests: not prod"  # type: ignore[union-attr]
    assert not (tmp_path / "danger.log").exists()


def test_the_driver_runs_a_parent_through_its_children_deciding_their_calls(
    tmp_path: Path,
) -> None:
    settings = embedded_settings(tmp_path)
    with running_worker(settings), SessionDriver(settings, timeout=60) as driver:
        child = write_script(
            [reply("", call("danger", value="child")), reply("child done")],
            driver.scripts,
            name="child",
        )
        spawn = call(
            "spawn_agents",
            children=[{"role": "helper", "input": {"sink": str(tmp_path)}, "model": child}],
        )
        parent = driver.submit(
            "tests.jobs:TREE", {"sink": str(tmp_path)}, replies=[reply("", spawn), reply("joined")]
        )
        session = driver.run(parent)
    assert session.head.status is Status.COMPLETED, session.head
    assert session.head.final_answer == "joined"
    ran = (tmp_path / "danger.log").read_text().splitlines()
    assert [line.split()[-1] for line in ran] == ["child"]  # approved, run once


def test_tickwork_testing_imports_without_pytest() -> None:
    code = (
        "import sys\n"
        "sys.modules['pytest'] = sys.modules['_pytest'] = None  # importing them fails\n"
        "import tickwork.testing\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.stdout.strip() == "ok", done.stderr
