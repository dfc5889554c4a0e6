"""Environments through real ticks (SQLite, a worker in a thread, bubblewrap): `--setup`
auto without egress, explicit commands, none, and a failed setup (ENV_SETUP)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import ErrorCode, Status
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.environments.projects import deployment, project
from tests.services import IN_CI
from tickwork.testing import SessionDriver, call, reply, running_worker

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)

FIX = "def add(a, b):\n    return a + b\n"


def _run(tmp_path: Path, data: dict[str, Any], replies: list[dict[str, Any]]) -> Any:
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit("repair", data, replies=replies)
        return driver.run(sid, timeout=120)


def test_auto_without_egress_installs_the_project_and_commands_see_it(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    session = _run(
        tmp_path,
        {"workspace": str(source), "test_command": "python -m unittest discover -s tests"},
        [
            reply(
                "where",
                call(
                    "run_command",
                    command="command -v python; python -c 'import calcpkg as c; print(c.__file__)'",
                ),
            ),
            reply("fix", call("write_file", path="calcpkg/__init__.py", content=FIX)),
            reply("done"),
        ],
    )
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    env = head.result["environment"]
    assert env["status"] == "ready" and env["built"] is True and len(env["key"]) == 64
    seen = session.observations[0].content
    assert "/env/bin/python" in seen
    # the editable install points at the session's own working copy, not a copy of it
    assert "/workspace/calcpkg/__init__.py" in seen
    assert head.result["tests"]["passed"] is True


def test_a_failed_setup_fails_the_session_early_with_env_setup(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {
                "workspace": str(source),
                "test_command": "true",
                "setup": ["echo preparing the env", "echo 'no such compiler: cc9' >&2; exit 3"],
            },
            replies=[reply("never asked")],
        )
        head = driver.run_until(sid, Status.FAILED, timeout=60)
        letters = driver.client.dead_letters()
    assert head.error_code is ErrorCode.ENV_SETUP
    assert "no such compiler: cc9" in head.error_message and "exit code: 3" in head.error_message
    assert head.step == 0  # no model call was made
    assert "tests" not in head.result  # not a test failure
    env = head.result["environment"]
    assert env["status"] == "failed" and "preparing the env" in env["log"]
    assert [(d.session_id, d.code) for d in letters] == [(sid, "ENV_SETUP")]


def test_a_setup_killed_says_why_at_the_end_of_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A setup past its time limit said only `exit code: killed`; one that printed much kept
    only its output's end, without the command or why it failed."""
    monkeypatch.setenv("TICKWORK_ENVIRONMENT_SETUP_TIMEOUT_S", "3")
    source = project(tmp_path / "src")
    settings = deployment(tmp_path / "deploy")
    setups = {"slow": ["sleep 30"], "loud": ["yes hello | head -c 300000; exit 4"]}
    with running_worker(settings), SessionDriver(settings) as driver:
        heads = {}
        for name, setup in setups.items():
            sid = driver.submit(
                "repair",
                {"workspace": str(source), "test_command": "true", "setup": setup},
                replies=[reply("never asked")],
            )
            heads[name] = driver.run_until(sid, Status.FAILED, timeout=60)
    slow, loud = heads["slow"].error_message, heads["loud"].error_message
    assert slow.endswith(
        "setup stopped at `sleep 30`: it ran past the setup's time limit (3s: "
        "TICKWORK_ENVIRONMENT_SETUP_TIMEOUT_S, at most a tick's longest call) and was killed"
    ), slow
    assert loud.endswith("setup stopped at `yes hello | head -c 300000; exit 4`: it exited 4"), loud
    assert heads["loud"].result["environment"]["log"].endswith("it exited 4")


def test_setup_none_mounts_nothing_and_explicit_commands_build_env(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    probe = call("run_command", command="ls /env; cat /env/marker; echo PATH=$PATH")
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        none = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "true", "setup": "none"},
            replies=[reply("look", probe), reply("done")],
        )
        given = driver.submit(
            "repair",
            {
                "workspace": str(source),
                "test_command": "test -f /env/marker",
                "setup": ["mkdir -p /env/bin", "echo built-by-setup > /env/marker"],
            },
            replies=[reply("look", probe), reply("done")],
        )
        plain, built = driver.run(none), driver.run(given)
    assert "environment" not in plain.head.result
    assert "cannot access '/env'" in plain.observations[0].content  # nothing mounted there
    assert "built-by-setup" not in plain.observations[0].content
    assert built.head.result["environment"]["setup"] == [
        "mkdir -p /env/bin",
        "echo built-by-setup > /env/marker",
    ]
    seen = built.observations[0].content
    assert "built-by-setup" in seen and "PATH=/env/bin:" in seen
    assert built.head.result["tests"]["passed"] is True
    # read-only for commands: the model cannot change the shared environment
    assert built.head.status is Status.COMPLETED


def test_a_command_cannot_write_the_environment(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    session = _run(
        tmp_path,
        {"workspace": str(source), "test_command": "true", "setup": ["echo x > /env/marker"]},
        [reply("try", call("run_command", command="echo changed > /env/marker")), reply("done")],
    )
    assert "Read-only file system" in session.observations[0].content, session.head


def test_ten_sessions_on_one_source_build_it_once(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    settings = deployment(tmp_path / "deploy")
    data = {
        "workspace": str(source),
        "test_command": "python -m unittest discover -s tests",
        # slow enough that the others ask while it is being built
        "setup": ["sleep 2", "mkdir -p /env/bin && ln -s /usr/bin/python3 /env/bin/python"],
    }
    with running_worker(settings, concurrency=4), SessionDriver(settings) as driver:
        ids = [
            driver.submit("repair", data, replies=[reply("done")], session_id=f"ten-{i}")
            for i in range(10)
        ]
        heads = [driver.run_until(sid, timeout=120) for sid in ids]
        rows = driver.client.store.environments.find()
        events = [e.kind.value for sid in ids for e in driver.client.load(sid).events]
    assert all(h.status is Status.COMPLETED for h in heads), [h.error_message for h in heads]
    keys = {h.result["environment"]["key"] for h in heads}
    assert len(keys) == 1 and [r.key for r in rows] == list(keys)
    assert rows[0].attempts == 1 and rows[0].sessions == 10
    assert sum(h.result["environment"]["built"] for h in heads) == 1
    assert events.count("environment_waiting") >= 1  # some waited, through delayed ticks


def test_a_second_host_unpacks_it_from_the_artifact_store(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    data = {
        "workspace": str(source),
        "test_command": "python -m unittest discover -s tests",
        "setup": [
            "mkdir -p /env/bin && ln -s /usr/bin/python3 /env/bin/python",
            "echo v1 > /env/v",
        ],
    }
    first = deployment(tmp_path / "deploy", workspaces_dir=tmp_path / "host-a")
    with running_worker(first), SessionDriver(first) as driver:
        a = driver.run(driver.submit("repair", data, replies=[reply("done")]))
    built = first.model_copy(update={"workspaces_dir": tmp_path / "host-b"})
    probe = call("run_command", command="cat /env/v; readlink /env/bin/python")
    with running_worker(built), SessionDriver(built) as driver:
        b = driver.run(driver.submit("repair", data, replies=[reply("look", probe), reply("ok")]))
        row = driver.client.store.environments.find()[0]
    key = a.head.result["environment"]["key"]
    assert a.head.result["environment"]["built"] is True
    assert b.head.result["environment"] == {**b.head.result["environment"], "key": key}
    assert b.head.result["environment"]["built"] is False
    assert row.attempts == 1  # setup did not run again
    assert "v1" in b.observations[0].content and "/usr/bin/python3" in b.observations[0].content
    assert (tmp_path / "host-b" / "environments" / key / "v").read_text() == "v1\n"


def test_retention_drops_an_environment_no_live_session_uses(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from tickwork.worker.files.environments import drop_unused
    from tickwork.worker.tick.app import make_app, runtime

    source = project(tmp_path / "src")
    settings = deployment(tmp_path / "deploy")
    data = {"workspace": str(source), "test_command": "true", "setup": ["echo x > /env/x"]}
    with running_worker(settings), SessionDriver(settings) as driver:
        done = driver.run(driver.submit("repair", data, replies=[reply("done")]))
        waiting = driver.submit(
            "repair",
            {**data, "setup": ["echo y > /env/y"]},
            replies=[reply("w", call("write_file", path="a", content="a")), reply("done")],
        )
        driver.run_until(waiting, Status.WAITING_APPROVAL)
        app = make_app(settings, relay=False)
        rt = runtime(app)
        left_by_a_kill = settings.workspaces_path / "environments" / ".build-0123-abcd"
        (left_by_a_kill / "env").mkdir(parents=True)
        os.utime(left_by_a_kill, (1, 1))
        try:
            now = datetime.now(UTC)
            assert drop_unused(rt, now=now) == 0  # used just now
            later = now + timedelta(days=8)
            assert drop_unused(rt, now=later) == 1  # the waiting session's stays
            left = rt.store.environments.find()
        finally:
            app.close()
    gone = done.head.result["environment"]["key"]
    assert [e.key for e in left] != [gone] and len(left) == 1
    assert not (settings.workspaces_path / "environments" / gone).exists()
    assert (settings.workspaces_path / "environments" / left[0].key).is_dir()
    assert not left_by_a_kill.exists()


def test_a_fork_reuses_its_parents_environment(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    settings = deployment(tmp_path / "deploy")
    data = {"workspace": str(source), "test_command": "cat /env/v", "setup": ["echo v1 > /env/v"]}
    with running_worker(settings), SessionDriver(settings) as driver:
        parent = driver.run(
            driver.submit(
                "repair",
                data,
                replies=[reply("look", call("run_command", command="cat /env/v")), reply("done")],
            )
        )
        fork = driver.client.fork(parent.head.id, from_step=1, by="tests")
        child = driver.run(fork.id)
        row = driver.client.store.environments.find()[0]
    key = parent.head.result["environment"]["key"]
    assert child.head.status is Status.COMPLETED, child.head.error_message
    assert child.head.result["environment"]["key"] == key
    assert child.head.result["environment"]["built"] is False
    assert (row.attempts, row.sessions) == (1, 2)
    assert child.head.result["tests"]["passed"] is True


def test_a_fork_of_an_env_setup_dead_letter_builds_it_again(tmp_path: Path) -> None:
    """A setup failed by something outside the job (here: by the session's id) is retried
    by a fork from its dead letter; the failure's first line says what to do next."""
    source = project(tmp_path / "src")
    # fails for the first session only: the fork's id starts with "again-"
    flaky = 'case "$TICKWORK_SESSION_ID" in again-*) echo ok > /env/ok ;; *) exit 5 ;; esac'
    data = {"workspace": str(source), "test_command": "cat /env/ok", "setup": [flaky]}
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        first = driver.submit("repair", data, replies=[reply("done")])
        failed = driver.run_until(first, Status.FAILED, timeout=60)
        fork = driver.client.fork(first, from_step=0, by="tests", new_id="again-1")
        done = driver.run(fork.id)
        row = driver.client.store.environments.find()[0]
    assert failed.error_code is ErrorCode.ENV_SETUP
    key = failed.result["environment"]["key"]
    first_line = failed.error_message.splitlines()[0]
    assert "Next: fix the `--setup` commands and submit the job again" in first_line
    assert "a fork runs the same setup again" in first_line
    assert f"the whole log: `tickwork env show {key[:12]}`" in first_line
    assert done.head.status is Status.COMPLETED, done.head.error_message
    assert done.head.result["environment"]["built"] is True
    assert done.head.result["tests"]["passed"] is True
    assert (row.status.value, row.key) == ("ready", key)


def test_a_failed_setup_says_first_which_command_stopped_it_and_what_was_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message was the log's last 4,000 characters: `dlq ls` and a card's first line
    showed the middle of a command (`sh\\nexec /env/bin/python -m pip ...`), and why pip
    failed (the proxy refused the index's address) only at its very end."""
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", "localhost")
    source = project(tmp_path / "src")
    fetch = "python3 -c \"import urllib.request as u; u.urlopen('http://localhost:9/')\""
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "true", "setup": ["seq 3000", fetch]},
            replies=[reply("never asked")],
        )
        head = driver.run_until(sid, Status.FAILED, timeout=60)
        letter = driver.client.dead_letters()[0]
    first = head.error_message.splitlines()[0]
    assert first.startswith("the environment's setup failed (environment "), first
    assert "setup stopped at `python3 -c" in first and "it exited 1" in first, first
    assert "; egress refused localhost:9" in first and "loopback" in first, first
    # the next step is the allow-list, not other setup commands
    assert "Next: if the setup needs that connection, let the workers make it" in first, first
    assert "fork the session from its start (`tickwork dlq fork ID --from-step 0`)" in first
    assert "TICKWORK_EGRESS_ALLOW, docs/REPAIR.md (`tickwork docs repair`)" in first, first
    assert head.error_message.splitlines()[1] == "…"  # the log's end, from a line's start
    assert letter.message.splitlines()[0] == first


#: what pip says asked to install into a Debian system's Python (PEP 668), printed by a
#: command that does not name it (the log holds each command too)
PEP_668 = (
    "printf 'error: externally-%s\\n\\n%s\\n' managed-environment "
    "'This environment is externally managed' >&2; exit 1"
)


def test_a_setup_pip_refused_for_the_system_s_python_says_to_make_the_venv_first(
    tmp_path: Path,
) -> None:
    """`--setup "pip install frobnicator_zz"` failed with pip's PEP 668 text alone: given
    setup commands make /env themselves (`python3 -m venv /env`), which nothing said."""
    source = project(tmp_path / "src")
    data = {"workspace": str(source), "test_command": "true", "setup": [PEP_668]}
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit("repair", data, replies=[reply("never asked")])
        head = driver.run_until(sid, Status.FAILED, timeout=60)
    first = head.error_message.splitlines()[0]
    assert "pip refused to install into the system's Python" in first, first
    assert (
        '--setup "python3 -m venv /env"' in first
        and "docs/ENVIRONMENTS.md (`tickwork docs environments`)" in first
    ), first
    # it is the next step, which `dlq ls` keeps whole: it cut what went wrong before it
    from tickwork.render import gist

    assert ". Next: pip refused to install into the system's Python" in gist(first, 100)
    assert "then submit the job again; the whole log: `tickwork env show " in first, first


#: what pip says of a requirement its index lacks (toolz's build requirement
#: setuptools-git-versioning on an index without it), printed by a command that does not
#: name it
NOT_ON_INDEX = (
    "printf 'ERROR: Could not find a version that satisfies the requirement %s "
    "(from versions: none)\\nERROR: No matching distribution found for %s\\n' "
    "frobnicator-zz'>=2.0' frobnicator-zz'>=2.0' >&2; exit 1"
)


def test_a_setup_stopped_by_a_requirement_the_index_lacks_names_it_first(
    tmp_path: Path,
) -> None:
    """toolz's `auto` setup failed on an index without setuptools-git-versioning, and the
    message's first line (`dlq ls`, the card) named only the pip command, cut before the
    requirement: pip's "No matching distribution found for ..." was deep in the log."""
    source = project(tmp_path / "src")
    data = {"workspace": str(source), "test_command": "true", "setup": [NOT_ON_INDEX]}
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit("repair", data, replies=[reply("never asked")])
        head = driver.run_until(sid, Status.FAILED, timeout=60)
        letter = driver.client.dead_letters()[0]
    first = head.error_message.splitlines()[0]
    assert (
        ". Next: pip found no distribution of frobnicator-zz>=2.0 on the package index (none "
        "there, or none for the sandbox's Python): make the index hold it "
        "(TICKWORK_PIP_INDEX_URL names the index setup uses), and fork the session from its "
        "start (`tickwork dlq fork ID --from-step 0`), which builds it again; else fix the "
        "`--setup` commands without frobnicator-zz>=2.0 and submit the job again" in first
    ), first
    assert letter.message.splitlines()[0] == first
    # `dlq ls` cuts what went wrong to its width, but keeps the next step whole
    from tickwork.render import gist

    assert "pip found no distribution of frobnicator-zz>=2.0" in gist(first, 100)


def test_a_requirement_not_found_for_want_of_network_is_not_blamed_on_the_index() -> None:
    """pip finds nothing when the sandbox gave it no network, or the proxy refused the
    index: what the message names then is the network, not the index."""
    from tickwork.worker.files.environments import _failure

    pip = "ERROR: No matching distribution found for pytest"
    stopped = "setup stopped at `/env/bin/pip install pytest`: it exited 1"
    offline = f"$ /env/bin/pip install pytest\n{pip}\n--- no network in the sandbox ---\nx"
    refused = f"$ /env/bin/pip install pytest\n{pip}\negress refused pypi.org:443 (why)"
    for log in (offline, refused):
        first = _failure("a" * 64, f"{log}\n{stopped}", auto=False).splitlines()[0]
        assert "setup stopped at" in first and "no distribution" not in first, first
    first = _failure("a" * 64, f"{pip}\n{stopped}", auto=True).splitlines()[0]
    assert "pip found no distribution of pytest on the package index" in first, first


def test_an_environment_build_is_claimed_under_the_worker_name_its_tick_leases_as(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator matches a build's claim to a worker as a lease: by the node name Celery
    gives the worker (`--hostname`). The claim named the host alone (`host:pid:thread`)
    while the tick that made it leased its session as `node:pid:thread@K`."""
    from tickwork.store.environments import Environments
    from tickwork.worker.tick.advance import advance
    from tickwork.worker.tick.app import make_app, runtime

    owners: list[str] = []
    claim = Environments.claim

    def claimed(self: Environments, *args: Any, owner: str, **kwargs: Any) -> Any:
        owners.append(owner)
        return claim(self, *args, owner=owner, **kwargs)

    monkeypatch.setattr(Environments, "claim", claimed)
    source = project(tmp_path / "src")
    settings = deployment(tmp_path / "deploy")
    app = make_app(settings, relay=False)
    data = {"workspace": str(source), "test_command": "true", "setup": ["echo x > /env/marker"]}
    try:
        with SessionDriver(settings) as driver:
            sid = driver.submit("repair", data, replies=[reply("done")])
            head = driver.client.store.get(sid)
            while head.status.runnable and head.step == 0:
                advance(runtime(app), sid, head.version, node="alpha@box")
                head = driver.client.store.get(sid)
    finally:
        app.close()
    assert head.result["environment"]["status"] == "ready", head.error_message
    assert [o.rsplit(":", 1)[0] for o in owners] == [f"alpha@box:{os.getpid()}"], owners
