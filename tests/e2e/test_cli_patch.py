"""A repair job from a git repository through the CLI: `show` names its source, goal and test
command; `patch` prints the result against the source and `--apply` applies it."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Cli, Deployment
from tickwork.testing import git

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def _repo(root: Path) -> str:
    root.mkdir()
    (root / "calc.py").write_text(BUGGY)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "calc.py")
    git(root, "commit", "-qm", "buggy")
    return git(root, "rev-parse", "HEAD")


def test_a_repair_from_a_repository_gives_a_patch_to_apply(
    deployment: Deployment, cli: Cli
) -> None:
    repo = deployment.tmp / "repo"
    commit = _repo(repo)
    script = deployment.script(
        [
            {
                "content": "fix",
                "tool_calls": [
                    {"name": "apply_patch", "arguments": {"patch": _fix_patch()}},
                ],
            },
            {"content": "fixed the sign"},
        ]
    )
    test_cmd = "python3 -c 'from calc import add; assert add(2, 3) == 5'"
    head = cli(
        "submit", "repair", "--repo", f"file://{repo}", "--ref", "main",
        "--test-cmd", test_cmd, "--goal", "make add add", "--model", script, "--json",
    ).json()  # fmt: skip
    sid = head["id"]
    assert head["config"]["source"]["commit"] == commit

    with deployment.worker():
        assert deployment.client.wait(sid, timeout=60).status.value == "waiting_approval"
        shown = cli("show", sid).stdout
        assert f"file://{repo} at main ({commit[:12]})" in shown
        assert "make add add" in shown and "from calc import add" in shown
        # nothing changed yet: one line on stderr, and a non-zero exit
        cli("patch", sid, ok=False).error(1, sid, "has no patch", "no files yet")
        deployment.client.approve(sid, "s1c0", approver="alice")
        done = deployment.client.wait(sid, timeout=60)
    assert done.status.value == "completed", done.error_message
    assert done.result["tests"]["passed"] is True

    printed = cli("patch", sid).stdout
    assert printed == done.result["patch"]
    assert "--- a/calc.py\n+++ b/calc.py\n" in printed and "+    return a + b\n" in printed
    assert (repo / "calc.py").read_text() == BUGGY
    applied = cli("patch", sid, "--apply", str(repo))
    assert "applied" in applied.stdout
    assert (repo / "calc.py").read_text() == FIXED
    again = cli("patch", sid, "--apply", str(repo), ok=False)
    again.error(1, "applied to", "already")  # the command is right: a refusal, not usage
    (repo / "calc.py").write_text("def add(a, b):\n    return a * b\n")  # changed since
    other = cli("patch", sid, "--apply", str(repo), ok=False)
    other.error(1, "does not apply")


def _fix_patch() -> str:
    return (
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n"
    )


def test_a_repository_sessions_files_come_as_a_branch_in_a_bundle(
    deployment: Deployment, cli: Cli
) -> None:
    repo = deployment.tmp / "repo"
    commit = _repo(repo)
    write = {"name": "run_command", "arguments": {"command": "printf 'NEW = 1\\n' >> new.py"}}
    script = deployment.script([{"content": "add", "tool_calls": [write]}, {"content": "done"}])
    sid = cli(
        "submit", "repair", "--repo", str(repo), "--test-cmd", "true", "--model", script, "--json"
    ).json()["id"]
    with deployment.worker():
        assert deployment.client.wait(sid, timeout=60).status.value == "completed"
    out = deployment.tmp / "result.bundle"
    assert f"tickwork/{sid}" in cli("patch", sid, "--bundle", str(out)).stdout
    git(repo, "fetch", "-q", str(out), f"tickwork/{sid}:result")
    assert git(repo, "rev-parse", "result~1") == commit
    assert git(repo, "show", "result:new.py") == "NEW = 1"
    assert git(repo, "show", "result:calc.py") == BUGGY.rstrip("\n")


def test_a_patch_whose_test_run_left_a_binary_file_applies_without_it(
    deployment: Deployment, cli: Cli
) -> None:
    """The session's test run writes a binary file into its files (a snapshot, a report):
    the patch names it `Binary files ... differ`, which `git apply` refuses, so `--apply`
    applied nothing of a repaired session ("cannot apply binary patch to 'shot.bin' without
    full index line"). coverage.py's `.coverage` is no longer among the session's files."""
    project = deployment.tmp / "project"
    project.mkdir()
    (project / "calc.py").write_text(BUGGY)
    script = deployment.script(
        [
            {
                "content": "fix",
                "tool_calls": [{"name": "apply_patch", "arguments": {"patch": _fix_patch()}}],
            },
            {"content": "check", "tool_calls": [{"name": "run_tests", "arguments": {}}]},
            {"content": "fixed the sign"},
        ]
    )
    written = 'open(".coverage", "wb").write(bytes(range(256))); '
    written += 'open("shot.bin", "wb").write(bytes(range(256)))'
    test_cmd = f"python3 -c 'from calc import add; assert add(2, 3) == 5; {written}'"
    sid = cli(
        "submit", "repair", "--workspace", str(project), "--test-cmd", test_cmd,
        "--model", script, "--json",
    ).json()["id"]  # fmt: skip
    with deployment.worker():
        deployment.client.wait(sid, timeout=60)
        deployment.client.approve(sid, "s1c0", approver="alice")
        done = deployment.client.wait(sid, timeout=60)
    assert done.result["outcome"] == "repaired", done.result["tests"]["output"]
    assert "Binary files /dev/null and b/shot.bin differ" in done.result["patch"]
    assert ".coverage" not in done.result["patch"]

    applied = cli("patch", sid, "--apply", str(project))
    assert "applied the patch" in applied.stdout and "shot.bin" in applied.stdout
    assert (project / "calc.py").read_text() == FIXED
    assert not (project / "shot.bin").exists()


def test_a_bundle_never_writes_through_a_link_of_the_source(
    deployment: Deployment, cli: Cli
) -> None:
    """The source's commit holds links pointing out of it (`out` to a folder, `victim.txt`
    to a file of the machine); a session's files are never links, so the session made a
    folder `out` and a file `victim.txt` of its own. `tickwork patch --bundle` checks that
    commit out and wrote the session's files over it, through the links: onto whatever
    file of the machine making the bundle they named (its ~/.bashrc). The bundle's branch
    holds the session's folder and file instead, and nothing outside is touched."""
    outside = deployment.tmp / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me\n")
    repo = deployment.tmp / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    (repo / "out").symlink_to(outside)
    (repo / "victim.txt").symlink_to(outside / "victim.txt")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links out")
    command = "mkdir out && printf 'PWNED\\n' >> out/planted && printf 'PWNED\\n' >> victim.txt"
    write = {"name": "run_command", "arguments": {"command": command}}
    script = deployment.script([{"content": "add", "tool_calls": [write]}, {"content": "done"}])
    sid = cli(
        "submit", "repair", "--repo", str(repo), "--test-cmd", "true", "--model", script, "--json"
    ).json()["id"]
    with deployment.worker():
        done = deployment.client.wait(sid, timeout=60)
    assert done.status.value == "completed", done.error_message
    out = deployment.tmp / "result.bundle"
    cli("patch", sid, "--bundle", str(out))
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "keep me\n"
    git(repo, "fetch", "-q", str(out), f"tickwork/{sid}:result")
    assert git(repo, "show", "result:out/planted") == "PWNED"
    assert git(repo, "show", "result:victim.txt") == "PWNED"
    assert git(repo, "cat-file", "-t", "result:out") == "tree"


def test_a_bundle_holds_a_file_where_the_source_had_a_folder_and_the_reverse(
    deployment: Deployment, cli: Cli
) -> None:
    """The source's commit has a folder `x/` and a file `y`; the session removed the folder
    and wrote a file `x`, removed the file and made a folder `y`. `tickwork patch --bundle`
    stopped with IsADirectoryError writing `x`; the bundle's branch holds the session's file
    and folder."""
    repo = deployment.tmp / "repo"
    repo.mkdir()
    (repo / "x").mkdir()
    (repo / "x" / "a.txt").write_text("in x\n")
    (repo / "y").write_text("a file\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a folder and a file")
    command = "rm -r x y && printf 'FILE\\n' > x && mkdir y && printf 'IN\\n' > y/inner"
    write = {"name": "run_command", "arguments": {"command": command}}
    script = deployment.script([{"content": "swap", "tool_calls": [write]}, {"content": "done"}])
    sid = cli(
        "submit", "repair", "--repo", str(repo), "--test-cmd", "true", "--model", script, "--json"
    ).json()["id"]
    with deployment.worker():
        assert deployment.client.wait(sid, timeout=60).status.value == "waiting_approval"
        deployment.client.approve(sid, "s1c0", approver="alice")  # rm needs an approval
        done = deployment.client.wait(sid, timeout=60)
    assert done.status.value == "completed", done.error_message
    out = deployment.tmp / "result.bundle"
    assert f"tickwork/{sid}" in cli("patch", sid, "--bundle", str(out)).stdout
    git(repo, "fetch", "-q", str(out), f"tickwork/{sid}:result")
    assert git(repo, "show", "result:x") == "FILE"
    assert git(repo, "show", "result:y/inner") == "IN"
    assert git(repo, "ls-tree", "--name-only", "-r", "result") == "x\ny/inner"
