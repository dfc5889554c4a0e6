"""Settings of `tickwork serve`, from `TICKWORK_*` environment variables.

Tokens are given per person with their roles and tenant, inline or in a file (the same
JSON shape):

    TICKWORK_API_TOKENS='{"s3cret-alice": {"name": "alice", "roles": ["approver"],
                          "tenant": "team-a", "own_only": false}}'
    TICKWORK_API_TOKENS_FILE=/etc/tickwork/tokens.json

A key may also be `sha256:<hex digest of the token>`, so the file need not hold the token.
The file is read again when it changes (its mtime or size), so a revoked token stops
working without a restart.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tickwork.fsm.errors import ConfigurationError, InvalidInput
from tickwork.fsm.people import MAX_NAME, check_name
from tickwork.fsm.tenants import DEFAULT_TENANT, TENANT_PATTERN, check_tenant


class Role(StrEnum):
    SUBMITTER = "submitter"  #: submits sessions
    APPROVER = "approver"  #: decides on calls waiting for a person, cancels sessions
    OPERATOR = "operator"  #: cancels and forks sessions, analyses and forks dead letters
    #: holds every role in every tenant: reads and acts across tenants, submits into any
    ADMIN = "admin"


class TokenSpec(BaseModel):
    """Who holds a token and what they may do."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME)
    roles: tuple[Role, ...] = ()
    #: the tenant whose sessions the token sees and submits into
    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN)
    #: sees only the sessions it submitted (and their forks it made), not its whole tenant's
    own_only: bool = False

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a token needs the name of the person who holds it")
        try:
            return check_name(value, what="the token's name")
        except InvalidInput as exc:
            raise ValueError(exc.message) from None

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        # the names metrics keep for many tenants or none, refused as a submit's are
        try:
            return check_tenant(value)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None


class ApiSettings(BaseSettings):
    """What `tickwork serve` reads besides the deployment's settings."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    #: token (or `sha256:<hex>`) -> {"name": ..., "roles": [...]}
    api_tokens: dict[str, TokenSpec] = {}
    #: a JSON file of the same shape, read at start and again whenever it changes
    api_tokens_file: Path | None = None
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=0, le=65535)
    #: model spec prefixes a submit may name (e.g. `openai:`); empty: any
    api_models: list[str] = []
    #: directories whose script files a submit may name as `scripted:PATH`; empty: none
    api_scripted_roots: list[Path] = []
    #: the largest request body taken, in bytes (larger: 413 before it is read)
    api_max_body_bytes: int = Field(default=1_048_576, gt=0)
    #: a request's headers must all arrive within this many seconds of its first byte
    api_header_timeout_s: float = Field(default=10.0, gt=0)
    #: a request's whole body must arrive within this many seconds of its headers
    api_body_timeout_s: float = Field(default=30.0, gt=0)
    #: connections one client address may hold open at once (0: no bound); behind a
    #: proxy every client has the proxy's address, so bound them there instead
    api_max_connections_per_ip: int = Field(default=64, ge=0)
    #: an idle keep-alive connection is closed after this many seconds: longer than a
    #: client's own pool keeps one (httpx: 5 s), so no client sends a request on a
    #: connection the server is closing at that moment (a reset, never answered)
    api_keepalive_s: int = Field(default=30, ge=1)
    #: how often a live event stream looks for new events
    api_stream_poll_s: float = Field(default=0.25, gt=0)
    #: a live event stream sends a comment this often while nothing happens
    api_stream_heartbeat_s: float = Field(default=15.0, gt=0)

    def tokens(self) -> dict[str, TokenSpec]:
        """Every configured token, the file's and the inline ones."""
        found: dict[str, TokenSpec] = {}
        if self.api_tokens_file is not None:
            found.update(read_tokens_file(self.api_tokens_file))
        found.update(self.api_tokens)
        return found


def read_tokens_file(path: Path) -> dict[str, TokenSpec]:
    where = f"TICKWORK_API_TOKENS_FILE {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"{where} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where} must hold an object: token -> {{name, roles}}")
    found = {}
    for place, (key, value) in enumerate(data.items(), start=1):
        try:
            found[str(key)] = TokenSpec.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            # the entry by its holder's name, else its place: never the token itself
            name = value.get("name") if isinstance(value, dict) else None
            which = f"the token of {name!r}" if isinstance(name, str) else f"entry {place}"
            if not first["loc"]:  # the entry itself is no object: say what one is
                raise ConfigurationError(f"{where}: {which}: {not_an_object(value)}") from None
            raise ConfigurationError(
                f"{where}: {which}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
            ) from None
    return found


def not_an_object(value: object) -> str:
    """What a tokens file's entry that is no JSON object is told: what one holds."""
    got = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}
    shown = got.get(type(value), "a number")
    return (
        f'is {shown}, not an object of its holder: write it as "TOKEN": {{"name": '
        '"alice", "roles": ["approver"]}, `tenant` and `own_only` optional: docs/API.md '
        "(`tickwork docs api`)"
    )
