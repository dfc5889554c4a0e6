"""Bearer tokens: who is calling, and whether their roles allow the request.

A decision's approver, a fork's author and a cancel's requester are the token's name,
never a name from the request body. The token is checked before the request's body is
read (`TokenGate`), so nobody without one can make the server buffer anything.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.tenants import DEFAULT_TENANT

from .errors import ApiError, answer
from .limits import refuse_unread
from .settings import ApiSettings, Role, TokenSpec

log = logging.getLogger("tickwork.api")
#: paths under /api/v1 that anyone may read: the schema and its docs page
PUBLIC = frozenset({"/api/v1/openapi.json", "/api/v1/docs", "/api/v1/docs/oauth2-redirect"})

_bearer = HTTPBearer(auto_error=False, description="A token from TICKWORK_API_TOKENS")


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[Role]
    #: the tenant the token belongs to: the sessions it sees and submits into
    tenant: str = DEFAULT_TENANT
    #: sees only the sessions it submitted (404 for the rest of its tenant's)
    own_only: bool = False

    @property
    def admin(self) -> bool:
        """Spans tenants: sees and acts on every tenant's sessions."""
        return Role.ADMIN in self.roles

    def holds(self, roles: Iterable[Role]) -> bool:
        """Whether it may do what any of `roles` may (an admin may do everything)."""
        return self.admin or not self.roles.isdisjoint(roles)

    def sees(self, tenant: str, submitted_by: str) -> bool:
        """Whether a session of `tenant` submitted by `submitted_by` is this caller's to see."""
        if self.admin:
            return True
        return tenant == self.tenant and (not self.own_only or submitted_by == self.name)

    @property
    def scope(self) -> str | None:
        """The tenant its listings are limited to; None for an admin (every tenant)."""
        return None if self.admin else self.tenant


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def index(specs: Mapping[str, TokenSpec]) -> dict[str, Principal]:
    """Principals by the digest of their token; ConfigurationError names a bad key."""
    by_digest: dict[str, Principal] = {}
    for key, spec in specs.items():
        if key.startswith("sha256:"):
            hexdigest = key.removeprefix("sha256:").lower()
            if len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
                raise ConfigurationError(
                    f"token key {key[:15]}… of {spec.name} is not sha256:<64 hex digits>"
                )
        else:
            if len(key) < 16:
                raise ConfigurationError(
                    f"the token of {spec.name} is shorter than 16 characters; use a long "
                    "random one (python -c 'import secrets; print(secrets.token_urlsafe())')"
                )
            hexdigest = digest(key)
        by_digest[hexdigest] = Principal(
            spec.name, frozenset(spec.roles), tenant=spec.tenant, own_only=spec.own_only
        )
    return by_digest


class Tokens:
    """Tokens by their SHA-256 digest, so lookups never compare the secrets themselves.

    Built with `settings`, it reads TICKWORK_API_TOKENS_FILE again when the file's mtime,
    size or inode changes, so revoking a token needs no restart. A file that cannot be read
    or parsed then keeps the tokens in use (logged): a half-written file locks nobody out.
    """

    def __init__(
        self, specs: Mapping[str, TokenSpec], *, settings: ApiSettings | None = None
    ) -> None:
        self._by_digest = index(specs)
        if not self._by_digest:
            raise ConfigurationError(
                "no API tokens: set TICKWORK_API_TOKENS (JSON: token -> {name, roles}) or "
                "TICKWORK_API_TOKENS_FILE"
            )
        self._settings = settings
        self._seen = self._signature()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: ApiSettings) -> Tokens:
        return cls(settings.tokens(), settings=settings)

    def _signature(self) -> tuple[int, int, int] | None:
        path = self._settings.api_tokens_file if self._settings else None
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return (-1, -1, -1)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> None:
        if self._settings is None or self._settings.api_tokens_file is None:
            return
        seen = self._signature()
        if seen == self._seen:
            return
        with self._lock:
            if seen == self._seen:
                return
            self._seen = seen
            try:
                self._by_digest = index(self._settings.tokens())
            except ConfigurationError as exc:
                log.error(
                    "the tokens file changed but was not taken (%s); the tokens in use stay", exc
                )
                return
            log.info("tokens read again from %s", self._settings.api_tokens_file)

    def find(self, token: str) -> Principal | None:
        self._refresh()
        return self._by_digest.get(digest(token))


def bearer_token(scope: Scope) -> str | None:
    """The request's bearer token, or None."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class TokenGate:
    """ASGI middleware: a request under /api/v1 without a valid token is answered 401
    before its body is read (roles are checked by each route)."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == "/api/v1" or path.startswith("/api/v1/")) or path in PUBLIC:
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        if token is None:
            refusal = answer(
                401, "unauthenticated", "send your token as `Authorization: Bearer <token>`"
            )
        elif self.tokens.find(token) is None:
            refusal = answer(
                401, "invalid_token", "the token is not valid; ask an operator for one"
            )
        else:
            await self.app(scope, receive, send)
            return
        await refuse_unread(refusal, scope, receive, send)  # its body is never read


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthenticated", "send your token as `Authorization: Bearer <token>`")
    found: Principal | None = request.app.state.tokens.find(credentials.credentials)
    if found is None:
        raise ApiError(401, "invalid_token", "the token is not valid; ask an operator for one")
    return found


def require(*roles: Role) -> Callable[[Principal], Principal]:
    """A dependency: the caller, if they hold one of `roles`; else 403."""

    def allowed(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if not who.holds(roles):
            held = ", ".join(sorted(who.roles)) or "no role"
            needed = f"this needs the {' or '.join(roles)} role"
            if set(roles) == READING:  # only a token of no role lacks one of them
                needed = (
                    "reading needs a role (submitter, approver or operator): ask an operator "
                    "for the one you need"
                )
            raise ApiError(403, "forbidden", f"{who.name} holds {held}; {needed}")
        return who

    return allowed


Caller = Annotated[Principal, Depends(principal)]
#: reading (sessions, events, approvals, dead letters) takes any role; a roleless token none
#: the roles any of which reads
READING = frozenset({Role.SUBMITTER, Role.APPROVER, Role.OPERATOR})
Reader = Annotated[Principal, Depends(require(*sorted(READING)))]
Submitter = Annotated[Principal, Depends(require(Role.SUBMITTER))]
Approver = Annotated[Principal, Depends(require(Role.APPROVER))]
Canceller = Annotated[Principal, Depends(require(Role.APPROVER, Role.OPERATOR))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
