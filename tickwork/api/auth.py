"""Bearer tokens: who is calling, and whether their roles allow the request.

A decision's approver, a fork's author and a cancel's requester are the token's name,
never a name from the request body.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from fsm.errors import ConfigurationError

from .errors import ApiError
from .settings import Role, TokenSpec

_bearer = HTTPBearer(auto_error=False, description="A token from TICKWORK_API_TOKENS")


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[Role]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """Tokens by their SHA-256 digest, so lookups never compare the secrets themselves."""

    def __init__(self, specs: Mapping[str, TokenSpec]) -> None:
        self._by_digest: dict[str, Principal] = {}
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
            self._by_digest[hexdigest] = Principal(spec.name, frozenset(spec.roles))
        if not self._by_digest:
            raise ConfigurationError(
                "no API tokens: set TICKWORK_API_TOKENS (JSON: token -> {name, roles}) or "
                "TICKWORK_API_TOKENS_FILE"
            )

    def find(self, token: str) -> Principal | None:
        return self._by_digest.get(digest(token))


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
        if not who.roles.intersection(roles):
            held = ", ".join(sorted(who.roles)) or "no role"
            needed = " or ".join(roles)
            raise ApiError(
                403, "forbidden", f"{who.name} holds {held}; this needs the {needed} role"
            )
        return who

    return allowed


Caller = Annotated[Principal, Depends(principal)]
Submitter = Annotated[Principal, Depends(require(Role.SUBMITTER))]
Approver = Annotated[Principal, Depends(require(Role.APPROVER))]
Canceller = Annotated[Principal, Depends(require(Role.APPROVER, Role.OPERATOR))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
