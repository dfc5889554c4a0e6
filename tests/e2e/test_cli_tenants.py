"""The local CLI works in one tenant: `default` unless given `--tenant`; listings take '*'
for every tenant; `show --tenant` answers another tenant's session as no session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli, Deployment, call
from tests.tasks.conftest import TEST_KIND


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_submit_ls_and_show_per_tenant(cli: Cli, deployment: Deployment) -> None:
    script = deployment.script([{"content": "done"}])
    imports = {"TICKWORK_IMPORTS": json.dumps([TEST_KIND])}
    for session_id, tenant in (("in-a", "team-a"), ("in-default", None)):
        given = ["--tenant", tenant] if tenant else []
        cli.inline("submit", TEST_KIND, "--model", script, "--id", session_id, *given, **imports)

    def listed(*args: str) -> set[str]:
        return {h["id"] for h in cli.inline("ls", "--json", *args).json()}

    assert listed() == {"in-default"}
    plain = cli.inline("ls", ok=False)
    assert plain.code == 0 and "in-default" in plain.stdout and "in-a" not in plain.stdout
    # unasked, the default tenant's only: the other tenants' are counted, on stderr
    assert "1 more of other tenants match: --tenant '*' lists them too" in plain.stderr
    assert "more of other tenants" not in cli.inline("ls", "--tenant", "team-a").stderr
    everyone = cli.inline("ls", "--tenant", "*").stdout
    assert "TENANT" in everyone  # a listing of several tenants says whose each one is
    rows = [line.split() for line in everyone.splitlines() if line.strip().startswith("in-")]
    assert [row[-1] for row in rows] == [
        "default",
        "team-a",
    ]
    assert "TENANT" not in plain.stdout
    assert "tenant        team-a" in cli.inline("show", "in-a").stdout
    assert listed("--tenant", "team-a") == {"in-a"}
    assert listed("--tenant", "*") == {"in-a", "in-default"}
    assert listed("--tenant", "team-b") == set()
    assert cli.inline("show", "in-a", "--json", "--tenant", "team-a").json()["head"]["tenant"] == (
        "team-a"
    )
    cli.inline("show", "in-a", "--tenant", "default", ok=False).error(1, "no session 'in-a'")
    cli.inline("ls", "--tenant", "Team A", ok=False).error(2, "is not a tenant name")


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_show_with_a_tenant_names_no_other_tenant_s_id_by_its_start(
    cli: Cli, deployment: Deployment
) -> None:
    """`show --tenant` answers another tenant's session as no session; a start of an id
    named that session's whole id ("no session 'c0ffee1a...'") and an ambiguous start
    listed other tenants' ids. The start is looked up among the tenant's sessions only."""
    script = deployment.script([{"content": "done"}])
    imports = {"TICKWORK_IMPORTS": json.dumps([TEST_KIND])}
    theirs = ["c0ffee1a" + "0" * 24, "c0ffee1b" + "1" * 24]
    ours = "c0ffee2c" + "2" * 24
    for session_id, tenant in ((theirs[0], "team-b"), (theirs[1], "team-b"), (ours, "team-a")):
        given = ["--model", script, "--id", session_id, "--tenant", tenant]
        cli.inline("submit", TEST_KIND, *given, **imports)
    for start in ("c0ffee1a", "c0ffee1"):
        said = cli.inline("show", start, "--tenant", "team-a", ok=False).error(
            1, f"no session '{start}'"
        )
        assert not any(their_id in said for their_id in theirs)
    # the tenant's own session is named by a start that other tenants' ids share
    shown = cli.inline("show", "c0ffee", "--tenant", "team-a", "--json").json()
    assert shown["head"]["id"] == ours
    # without --tenant, every session is looked among, as before
    cli.inline("show", "c0ffee", ok=False).error(2, "is the start of 3 session ids")
    assert cli.inline("show", "c0ffee1a", "--json").json()["head"]["id"] == theirs[0]


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_dead_letter_listings_say_other_tenants_have_some(cli: Cli, deployment: Deployment) -> None:
    """`dlq ls`, `dlq stats` and `dlq export` without `--tenant` are the default tenant's;
    an operator whose tenants' dead letters are all elsewhere read "no dead letters match"
    as none at all. They say, on stderr, how many of other tenants match, as `ls` does."""
    two_steps = [call("echo", text="1")]
    replies = [{"content": "look", "tool_calls": two_steps}, {"content": "done"}]
    with deployment.worker():
        ids = [
            deployment.submit(replies, budgets={"max_steps": 1}, tenant=tenant)
            for tenant in ("team-a", "team-b", "team-a")
        ]
        for sid in ids:
            assert deployment.client.wait(sid, timeout=60).status.value == "failed"

    listed = cli.inline("dlq", "ls", ok=False)
    assert listed.code == 0 and "no dead letters match" in listed.stdout
    assert "3 more of other tenants match: --tenant '*' lists them too" in listed.stderr
    counted = cli.inline("dlq", "stats", "--by", "code", ok=False)
    assert counted.code == 0 and "0 dead letters" in counted.stdout
    assert "3 more of other tenants match" in counted.stderr
    exported = cli.inline("dlq", "export", "--format", "csv", ok=False)
    assert exported.code == 0 and "3 more of other tenants match" in exported.stderr
    # asked for a tenant, or for every one, or for JSON: no note
    for asked in (("--tenant", "team-a"), ("--tenant", "*"), ("--json",)):
        assert "other tenants" not in cli.inline("dlq", "ls", *asked).stderr
        assert "other tenants" not in cli.inline("dlq", "stats", *asked).stderr
    assert "other tenants" not in cli.inline("dlq", "export", "--tenant", "*").stderr


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_archived_listing_says_other_tenants_have_some(
    cli: Cli, deployment: Deployment, tmp_path: Path
) -> None:
    """`ls --archived` without `--tenant` is the default tenant's: it said "no archived
    sessions match" while other tenants' were archived, and now says how many, as `ls`."""
    with deployment.worker():
        sid = deployment.submit([{"content": "done"}], tenant="team-a")
        assert deployment.client.wait(sid, timeout=60).status.value == "completed"
    env = {"TICKWORK_RETENTION_ARCHIVE_URL": (tmp_path / "archive").as_uri()}
    assert (
        cli.inline("gc", "--json", TICKWORK_RETENTION_COMPLETED_S="0", **env).json()["archived"]
        == 1
    )

    listed = cli.inline("ls", "--archived", ok=False, **env)
    assert listed.code == 0 and "no archived sessions match" in listed.stdout
    assert "1 more of other tenants match: --tenant '*' lists them too" in listed.stderr
    assert "other tenants" not in cli.inline("ls", "--archived", "--tenant", "*", **env).stderr


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_a_submit_into_a_tenant_no_quota_holds_says_so(
    cli: Cli, deployment: Deployment, tmp_path: Path
) -> None:
    """A tenant the tenants file does not name, with no `*` quotas, is held by no quota: as
    documented, but a mistyped `--tenant tema-a` got that silently. The submit says so."""
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"team-a": {"max_queued": 5}, "team-b": {}}))
    script = deployment.script([{"content": "done"}])
    env = {"TICKWORK_TENANTS_FILE": str(tenants), "TICKWORK_IMPORTS": json.dumps([TEST_KIND])}

    def submitted(*given: str) -> str:
        done = cli.inline("submit", TEST_KIND, "--model", script, *given, ok=False, **env)
        assert done.code == 0 and done.stdout.strip(), done.stderr
        return done.stderr

    said = submitted("--tenant", "tema-a")
    assert "tenant tema-a is not named in TICKWORK_TENANTS_FILE" in said
    assert "(it names team-a, team-b)" in said and "no quota holds session" in said
    # a named tenant, the default one unasked, or a file whose "*" sets quotas: nothing said
    assert "not named" not in submitted("--tenant", "team-b")
    assert "not named" not in submitted()
    tenants.write_text(json.dumps({"team-a": {}, "*": {"max_queued": 50}}))
    assert "not named" not in submitted("--tenant", "tema-a")
