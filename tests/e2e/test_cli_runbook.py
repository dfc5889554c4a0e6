"""`tickwork runbook`: the messages that send an operator to the runbook name a section it
prints, from any install (ops/RUNBOOK.md ships in the wheel; tests/e2e/test_install.py)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT
from tickwork import cli_runbook
from tickwork.cli import main
from tickwork.cli_runbook import RUNBOOK, about, sections

#: the folders of the code that prints messages: what a wheel installs
CODE = ("tickwork", "worker", "store", "tasks", "fsm")


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


def test_every_pointer_names_one_section_and_none_names_the_file() -> None:
    """A message named `ops/RUNBOOK.md`, a path a wheel user does not have."""
    found = sections(RUNBOOK.read_text())
    topics = set()
    for name, text in _sources().items():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert "RUNBOOK.md" not in code or name == "tickwork/cli_runbook.py", name
        topics |= set(re.findall(r"`tickwork runbook ([a-z ]+)`", re.sub(r'"\s*\n\s*"', "", code)))
    assert {"upgrades", "sandbox", "backups", "graph version"} <= topics
    for topic in topics:
        assert len(about(topic, found)) == 1, topic


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = list(args) if args[:1] == ("--server",) else ["runbook", *args]
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exited,
    ):
        main(argv)
    assert isinstance(exited.value.code, int)
    return exited.value.code, out.getvalue(), err.getvalue()


def test_runbook_prints_a_section_or_lists_them() -> None:
    code, out, _ = _run("graph", "version")
    assert code == 0 and out.startswith("## Rolling out a new graph version\n")
    assert "## Capacity" not in out  # the section only
    code, out, _ = _run()
    assert code == 0 and "  Upgrades\n" in out and "  Backups: what state lives where\n" in out
    code, out, _ = _run("--server", "http://127.0.0.1:9", "runbook", "upgrades")
    assert code == 0 and out.startswith("## Upgrades\n")  # reads no server
    code, _, err = _run("no", "such")
    assert code == 2 and err.startswith("error: no runbook section's title holds 'no such'")


def test_an_install_without_the_runbook_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It said "No such file or directory" and a path, as if the user had named a file:
    the install lacks its package data (a repackaging that left it out)."""
    monkeypatch.setattr(cli_runbook, "RUNBOOK", tmp_path / "RUNBOOK.md")
    for args in (("upgrades",), ()):
        code, out, err = _run(*args)
        assert (code, out) == (1, "")
        assert err.startswith(f"error: this install lacks the runbook: {tmp_path}/RUNBOOK.md ")
        assert "Reinstall tickwork from its wheel" in err
