"""Issue 12: the OpenAPI schema documents every error a route may answer, with its body, and
the docs page serves Swagger UI from tickwork itself under a CSP that allows only self."""

from __future__ import annotations

import re
from typing import Any

from tests.api.conftest import Stack

ERROR = "#/components/schemas/ErrorBody"


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if path.startswith("/api/v1/")
    ]


def test_every_route_documents_its_errors_with_the_error_body(stack: Stack) -> None:
    schema = stack.http().get("/api/v1/openapi.json").json()
    assert set(schema["components"]["schemas"]["ErrorBody"]["required"]) == {"code", "message"}
    found = operations(schema)
    assert len(found) >= 14
    for method, path, op in found:
        wanted = {"401", "403", "422"}
        if "{" in path:
            wanted.add("404")
        if method == "POST":
            wanted |= {"404", "409", "413"} if "{" in path else {"409", "413"}
        missing = wanted - set(op["responses"])
        assert not missing, (method, path, missing)
        for status in wanted:
            content = op["responses"][status]["content"]["application/json"]["schema"]
            assert content == {"$ref": ERROR}, (method, path, status, content)
    assert "bearer" in str(schema["components"]["securitySchemes"]).lower()


def test_the_docs_page_and_its_assets_come_from_tickwork(stack: Stack) -> None:
    http = stack.http()
    page = http.get("/api/v1/docs")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy
    assert "cdn" not in page.text and "http" not in page.text
    assert "<script>" not in page.text  # no inline script: the CSP would refuse it
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert len(assets) >= 3
    for asset in assets:
        assert asset.startswith("/static/"), asset
        answer = http.get(asset)
        assert answer.status_code == 200 and answer.content, asset
        assert "default-src 'self'" in answer.headers["content-security-policy"]


def test_a_wrong_method_is_405_naming_every_method_the_path_takes(stack: Stack) -> None:
    http = stack.http("olga")
    for method, path, allowed in [
        ("DELETE", "/api/v1/sessions", "GET, POST"),
        ("PUT", "/api/v1/sessions/some-id", "GET"),
        ("GET", "/api/v1/sessions/some-id/cancel", "POST"),
        ("POST", "/healthz", "GET"),
    ]:
        answer = http.request(method, path)
        assert answer.status_code == 405, (method, path)
        assert answer.headers["allow"] == allowed, (method, path)
        assert answer.json()["code"] == "method_not_allowed"


def test_the_decision_schema_says_which_fields_go_with_which_kind() -> None:
    """A client generated from the schema knows what the server checks: `arguments` with an
    edit only, `output` with provide_output only, `feedback` with reject only."""
    import jsonschema
    from pydantic import ValidationError

    from tickwork.api.bodies import Decide

    schema = Decide.model_json_schema()
    fingerprint = "0" * 64
    bodies = [
        {"kind": "approve"},
        {"kind": "approve", "arguments": {"a": 1}},
        {"kind": "edit"},
        {"kind": "edit", "arguments": {"a": 1}},
        {"kind": "edit", "arguments": None},
        {"kind": "reject", "feedback": "no"},
        {"kind": "approve", "feedback": "no"},
        {"kind": "provide_output"},
        {"kind": "provide_output", "output": "it ran"},
        {"kind": "reject", "output": "x"},
    ]
    for body in bodies:
        body = {**body, "fingerprint": fingerprint}
        try:
            Decide.model_validate(body)
            server = True
        except ValidationError:
            server = False
        documented = jsonschema.Draft202012Validator(schema).is_valid(body)
        assert documented == server, (body, documented, server)
