"""Over the HTTP API a repair job's local paths must lie under TICKWORK_WORKSPACE_ROOTS; the
CLI and the Python client are trusted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tickwork.worker.files import sources

from tests.api.conftest import Stack


def _repair(stack: Stack, **source: str) -> dict[str, object]:
    return {
        "kind": "repair",
        "input": {**source, "test_command": "true"},
        "model": stack.deployment.script([{"content": "done"}]),
    }


def test_local_paths_outside_the_roots_are_422(stack: Stack, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("A = 1\n")
    settings = stack.deployment.settings
    http = stack.http("sam")

    refused = http.post("/api/v1/sessions", json=_repair(stack, workspace=str(project)))
    assert refused.status_code == 422, refused.text
    assert "does not accept local paths" in refused.json()["message"]
    assert "TICKWORK_WORKSPACE_ROOTS" in refused.json()["message"]
    as_repo = http.post("/api/v1/sessions", json=_repair(stack, repo=f"file://{project}"))
    assert as_repo.status_code == 422 and "local paths" in as_repo.json()["message"]

    settings.workspace_roots = [tmp_path / "elsewhere"]
    try:
        outside = http.post("/api/v1/sessions", json=_repair(stack, workspace="/etc"))
        assert outside.status_code == 422, outside.text
        assert "outside the directories this server accepts" in outside.json()["message"]
        settings.workspace_roots = [tmp_path]
        accepted = http.post("/api/v1/sessions", json=_repair(stack, workspace=str(project)))
        assert accepted.status_code == 201, accepted.text
    finally:
        settings.workspace_roots = []
    # the same directory from the trusted Python client needs no root
    head = stack.deployment.client.submit(
        "repair",
        {"workspace": str(project), "test_command": "true"},
        model=stack.deployment.script([{"content": "done"}]),
    )
    assert head.config["source"]["path"] == str(project.resolve())


def test_a_repository_url_into_the_servers_own_network_is_422(stack: Stack) -> None:
    """No request into the server's network: loopback, private, link-local (cloud metadata)
    and unspecified addresses are refused before git runs, and no session is made."""
    http = stack.http("sam")
    before = len(stack.deployment.client.sessions(limit=500))
    for url, address in [
        ("https://127.0.0.1/x.git", "127.0.0.1"),
        ("https://localhost:8443/x.git", "127.0.0.1"),
        ("https://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("https://10.1.2.3/x.git", "10.1.2.3"),
        ("https://[::1]/x.git", "::1"),
        ("https://0.0.0.0/x.git", "0.0.0.0"),
        # IPv6 addresses that carry a private IPv4 one: NAT64, 6to4, mapped
        ("https://[64:ff9b::7f00:1]/x.git", "64:ff9b::7f00:1"),
        ("https://[2002:a00:1::]/x.git", "2002:a00:1::"),
        ("https://[::ffff:10.0.0.1]/x.git", "::ffff:10.0.0.1"),
    ]:
        refused = http.post("/api/v1/sessions", json=_repair(stack, repo=url))
        assert refused.status_code == 422, (url, refused.text)
        message = refused.json()["message"]
        assert f"resolves to {address}" in message and "not a public address" in message, message
    not_https = http.post("/api/v1/sessions", json=_repair(stack, repo="git://example.com/x"))
    assert not_https.status_code == 422 and "https:// URLs only" in not_https.json()["message"]
    assert len(stack.deployment.client.sessions(limit=500)) == before


def test_a_repository_whose_host_does_not_resolve_is_502_not_bad_input(stack: Stack) -> None:
    """The URL may be right and the network down: the client's request was not at fault."""
    http = stack.http("sam")
    unresolved = http.post(
        "/api/v1/sessions", json=_repair(stack, repo="https://nosuchhost.invalid/x.git")
    )
    assert unresolved.status_code == 502, unresolved.text
    assert unresolved.json()["code"] == "source_unreachable"
    assert "does not resolve" in unresolved.json()["message"]


def test_an_untrusted_clone_is_capped_in_size(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository under the roots is copied (never hardlinked) and its clone is capped."""
    project = tmp_path / "big"
    project.mkdir()
    (project / "blob").write_bytes(os.urandom(300_000))
    for args in (["init", "-q"], ["add", "blob"], ["commit", "-qm", "big"]):
        subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=project, check=True
        )
    settings = stack.deployment.settings
    settings.workspace_roots = [tmp_path]
    monkeypatch.setattr(sources, "MAX_CLONE_BYTES", 50_000)
    try:
        http = stack.http("sam")
        refused = http.post("/api/v1/sessions", json=_repair(stack, repo=str(project)))
        assert refused.status_code == 422, refused.text
        assert "capped at 50,000 bytes" in refused.json()["message"]
        monkeypatch.setattr(sources, "MAX_CLONE_BYTES", 10_000_000)
        accepted = http.post("/api/v1/sessions", json=_repair(stack, repo=str(project)))
        assert accepted.status_code == 201, accepted.text
    finally:
        settings.workspace_roots = []


def test_an_untrusted_repository_whose_files_would_fill_the_disk_is_422_before_checkout(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose tree names one blob of zeros at many paths is a pack of a few KB (the
    clone's cap holds) and a checkout of any size: the server checked it out whole before
    its files were counted, onto its own disk. It is refused from the tree's sizes, with
    nothing checked out, naming the cap; one under the cap is taken."""
    project = tmp_path / "bomb"
    project.mkdir()
    (project / "zeros").write_bytes(bytes(1_000_000))
    for i in range(20):
        os.link(project / "zeros", project / f"copy{i}")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "zeros"]):
        subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=project, check=True
        )
    checkouts: list[tuple[str, ...]] = []
    real_git = sources._git

    def spy(*args: str, **kw: object) -> str:
        if "checkout" in args:
            checkouts.append(args)
        return real_git(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sources, "_git", spy)
    settings = stack.deployment.settings
    settings.workspace_roots = [tmp_path]
    monkeypatch.setattr(sources, "MAX_CHECKOUT_BYTES", 5_000_000)
    try:
        http = stack.http("sam")
        refused = http.post("/api/v1/sessions", json=_repair(stack, repo=str(project)))
        assert refused.status_code == 422, refused.text
        message = refused.json()["message"]
        assert "21,000,000 bytes" in message and "5,000,000" in message, message
        assert checkouts == []
        monkeypatch.setattr(sources, "MAX_CHECKOUT_BYTES", 50_000_000)
        accepted = http.post("/api/v1/sessions", json=_repair(stack, repo=str(project)))
        assert accepted.status_code == 201, accepted.text
    finally:
        settings.workspace_roots = []


def test_an_untrusted_repository_picks_none_of_the_servers_git_filters(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's git configuration defines a filter (`git lfs install` writes
    `filter.lfs.*`, whose smudge fetches from any `lfs.url` the repository's `.lfsconfig`
    names, the server's loopback too); a repository's `.gitattributes` chose it for its
    files, and the server's checkout ran it. An untrusted checkout runs no filter: its files
    are the commit's as committed."""
    marker = tmp_path / "smudged"
    config = tmp_path / "gitconfig"
    smudge = tmp_path / "smudge.sh"
    smudge.write_text(f"#!/bin/sh\necho ran >> {marker}\nexec cat\n")
    smudge.chmod(0o755)
    config.write_text(f'[filter "lfs"]\n\tsmudge = {smudge}\n')
    project = tmp_path / "filtered"
    project.mkdir()
    (project / ".gitattributes").write_text("* filter=lfs\n")
    (project / "a.py").write_text("A = 1\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "lfs"]):
        subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=project, check=True
        )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    settings = stack.deployment.settings
    settings.workspace_roots = [tmp_path]
    try:
        accepted = stack.http("sam").post(
            "/api/v1/sessions", json=_repair(stack, repo=str(project))
        )
        assert accepted.status_code == 201, accepted.text
    finally:
        settings.workspace_roots = []
    assert not marker.exists()
    head = stack.deployment.client.get(accepted.json()["id"])
    assert stack.deployment.client.files.read(head, "a.py") == b"A = 1\n"


def test_a_relative_local_path_is_422_naming_the_absolute_one_to_give(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`"workspace": "project"` over the API was read against the server process's own
    folder, which its client cannot know: taken where that folder happened to lie under the
    roots, and refused as outside them elsewhere. A local path over the API is absolute."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "a.py").write_text("A = 1\n")
    monkeypatch.chdir(tmp_path)
    settings = stack.deployment.settings
    settings.workspace_roots = [tmp_path]
    try:
        http = stack.http("sam")
        for source in ({"workspace": "project"}, {"repo": "project"}):
            refused = http.post("/api/v1/sessions", json=_repair(stack, **source))
            assert refused.status_code == 422, refused.text
            message = refused.json()["message"]
            assert "'project'" in message and "absolute path" in message, message
            assert str(tmp_path) in message, message
    finally:
        settings.workspace_roots = []


def _commit(repo: Path, name: str, text: str) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    for args in (["init", "-q"], ["add", name], ["commit", "-qm", name]):
        subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True
        )


@pytest.mark.parametrize(
    "how",
    [
        "gitfile",
        "linked .git",
        "linked objects",
        "linked loose objects",
        "alternates",
        "quoted",
        "octal-quoted",
        "config include",
        "config includeIf",
        "config nested include",
        "bare beside .git",
        "linked config",
        "linked ref",
        "linked packed-refs",
        "linked ref of a worktree's repository",
    ],
)
def test_a_repository_under_the_roots_whose_git_data_lies_outside_is_422(
    stack: Stack, tmp_path: Path, how: str
) -> None:
    """git reads a `.git` file's `gitdir:`, a linked `.git` or `objects` and alternates: a
    folder under the roots pointing at a repository elsewhere would have cloned that one,
    a repository the server reads but the roots do not hold; and it reads the files its
    config includes, which would have read a file outside the roots as configuration."""
    secret = tmp_path / "secret"
    _commit(secret, "secret.txt", "TOP SECRET\n")
    roots = tmp_path / "roots"
    inside = roots / "evil"
    if how == "gitfile":
        inside.mkdir(parents=True)
        (inside / ".git").write_text(f"gitdir: {secret / '.git'}\n")
    elif how == "linked .git":
        inside.mkdir(parents=True)
        (inside / ".git").symlink_to(secret / ".git")
    elif how.startswith("config"):  # git reads an included file as its configuration
        _commit(inside, "a.py", "A = 1\n")
        section = '[includeIf "gitdir:/"]' if how == "config includeIf" else "[include]"
        target = secret / "secret.txt"
        if how == "config nested include":  # a file under the roots that includes it
            (inside / ".git" / "more.cfg").write_text(f"[include]\n\tpath = {target}\n")
            target = inside / ".git" / "more.cfg"
        with (inside / ".git" / "config").open("a") as config:
            config.write(f"{section}\n\tpath = {target}\n")
    elif how == "linked config":  # git reads the file a link points to as configuration
        _commit(inside, "a.py", "A = 1\n")
        config = inside / ".git" / "config"
        (secret / "config").write_text(config.read_text())
        config.unlink()
        config.symlink_to(secret / "config")
    elif how == "linked ref of a worktree's repository":  # its refs are the common dir's
        _commit(roots / "main", "a.py", "A = 1\n")
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(inside)],
            cwd=roots / "main",
            check=True,
        )
        branch = next(p for p in (secret / ".git" / "refs" / "heads").iterdir())
        (roots / "main" / ".git" / "refs" / "heads" / "elsewhere").symlink_to(branch)
    elif how.startswith("linked ") and "ref" in how:  # git reads a ref where it points
        _commit(inside, "a.py", "A = 1\n")
        secret_git = secret / ".git"
        if how == "linked ref":
            branch = next(p for p in (secret_git / "refs" / "heads").iterdir())
            (inside / ".git" / "refs" / "heads" / "elsewhere").symlink_to(branch)
        else:
            (secret_git / "packed-refs").write_text("# pack-refs with: peeled\n")
            (inside / ".git" / "packed-refs").symlink_to(secret_git / "packed-refs")
    elif how == "bare beside .git":  # git skips a .git that is no repository
        inside.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "--bare", str(inside)], check=True)
        (inside / ".git").mkdir()
        (inside / "objects" / "info" / "alternates").write_text(f"{secret / '.git' / 'objects'}\n")
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=secret, capture_output=True, text=True, check=True
        ).stdout.strip()
        (inside / "refs" / "heads" / "stolen").write_text(head + "\n")
    else:
        _commit(inside, "a.py", "A = 1\n")
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=secret, capture_output=True, text=True, check=True
        ).stdout.strip()
        objects = inside / ".git" / "objects"
        if how == "linked objects":
            subprocess.run(["rm", "-rf", str(objects)], check=True)
            objects.symlink_to(secret / ".git" / "objects")
        elif how == "linked loose objects":  # the objects folder is its own; its files not
            for found in (secret / ".git" / "objects").glob("??/*"):
                link = objects / found.parent.name / found.name
                link.parent.mkdir(exist_ok=True)
                if not link.exists():
                    link.symlink_to(found)
        else:
            elsewhere = str(secret / ".git" / "objects")
            if how == "quoted":  # git C-unquotes a line in double quotes
                elsewhere = f'"{elsewhere}"'
            elif how == "octal-quoted":  # its slashes as \057: no `/` for a check to see
                elsewhere = '"' + elsewhere.replace("/", "\\057") + '"'
            (objects / "info" / "alternates").write_text(elsewhere + "\n")
        (inside / ".git" / "refs" / "heads" / "stolen").write_text(head + "\n")
    settings = stack.deployment.settings
    settings.workspace_roots = [roots]
    try:
        http = stack.http("sam")
        before = len(stack.deployment.client.sessions())
        ref = (
            "stolen"
            if "objects" in how or "quoted" in how or how in ("alternates", "bare beside .git")
            else "HEAD"
        )
        refused = http.post(
            "/api/v1/sessions", json=_repair(stack, repo=f"file://{inside}", ref=ref)
        )
        assert refused.status_code == 422, refused.text
        message = refused.json()["message"]
        assert "outside the directories this server accepts" in message, message
        assert str(secret) in message
        assert len(stack.deployment.client.sessions()) == before  # nothing was made
    finally:
        settings.workspace_roots = []


@pytest.mark.parametrize("where", ["objects", "inside objects"])
def test_a_repository_with_a_looping_link_in_its_git_data_is_422_not_500(
    stack: Stack, tmp_path: Path, where: str
) -> None:
    """A link that points at itself cannot be resolved (Python raises RuntimeError): the
    submit is refused naming the repository, not answered 500."""
    roots = tmp_path / "roots"
    inside = roots / "loops"
    _commit(inside, "a.py", "A = 1\n")
    objects = inside / ".git" / "objects"
    if where == "objects":
        subprocess.run(["rm", "-rf", str(objects)], check=True)
        objects.symlink_to(objects)
    else:
        # not two hex digits: git keeps its objects in such folders (a commit's may be "aa")
        (objects / "loop-a").symlink_to(objects / "loop-b")
        (objects / "loop-b").symlink_to(objects / "loop-a")
    settings = stack.deployment.settings
    settings.workspace_roots = [roots]
    try:
        refused = stack.http("sam").post(
            "/api/v1/sessions", json=_repair(stack, repo=f"file://{inside}")
        )
        assert refused.status_code == 422, refused.text
        message = refused.json()["message"]
        assert "its git data cannot be read" in message and "loops" in message, message
    finally:
        settings.workspace_roots = []


@pytest.mark.parametrize("field", ["workspace", "repo"])
def test_a_submitted_path_whose_link_loops_is_422_not_500(
    stack: Stack, tmp_path: Path, field: str
) -> None:
    roots = tmp_path / "roots"
    roots.mkdir()
    (roots / "loop").symlink_to(roots / "loop")
    settings = stack.deployment.settings
    settings.workspace_roots = [roots]
    try:
        refused = stack.http("sam").post(
            "/api/v1/sessions", json=_repair(stack, **{field: str(roots / "loop" / "x")})
        )
        assert refused.status_code == 422, refused.text
        assert "a link in it loops" in refused.json()["message"]
    finally:
        settings.workspace_roots = []
