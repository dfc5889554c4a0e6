"""Escape attempts against the command sandbox itself (worker/sandbox/runner.py): each is
refused or contained. Through real ticks: test_sandbox_e2e.py."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery, signals
from tickwork.fsm.errors import SandboxUnavailable, ToolError
from tickwork.worker.config.settings import Settings
from tickwork.worker.sandbox.runner import Limits, Sandbox, check, run_sandboxed, sandbox_of
from tickwork.worker.sandbox.shell import ShellResult
from tickwork.worker.tick.app import log_sandbox, make_app

from tests.processes import processes_with
from tests.services import IN_CI

SECRET = "TOP SECRET: the launch codes"
ROOT = Path(__file__).resolve().parents[2]
#: the sandbox's python3 (the system's, on its PATH): the worker's venv is not in there
PYTHON = "python3"

# locally skipped where bubblewrap cannot run; under CI=true these fail instead
pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """A working copy, and beside it a secret, a state dir and another session's copy."""
    (tmp_path / "secret.txt").write_text(SECRET)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "tickwork.db").write_text(SECRET)
    (tmp_path / "other-session").mkdir()
    (tmp_path / "other-session" / "notes.txt").write_text(SECRET)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("inside\n")
    return workspace, tmp_path


def run(workspace: Path, command: str, *, timeout_s: float = 30, **kw: object) -> ShellResult:
    return run_sandboxed(command, workdir=workspace, timeout_s=timeout_s, **kw)  # type: ignore[arg-type]


def gone(marker: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_command_runs_in_the_working_copy_as_an_unprivileged_user(
    places: tuple[Path, Path],
) -> None:
    workspace, _ = places
    result = run(workspace, "pwd; id -u; cat a.txt; echo made > made.txt")
    assert result.exit_code == 0, result.describe()
    cwd, uid, content = result.stdout.splitlines()
    assert (cwd, content) == ("/workspace", "inside")
    assert int(uid) != 0
    assert (workspace / "made.txt").read_text() == "made\n"


def owners(workspace: Path) -> set[tuple[int, int]]:
    return {(p.lstat().st_uid, p.lstat().st_gid) for p in [workspace, *workspace.rglob("*")]}


def test_the_working_copy_is_given_back_to_its_owner(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    owner = (workspace.stat().st_uid, workspace.stat().st_gid)
    run(workspace, "mkdir -p new/deep && echo x > new/deep/f.txt && echo y >> a.txt")
    assert (workspace / "new" / "deep" / "f.txt").exists()
    assert owners(workspace) == {owner}


def test_a_working_copy_left_to_the_sandbox_user_is_given_back(
    places: tuple[Path, Path],
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker hands the working copy to another user")
    workspace, tmp = places
    sandbox = Sandbox()
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, sandbox.uid, sandbox.gid)  # as a worker killed mid-command leaves it
    run(workspace, "true", sandbox=sandbox)
    assert owners(workspace) == {(tmp.stat().st_uid, tmp.stat().st_gid)}


def test_a_file_hard_linked_from_outside_is_not_handed_to_the_command(
    places: tuple[Path, Path],
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker hands the working copy to another user")
    workspace, tmp = places
    os.link(tmp / "secret.txt", workspace / "linked.txt")
    (tmp / "secret.txt").chmod(0o600)
    owner = (tmp / "secret.txt").stat().st_uid
    result = run(workspace, "cat linked.txt; echo pwned >> linked.txt")
    assert SECRET not in result.stdout and "Permission denied" in result.stderr
    assert (tmp / "secret.txt").read_text() == SECRET
    assert (tmp / "secret.txt").stat().st_uid == owner


@pytest.mark.parametrize(
    "command",
    [
        "cat ../secret.txt",
        "cat {tmp}/secret.txt",
        "cat {tmp}/state/tickwork.db",
        "cat {tmp}/other-session/notes.txt",
        "ls -la {tmp} ..",
        "head -1 /etc/shadow",
        "cat /proc/1/environ /proc/*/environ",
        "ls /root /home /run /var/run /var/run/postgresql /run/postgresql",
    ],
)
def test_files_outside_the_working_copy_cannot_be_read(
    places: tuple[Path, Path], command: str
) -> None:
    workspace, tmp = places
    result = run(workspace, command.replace("{tmp}", str(tmp)))
    assert SECRET not in result.describe()
    assert result.exit_code != 0 and "$" not in result.stdout  # no shadow hash either


def test_nothing_of_the_host_beside_the_working_copy_is_there_to_find(
    places: tuple[Path, Path],
) -> None:
    workspace, _ = places
    names = "-name secret.txt -o -name tickwork.db -o -name notes.txt -o -name shadow"
    result = run(
        workspace,
        f"find / \\( -path /proc -o -path /sys \\) -prune -o \\( {names} \\) -print; "
        "cat /etc/passwd /etc/group",
        timeout_s=120,
    )
    users = {line.split(":")[0] for line in result.stdout.splitlines() if ":" in line}
    assert users == {"root", "sandbox"}, result.describe()
    assert [line for line in result.stdout.splitlines() if ":" not in line] == []


def test_the_workers_environment_does_not_leak(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, _ = places
    monkeypatch.setenv("TICKWORK_DATABASE_URL", f"postgresql://u:{SECRET}@db/x")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    result = run(workspace, "env; cat /proc/1/environ /proc/self/environ; echo $HOME")
    assert SECRET not in result.describe()
    assert "PATH=" in result.stdout and result.stdout.rstrip().endswith("/tmp")


@pytest.mark.parametrize(
    "command",
    [
        "echo pwned > ../tickwork-sandbox-pwned.txt",
        "echo pwned > {tmp}/tickwork-sandbox-pwned.txt",
        "echo pwned > {tmp}/state/tickwork-sandbox-pwned.txt",
        "echo pwned > /usr/tickwork-sandbox-pwned.txt",
        "echo pwned > /etc/tickwork-sandbox-pwned.txt",
        "echo pwned > {venv}/tickwork-sandbox-pwned.txt",
        "echo pwned > /tickwork-sandbox-pwned.txt",
        "echo pwned > /tmp/tickwork-sandbox-pwned.txt",
    ],
)
def test_nothing_outside_the_working_copy_can_be_written(
    places: tuple[Path, Path], command: str
) -> None:
    workspace, tmp = places
    before = sorted(p.name for p in tmp.iterdir())
    command = command.replace("{tmp}", str(tmp)).replace("{venv}", sys.prefix)
    run(workspace, command)
    assert sorted(p.name for p in tmp.iterdir()) == before
    assert not (tmp / "state" / "tickwork-sandbox-pwned.txt").exists()
    for host in ("/usr", "/etc", sys.prefix, "/", "/tmp"):
        assert not Path(host, "tickwork-sandbox-pwned.txt").exists()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port open on the host's loopback."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


CONNECT = (
    PYTHON + " -c 'import socket, sys\n"
    "for port in sys.argv[1:]:\n"
    "    try:\n"
    '        socket.create_connection(("127.0.0.1", int(port)), 2).close(); print(port, "open")\n'
    "    except OSError as e:\n"
    '        print(port, "refused", e)\' '
)


def test_no_network_by_default_not_even_the_hosts_loopback(
    places: tuple[Path, Path], listener: int
) -> None:
    workspace, _ = places
    result = run(workspace, CONNECT + f"5432 6379 {listener}")
    assert result.exit_code == 0, result.describe()
    assert "open" not in result.stdout
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [
        ["5432", "refused"],
        ["6379", "refused"],
        [str(listener), "refused"],
    ]


def test_a_lookup_without_network_says_the_sandbox_gives_none(
    places: tuple[Path, Path],
) -> None:
    """`urlopen('https://pypi.org/')` in a session whose commands have no network said only
    "Temporary failure in name resolution": nothing said it was the sandbox."""
    workspace, _ = places
    looked = run(workspace, f"echo '{LOOKED}' >&2")
    told = looked.describe()
    assert "--- no network in the sandbox ---\nthis command runs without network" in told
    assert "no network in the sandbox" not in run(workspace, "echo fine").describe()


#: what a command that found no network prints (Python's urlopen)
LOOKED = "URLError: [Errno -3] Temporary failure in name resolution"


@pytest.mark.parametrize(
    ("config", "said"),
    [
        pytest.param(
            {"network": "setup"},
            ['says `"network": "setup"` (the default)', "not its commands", '`"network": "all"`'],
            id="repair_setup_only",
        ),
        pytest.param(
            {"network": "none"},
            ['says `"network": "none"`', "nor to its setup"],
            id="repair_none",
        ),
        # a session of another kind that runs commands: no repair's input to point to
        pytest.param({}, ["job kind asks for no network"], id="other_kind"),
    ],
)
def test_a_command_without_network_is_told_why_in_its_sessions_words(
    places: tuple[Path, Path], config: dict[str, str], said: list[str]
) -> None:
    """The note named "a repair's commands" and `"network": "all"` whatever the session: one
    whose input said "none", or of a kind that takes no `network`, was told what is not so."""
    from tickwork.worker.jobs.repair.toolkit import run_in_workspace

    workspace, _ = places
    told = run_in_workspace(
        f"echo '{LOOKED}' >&2", config=config, workdir=workspace, timeout_s=30, env={}
    ).describe()
    note = told.split("--- no network in the sandbox ---\n", 1)[1]
    assert note.startswith("this command runs without network: "), told
    assert all(s in note for s in said), note
    assert "a repair's commands" not in note and "docs/REPAIR.md (`tickwork docs repair`)" in note


def test_a_setup_or_a_session_the_workers_allow_nothing_is_told_so() -> None:
    from tickwork.worker.sandbox.egress import offline_note

    nothing, some = Settings(egress_allow=""), Settings(egress_allow="pypi.org")
    assert offline_note({"network": "none"}, some, setup=True).startswith(
        "this setup command runs without network: "
    )
    assert "TICKWORK_EGRESS_ALLOW is empty" in offline_note({"network": "all"}, nothing)
    narrowed = offline_note({"network": "all", "egress_allow": ["example.org"]}, some)
    assert "`egress_allow` keeps none of the hosts" in narrowed


def test_a_fork_bomb_is_contained_and_killed_with_the_command(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    started = time.monotonic()
    result = run(workspace, "bomb() { bomb | bomb & }; bomb; sleep 600.4242", timeout_s=5)
    assert time.monotonic() - started < 30
    # the bomb fills the sandbox's process limit: either the shell's own `sleep` started
    # first and the command timed out, or the limit was reached first and the shell could
    # not fork it and failed; either way the command ends and takes every bomb with it
    # (their command line is the shell's, marker included)
    assert result.timed_out or (result.exit_code != 0 and "Cannot fork" in result.stderr), (
        result.describe()
    )
    assert gone("600.4242")
    counted = run(workspace, "for i in $(seq 600); do sleep 5 & done; echo spawned")
    assert "Cannot fork" in counted.stderr or "fork" in counted.stderr.lower()


def test_a_background_process_does_not_outlive_the_command(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    result = run(workspace, "(sleep 601.4242 &); nohup sleep 601.4242 >/dev/null 2>&1 & echo bye")
    assert result.exit_code == 0 and result.stdout == "bye\n"
    assert gone("601.4242")


def test_the_sandbox_dies_with_a_killed_worker(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    script = (
        "import sys; from pathlib import Path\n"
        "from tickwork.worker.sandbox.runner import run_sandboxed\n"
        "run_sandboxed('touch started; sleep 602.4242 & sleep 602.4242', "
        "workdir=Path(sys.argv[1]), timeout_s=600)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script, str(workspace)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (workspace / "started").exists():
            assert time.monotonic() < deadline and worker.poll() is None, "the command never ran"
            time.sleep(0.05)
        assert len(processes_with("602.4242")) >= 2
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        assert gone("602.4242"), processes_with("602.4242")
    finally:
        worker.kill()
        worker.wait()


def test_ten_gigabytes_of_output_are_cut_while_read(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    limit = Sandbox().limits.output_bytes
    started = time.monotonic()
    result = run(workspace, "head -c 10G /dev/zero | tr '\\0' y; yes", timeout_s=120)
    assert result.killed == f"its output passed {limit} bytes"
    assert result.exit_code is None and len(result.stdout) + len(result.stderr) <= limit
    assert time.monotonic() - started < 60
    assert gone("head -c 10G")


def test_memory_and_file_size_are_limited(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    small = Sandbox(limits=Limits(memory_bytes=512 << 20, file_bytes=1 << 20))
    memory = run(workspace, f"{PYTHON} -c 'bytearray(1 << 30)'", sandbox=small)
    assert memory.exit_code != 0 and "MemoryError" in memory.stderr
    run(workspace, "head -c 5M /dev/zero > big.bin", sandbox=small)
    assert (workspace / "big.bin").stat().st_size <= 1 << 20


def test_cpu_time_is_limited(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    result = run(workspace, "while :; do :; done", sandbox=Sandbox(limits=Limits(cpu_s=1)))
    assert result.exit_code not in (0, None) and not result.timed_out


def test_a_stop_kills_the_command_at_once(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    asked = time.monotonic() + 1.0
    result = run(
        workspace,
        "sleep 603.4242",
        timeout_s=600,
        stop=lambda: "the session was cancelled" if time.monotonic() > asked else None,
    )
    assert result.killed == "the session was cancelled" and result.exit_code is None
    assert gone("603.4242")


def test_without_bubblewrap_commands_are_refused_with_what_to_do(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    workspace, _ = places
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SandboxUnavailable) as raised:
        run(workspace, "touch ran.txt", sandbox=Sandbox(uid=4242))
    message = str(raised.value)
    assert "bubblewrap (bwrap) is not installed" in message
    assert "apt-get install bubblewrap" in message and "TICKWORK_SANDBOX=none" in message
    assert not (workspace / "ran.txt").exists()


def test_a_command_too_long_to_start_says_so_and_the_sandbox_stays_in_use(
    places: tuple[Path, Path],
) -> None:
    """Linux starts no program with an argument past 128 KiB: that was reported as a
    sandbox that cannot run ("install bubblewrap"), and the sandbox was taken for broken
    (found by an outside run)."""
    workspace, _ = places
    sandbox = Sandbox()
    with pytest.raises(ToolError) as raised:
        run(workspace, "echo " + "x" * 200_000 + " > ran.txt", sandbox=sandbox)
    message = str(raised.value)
    assert not isinstance(raised.value, SandboxUnavailable)
    assert "Argument list too long" in message and "shorten the command" in message
    assert "install bubblewrap" not in message
    assert not (workspace / "ran.txt").exists()
    assert check(sandbox) is None
    assert run(workspace, "echo ok", sandbox=sandbox).stdout == "ok\n"


def test_none_runs_on_the_host_and_the_worker_warns_at_start(
    places: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    workspace, _ = places
    result = run(workspace, "pwd", sandbox=Sandbox(mode="none"))
    assert result.stdout.strip() == str(workspace.resolve())
    with caplog.at_level(logging.INFO, logger="tickwork.worker"):
        log_sandbox(Settings(sandbox="none"))
        log_sandbox(Settings())
        log_sandbox(Settings(egress_allow="pypi.org,127.0.0.1:3141"))
    unconfined, confined, allowed = caplog.records
    assert unconfined.levelno == logging.WARNING and "UNCONFINED" in unconfined.message
    assert confined.levelno == logging.INFO and "bubblewrap" in confined.message
    assert confined.message.endswith("no egress allow-list")
    assert allowed.message.endswith("egress allow-list: pypi.org,127.0.0.1:3141")


def test_an_unknown_sandbox_setting_is_refused() -> None:
    with pytest.raises(ValueError, match=r"bwrap .*or none"):
        Settings(sandbox="docker")
    with pytest.raises(ValueError, match="absolute"):
        Settings(sandbox_paths=["opt/node"])
    assert sandbox_of(Settings(sandbox_cpu_s=7)).limits.cpu_s == 7


NOT_ROOT_WORKER = """
import json, os, site, sys
from pathlib import Path
# the venv's site-packages with their .pth files (an editable install maps the namespace)
for where in os.environ["TICKWORK_TEST_SITES"].split(os.pathsep):
    site.addsitedir(where)
from tickwork.worker.config.allowlist import AllowList
from tickwork.worker.sandbox.egress import EgressPolicy
from tickwork.worker.sandbox.runner import run_sandboxed
result = run_sandboxed(
    "id -u; echo made > made.txt; cat /etc/shadow ../secret.txt; unshare -Urm true; "
    "echo unshare=$?; " + sys.argv[2],
    workdir=Path(sys.argv[1]),
    timeout_s=30,
)
proxied = run_sandboxed(  # the proxy's socket, made by this user, reached from inside
    "python3 -c 'import urllib.request as u\\ntry: u.urlopen(\\"http://10.0.0.1/\\")\\n"
    "except Exception as e: print(e.code, e.read().decode())'",
    workdir=Path(sys.argv[1]),
    timeout_s=30,
    egress=EgressPolicy(AllowList.of("10.0.0.1")),
)
print(json.dumps({"stdout": result.stdout, "stderr": result.stderr, "proxied": proxied.stdout}))
"""


def test_a_worker_that_is_not_root_runs_commands_as_itself_in_a_user_namespace() -> None:
    if os.geteuid() != 0:
        pytest.skip("starts a worker as another user, which needs root")
    python = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    site = [p for p in sys.path if p.endswith("site-packages")]
    top = Path(tempfile.mkdtemp(prefix="tickwork-not-root-", dir="/tmp"))
    try:
        top.chmod(0o755)
        (top / "secret.txt").write_text(SECRET)
        (top / "secret.txt").chmod(0o644)  # readable on the host: the sandbox must hide it
        workspace = top / "workspace"
        workspace.mkdir()
        os.chown(workspace, 65534, 65534)
        env = {
            "PATH": os.defpath,
            "PYTHONPATH": str(ROOT),
            "TICKWORK_TEST_SITES": os.pathsep.join(site),
        }
        connect = CONNECT.replace(PYTHON, str(python), 1) + "5432"
        args = [str(python), "-c", NOT_ROOT_WORKER, str(workspace), connect]
        try:
            done = subprocess.run(
                args, env=env, cwd="/", capture_output=True, text=True, timeout=60,
                user=65534, group=65534, extra_groups=[],
            )  # fmt: skip
        except OSError as exc:
            pytest.skip(f"cannot start {python} as another user: {exc}")
        if "ModuleNotFoundError" in done.stderr or "Permission denied" in done.stderr:
            pytest.skip(f"this checkout cannot be imported by another user: {done.stderr[-300:]}")
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        uid, *rest = seen["stdout"].splitlines()
        assert uid == "65534" and rest[0] == "unshare=1", seen  # no nested user namespace
        assert rest[1].split()[:2] == ["5432", "refused"]
        assert SECRET not in seen["stdout"] + seen["stderr"]
        assert (workspace / "made.txt").read_text() == "made\n"
        assert seen["proxied"].startswith("403 egress refused: 10.0.0.1"), seen
    finally:
        shutil.rmtree(top)


def test_a_test_suite_with_processes_and_git_runs(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    pool = f"{PYTHON} -c 'import multiprocessing as m; print(m.Pool(2).map(abs, [-1, -2]))'"
    result = run(workspace, f"{pool} && git init -q . && git add -A && git status --short")
    assert result.exit_code == 0, result.describe()
    assert result.stdout.splitlines() == ["[1, 2]", "A  a.txt"]


@pytest.mark.parametrize("where", ["/", "/etc", "/usr/lib", "/var", "{home}", "{code}", "{prefix}"])
def test_a_working_copy_that_holds_the_system_or_the_worker_is_refused(where: str) -> None:
    path = Path(where.format(home=Path.home(), code=ROOT, prefix=sys.prefix))
    with pytest.raises(ToolError, match="commands only run in a project's own directory"):
        run(path, "touch /workspace/tickwork-sandbox-pwned.txt")
    assert not Path(path, "tickwork-sandbox-pwned.txt").exists()


def test_a_state_dir_inside_the_working_copy_is_hidden_from_commands(
    places: tuple[Path, Path],
) -> None:
    _, tmp = places  # tmp holds the state dir, as a project holds `.tickwork/`
    state = tmp / "state"
    before = owners(state)
    result = run(
        tmp,
        "ls -la state; cat state/tickwork.db; echo x > state/tickwork.db; echo y > state/new",
        sandbox=Sandbox(hide=(str(state),)),
    )
    assert SECRET not in result.describe()
    assert [p.name for p in state.iterdir()] == ["tickwork.db"]
    assert (state / "tickwork.db").read_text() == SECRET and owners(state) == before
    assert (tmp / "secret.txt").exists()  # the rest of the working copy is there


class Consumer:
    """What Celery sends `worker_ready` from: it knows its app."""

    def __init__(self, app: Celery) -> None:
        self.app = app


def test_a_worker_says_at_start_what_its_commands_run_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(state_dir=tmp_path / "state", sandbox="none")
    with (
        make_app(settings, relay=False) as app,
        make_app(settings, relay=False) as other,
        caplog.at_level(logging.INFO, logger="tickwork.worker"),
    ):
        signals.worker_ready.send(sender=Consumer(app))
    # the sandbox's line (the release's and the egress lines are said beside it)
    said = [r for r in caplog.records if r.name == "tickwork.worker" and "SANDBOX" in r.message]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert said[0].message.startswith("TICKWORK_SANDBOX=none: run_command and test commands")
    assert other is not app
