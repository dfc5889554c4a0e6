"""The local CLI works in one tenant: `default` unless given `--tenant`; listings take '*'
for every tenant; `show --tenant` answers another tenant's session as no session."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Cli, Deployment
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
