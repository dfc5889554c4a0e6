"""Issue 12: a submitter cannot make the API host read a file it names.

`scripted:PATH` models are refused over the API unless an operator allows a directory
(TICKWORK_API_SCRIPTED_ROOTS), then only files inside it, and a refusal reads nothing and
says the same whether the file exists or not.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import TEST_KIND, TOKEN, TOKENS, Server, Stack
from tickwork.api import ApiSettings, make_api

SECRET_KEY = "a-secret-api-token-of-someone-0001"


@pytest.fixture
def tokens_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file outside every root holding what a submitter must never see."""
    path = tmp_path_factory.mktemp("etc") / "tokens.json"
    path.write_text(json.dumps({SECRET_KEY: {"name": "root", "roles": ["operator"]}}))
    return path


def submit(url: str, model: str) -> tuple[int, dict[str, str]]:
    import httpx

    answer = httpx.post(
        f"{url}/api/v1/sessions",
        json={"kind": TEST_KIND, "model": model, "id": f"sc-{uuid.uuid4().hex[:8]}"},
        headers={"Authorization": f"Bearer {TOKEN['sam']}"},
        timeout=30,
    )
    return answer.status_code, answer.json()


def test_a_file_outside_the_roots_is_neither_read_nor_probed(
    stack: Stack, tokens_file: Path
) -> None:
    status, error = submit(stack.url, f"scripted:{tokens_file}")
    assert status == 422 and error["code"] == "model_not_allowed"
    assert SECRET_KEY not in json.dumps(error)
    missing = tokens_file.with_name("missing.json")
    same = [
        submit(stack.url, f"scripted:{missing}"),
        submit(stack.url, f"react:scripted:{tokens_file}"),
        submit(stack.url, f"scripted:{tokens_file.parent}"),
        submit(stack.url, "scripted:tokens.json"),  # relative: refused too
    ]
    assert all(s == (422, error) for s in same), same


def test_a_symlink_inside_the_roots_to_a_file_outside_is_refused(
    stack: Stack, tokens_file: Path
) -> None:
    link = stack.deployment.tmp / f"innocent-{uuid.uuid4().hex[:6]}.json"
    link.symlink_to(tokens_file)
    status, error = submit(stack.url, f"scripted:{link}")
    assert status == 422 and error["code"] == "model_not_allowed"
    assert SECRET_KEY not in json.dumps(error)


def test_a_script_inside_the_roots_is_taken_and_a_bad_one_named(stack: Stack) -> None:
    status, head = submit(stack.url, stack.deployment.script([{"content": "done"}]))
    assert status == 201, head
    assert head["model"].startswith(f"scripted:{stack.deployment.tmp.resolve()}")
    bad = stack.deployment.tmp / f"bad-{uuid.uuid4().hex[:6]}.json"
    bad.write_text('{"replies": [], "extra": 1}')
    status, error = submit(stack.url, f"scripted:{bad}")
    assert status == 422 and error["code"] == "invalid_script"


def test_a_script_nested_too_deep_is_named_not_a_500(stack: Stack) -> None:
    deep = stack.deployment.tmp / f"deep-{uuid.uuid4().hex[:6]}.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    status, error = submit(stack.url, f"scripted:{deep}")
    assert status == 422 and error["code"] == "invalid_script", error
    assert f"{deep.resolve()} nests deeper than" in error["message"]


@pytest.fixture
def no_roots(stack: Stack) -> Iterator[str]:
    """A server on the same deployment with TICKWORK_API_SCRIPTED_ROOTS unset."""
    with Server(make_api(stack.deployment.settings, ApiSettings(api_tokens=TOKENS))) as server:  # type: ignore[arg-type]
        yield server.url


def test_without_roots_scripted_models_are_refused_whatever_the_path(
    stack: Stack, no_roots: str, tokens_file: Path
) -> None:
    for model in (
        f"scripted:{tokens_file}",
        stack.deployment.script([{"content": "done"}]),
        "react:scripted:/etc/passwd",
    ):
        status, error = submit(no_roots, model)
        assert status == 422 and error["code"] == "model_not_allowed", error
        assert "TICKWORK_API_SCRIPTED_ROOTS" in error["message"]
        assert SECRET_KEY not in json.dumps(error)
