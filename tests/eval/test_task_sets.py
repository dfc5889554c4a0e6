"""Task sets: the shipped demo set, and every bad line refused with its line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tickwork.fsm.errors import InvalidInput

from tickwork.eval.tasks import (
    TaskSetError,
    changed_lines,
    parse_tasks,
    patch_matches,
    read_tasks,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "eval" / "tasks.jsonl"


def test_the_demo_set_reads_with_its_sources_and_scripts_resolved() -> None:
    tasks = read_tasks(DEMO)
    assert [t.id for t in tasks.tasks] == [
        "calc-average",
        "slugify-case",
        "wordcount-spaces",
        "clamp-high",
    ]
    calc = tasks.tasks[0]
    assert calc.source == str(ROOT / "examples" / "buggy_calc") and not calc.is_repo
    assert calc.script == str(ROOT / "examples" / "eval" / "scripts" / "calc.json")
    assert calc.repair_input() == {
        "workspace": calc.source,
        "test_command": "python3 -m unittest -q",
        "goal": "average() returns the wrong mean; make the tests pass.",
        "setup": "none",
    }
    assert tasks.tasks[1].expected_patch and "+    return" in tasks.tasks[1].expected_patch
    assert len(tasks.digest) == 64


def test_the_digest_covers_the_tasks_not_the_files_spacing(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    one = {"id": "a", "source": "p", "test_command": "true", "goal": "g"}
    spaced = "\n# a comment\n" + json.dumps(dict(reversed(one.items())), indent=None) + "\n\n"
    first = parse_tasks(json.dumps(one), where="a.jsonl", base=tmp_path)
    second = parse_tasks(spaced, where="b.jsonl", base=tmp_path)
    assert first.digest == second.digest
    other = parse_tasks(json.dumps({**one, "goal": "h"}), where="a.jsonl", base=tmp_path)
    assert other.digest != first.digest


def test_git_sources_go_as_repo_and_ref(tmp_path: Path) -> None:
    line = {"id": "r", "source": "https://example.invalid/x.git", "ref": "v1", "test_command": "t"}
    (task,) = parse_tasks(json.dumps(line), where="t", base=tmp_path).tasks
    assert task.repair_input() == {
        "repo": "https://example.invalid/x.git",
        "ref": "v1",
        "test_command": "t",
    }
    local = {"id": "l", "source": "repo", "ref": "main", "test_command": "t", "setup": ["a", "b"]}
    (task,) = parse_tasks(json.dumps(local), where="t", base=tmp_path).tasks
    assert task.repair_input()["repo"] == str(tmp_path / "repo")
    assert task.repair_input()["setup"] == ["a", "b"]


GOOD = {"id": "t1", "source": "proj", "test_command": "python3 -m unittest -q"}


@pytest.mark.parametrize(
    ("line", "fragments"),
    [
        ("{not json", ["t.jsonl:2:", "not valid JSON"]),
        ("[1, 2]", ["t.jsonl:2:", "a task is a JSON object, got list"]),
        ({**GOOD, "tests": "x"}, ["t.jsonl:2:", "unknown field(s) 'tests'", "test_command"]),
        ({"source": "proj", "test_command": "t"}, ["t.jsonl:2: field `id`: is required"]),
        ({"id": "x", "test_command": "t"}, ["field `source`: is required"]),
        ({"id": "x", "source": "proj"}, ["field `test_command`: is required"]),
        ({**GOOD, "id": 7}, ["field `id`: must be text, got int"]),
        ({**GOOD, "id": "a b/c"}, ["field `id`:", "may only hold letters"]),
        ({**GOOD, "id": "t0"}, ["field `id`: 't0' is already the id of line 1"]),
        ({**GOOD, "source": "missing"}, ["field `source`: 'missing' is not a directory"]),
        ({**GOOD, "ref": "--upload-pack=x"}, ["field `ref`:", "not a branch, tag or commit"]),
        ({**GOOD, "setup": 3}, ["field `setup`:", '"auto", "none"']),
        ({**GOOD, "setup": ["make", ""]}, ["field `setup`: command 2 must be a non-empty"]),
        ({**GOOD, "goal": "a\x00b"}, ["field `goal`:", "NUL"]),
        ({**GOOD, "goal": "g" * 20_001}, ["field `goal`: is longer than 20,000 characters"]),
        ({**GOOD, "test_command": "  "}, ["field `test_command`: is empty"]),
        ({**GOOD, "expected_patch": "just words"}, ["field `expected_patch`: is not a unified"]),
        ({**GOOD, "expected_tests": ["t"]}, ["field `expected_tests`: must be text, got list"]),
        ({**GOOD, "script": "gone.json"}, ["field `script`: 'gone.json' is not a file"]),
    ],
)
def test_a_bad_line_is_refused_naming_its_line_and_field(
    tmp_path: Path, line: object, fragments: list[str]
) -> None:
    (tmp_path / "proj").mkdir()
    first = json.dumps({**GOOD, "id": "t0"})
    text = line if isinstance(line, str) else json.dumps(line)
    with pytest.raises(TaskSetError) as refused:
        parse_tasks(f"{first}\n{text}\n", where="t.jsonl", base=tmp_path)
    assert isinstance(refused.value, InvalidInput)  # the CLI's exit code 2
    for fragment in fragments:
        assert fragment in refused.value.message, refused.value.message


def test_an_empty_or_unreadable_task_set_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n# nothing here\n")
    with pytest.raises(TaskSetError, match="no tasks"):
        read_tasks(empty)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "a"}\n{"goal": "caf\xe9"}\n')
    with pytest.raises(TaskSetError, match=r"latin.jsonl:2: not UTF-8"):
        read_tasks(latin)
    with pytest.raises(InvalidInput, match="cannot read the task set"):
        read_tasks(tmp_path / "absent.jsonl")


def _set_of(folder: Path, **task: object) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text(json.dumps({"id": "t", "test_command": "true", **task}) + "\n")
    return path


def test_a_task_sets_local_paths_stay_in_its_folder_unless_told(tmp_path: Path) -> None:
    """A task set is somebody's text: a source of ~/.ssh would be packed into a session and
    shown to its model. Local sources and scripts must lie beside it."""
    secrets = tmp_path / "home" / ".ssh"
    secrets.mkdir(parents=True)
    (secrets / "id_ed25519").write_text("PRIVATE KEY")
    evals = tmp_path / "downloads"
    (evals / "proj").mkdir(parents=True)
    (evals / "linked").symlink_to(secrets)
    outside_script = tmp_path / "home" / "notes.json"
    outside_script.write_text("[]")
    refused = [
        ({"source": str(secrets)}, "source"),
        ({"source": "../home/.ssh"}, "source"),
        ({"source": "linked"}, "source"),  # a link beside it, to a folder elsewhere
        ({"source": "../home", "ref": "main"}, "source"),  # a local repository
        ({"source": f"file://{secrets}"}, "source"),
        ({"source": "proj", "script": str(outside_script)}, "script"),
    ]
    for task, field in refused:
        path = _set_of(evals, **task)
        with pytest.raises(TaskSetError) as error:
            read_tasks(path)
        message = error.value.message
        assert f"tasks.jsonl:1: field `{field}`" in message, message
        assert "--any-path" in message, message
        mine = read_tasks(path, any_path=True)  # the operator's own task set
        assert mine.tasks[0].id == "t"
    assert read_tasks(_set_of(evals, source="proj")).tasks[0].source == str(evals / "proj")


def test_a_task_set_in_a_git_work_tree_may_name_its_projects_across_it(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "projects" / "calc").mkdir(parents=True)
    (tmp_path / "evals").mkdir()
    path = _set_of(tmp_path / "evals", source="../projects/calc")
    assert read_tasks(path).tasks[0].source == str(tmp_path / "projects" / "calc")


def test_a_patch_matches_the_expected_one_by_the_lines_it_changes() -> None:
    expected = (
        "--- a/slug.py\n+++ b/slug.py\n@@ -8,2 +8,2 @@\n     words = 1\n"
        '-    return "-".join(words)\n+    return "-".join(words).lower()\n'
    )
    made = (
        "diff --git a/slug.py b/slug.py\n--- a/slug.py\n+++ b/slug.py\n@@ -6,4 +6,4 @@\n"
        " def slugify(title):\n     doc\n     words = 1\n"
        '-    return "-".join(words)\n+    return "-".join(words).lower()   \n'
    )
    assert changed_lines(made) == changed_lines(expected)
    assert patch_matches(made, expected)
    assert not patch_matches(made.replace(".lower()", ".upper()"), expected)
    assert not patch_matches(made.replace("slug.py", "other.py"), expected)
    assert not patch_matches("", expected) and not patch_matches(None, expected)


@pytest.mark.parametrize("argv", [["shwo", "last"], ["export"], ["lst", "--json"]])
def test_a_mistyped_eval_command_is_named_with_the_commands_there_are(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tickwork eval ARGS` runs a task set unless ARGS start with a command: a mistyped
    command was taken for a task set, and said `Got unexpected extra argument(s) (last)` or
    `cannot read the task set .../export`, naming neither the typo nor the commands."""
    from tickwork.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["eval", *argv])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: no command '{argv[0]}' of `tickwork eval`"), line
    for name in ("run", "ls", "show", "compare", "chart", "TASKS.jsonl"):
        assert name in line, line


def test_a_task_set_file_of_any_name_still_runs_without_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task set named like a word (no suffix) is still read when the file is there."""
    from tickwork.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mytasks").write_text("{bad\n")
    with pytest.raises(SystemExit) as exited:
        main(["eval", "mytasks", "--model", "scripted"])
    assert exited.value.code == 2
    assert "mytasks:1: not valid JSON" in capsys.readouterr().err
