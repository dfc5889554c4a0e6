"""The remote client's dead-letter calls take a tenant filter, as its sessions call does:
an admin token's narrows to one tenant; another token may name only its own (403 else).
The server is the tenancy tests' (sessions written through the store, no worker)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.api.test_tenancy import TOKEN, World, world  # noqa: F401 (the fixture)
from tests.e2e.conftest import Cli
from tickwork.remote import Client, RemoteError


def _failed(world: World, *who: str) -> set[str]:  # noqa: F811
    return {i for w in who for i in world.ids[w] if "failed" in i}


def test_an_admins_dead_letter_calls_take_a_tenant_filter(world: World) -> None:  # noqa: F811
    with Client(world.url, token=TOKEN["root"]) as root:
        assert {d.session_id for d in root.dead_letters()} == _failed(world, "ann", "amy", "bob")
        for tenant, who in (("team-a", ("ann", "amy")), ("team-b", ("bob",))):
            letters = root.dead_letters(tenant=tenant)
            assert {d.session_id for d in letters} == _failed(world, *who), tenant
            assert {d.tenant for d in letters} == {tenant}
            assert root.dead_letter_stats(tenant=tenant)["total"] == len(_failed(world, *who))
            rows = csv.DictReader(
                io.StringIO(root.export_dead_letters(format="csv", tenant=tenant).decode())
            )
            assert {r["session_id"] for r in rows} == _failed(world, *who), tenant
        assert root.dead_letters(tenant="team-nobody") == []
        assert root.dead_letter_stats(tenant="team-nobody")["total"] == 0


def test_another_token_names_only_its_own_tenant(world: World) -> None:  # noqa: F811
    with Client(world.url, token=TOKEN["bob"]) as bob:
        assert {d.session_id for d in bob.dead_letters(tenant="team-b")} == _failed(world, "bob")
        for call in (bob.dead_letters, bob.dead_letter_stats, bob.export_dead_letters):
            with pytest.raises(RemoteError) as refused:
                call(tenant="team-a")
            assert refused.value.status == 403 and "admin" in refused.value.message
    with Client(world.url, token=TOKEN["amy"]) as amy:  # own-only: still only her own
        assert {d.session_id for d in amy.dead_letters(tenant="team-a")} == _failed(world, "amy")


def test_the_cli_with_server_sends_tenant_to_the_dead_letter_calls(
    world: World,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = {"TICKWORK_SERVER": world.url, "TICKWORK_TOKEN": TOKEN["root"], "HOME": str(tmp_path)}
    cli = Cli(env, tmp_path)
    listed = cli.inline("dlq", "ls", "--tenant", "team-b", "--json").json()
    assert {d["session_id"] for d in listed} == _failed(world, "bob")
    every = cli.inline("dlq", "ls", "--tenant", "*", "--json").json()
    assert {d["session_id"] for d in every} == _failed(world, "ann", "amy", "bob")
    stats = cli.inline("dlq", "stats", "--tenant", "team-a", "--json").json()
    assert stats["total"] == 2
    exported = cli.inline("dlq", "export", "--tenant", "team-b").stdout
    assert all(i in exported for i in _failed(world, "bob"))
    assert not any(i in exported for i in _failed(world, "ann", "amy"))
    refused = cli.inline("dlq", "ls", "--tenant", "team-a", ok=False, TICKWORK_TOKEN=TOKEN["bob"])
    refused.error(1, "admin")


def test_ls_of_another_tenant_is_refused_not_answered_empty(
    world: World,  # noqa: F811
    tmp_path: Path,
) -> None:
    with Client(world.url, token=TOKEN["bob"]) as bob:
        assert {s.id for s in bob.sessions(tenant="team-b")} == set(world.ids["bob"])
        with pytest.raises(RemoteError) as refused:
            bob.sessions(tenant="team-a")
        assert refused.value.status == 403 and "admin" in refused.value.message
    env = {"TICKWORK_SERVER": world.url, "TICKWORK_TOKEN": TOKEN["bob"], "HOME": str(tmp_path)}
    cli = Cli(env, tmp_path)
    # "no sessions match" read as "team-a has none"
    refused = cli.inline("ls", "--tenant", "team-a", ok=False)
    refused.error(1, "bob reads tenant team-b's")
    assert "leave --tenant out" in refused.stderr, refused  # the API's `tenant` is its flag
    every = cli.inline("ls", "--tenant", "*", "--json").json()
    assert {s["id"] for s in every} == set(world.ids["bob"])
