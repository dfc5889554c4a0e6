"""tickwork.store.owners: a lease owner's name, written and read in one place."""

from __future__ import annotations

from tickwork.store.owners import key_of, of_nodes, signed


def test_an_owner_names_its_sign_and_its_node() -> None:
    owner = signed("host-a:41:7", 12)
    assert key_of(owner) == 12 and key_of("host-a:41:7") is None and key_of(None) is None
    assert of_nodes(owner, {"host-b", "host-a"}) and of_nodes("host-a", {"host-a"})
    assert not of_nodes(owner, {"host"}) and not of_nodes(None, {"host-a"})
