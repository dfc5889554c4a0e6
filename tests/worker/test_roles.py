"""Roles: the repair kind's three, the roles file over them, and what a bad one is told;
a repair child's config (its parent's files and test command, its role's prompt and tools);
`adopt_patch` on a real working copy."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import ConfigurationError, InvalidInput, ToolError
from tickwork.fsm.values import ErrorCode, Head
from tickwork.store.artifacts import DirectoryArtifacts
from tickwork.worker.files import sources
from tickwork.worker.jobs import JobKind, Jobs, Submission
from tickwork.worker.jobs.repair import team
from tickwork.worker.jobs.repair.adoption import adopt_patch, chosen, proposed
from tickwork.worker.jobs.repair.job import REPAIR, diff_manifests
from tickwork.worker.jobs.repair.toolkit import SOLO_TOOLS
from tickwork.worker.jobs.roles import declare, role_for
from tickwork.worker.tick.runtime import Runtime
from tickwork.worker.tools.registry import ChildResult, ToolContext, ToolRegistry, run_tool

from tests.worker.ticking import Ticks
from tickwork import render

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def roles_file(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "roles.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_the_repair_kind_ships_planner_explorer_and_reviewer() -> None:
    roles = Jobs().roles("repair")
    assert set(roles) == {"planner", "explorer", "reviewer"}
    assert "spawn_agents" in (roles["planner"].tools or ())
    assert "wait_children" in (roles["planner"].tools or ())
    assert "adopt_patch" in (roles["planner"].tools or ())
    assert "write_file" in (roles["explorer"].tools or ())
    assert not {"write_file", "apply_patch", "run_command"} & set(roles["reviewer"].tools or ())
    assert roles["explorer"].config()["role"] == "explorer"


def test_the_roles_file_changes_a_role_field_by_field_and_adds_one(tmp_path: Path) -> None:
    path = roles_file(
        tmp_path,
        {
            "repair": {
                "explorer": {"model": "scripted:/x.json", "budgets": {"max_steps": 5}},
                "tester": {"system_prompt": "Run the tests.", "tools": ["run_tests"]},
            },
            "other": {"anything": {"system_prompt": "not read for repair"}},
        },
    )
    roles = Jobs(roles_file=path).roles("repair")
    explorer = roles["explorer"]
    assert explorer.model == "scripted:/x.json" and explorer.budgets == {"max_steps": 5}
    assert explorer.system_prompt == team.EXPLORER_PROMPT  # what the file did not give stays
    assert roles["tester"].tools == ("run_tests",)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ("{not json", "is not JSON"),
        ({"repair": {"tester": {"tools": ["run_tests"]}}}, "needs its `system_prompt`"),
        ({"repair": {"explorer": {"colour": "red"}}}, "unknown key(s) colour"),
        ({"repair": {"explorer": {"budgets": {"max_stepz": 3}}}}, "unknown budget(s) max_stepz"),
        ({"repair": {"explorer": {"budgets": {"max_steps": -1}}}}, "invalid budgets"),
        ({"repair": {"explorer": {"tools": "run_tests"}}}, "`tools` must be a non-empty list"),
        ({"repair": {"bad name": {"system_prompt": "x"}}}, "a role's name must be a word"),
        ({"repair": {"explorer": {"tools": ["rm_rf"]}}}, "no tool(s) rm_rf"),
        ([], "must be an object"),
    ],
)
def test_a_bad_roles_file_is_refused_naming_what_is_wrong(
    tmp_path: Path, data: Any, said: str
) -> None:
    jobs = Jobs(roles_file=roles_file(tmp_path, data))
    with pytest.raises(ConfigurationError) as caught:
        jobs.roles("repair")
    assert said in str(caught.value) and "roles file" in str(caught.value)


def test_a_missing_roles_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read"):
        Jobs(roles_file=tmp_path / "nope.json").roles("repair")


def test_an_unknown_role_names_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as caught:
        role_for(Jobs().roles("repair"), "wizard", kind="repair")
    assert "unknown role 'wizard'" in str(caught.value)
    assert "explorer, planner, reviewer" in str(caught.value)
    for bad in (5, None, ["planner"]):  # a string's look-alike was "unknown role '5'"
        with pytest.raises(InvalidInput, match="a role is named by a string, not") as typed:
            role_for(Jobs().roles("repair"), bad, kind="repair")
        assert "explorer, planner, reviewer" in str(typed.value)


def submit(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "calc.py").write_text("X = 1\n")
    data = {"workspace": str(project), "test_command": "true", **extra}
    submission = Submission(
        state_dir=tmp_path / "state", artifacts=DirectoryArtifacts(tmp_path / "artifacts")
    )
    return REPAIR.configure(data, submission)


def test_a_repair_kind_with_a_toolkit_of_its_own_offers_it_when_alone(tmp_path: Path) -> None:
    from tests.jobs import FILES

    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("X = 1\n")
    submission = Submission(
        state_dir=tmp_path / "state", artifacts=DirectoryArtifacts(tmp_path / "artifacts")
    )
    config = FILES.configure({"workspace": str(project), "test_command": "true"}, submission)
    assert config["tools"] == [*SOLO_TOOLS, "slow_write"]


def test_a_root_takes_a_role_from_its_input_or_works_alone(tmp_path: Path) -> None:
    alone = submit(tmp_path)
    assert alone["tools"] == list(SOLO_TOOLS) and "role" not in alone
    planner = submit(tmp_path, role="planner")
    assert planner["role"] == "planner" and planner["system_prompt"] == team.PLANNER_PROMPT
    assert "spawn_agents" in planner["tools"]
    # the tree (`ls --tree`, `show`, the API's `tree`) names the root's role as a child's
    from tickwork import views

    root = parent_head(planner)
    child = parent_head(submit(tmp_path, role="explorer")).model_copy(
        update={"id": "c-1", "parent_id": root.id, "root_id": root.id, "role": "explorer"}
    )
    drawn = views.tree(root, [child])
    assert (drawn["role"], drawn["children"][0]["role"]) == ("planner", "explorer")
    assert views.tree(parent_head(alone), [])["role"] == ""
    with pytest.raises(InvalidInput, match="unknown role 'boss'"):
        submit(tmp_path, role="boss")


def parent_head(config: dict[str, Any]) -> Head:
    return Head(id="p-1", kind="repair", created_at=T0, updated_at=T0, model="m", config=config)


def test_a_child_keeps_its_parents_test_command_and_starts_on_the_given_files() -> None:
    parent = parent_head(
        {
            "test_command": "pytest -q",
            "network": "none",
            "source": {"kind": "workspace"},
            "files": {"base": "parent-base"},
            "user_prompt": "the parent's task",
            "tools": ["list_files"],
        }
    )
    role = Jobs().roles("repair")["explorer"]
    config = team.child_config(
        parent, role, {"goal": "fix average", "notes": "look at the divisor"}, {"base": "m2"}
    )
    assert config["files"] == {"base": "m2"}
    assert config["test_command"] == "pytest -q" and config["network"] == "none"
    assert config["tools"] == list(role.tools or ()) and config["role"] == "explorer"
    assert "fix average" in config["user_prompt"] and "divisor" in config["user_prompt"]
    assert config["system_prompt"] == team.EXPLORER_PROMPT


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({}, "`goal` must be non-empty text"),
        ({"goal": "x", "budget": 3}, "unknown key(s) budget"),
        ({"goal": 7}, "`goal` must be"),
        ("fix it", "must be an object"),
    ],
)
def test_a_bad_child_input_is_refused(data: Any, said: str) -> None:
    role = Jobs().roles("repair")["explorer"]
    with pytest.raises(InvalidInput) as caught:
        team.child_config(parent_head({}), role, data, None)
    assert said in str(caught.value)


def child(n: int, result: dict[str, Any], *, status: str = "completed") -> ChildResult:
    return ChildResult(
        id=f"c-{n}", spawn_call="s1c0", index=n, role="explorer", status=status, result=result
    )


def test_a_child_is_chosen_by_id_or_index_and_a_wrong_one_is_named() -> None:
    children = [child(0, {}), child(1, {})]
    assert chosen(children, 1).id == "c-1" and chosen(children, "0").id == "c-0"
    assert chosen(children, "c-1").index == 1
    with pytest.raises(ToolError, match="numbered 0 to 1"):
        chosen(children, 5)
    with pytest.raises(ToolError, match="no child 'c-9'"):
        chosen(children, "c-9")
    with pytest.raises(ToolError, match="started no children"):
        chosen([], 0)


def test_the_approver_is_shown_the_patch_the_adoption_would_take() -> None:
    children = [
        child(0, {"patch": "+a\n", "outcome": "tests_failing"}),
        child(1, {"patch": "+b\n", "outcome": "repaired"}),
        child(2, {}, status="running"),
    ]
    by_index = ("the patch of child 1 (c-1, explorer), outcome repaired", "+b\n")
    assert proposed(children, 1) == proposed(children, "c-1") == by_index
    assert proposed(children, 2) == (
        "child 2 (c-2, explorer) is running: only a completed child has a patch to adopt",
        "",
    )
    empty = [child(0, {"patch": "", "outcome": "no_changes"})]
    assert proposed(empty, 0) == (
        "child 0 (c-0, explorer) changed no files: its patch is empty (outcome no_changes)",
        "",
    )
    for unknown in (7, "c-elsewhere", True, None, [0]):
        note = f"(no child {unknown!r} of this session: the call will say so)"
        assert proposed(children, unknown) == (note, "")
    assert proposed([], 0) == ("(no child 0 of this session: the call will say so)", "")


def test_adopt_patch_applies_a_childs_patch_or_says_why_not(tmp_path: Path) -> None:
    artifacts = DirectoryArtifacts(tmp_path / "artifacts")
    before, after = tmp_path / "before", tmp_path / "after"
    for folder, body in ((before, "return 1\n"), (after, "return 2\n")):
        folder.mkdir()
        (folder / "calc.py").write_text(f"def f():\n    {body}")
    manifests = [
        sources.read_manifest(artifacts, sources.pack(f, artifacts)[0]) for f in (before, after)
    ]
    patch, _ = diff_manifests(manifests[0], manifests[1], artifacts.get)
    workspace = tmp_path / "mine"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def f():\n    return 1\n")
    children = [
        child(0, {"patch": patch, "outcome": "tests_failing"}),
        child(1, {"patch": patch, "outcome": "repaired"}),
        child(2, {}, status="failed"),
        child(3, {"patch": "", "outcome": "no_changes"}),
    ]

    def adopt(which: Any) -> Any:
        ctx = ToolContext(
            session_id="p-1",
            call_id="c",
            step=3,
            workspace=workspace,
            children=lambda: children,
        )
        return run_tool(adopt_patch, {"child": which}, ctx)

    assert adopt_patch.requires_approval
    failed = adopt(2)
    assert failed.is_error and "is failed" in failed.output
    empty = adopt("c-3")
    assert empty.is_error and "changed no files" in empty.output
    done = adopt(1)
    assert not done.is_error and "outcome repaired" in done.output
    assert (workspace / "calc.py").read_text() == "def f():\n    return 2\n"
    again = adopt(0)  # its context is gone now: nothing changes
    assert again.is_error and "does not apply to your files" in again.output
    assert (workspace / "calc.py").read_text() == "def f():\n    return 2\n"


def test_a_job_kind_of_plain_functions_declares_roles_too() -> None:
    from tickwork.worker.jobs import JobKind, Staffed
    from tickwork.worker.jobs.roles import check_roles, declare
    from tickwork.worker.tools.registry import ToolRegistry

    roles = declare("mine", {"scout": {"system_prompt": "Look around.", "tools": ["look"]}})
    kind = JobKind(name="mine", system_prompt="x", tools=ToolRegistry, prepare=dict, roles=roles)
    assert isinstance(kind, Staffed) and kind.roles["scout"].tools == ("look",)
    with pytest.raises(ConfigurationError, match="no tool\\(s\\) look"):
        check_roles(kind.roles, kind.tools().names(), kind="mine")


def test_a_worker_does_not_start_on_a_bad_roles_file(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tickwork.worker.config.settings import Settings

    from tickwork.cli_ops import check_what_ticks_load

    bad = roles_file(tmp_path, {"repair": {"explorer": {"colour": "red"}}})
    monkeypatch.setenv("TICKWORK_ROLES_FILE", str(bad))
    settings = Settings(database_url=sqlite_url, state_dir=tmp_path / "state")
    with pytest.raises(ConfigurationError, match="unknown key\\(s\\) colour"):
        check_what_ticks_load(settings)


def test_a_session_failed_by_a_bad_roles_file_is_said_in_its_words(
    ticks: Ticks, tmp_path: Path
) -> None:
    """A worker whose roles file gives a kind's role an empty `system_prompt` (a kind it was
    not started with, so not checked then) fails the session that spawns in that role,
    INTERNAL, with the file's words. The command line printed that reason (`show`, `ls`,
    `dlq`) with "--system-prompt must be non-empty text": a flag of `fork`, which cannot
    mend a file. It prints what the file says, as a refusal of the settings reads."""
    bad = roles_file(tmp_path, {"tree": {"helper": {"system_prompt": " "}}})
    spawn = {"name": "spawn_agents", "arguments": {"children": [{"role": "helper"}]}}
    script = tmp_path / "spawner.json"
    script.write_text(json.dumps([{"content": "split", "tool_calls": [spawn]}]))
    root = ticks.client.submit("tests.jobs:TREE", {}, model=f"scripted:{script}")
    rt = Runtime(
        settings=ticks.settings,
        store=ticks.store,
        jobs=Jobs(roles_file=bad),
        publish_tick=lambda *_: None,
    )
    try:
        failed = ticks.run(root.id, rt)
    finally:
        rt.close()
    stored = (
        f"ConfigurationError: roles file {bad} (TICKWORK_ROLES_FILE), kind 'tree', role "
        "'helper': `system_prompt` must be non-empty text"
    )
    assert (failed.error_code, failed.error_message) == (ErrorCode.INTERNAL, stored)
    assert render.reason_said(stored) == stored
    letter = ticks.store.dead_letter(root.id)
    assert render.summary("failed", {"error_code": letter.code, "message": letter.message}) == (
        f"INTERNAL: {stored}"
    )
    # a reason of the session's own still names the flag that gives a field
    assert render.reason_said("`deadline_s` is 60") == "--deadline is 60"


#: a second kind named as the test kind of tests/jobs.py, and one named as the built-in
TWIN = JobKind(name="test", system_prompt="", tools=ToolRegistry, prepare=lambda _: {})
FAKE_REPAIR = JobKind(name="repair", system_prompt="", tools=ToolRegistry, prepare=lambda _: {})


@pytest.mark.parametrize(
    ("imports", "said"),
    [
        (
            ["tests.jobs:TEST", f"{__name__}:TWIN"],
            f"{__name__}:TWIN is a job kind named 'test', as tests.jobs:TEST is",
        ),
        (
            [f"{__name__}:FAKE_REPAIR"],
            f"{__name__}:FAKE_REPAIR is a job kind named 'repair', as "
            "tickwork.worker.jobs.repair:REPAIR (built in) is",
        ),
    ],
    ids=["two-imports", "the-built-in"],
)
def test_a_worker_does_not_start_on_two_kinds_of_one_name(
    sqlite_url: str, tmp_path: Path, imports: list[str], said: str
) -> None:
    from tickwork.worker.config.settings import Settings

    from tickwork.cli_ops import check_what_ticks_load

    settings = Settings(database_url=sqlite_url, state_dir=tmp_path / "state", imports=imports)
    with pytest.raises(ConfigurationError, match="give each kind its own name") as refused:
        check_what_ticks_load(settings)
    assert said in str(refused.value)


def _no_tools() -> ToolRegistry:
    raise RuntimeError("the tools cannot be built here")


TOOLLESS = JobKind(name="toolless", system_prompt="", tools=_no_tools, prepare=lambda _: {})


def test_a_worker_does_not_start_on_a_kind_whose_tools_raise_naming_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    from tickwork.worker.config.settings import Settings

    from tickwork.cli_ops import check_what_ticks_load

    imports = [f"{__name__}:TOOLLESS"]
    settings = Settings(database_url=sqlite_url, state_dir=tmp_path / "state", imports=imports)
    with pytest.raises(ConfigurationError) as refused:
        check_what_ticks_load(settings)
    assert "job kind 'toolless': its tools() raised RuntimeError: the tools cannot be built" in (
        str(refused.value)
    )


def test_a_root_of_a_kind_of_one_s_own_takes_no_role_as_its_docs_say(tmp_path: Path) -> None:
    """A user submitted a root of their own kind with `"role": "zzz"` and it was taken
    silently with every tool: only the repair kind reads a root's role. JOB_KINDS.md now
    says so, and this holds it to what the code does."""
    seen: list[dict[str, Any]] = []
    kind = JobKind(
        name="crew",
        system_prompt="You work.",
        tools=lambda: ToolRegistry([]),
        prepare=lambda data: seen.append(dict(data)) or {"user_prompt": "go"},
        roles=declare("crew", {"worker": {"system_prompt": "One thing."}}),
    )
    kind.configure({"role": "zzz"}, Submission(state_dir=tmp_path))
    assert seen == [{"role": "zzz"}]  # neither refused nor applied: prepare's to read
    docs = " ".join((Path(__file__).parents[2] / "docs" / "JOB_KINDS.md").read_text().split())
    assert "Roles are a child's: a root session of your kind takes none" in docs
