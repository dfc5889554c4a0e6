"""What `tickwork fork --server` says of a server's 413 to a fork that gives tool outputs."""

from __future__ import annotations

import pytest

from tickwork.cli_sessions import _outputs_too_large
from tickwork.remote.errors import RemoteError

REFUSAL = "the request body is over 65536 bytes (TICKWORK_API_MAX_BODY_BYTES); send less"


def _said(outputs: dict[str, str], limit: int | None) -> str:
    with pytest.raises(RemoteError) as refused, _outputs_too_large(outputs):
        raise RemoteError(
            REFUSAL, code="too_large", status=413, details={"limit": limit} if limit else {}
        )
    return refused.value.message


def test_a_short_output_is_not_blamed_for_a_body_its_system_prompt_takes_over() -> None:
    """A 500-byte output with a long system prompt: the output is within the limit, so the
    refusal does not say it is more than a whole request may be."""
    said = _said({"s1c0": "x" * 500}, 65536)
    assert "more than a whole request may be" not in said
    assert "500 bytes in all, within those 65,536" in said
    assert "system prompt or instruction" in said


def test_an_output_over_the_limit_alone_is_named() -> None:
    said = _said({"s1c0": "x" * 70_000, "s1c1": "y"}, 65536)
    assert "the tool output given for s1c0 is 70,000 bytes" in said


def test_outputs_over_the_limit_together_are_named_by_their_total() -> None:
    said = _said({"s1c0": "x" * 40_000, "s1c1": "y" * 30_000}, 65536)
    assert "the 2 tool outputs given are 70,000 bytes in all" in said


def test_outputs_are_measured_as_the_request_holds_them() -> None:
    """A log of short lines takes more bytes in the JSON body than in its file (each
    newline is two): outputs over the limit so are not said to be within it."""
    said = _said({"s1c0": "x\n" * 30_000}, 65536)  # 60,000 bytes; 90,000 in the body
    assert "within" not in said
    assert "the tool output given for s1c0 is 90,000 bytes" in said
