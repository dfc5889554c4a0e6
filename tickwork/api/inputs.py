"""Each built-in job kind's input as a model, for the OpenAPI schema and typed clients.

The schema of a submit is a union on `kind` (`bodies.Submit`): `repair` with a
`RepairInput`, or any other kind (one of TICKWORK_IMPORTS) with an object of its own. The
job kind still checks the input when the session is made (`worker/jobs/repair/job.py`),
with messages that name the CLI's options; these models say what it takes. (Every text
of an input is bounded by the submit's own check, `bodies.MAX_TEXT`.)
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class RepairInput(BaseModel):
    """The input of a `repair` session: a source (`repo` at `ref`, or a `workspace`
    directory), the command that runs its tests, and what to fix."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    repo: str | None = Field(
        default=None,
        examples=["https://github.com/example/project.git"],
        description="A git repository to start from (any URL git clones; over the API a "
        "local path only under TICKWORK_WORKSPACE_ROOTS). Not with `workspace`.",
    )
    ref: str | None = Field(
        default=None,
        examples=["main"],
        description="The branch, tag or commit of `repo` [default: HEAD].",
    )
    workspace: str | None = Field(
        default=None,
        description="A directory on the server, packed at submit and never changed (over "
        "the API only under TICKWORK_WORKSPACE_ROOTS). Not with `repo`.",
    )
    test_command: str | list[str] = Field(
        validation_alias=AliasChoices("test_command", "test_cmd"),
        examples=["python -m pytest -q"],
        description="The shell command that runs the tests (or its words as a list). "
        "`test_cmd`, the CLI's name (`--test-cmd`), is taken too.",
    )
    goal: str | None = Field(default=None, description="What to fix, in words for the model.")
    test_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="The final test run's limit in seconds [default: 600; at most a "
        "command's limit].",
    )
    setup: str | list[str] | None = Field(
        default=None,
        examples=["auto", ["pip install -e ."]],
        description='How the environment (/env) is built: "auto" (from the project\'s '
        'packaging files), "none", or shell commands run in order [default: auto].',
    )
    network: Literal["setup", "all", "none"] | bool | None = Field(
        default=None,
        description='"setup" (only the setup commands reach the network), "all" (every '
        'command, through the egress proxy) or "none" [default: setup]; true and false '
        'mean "all" and "none".',
    )
    egress_allow: list[str] | None = Field(
        default=None,
        examples=[["pypi.org", "*.pythonhosted.org"]],
        description="host or host:port patterns the sandbox may reach: within the "
        "server's TICKWORK_EGRESS_ALLOW, never wider [default: all of it].",
    )
