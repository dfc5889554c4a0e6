"""The expected tests of `tickwork eval` (tickwork/eval/checks.py) run as the session's own
test runs did: every check got the working copy's src/ first on PYTHONPATH, even a
session whose environment had installed the project and whose tests ran without it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import Head

from tickwork.eval.checks import run_expected_tests

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SHOW = 'echo "path=${PYTHONPATH:-unset}"'


def _head(project: Path, result: dict[str, Any]) -> Head:
    config = {"source": {"kind": "workspace", "path": str(project)}, "test_command": "true"}
    return Head(
        id="sess-1",
        kind="repair",
        created_at=T0,
        updated_at=T0,
        model="scripted",
        config=config,
        result={"files_changed": [], **result},
    )


@pytest.mark.parametrize(
    ("environment", "seen"),
    [
        ({"setup": "auto", "key": "k", "status": "ready"}, "path=unset"),
        ({"setup": "auto", "key": None, "status": "skipped"}, "/workspace/src"),
        (None, "/workspace/src"),
    ],
)
def test_expected_tests_get_the_src_path_only_where_the_session_had_no_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: Any, seen: str
) -> None:
    monkeypatch.setenv("TICKWORK_SANDBOX", "none")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    project = tmp_path / "project"
    (project / "src" / "pkg").mkdir(parents=True)
    (project / "src" / "pkg" / "__init__.py").write_text("")
    result = {} if environment is None else {"environment": environment}
    checked = run_expected_tests(None, _head(project, result), SHOW, timeout_s=30)  # type: ignore[arg-type]
    assert checked.verdict == "pass", checked.detail
    assert seen in checked.detail
