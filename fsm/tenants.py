"""Tenant names, and a tenant's quotas: what every session, token and metric label
belongs to, and what one tenant may use (`tickwork.worker.config.tenants` reads them from
the tenants file).

A tenant name is short and plain ([a-z0-9_-], 1 to 64 characters), so it is safe in a
metric label, a log line, a URL's query and a file of quotas alike.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field
from tickwork.fsm.errors import InvalidInput

#: the tenant of the embedded mode, the local CLI and every session stored before tenants
DEFAULT_TENANT = "default"
#: the longest tenant name (the column is String(64))
MAX_TENANT = 64
TENANT_PATTERN = r"^[a-z0-9_-]{1,64}$"
_NAME = re.compile(TENANT_PATTERN)
#: the metric label of the tenants past the label cap (`TICKWORK_TENANT_LABEL_CAP`)
OTHER = "other"
#: the metric label of a tick dropped before its claim (no session, so no tenant)
NO_TENANT = "none"
#: names no tenant takes: a label that stands for many tenants, or for none
RESERVED = frozenset({OTHER, NO_TENANT})


def check_tenant(name: object, *, what: str = "tenant") -> str:
    """`name` if it is a tenant name; else InvalidInput naming `what` and the rule."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = repr(name)[:80]
        raise InvalidInput(
            f"{what} {shown} is not a tenant name: use 1 to {MAX_TENANT} characters of "
            "a-z, 0-9, '_' and '-' (e.g. 'default', 'team-a')"
        )
    if name in RESERVED:
        raise InvalidInput(
            f"{what} {name!r} is reserved: metrics label the tenants past the label cap "
            f"{OTHER!r} and ticks without a session {NO_TENANT!r}; choose another name"
        )
    return name


class Quotas(BaseModel):
    """One tenant's limits; None: no limit."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    #: sessions running at once (admitted, not finished); more wait as `queued`
    max_in_flight: int | None = Field(default=None, ge=1)
    #: sessions waiting as `queued`; a submit past it is refused (429)
    max_queued: int | None = Field(default=None, ge=0)
    #: dollars spent by the tenant's sessions in the current UTC day; a submit past it: 429,
    #: and a running session of a spent day stops BUDGET_COST before its next model call
    max_usd_per_day: float | None = Field(default=None, ge=0)
    #: bytes stored for the tenant's sessions (`docs/OPERATIONS.md`); a submit past it: 429
    max_stored_bytes: int | None = Field(default=None, ge=0)
    #: the tenant's share in fair admission, against the other tenants' weights
    weight: float = Field(default=1.0, gt=0)


#: the quotas of a tenant nobody configured: no limits, weight 1
UNLIMITED = Quotas()
