"""Request size limits, enforced before a body is read, and the checks on every text.

A body larger than TICKWORK_API_MAX_BODY_BYTES is answered 413: at once when its
Content-Length says so, else (chunked) as soon as what arrived passes the limit; the
server holds at most the limit in memory. Text in a query, a path or a body may hold
neither NUL nor a lone surrogate: no database stores them, so they are a 422 here rather
than a database error later; the OpenAPI schema says so (`state_clean_text`). A query
parameter the route does not take is a 422 naming the ones it takes: a misspelt or
unsupported filter was ignored, and the answer looked filtered when it was not.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..parsing import bad_text
from .errors import ApiError, answer

#: what every text a client sends matches, in the schema: no NUL. A lone surrogate cannot be
#: said in a pattern that every validator reads (ECMA-262 without the u flag, Python's re and
#: Rust's regex differ on it), so `CLEAN_TEXT` says it in words
NO_NUL = "^[^\\u0000]*$"
CLEAN_TEXT = (
    "No text in it, keys included, may hold a NUL character (\\u0000) or a lone UTF-16 "
    "surrogate (a \\ud800-\\udfff escape not in a pair): no database stores them, and such "
    "a request is a 422 naming the field."
)
#: the largest integer a query, a path or an id may hold: what a database's BIGINT holds
MAX_INT = 2**63 - 1
#: the deepest nesting of JSON objects and lists a body field may hold
MAX_DEPTH = 32
#: how much of a refused body is read and dropped, and for how long, before the connection
#: closes: enough for the client to read its 413 instead of a reset connection
LINGER_BYTES = 64 * 2**20
LINGER_S = 5.0


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope.get("headers", ()) if k == name), None)


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` bytes, without reading past it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        chunked = b"chunked" in (_header(scope, b"transfer-encoding") or b"").lower()
        if length is not None and length.strip().isdigit() and int(length) > self.limit:
            await self._refuse(scope, receive, send)
            return
        if not chunked:
            await self.app(scope, receive, send)  # h11 never delivers more than Content-Length
            return
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(parts), "more_body": False}
        await self.app(scope, _replay([whole], receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = answer(
            413,
            "too_large",
            f"the request body is over {self.limit} bytes (TICKWORK_API_MAX_BODY_BYTES); send less",
            limit=self.limit,
        )
        await refuse_unread(refusal, scope, receive, send)


async def refuse_unread(refusal: Response, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer `refusal` to a request whose body is not read, then close the connection.

    The answer goes out at once, but the connection stays open while the rest of the body
    arrives and is dropped (nginx's lingering close): closed on unread data, the socket
    would reset and the client lose the answer it was sent.
    """
    refusal.headers["Connection"] = "close"

    async def lingering(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            await send({**message, "more_body": True})
            await _drain(receive)
            message = {"type": "http.response.body", "body": b"", "more_body": False}
        await send(message)

    await refusal(scope, receive, lingering)


async def _drain(receive: Receive) -> None:
    """Read and drop the request body, up to LINGER_BYTES or LINGER_S; nothing is kept."""
    dropped = 0
    with anyio.move_on_after(LINGER_S):
        while dropped <= LINGER_BYTES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            dropped += len(message.get("body", b""))


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """`receive` that first gives back what was already read."""
    pending = list(messages)

    async def replaying() -> Message:
        return pending.pop(0) if pending else await receive()

    return replaying


def check_tree(value: Any, *, where: str, depth: int = 0) -> None:
    """ValueError naming the first bad text (keys too) or too deep nesting in a JSON value."""
    if depth > MAX_DEPTH:
        raise ValueError(f"{where} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        wrong = bad_text(value)
        if wrong:
            raise ValueError(f"{where} {wrong}")
    elif isinstance(value, dict):
        for key, item in value.items():
            wrong = bad_text(key) if isinstance(key, str) else None
            if wrong:
                raise ValueError(f"a key in {where} {wrong}")
            check_tree(item, where=f"{where}.{key}", depth=depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_tree(item, where=f"{where}[{i}]", depth=depth + 1)


def clean_parameters(request: Request) -> None:
    """A dependency of every route: 422 for a query parameter the route does not take, or
    a query or path text no database can store."""
    route = request.scope.get("route")
    taken = query_names(route) if route is not None else None
    if taken is not None:
        unknown = sorted(set(request.query_params) - taken)
        if unknown:
            raise ApiError(
                422,
                "invalid_input",
                f"{request.method} {getattr(route, 'path', request.url.path)} takes no query "
                f"parameter {unknown[0][:40]!r}; "
                + (f"it takes {', '.join(sorted(taken))}" if taken else "it takes none"),
            )
    given = [*(("query", k, v) for k, v in request.query_params.multi_items())]
    given += [("path", k, v) for k, v in request.path_params.items() if isinstance(v, str)]
    for where, name, value in given:
        wrong = bad_text(name) or bad_text(value)
        if wrong:
            raise ApiError(
                422, "invalid_input", f"{where} parameter {name[:40]!r} {wrong}; remove it"
            )


def state_clean_text(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI `schema` with what `check_tree` and `clean_parameters` refuse stated, in
    one place for every route: each free text of a parameter or a request body (a string
    schema without a pattern or a set of values, an object's keys) matches NO_NUL, and each
    body's schema says CLEAN_TEXT."""
    components = schema.get("components", {}).get("schemas", {})
    reached: set[str] = set()
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                _no_nul(parameter.get("schema", {}), components, reached)
            for content in operation.get("requestBody", {}).get("content", {}).values():
                _no_nul(content.get("schema", {}), components, reached)
    for name in reached:
        body = components[name]
        if "enum" not in body:
            said = body.get("description", "")
            body["description"] = f"{said}\n\n{CLEAN_TEXT}" if said else CLEAN_TEXT
    return schema


def _no_nul(node: Any, components: dict[str, Any], seen: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _no_nul(item, components, seen)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[1]
        if name not in seen and name in components:
            seen.add(name)
            _no_nul(components[name], components, seen)
    if node.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(node):
        node["pattern"] = NO_NUL
    if node.get("type") == "object" and node.get("additionalProperties", True) is not False:
        node.setdefault("propertyNames", {"pattern": NO_NUL})
    for key in ("properties", "$defs"):
        for child in node.get(key, {}).values():
            _no_nul(child, components, seen)
    # not `not`, `if` or `contains`: a pattern there would change what they let through
    for key in ("items", "additionalProperties", "then", "else"):
        _no_nul(node.get(key), components, seen)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        _no_nul(node.get(key), components, seen)


def query_names(route: Any) -> frozenset[str] | None:
    """The query parameters `route` and its dependencies declare, kept on the route (None: a
    route FastAPI does not build, which is not checked)."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return None
    known: frozenset[str] | None = getattr(route, "_tickwork_query_names", None)
    if known is None:
        names: set[str] = set()
        todo = [dependant]
        while todo:
            found = todo.pop()
            names.update(field.alias for field in found.query_params)
            todo.extend(found.dependencies)
        known = frozenset(names)
        route._tickwork_query_names = known
    return known
