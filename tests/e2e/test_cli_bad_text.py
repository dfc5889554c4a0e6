"""Issue 24: text the database cannot hold, and a script nested too deep, are one clear line.

A NUL byte or bytes that are not UTF-8 in a goal (or any text given at submit) are named
as such before anything is written, on SQLite and on Postgres alike, instead of a database
error that blamed TICKWORK_DATABASE_URL. A scripted model file nested thousands deep is
one line naming the file, not a RecursionError's traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import ROOT, Cli, Deployment, Result

EXAMPLE = str(ROOT / "examples" / "buggy_calc")


def _run(cli: Cli, *argv: str | bytes) -> Result:
    """`python -m tickwork` with arguments that may be bytes (not UTF-8), as a shell passes."""
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", *argv],
        cwd=ROOT,
        env=cli.env,
        capture_output=True,
        timeout=120,
    )
    out, err = (b.decode("utf-8", "replace") for b in (done.stdout, done.stderr))
    return Result(tuple(str(a) for a in argv), done.returncode, out, err)


def _repair(deployment: Deployment, *extra: str | bytes) -> list[str | bytes]:
    script = deployment.script([{"content": "done"}])
    return [
        "submit",
        "repair",
        "--workspace",
        EXAMPLE,
        "--test-cmd",
        "pytest",
        "--model",
        script,
        *extra,
    ]


def test_a_goal_with_a_nul_byte_or_bytes_not_utf8_is_named_and_nothing_is_stored(
    deployment: Deployment, cli: Cli
) -> None:
    not_utf8 = _run(cli, *_repair(deployment, "--goal", b"fix \xff the sum"))
    not_utf8.error(2, "the goal is not valid UTF-8")
    nul = cli.inline(*_repair(deployment, "--input", '{"goal": "fix\\u0000it"}'), ok=False)
    nul.error(2, "the goal contains a NUL byte")
    nested = '{"goal": "g", "notes": {"deep": ["ok", "a\\u0000b"]}}'
    cli.inline(*_repair(deployment, "--input", nested), ok=False).error(
        2, "the notes.deep[1] contains a NUL byte"
    )
    by = _run(cli, *_repair(deployment, "--goal", "g", "--as", b"ann\xe9"))
    by.error(2, "the submitter's name is not valid UTF-8")
    for result in (not_utf8, nul, by):
        assert "TICKWORK_DATABASE_URL" not in result.stderr
    assert cli.inline("ls", "--json").json() == []


def test_a_scripted_model_file_nested_too_deep_is_one_line(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    args = '{"content": "x", "tool_calls": [{"name": "a", "arguments": ' + '{"a": ' * 200
    deep_args = tmp_path / "deep_args.json"
    deep_args.write_text("[" + args + "1" + "}" * 200 + "}]}]")
    for script in (deep, deep_args):
        argv = ["submit", "repair", "--workspace", EXAMPLE, "--test-cmd", "pytest"]
        argv += ["--model", f"scripted:{script}"]
        _run(cli, *argv, "--goal", "g").error(2, f"the scripted model file {script} nests deeper")
    assert cli.inline("ls", "--json").json() == []
