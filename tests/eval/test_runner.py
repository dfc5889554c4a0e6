"""The demo task set run through the client and a real in-process worker, as `tickwork eval
--demo` runs it: the outcomes, the figures the sessions counted, the approvals recorded as
`eval`, at most N at a time, a time limit, and a submit that is refused."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.worker.sandbox.runner import DEMO_UNCONFINED

from tickwork.client import Tickwork
from tickwork.eval.model import (
    APPROVER,
    Approve,
    Outcome,
    Run,
    RunConfig,
    TaskResult,
)
from tickwork.eval.runner import run_tasks
from tickwork.eval.runs import Runs
from tickwork.eval.tasks import TaskSet, parse_tasks, read_tasks
from tickwork.testing import embedded_settings, git, running_worker

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "eval" / "tasks.jsonl"
SCRIPTED = RunConfig(model="scripted", price=(3.0, 15.0), concurrency=2, timeout_s=120)


def _subset(tasks: TaskSet, *ids: str) -> TaskSet:
    return TaskSet(path=tasks.path, tasks=tuple(t for t in tasks.tasks if t.id in ids))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Tickwork]:
    settings = embedded_settings(tmp_path)
    with running_worker(settings, concurrency=2):
        made = Tickwork(settings)
        yield made
        made.close()


def _run(
    client: Tickwork, tasks: TaskSet, config: RunConfig, tmp_path: Path, **kw: Any
) -> tuple[Run, Runs, list[str]]:
    runs = Runs(tmp_path / "evals")
    seen: list[str] = []

    def stored(so_far: Run, result: TaskResult) -> None:
        runs.save(so_far)
        seen.append(result.task)

    done = run_tasks(
        client,
        tasks,
        config,
        run_id="20261201-200000-test",
        own_config={DEMO_UNCONFINED: True},
        on_result=stored,
        **kw,
    )
    return done, runs, seen


def test_the_demo_set_repairs_some_and_not_others(client: Tickwork, tmp_path: Path) -> None:
    tasks = read_tasks(DEMO)
    done, runs, seen = _run(client, tasks, SCRIPTED, tmp_path)
    by_task = {r.task: r for r in done.results}
    assert [r.task for r in done.results] == [t.id for t in tasks.tasks]  # the set's order
    assert sorted(seen) == sorted(by_task)
    assert by_task["calc-average"].outcome is Outcome.REPAIRED
    assert by_task["slugify-case"].outcome is Outcome.REPAIRED
    assert by_task["slugify-case"].patch_matches is True  # its expected patch
    assert by_task["wordcount-spaces"].outcome is Outcome.TESTS_FAILING
    clamp = by_task["clamp-high"]
    assert clamp.outcome is Outcome.FAILED and clamp.cause == "LOOP", clamp
    assert done.state == "finished" and done.finished_at is not None
    assert done.task_set_digest == tasks.digest and done.config == SCRIPTED
    # the figures are the sessions' own: steps, tokens, the scripts' cached tokens, cost
    calc = by_task["calc-average"]
    session = client.load(str(calc.session_id))
    assert calc.steps == session.head.step == 5
    assert calc.tokens == session.head.tokens
    assert calc.cached_tokens == 0 + 1152 + 1536 + 2048 + 2432
    assert calc.cost_usd == pytest.approx(session.head.cost_usd) and calc.cost_usd > 0
    assert calc.wall_s > 0
    assert session.head.result["tests"]["passed"] is True
    # each write was approved for the run, recorded as approver `eval`
    approvals = [d for d in session.decisions if d.kind.value == "approve"]
    assert approvals and {d.approver for d in approvals} == {APPROVER}
    assert session.head.submitted_by == APPROVER
    # the run was stored as it went (the last save holds every task), then finished
    assert runs.load(done.id).results == done.results
    assert runs.load(done.id).state == "running"
    runs.save(done)
    assert runs.load(done.id) == done


def test_concurrency_one_runs_one_session_at_a_time(client: Tickwork, tmp_path: Path) -> None:
    tasks = _subset(read_tasks(DEMO), "wordcount-spaces", "clamp-high")
    config = RunConfig(model="scripted", concurrency=1, timeout_s=60)
    done, _, _ = _run(client, tasks, config, tmp_path)
    first, second = (client.get(str(r.session_id)) for r in done.results)
    assert second.created_at >= first.updated_at  # submitted once the first had ended


def test_with_approve_wait_a_task_past_its_time_is_cancelled(
    client: Tickwork, tmp_path: Path
) -> None:
    tasks = _subset(read_tasks(DEMO), "calc-average")
    config = RunConfig(model="scripted", approve=Approve.WAIT, timeout_s=4)
    done, _, _ = _run(client, tasks, config, tmp_path)
    (calc,) = done.results
    assert calc.outcome is Outcome.TIMED_OUT and calc.cause == "timeout"
    head = client.wait(str(calc.session_id), timeout=30)
    assert head.status.value == "cancelled"
    assert not [d for d in client.load(head.id).decisions if d.approver == APPROVER]


def test_a_refused_submit_is_the_tasks_result_and_the_rest_run(
    client: Tickwork, tmp_path: Path
) -> None:
    (tmp_path / "proj").mkdir()
    script = tmp_path / "done.json"
    script.write_text(json.dumps([{"content": "nothing to do"}]))
    lines = [
        {"id": "gone", "source": "no-such-repo", "ref": "main", "test_command": "true"},
        {"id": "fine", "source": "proj", "test_command": "true", "setup": "none"},
    ]
    text = "\n".join(json.dumps({**line, "script": str(script)}) for line in lines)
    tasks = parse_tasks(text, where="t.jsonl", base=tmp_path)
    done, _, _ = _run(client, tasks, RunConfig(model="scripted", timeout_s=60), tmp_path)
    gone, fine = done.results
    assert gone.outcome is Outcome.NOT_SUBMITTED and gone.session_id is None
    assert "no-such-repo" in gone.message, gone
    assert fine.outcome is Outcome.NO_CHANGES and fine.session_id


def test_scripted_needs_every_tasks_script_before_anything_runs(
    client: Tickwork, tmp_path: Path
) -> None:
    (tmp_path / "proj").mkdir()
    line = {"id": "bare", "source": "proj", "test_command": "true"}
    tasks = parse_tasks(json.dumps(line), where="t.jsonl", base=tmp_path)
    with pytest.raises(InvalidInput, match=r"t\.jsonl:1: field `script`: task 'bare' has none"):
        _run(client, tasks, RunConfig(model="scripted"), tmp_path)
    assert client.sessions() == []


def test_an_unknown_model_refuses_the_run_before_anything_runs(
    client: Tickwork, tmp_path: Path
) -> None:
    (tmp_path / "proj").mkdir()
    line = {"id": "one", "source": "proj", "test_command": "true"}
    tasks = parse_tasks(json.dumps(line), where="t.jsonl", base=tmp_path)
    with pytest.raises(InvalidInput, match=r"unknown model spec 'gpt-4o'.*write openai:gpt-4o"):
        _run(client, tasks, RunConfig(model="gpt-4o"), tmp_path)
    assert client.sessions() == []


def test_expected_tests_run_on_the_result_and_decide_success(
    client: Tickwork, tmp_path: Path
) -> None:
    (calc,) = _subset(read_tasks(DEMO), "calc-average").tasks
    check = "python3 -c 'from calc import average; assert average({}) == {}'"
    tasks = TaskSet(
        path="t.jsonl",
        tasks=(
            replace(calc, id="right", expected_tests=check.format("[1, 2]", "1.5")),
            replace(calc, id="wrong", expected_tests=check.format("[]", "0")),
            replace(calc, id="absent", expected_tests="no-such-checker --all"),
        ),
    )
    done, _, _ = _run(client, tasks, SCRIPTED, tmp_path)
    right, wrong, absent = done.results
    assert {r.outcome for r in done.results} == {Outcome.REPAIRED}
    assert (right.expected_tests, right.success) == ("pass", True)
    assert (wrong.expected_tests, wrong.success) == ("fail", False)
    assert "ValueError" in wrong.expected_tests_output  # average([]) raises
    assert (absent.expected_tests, absent.success) == ("not_run", False)
    assert "not found" in absent.expected_tests_output


def test_expected_tests_that_failed_behind_a_pipe_are_not_a_pass(
    client: Tickwork, tmp_path: Path
) -> None:
    """`pytest -q | tail -3` exits as `tail`, 0: the expected tests counted failures and
    the task was a success. The runner's own summary decides, as for the repair's outcome."""
    (calc,) = _subset(read_tasks(DEMO), "calc-average").tasks
    piped = "printf 'FAILED tests/test_calc.py::test_x\\n1 failed, 3 passed in 0.05s\\n' | tail -1"
    passed = "printf '4 passed in 0.05s\\n' | tail -1"
    tasks = TaskSet(
        path="t.jsonl",
        tasks=(
            replace(calc, id="piped", expected_tests=piped),
            replace(calc, id="passed", expected_tests=passed),
        ),
    )
    done, _, _ = _run(client, tasks, SCRIPTED, tmp_path)
    piped_result, passed_result = done.results
    assert (piped_result.expected_tests, piped_result.success) == ("fail", False)
    assert "`1 failed, 3 passed in 0.05s`" in piped_result.expected_tests_output
    assert (passed_result.expected_tests, passed_result.success) == ("pass", True)


def test_expected_tests_open_no_folder_a_link_in_the_source_points_at(
    client: Tickwork, tmp_path: Path
) -> None:
    """The copy the expected tests run on is opened up for the sandbox's user; a link in
    the (untrusted) source to a folder elsewhere is not followed, so that folder stays
    closed."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    project = tmp_path / "linked"
    shutil.copytree(ROOT / "examples" / "buggy_calc", project)
    (project / "elsewhere").symlink_to(private, target_is_directory=True)
    (calc,) = _subset(read_tasks(DEMO), "calc-average").tasks
    linked = replace(calc, id="linked", source=str(project), expected_tests="true")
    done, _, _ = _run(client, TaskSet(path="t.jsonl", tasks=(linked,)), SCRIPTED, tmp_path)
    assert done.results[0].expected_tests == "pass"
    assert private.stat().st_mode & 0o777 == 0o700


def test_ctrl_c_cancels_the_sessions_in_flight_and_keeps_the_run(
    client: Tickwork, tmp_path: Path
) -> None:
    tasks = _subset(read_tasks(DEMO), "calc-average", "slugify-case")
    config = RunConfig(model="scripted", approve=Approve.WAIT, timeout_s=60)

    def interrupt() -> None:
        if any(h.status.value == "waiting_approval" for h in client.sessions()):
            raise KeyboardInterrupt

    done, _, _ = _run(client, tasks, config, tmp_path, watch=interrupt)
    assert done.state == "interrupted" and done.results == ()
    heads = client.sessions()
    assert len(heads) == 2
    for head in heads:
        assert client.wait(head.id, timeout=30).status.value == "cancelled"


def test_expected_tests_run_on_a_git_sources_result(client: Tickwork, tmp_path: Path) -> None:
    repo = tmp_path / "calc-repo"
    shutil.copytree(ROOT / "examples" / "buggy_calc", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "calc, with a bug")
    (calc,) = _subset(read_tasks(DEMO), "calc-average").tasks
    check = "python3 -c 'from calc import average; assert average([1, 2]) == 1.5'"
    task = replace(calc, source=str(repo), ref="main", expected_tests=check)
    assert task.is_repo and task.repair_input()["repo"] == str(repo)
    done, _, _ = _run(client, TaskSet(path="t.jsonl", tasks=(task,)), SCRIPTED, tmp_path)
    (result,) = done.results
    assert result.outcome is Outcome.REPAIRED, result
    assert result.expected_tests == "pass", result.expected_tests_output


def test_a_sessions_gitattributes_pick_none_of_the_machines_git_filters(
    client: Tickwork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session (the model) writes a `.gitattributes` choosing a filter the machine's git
    configuration defines (`git lfs install` writes `filter.lfs.*`; git-lfs fetches from
    whatever `lfs.url` a `.lfsconfig` names, the machine's loopback too). The bundle of its
    files (`git add`) and the expected tests' checkout of it ran that filter on the
    operator's machine, outside any sandbox. Neither runs a filter now."""
    marker = tmp_path / "filtered"
    script = tmp_path / "filter.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\nexec cat\n")
    script.chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f'[filter "lfs"]\n\tsmudge = {script}\n\tclean = {script}\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    repo = tmp_path / "calc-repo"
    shutil.copytree(ROOT / "examples" / "buggy_calc", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "calc, with a bug")
    command = "printf '* filter=lfs\\n' >> .gitattributes"
    replies = [
        {
            "content": "x",
            "tool_calls": [{"name": "run_command", "arguments": {"command": command}}],
        },
        {"content": "done"},
    ]
    (tmp_path / "script.json").write_text(json.dumps(replies))
    (calc,) = _subset(read_tasks(DEMO), "calc-average").tasks
    task = replace(
        calc, source=str(repo), ref="main", expected_tests="true",
        script=str(tmp_path / "script.json"),
    )  # fmt: skip
    done, _, _ = _run(client, TaskSet(path="t.jsonl", tasks=(task,)), SCRIPTED, tmp_path)
    (result,) = done.results
    assert result.expected_tests == "pass", result.expected_tests_output
    assert not marker.exists()
