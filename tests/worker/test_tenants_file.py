"""The tenants file: quotas per tenant, `*` for the others, read again when it changes, a
broken file refused at start and kept out later (the last good quotas stay)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from tickwork.fsm.errors import ConfigurationError
from tickwork.worker.config.tenants import (
    UNLIMITED,
    Quotas,
    Tenants,
    TenantSettings,
    parse_tenants,
)


def write(path: Path, data: object) -> None:
    """Write and move the mtime on, so a rewrite within the clock's tick is seen."""
    text = data if isinstance(data, str) else json.dumps(data)
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_quotas_by_tenant_with_a_default_for_the_others(tmp_path: Path) -> None:
    path = tmp_path / "tenants.json"
    write(
        path,
        {
            "team-a": {"max_in_flight": 20, "max_usd_per_day": 50, "weight": 2},
            "*": {"max_queued": 100},
        },
    )
    tenants = Tenants(path)
    assert tenants.quotas("team-a") == Quotas(max_in_flight=20, max_usd_per_day=50.0, weight=2.0)
    assert tenants.quotas("team-b") == Quotas(max_queued=100)
    assert tenants.table().names == frozenset({"team-a"})
    assert Tenants().quotas("anyone") == UNLIMITED  # no file: no limits, weight 1
    assert UNLIMITED.weight == 1.0 and UNLIMITED.max_in_flight is None


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"Team A": {}}, "'Team A' is not a tenant name"),
        ({"x" * 65: {}}, "is not a tenant name"),
        ({"other": {}}, "'other' is reserved"),
        ({"none": {}}, "'none' is reserved"),
        ({"team-a": {"max_inflight": 3}}, "team-a.max_inflight: Extra inputs"),
        ({"team-a": {"max_in_flight": 0}}, "team-a.max_in_flight: Input should be greater"),
        ({"team-a": {"max_in_flight": True}}, "team-a.max_in_flight"),
        ({"team-a": {"max_usd_per_day": -1}}, "team-a.max_usd_per_day"),
        ({"team-a": {"weight": 0}}, "team-a.weight"),
        ({"*": {"max_stored_bytes": "lots"}}, r"\*.max_stored_bytes"),
        ({"team-a": 5}, "team-a: give an object of the tenant's quotas \\(max_in_flight, "),
        (["team-a"], "must hold an object"),
    ],
)
def test_a_bad_file_names_the_bad_key(data: object, names: str) -> None:
    with pytest.raises(ConfigurationError, match=names):
        parse_tenants(data)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (
            {"team-a": {"max_inflight": 3}},
            "team-a.max_inflight: Extra inputs are not permitted (a tenant's quotas are "
            "max_in_flight, max_queued, max_usd_per_day, max_stored_bytes, weight)",
        ),
        ({"team-a": {"max_usd_per_day": "10$"}}, "valid number, got '10$'"),
        ({"team-a": {"max_stored_bytes": 2e10}}, "valid integer, got 20000000000.0"),
        ({"team-a": {"max_in_flight": 0}}, "greater than or equal to 1, got 0"),
    ],
)
def test_a_bad_quota_says_what_the_file_gave_or_which_quotas_there_are(
    data: object, said: str
) -> None:
    """An operator read `max_stored_bytes: Input should be a valid integer` for a size they
    wrote as 2e10, and `Extra inputs are not permitted` for a misspelt quota, with nothing
    saying what was read or what the quotas are called."""
    with pytest.raises(ConfigurationError) as refused:
        parse_tenants(data)
    assert str(refused.value).endswith(said), str(refused.value)


def test_a_missing_or_broken_file_stops_a_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read TICKWORK_TENANTS_FILE"):
        Tenants(tmp_path / "absent.json")
    path = tmp_path / "tenants.json"
    write(path, "{not json")
    with pytest.raises(ConfigurationError, match="is not JSON"):
        Tenants(path)


def test_the_file_is_read_again_when_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tenants.json"
    write(path, {"team-a": {"max_in_flight": 2}})
    tenants = Tenants(path)
    assert tenants.quotas("team-a").max_in_flight == 2
    write(path, {"team-a": {"max_in_flight": 5, "weight": 3}})
    assert tenants.quotas("team-a") == Quotas(max_in_flight=5, weight=3.0)
    with caplog.at_level(logging.ERROR, logger="tickwork.tenants"):
        write(path, {"team-a": {"max_in_flight": -1}})  # a broken edit keeps the last good
        assert tenants.quotas("team-a") == Quotas(max_in_flight=5, weight=3.0)
    assert "team-a.max_in_flight" in caplog.text and "the quotas in use stay" in caplog.text
    path.unlink()  # gone: the last good quotas stay too
    assert tenants.quotas("team-a").max_in_flight == 5
    write(path, {"team-a": {"max_queued": 7}})  # fixed: taken
    assert tenants.quotas("team-a") == Quotas(max_queued=7)


def test_the_settings_name_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "tenants.json"
    write(path, {"ops": {"max_queued": 1}})
    monkeypatch.setenv("TICKWORK_TENANTS_FILE", str(path))
    tenants = Tenants.of(TenantSettings())
    assert tenants.path == path and tenants.quotas("ops").max_queued == 1
