"""Every command's exit code follows one rule (README, "Errors and exit codes"): 2 when the
command line is wrong (usage, a malformed or unknown value, a file it names that cannot be
read or written), 1 when it is right but what it names is not there or may not be done
now. A not-found is 1 whatever the command; the same mistake is the same code everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import TEST_KIND, Cli, Deployment

SID = "{sid}"  #: stands for a session that exists, has no calls, no patch and no bundle
NOWHERE = "/no/such/folder"

NOT_FOUND = [
    (("show", "nope"), "no session 'nope'"),
    (("watch", "nope"), "no session 'nope'"),
    (("fork", "nope", "--from-step", "0"), "no session 'nope'"),
    (("patch", "nope"), "no session 'nope'"),
    (("patch", "nope", "--bundle", "{tmp}/x.bundle"), "no session 'nope'"),
    (("approve", "nope", "s1c0"), "no session 'nope'"),
    (("edit", "nope", "s1c0", "--args", "{}"), "no session 'nope'"),
    (("reject", "nope", "s1c0"), "no session 'nope'"),
    (("provide-output", "nope", "s1c0", "--output", "x"), "no session 'nope'"),
    (("cancel", "nope"), "no session 'nope'"),
    (("show", SID, "--tenant", "team-b"), "no session"),  # another tenant's is no session
    (("approve", SID, "s9c9"), "no call 's9c9'"),
    (("edit", SID, "s9c9", "--args", "{}"), "no call 's9c9'"),
    (("reject", SID, "s9c9"), "no call 's9c9'"),
    (("provide-output", SID, "s9c9", "--output", "x"), "no call 's9c9'"),
    (("patch", SID), "has no patch"),
    (("patch", SID, "--bundle", "{tmp}/x.bundle"), "has no bundle"),
    (("dlq", "show", "98765"), "no dead letter"),
    (("dlq", "fork", "98765", "--from-step", "0"), "no dead letter"),
    (("dlq", "resolve", "98765", "--reason", "x"), "no dead letter"),
    (("dlq", "dismiss", "98765", "--reason", "x"), "no dead letter"),
    (("eval", "show", "nosuchrun"), "no run 'nosuchrun'"),
    (("eval", "show", "last"), "no runs are stored"),
    (("eval", "compare", "nosuchrun", "last"), "no run"),
    (("eval", "chart", "nosuchrun", "--png", "{tmp}/x.png"), "no run 'nosuchrun'"),
    (("env", "show", "abcd"), "no environment"),
    (("env", "rm", "abcd"), "no environment"),
    # an id in use may not be taken now (with --server: the API's 409), not a malformed one
    (("fork", SID, "--from-step", "0", "--id", SID), "exists already"),
]

BAD_INPUT = [
    (("show",), "Missing argument"),
    # longer than any id (the API's 422): it was "no session" quoting the whole text, exit 1
    (("show", "x" * 100_000), "100,000 characters long, not a session id"),
    (("approve", "x" * 65, "s1c0"), "not a session id"),
    # empty: a script's unset variable, not an id nobody made (it was "no session ''", exit 1)
    (("cancel", ""), "the session id is empty"),
    # the options before the id is looked up, as with --server: it was "no session", exit 1
    (("cancel", "nope", "--as", ""), "--as needs a name: who is cancelling"),
    (("approve", "nope", "s1c0", "--as", ""), "--as needs a name: who is deciding"),
    (("reject", "nope", "s1c0", "--as", " "), "--as needs a name: who is deciding"),
    (("fork", "nope", "--from-step", "0", "--as", ""), "--as needs a name: who is forking"),
    (("dlq", "dismiss", "98765", "--reason", "x", "--as", ""), "who is dismissing"),
    (("show", " "), "the session id is empty"),
    (("frobnicate",), "frobnicate"),
    (("dlq", "frobnicate"), "frobnicate"),
    (("ls", "--status", "sleeping"), "--status"),
    # a kind no session has and none here is named: a typo, as a wrong --status is
    (("ls", "--kind", "nosuchkind"), "unknown job kind 'nosuchkind'"),
    (("ls", "--archived", "--kind", "nosuchkind"), "unknown job kind 'nosuchkind'"),
    (("dlq", "ls", "--kind", "nosuchkind"), "unknown job kind 'nosuchkind'"),
    # with a tenant the export read no other tenant's rows, so nothing checked the kind: it
    # wrote no rows and exited 0 where the API refuses (422 unknown_kind)
    (("dlq", "export", "--kind", "nosuchkind"), "unknown job kind 'nosuchkind'"),
    (("dlq", "export", "--tenant", "x", "--kind", "nosuchkind"), "unknown job kind 'nosuchkind'"),
    # past what SQLite's integers hold: an OverflowError traceback before
    (("ls", "--limit", "99999999999999999999"), "--limit"),
    (("dlq", "ls", "--limit", "99999999999999999999"), "--limit"),
    (("show", SID, "--tenant", "Not A Tenant"), "is not a tenant name"),
    (("fork", SID, "--from-step", "9"), "has no steps; fork it from step 0"),
    (("fork", SID, "--from-step", "0", "--tool-output", "s1c0=x"), "is no call of session"),
    (("submit", "nosuchkind"), "unknown job kind"),
    (("submit", "no_such_module_xyz:KIND"), "PYTHONPATH"),
    (("submit", TEST_KIND, "--input", f"@{NOWHERE}/input.json"), "cannot read"),
    (("env", "show", "zz"), "not an environment key"),
    (("eval", "show", "bad id"), "not a run id"),
    (("eval", "run", f"{NOWHERE}/tasks.jsonl", "--model", "scripted:x"), "cannot read"),
    (("eval", "chart", "last", "--png", f"{NOWHERE}/x.png"), "does not exist"),
    (("dlq", "export", "--output", f"{NOWHERE}/x.csv"), "does not exist"),
    (("dlq", "export", "--output", "{tmp}"), "is a folder"),
    (("patch", SID, "--bundle", f"{NOWHERE}/x.bundle"), "does not exist"),
    (("db", "downgrade", "nosuchrev", "--yes"), "nosuchrev"),
    # malformed, as with --server (the API's 422): not "no call" nor a stale decision
    (("approve", SID, "s1c0", "--fingerprint", "ABC"), "not a call's whole fingerprint"),
    (("reject", SID, "s1c0", "--fingerprint", "A" * 64), "64 hex digits, lower-case"),
    # a typo, not a pool: refused before Celery tries to start it
    (("worker", "-c", "99999999999999999999"), "less than or equal to 10000"),
]


def _ids(cases: list[tuple[tuple[str, ...], str]]) -> list[str]:
    return [" ".join(a[:80] for a in argv).replace("{sid}", "SID") for argv, _ in cases]


@pytest.fixture
def session(deployment: Deployment) -> str:
    return deployment.client.submit(TEST_KIND, {}, model=deployment.script([])).id


def _argv(argv: tuple[str, ...], sid: str, tmp: Path) -> list[str]:
    return [a.replace("{sid}", sid).replace("{tmp}", str(tmp)) for a in argv]


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
@pytest.mark.parametrize(("argv", "says"), NOT_FOUND, ids=_ids(NOT_FOUND))
def test_what_is_not_there_exits_1(
    cli: Cli, session: str, tmp_path: Path, argv: tuple[str, ...], says: str
) -> None:
    cli.inline(*_argv(argv, session, tmp_path), ok=False).error(1, says)


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
@pytest.mark.parametrize(("argv", "says"), BAD_INPUT, ids=_ids(BAD_INPUT))
def test_a_wrong_command_line_exits_2(
    cli: Cli, session: str, tmp_path: Path, argv: tuple[str, ...], says: str
) -> None:
    cli.inline(*_argv(argv, session, tmp_path), ok=False).error(2, says)


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--max-steps", "0", "invalid budget: --max-steps must be a positive finite number, got 0"),
        (
            "--deadline",
            "0",
            "invalid budget: --deadline must be a positive finite number of seconds, got 0.0",
        ),
        (
            "--max-cost-usd",
            "-1",
            "invalid budget: --max-cost-usd must be 0 (no cost budget) or a positive finite "
            "number, got -1.0",
        ),
    ],
)
def test_a_budget_out_of_range_is_named_once_in_plain_words(
    cli: Cli, session: str, option: str, value: str, says: str
) -> None:
    line = cli.inline("fork", session, "--from-step", "0", option, value, ok=False).error(2, says)
    assert "Value error" not in line


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_file_that_is_not_utf8_is_named_as_what_it_was_given_for(
    cli: Cli, tmp_path: Path
) -> None:
    binary = tmp_path / "input.json"
    binary.write_bytes(b"\xff\xfe{}")
    line = cli.inline("submit", TEST_KIND, "--input", f"@{binary}", ok=False).error(
        2, f"--input: {binary} is not UTF-8 text", "save it as UTF-8"
    )
    assert "output" not in line  # it said "give the output as UTF-8 text" of an input


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_kind_filter_is_refused_only_for_a_kind_that_nothing_has(cli: Cli, session: str) -> None:
    """`ls --kind nosuch` said "no sessions match" and exited 0, where `--status nosuch`
    exits 2: a kind no session has and none here is named is a typo. A kind this process
    has, or one a stored session has (a kind other hosts run), lists nothing as it did."""
    line = cli.inline("ls", "--kind", "repiar", ok=False).error(2, "unknown job kind 'repiar'")
    assert "known: repair" in line
    assert "no sessions match" in cli.inline("ls", "--kind", "repair").stdout
    stored = cli.inline("ls", "--kind", TEST_KIND, "--status", "failed")
    assert "no sessions match" in stored.stdout
    assert "no dead letters match" in cli.inline("dlq", "ls", "--kind", TEST_KIND).stdout
    # a module:attr kind that imports as one, of which no session is stored
    assert "no sessions match" in cli.inline("ls", "--kind", "tests.jobs:TREE").stdout
    cli.inline("ls", "--kind", "tests.jobs:CHUNK_BYTES", ok=False).error(2, "unknown job kind")


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_repository_that_does_not_answer_exits_1_and_a_ref_it_lacks_2(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    """`submit repair --repo https://github.com/... --ref nosuchref` with no network exited
    2, as bad input, on git's "Could not resolve host": the URL and the ref may be right.
    A host that does not resolve or answer is a service that did not answer (1); a ref the
    repository, once reached, lacks is bad input (2)."""
    from tickwork import testing

    repair = (
        "submit",
        "repair",
        "--test-cmd",
        "true",
        "--model",
        deployment.script([{"content": "done"}]),
    )
    for url, says, then in (
        # a host that does not resolve may be misspelt: the line says to check it
        ("https://nosuchhost.invalid/x.git", "Could not resolve host", "check the URL's host, or "),
        ("https://127.0.0.1:1/x.git", "Failed to connect", ""),
    ):
        line = cli.inline(*repair, "--repo", url, "--ref", "nosuchref", ok=False).error(1, says)
        assert f"; {then}try again once it answers" in line
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("X = 1\n")
    testing.git(repo, "init", "-q", "-b", "main")
    testing.git(repo, "add", "calc.py")
    testing.git(repo, "commit", "-qm", "one")
    cli.inline(*repair, "--repo", f"file://{repo}", "--ref", "nosuchref", ok=False).error(
        2, "has no branch, tag or commit 'nosuchref'"
    )


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_project_directory_given_as_repo_names_workspace_once(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    """It said "give a project directory as --workspace (`--workspace`)": the field and its
    flag, both as the flag once the command line had put its flags in."""
    (tmp_path / "calc.py").write_text("X = 1\n")
    model = deployment.script([{"content": "done"}])
    submit = ("submit", "repair", "--test-cmd", "true", "--model", model)
    line = cli.inline(*submit, "--repo", str(tmp_path), ok=False).error(
        2, "no git repository: give a project directory as --workspace"
    )
    assert line.count("--workspace") == 1 and "`" not in line, line
