"""A job kind of the user's own (`module:attr`) that the command cannot import: the error
names what was not found and how Python finds modules (PYTHONPATH, not the working
directory, which the `tickwork` script does not put on sys.path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, Cli, Deployment


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_kind_beside_the_command_is_not_imported_and_the_error_says_set_pythonpath(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "userjobs.py").write_text("from tests.jobs import TEST as KIND\n")
    script = deployment.script([{"content": "done"}])
    argv = [str(Path(sys.executable).with_name("tickwork")), "submit", "userjobs:KIND"]
    argv += ["--model", script, "--input", "{}"]

    def submit(pythonpath: str) -> subprocess.CompletedProcess[str]:
        env = {**cli.env, "PYTHONPATH": pythonpath}
        return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)

    refused = submit(str(ROOT))  # run from the folder that holds userjobs.py
    assert refused.returncode == 2, refused
    said = refused.stderr.strip()
    assert said.startswith("error: cannot import 'userjobs' for 'userjobs:KIND'"), said
    assert "No module named 'userjobs'" in said
    assert "PYTHONPATH" in said and "not in the working directory" in said
    done = submit(f"{folder}:{ROOT}")  # as the error says
    assert done.returncode == 0, done
    assert deployment.client.get(done.stdout.strip()).kind == "userjobs:KIND"


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_kind_whose_own_import_is_missing_names_that_import(
    deployment: Deployment, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "brokenjobs.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    script = deployment.script([{"content": "done"}])
    said = cli.inline("submit", "brokenjobs:KIND", "--model", script, ok=False).error(
        2, "cannot import 'brokenjobs'", "'brokenjobs' imports 'no_such_dependency_xyz'"
    )
    assert "which is not installed" in said and "PYTHONPATH" not in said
