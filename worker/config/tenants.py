"""Tenants' quotas, from `TICKWORK_TENANTS_FILE`, read again when the file changes.

The file is one JSON object, tenant name -> quotas, every field optional:

    {
      "team-a": {"max_in_flight": 20, "max_queued": 2000, "max_usd_per_day": 50,
                 "max_stored_bytes": 5000000000, "weight": 2},
      "*": {"max_in_flight": 5, "max_queued": 100}
    }

`"*"` holds the quotas of every tenant the file does not name; without it (or without a
file) such a tenant has no limits and weight 1. A tenant exists as soon as a token names
it: the file only sets limits. `Tenants` reads the file again when its mtime, size or inode
changes, so quotas change without a restart; a file that cannot be read or parsed then
keeps the quotas in use (logged), as the API's tokens file does.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from tickwork.fsm.errors import ConfigurationError, InvalidInput
from tickwork.fsm.tenants import OTHER, UNLIMITED, Quotas, check_tenant

__all__ = [
    "ANY_TENANT",
    "OTHER",
    "UNLIMITED",
    "Quotas",
    "TenantSettings",
    "TenantTable",
    "Tenants",
    "parse_tenants",
    "read_tenants_file",
]

log = logging.getLogger("tickwork.tenants")
#: the key of the quotas for every tenant the file does not name
ANY_TENANT = "*"


@dataclass(frozen=True)
class TenantTable:
    """The quotas of the tenants a file names, and of every other tenant."""

    listed: Mapping[str, Quotas] = field(default_factory=dict)
    others: Quotas = UNLIMITED

    def quotas(self, tenant: str) -> Quotas:
        return self.listed.get(tenant, self.others)

    @property
    def names(self) -> frozenset[str]:
        """The tenants the file names (not `*`)."""
        return frozenset(self.listed)


class TenantSettings(BaseSettings):
    """Where the tenants' quotas are (`Settings.section(TenantSettings)`)."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: the tenants file (JSON: tenant -> quotas, `"*"` for the others); unset: no quotas
    tenants_file: Path | None = None
    #: metrics label at most this many tenants the file does not name; the rest: "other"
    tenant_label_cap: int = Field(default=20, ge=0)


def parse_tenants(data: object, *, where: str = "the tenants file") -> TenantTable:
    """The table a tenants file's JSON value holds; ConfigurationError names the bad key."""
    if not isinstance(data, dict):
        raise ConfigurationError(
            f'{where} must hold an object: tenant -> {{"max_in_flight": N, ...}}'
        )
    listed: dict[str, Quotas] = {}
    others = UNLIMITED
    for name, spec in data.items():
        if name != ANY_TENANT:
            try:
                check_tenant(name, what="tenant")
            except InvalidInput as exc:
                raise ConfigurationError(f"{where}: {exc}") from None
        try:
            quotas = Quotas.model_validate(spec)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(p) for p in (name, *first["loc"]))
            raise ConfigurationError(f"{where}: {key}: {_said(first)}") from None
        if name == ANY_TENANT:
            others = quotas
        else:
            listed[name] = quotas
    return TenantTable(listed, others)


def _said(error: Mapping[str, Any]) -> str:
    """Why a tenant's quotas were refused, with what the file gave, or the quotas there are
    where a key is none of them (a typo such as `max_inflight`)."""
    quotas = ", ".join(Quotas.model_fields)
    if not error["loc"]:
        return f"give an object of the tenant's quotas ({quotas}), got {error['input']!r}"
    if error["type"] == "extra_forbidden":
        return f"{error['msg']} (a tenant's quotas are {quotas})"
    return f"{error['msg']}, got {error['input']!r}"


def read_tenants_file(path: Path) -> TenantTable:
    where = f"TICKWORK_TENANTS_FILE {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"{where} is not JSON: {exc}") from None
    return parse_tenants(data, where=where)


class Tenants:
    """The tenants' quotas in force: the file's, read again whenever it changes.

    Built with a path, a missing or broken file is a ConfigurationError at once (a typo
    should stop a start); later, a file that cannot be taken keeps the last good table.
    """

    def __init__(self, path: Path | None = None, *, table: TenantTable | None = None) -> None:
        self._path = path
        self._table = table if table is not None else TenantTable()
        self._seen = self._signature()
        self._lock = threading.Lock()
        if path is not None and table is None:
            self._table = read_tenants_file(path)

    @classmethod
    def of(cls, settings: TenantSettings) -> Tenants:
        return cls(settings.tenants_file)

    @property
    def path(self) -> Path | None:
        return self._path

    def _signature(self) -> tuple[int, int, int] | None:
        if self._path is None:
            return None
        try:
            st = self._path.stat()
        except OSError:
            return (-1, -1, -1)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def table(self) -> TenantTable:
        """The table in force, after reading the file again if it changed."""
        seen = self._signature()
        if seen == self._seen or self._path is None:
            return self._table
        with self._lock:
            if seen != self._seen:
                self._seen = seen
                try:
                    self._table = read_tenants_file(self._path)
                except ConfigurationError as exc:
                    log.error(
                        "the tenants file changed but was not taken (%s); the quotas in use stay",
                        exc,
                    )
                else:
                    log.info("tenants read again from %s", self._path)
        return self._table

    def quotas(self, tenant: str) -> Quotas:
        """`tenant`'s quotas: its entry, else the file's `*`, else no limits."""
        return self.table().quotas(tenant)
