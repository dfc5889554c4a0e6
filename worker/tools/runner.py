"""Commands in the OS sandbox: bubblewrap (DESIGN section 10).

`run_sandboxed` runs one shell command with
- the working copy read-write at /workspace (its cwd); the system read-only (/usr and the
  /bin, /sbin, /lib* beside it, a few files of /etc: generated passwd and group, no shadow);
  the worker's Python (its prefixes, e.g. a venv and the interpreter it points at) and the
  operator's `paths` read-only at their own place; nothing else of the host: not the
  worker's home, state dir, sockets (/run) or other sessions. /tmp is a private tmpfs (also
  HOME), /proc is the sandbox's own, /dev minimal;
- new PID, IPC, UTS and cgroup namespaces and, unless the job asks for network, a network
  namespace with only its own loopback; `--die-with-parent` and `--new-session`: killing
  bwrap (the tick's timeout, a cancel, the worker dying) kills everything inside;
- an unprivileged user: a worker running as root starts bwrap as root and drops to
  `uid:gid` inside with setpriv, the working copy handed to that user for the run and taken
  back after; a worker running as another user runs bwrap in a user namespace as itself;
- limits (prlimit): CPU seconds, address space, processes, file size, no core files; the
  output is capped while it is read.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fsm.errors import SandboxUnavailable, ToolError

from .ownership import handed_over
from .shell import ShellResult, Stop, command_env, run_process, run_shell

if TYPE_CHECKING:
    from worker.settings import Settings

log = logging.getLogger("tickwork.sandbox")

MODES = ("bwrap", "none")
#: where the working copy is inside the sandbox
WORKDIR = "/workspace"
#: where a session's environment is mounted (worker/environments.py)
ENV_DIR = "/env"
#: host directories bound read-only (or re-created as the symlinks they are)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: files of /etc a program may need; nothing that identifies the host's users or secrets
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone")
#: and the ones name resolution and TLS need, for a job that asked for network
ETC_NETWORK = (
    *("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf"),
    *("ssl", "ca-certificates", "ca-certificates.conf"),
)
PRLIMIT, SETPRIV = "/usr/bin/prlimit", "/usr/bin/setpriv"
#: host directories a working copy may not lie in
SYSTEM_ONLY = (*SYSTEM, "/etc", "/boot", "/dev", "/proc", "/sys", "/run")
#: tickwork's own code: a working copy holding it could change what the worker runs next
CODE = str(Path(__file__).resolve().parents[2])
HOW_TO = (
    "install bubblewrap (`apt-get install bubblewrap`) and let it create namespaces (see "
    "ops/RUNBOOK.md, Sandbox), or set TICKWORK_SANDBOX=none to run commands unconfined on purpose"
)


@dataclass(frozen=True)
class Limits:
    """What one command may use; each applies per process, `processes` per user."""

    cpu_s: int = 600
    memory_bytes: int = 4 << 30
    processes: int = 256
    file_bytes: int = 1 << 30
    #: stdout and stderr together; past it the command is killed
    output_bytes: int = 10 << 20
    #: the private /tmp (a tmpfs, so it is memory)
    tmp_bytes: int = 256 << 20


@dataclass(frozen=True)
class Sandbox:
    """How commands run: `bwrap`, or `none` (on the host, unconfined)."""

    mode: str = "bwrap"
    #: the user commands run as when the worker is root
    uid: int = 65534
    gid: int = 65534
    limits: Limits = field(default_factory=Limits)
    #: host paths bound read-only at the same place, besides the system and the worker's Python
    paths: tuple[str, ...] = ()
    #: host paths hidden from commands when the working copy holds them (the state dir:
    #: the embedded default keeps `.tickwork/` in the directory tickwork runs in)
    hide: tuple[str, ...] = ()


def sandbox_of(settings: Settings) -> Sandbox:
    return Sandbox(
        mode=settings.sandbox,
        uid=settings.sandbox_uid,
        gid=settings.sandbox_gid,
        limits=Limits(
            cpu_s=settings.sandbox_cpu_s,
            memory_bytes=settings.sandbox_memory_bytes,
            processes=settings.sandbox_processes,
            file_bytes=settings.sandbox_file_bytes,
            output_bytes=settings.sandbox_output_bytes,
            tmp_bytes=settings.sandbox_tmp_bytes,
        ),
        paths=tuple(settings.sandbox_paths),
        hide=(str(settings.state_dir.expanduser().resolve()),),
    )


def run_sandboxed(
    command: str,
    *,
    workdir: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    network: bool = False,
    sandbox: Sandbox | None = None,
    stop: Stop | None = None,
    environment: Path | None = None,
    environment_writable: bool = False,
) -> ShellResult:
    """Run `command` with /bin/sh in `workdir` inside the sandbox; `SandboxUnavailable` if
    bubblewrap cannot run here (unless the mode is `none`). `environment`: a host directory
    mounted at /env (`ENV_DIR`), read-only unless `environment_writable` (the setup that
    builds it), with /env/bin first on PATH (worker/environments.py)."""
    sandbox = sandbox or Sandbox()
    env = dict(env) if env is not None else command_env()
    if sandbox.mode == "none":
        return run_shell(
            command,
            cwd=workdir,
            timeout_s=timeout_s,
            env=env,
            max_output_bytes=sandbox.limits.output_bytes,
            stop=stop,
        )
    why = check(sandbox)
    if why is not None:
        raise SandboxUnavailable(f"the command was not run: {why}; {HOW_TO}")
    mount = None if environment is None else (environment, environment_writable)
    return _run(command, workdir, timeout_s, env, network, sandbox, stop, mount)


#: sandboxes that started once in this process; a failing one is tried again each time
_working: set[Sandbox] = set()


def check(sandbox: Sandbox) -> str | None:
    """Why commands cannot run in `sandbox` on this machine, or None if they can."""
    if sandbox.mode == "none" or sandbox in _working:
        return None
    if sandbox.mode not in MODES:
        return f"TICKWORK_SANDBOX={sandbox.mode!r} is not one of {', '.join(MODES)}"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    for tool in (PRLIMIT, SETPRIV) if os.geteuid() == 0 else (PRLIMIT,):
        if not os.access(tool, os.X_OK):
            return f"{tool} (util-linux) is missing"
    with tempfile.TemporaryDirectory(prefix="tickwork-probe-") as probe:
        try:
            result = _run("id -u", Path(probe), 30.0, command_env(), False, sandbox, None)
        except SandboxUnavailable as exc:
            return f"bwrap could not start: {exc.__cause__}"
    if result.exit_code != 0:
        said = " ".join((result.stderr or result.stdout).split())[:300]
        return f"bwrap failed (exit code {result.exit_code}): {said or 'no message'}"
    if result.stdout.strip() == "0":
        return "commands would run as root inside the sandbox; set TICKWORK_SANDBOX_UID"
    _working.add(sandbox)
    return None


def describe(sandbox: Sandbox) -> str:
    """One line for the worker's log at start: what commands run in, or why they cannot."""
    if sandbox.mode == "none":
        return (
            "TICKWORK_SANDBOX=none: run_command and test commands run on this host UNCONFINED, "
            "as the worker's user, with its files and network"
        )
    why = check(sandbox)
    if why is not None:
        return f"sandbox unavailable, commands will be refused: {why}; {HOW_TO}"
    who = f"uid {sandbox.uid}" if os.geteuid() == 0 else f"uid {os.getuid()} in a user namespace"
    lim = sandbox.limits
    return (
        f"commands run in bubblewrap as {who}: cpu {lim.cpu_s}s, memory {lim.memory_bytes} B, "
        f"{lim.processes} processes, files {lim.file_bytes} B, output {lim.output_bytes} B"
    )


def working_copy(workdir: Path, sandbox: Sandbox) -> Path:
    """`workdir`'s real path, or a `ToolError` if it is no place to give a command.

    Not a system directory, and not one that holds the worker's home, Python or code (a
    root worker hands the working copy to the sandbox's user for the run).
    """
    root = workdir.resolve(strict=True)
    inside = next((top for top in SYSTEM_ONLY if _below(str(root), top)), None)
    held = [*SYSTEM_ONLY, "/var", str(Path.home()), CODE, *host_paths()]
    holds = next((top for top in held if _below(os.path.realpath(top), str(root))), None)
    if inside or holds or str(root) == "/":
        raise ToolError(
            f"the working copy {root} is a system directory or holds {holds or inside or '/'}; "
            "commands only run in a project's own directory"
        )
    return root


def _run(
    command: str,
    workdir: Path,
    timeout_s: float,
    env: Mapping[str, str],
    network: bool,
    sandbox: Sandbox,
    stop: Stop | None,
    mount: tuple[Path, bool] | None = None,
) -> ShellResult:
    root = working_copy(workdir, sandbox)
    hidden = _hidden(root, sandbox.hide)
    privileged = os.geteuid() == 0
    uid, gid = (sandbox.uid, sandbox.gid) if privileged else (os.getuid(), os.getgid())
    inside = {
        **env,
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PWD": WORKDIR,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
    }
    if mount is not None:
        inside["PATH"] = f"{ENV_DIR}/bin:{inside.get('PATH') or os.defpath}"
    with ExitStack() as stack:
        if privileged:
            stack.enter_context(handed_over(root, uid, gid, skip=hidden))
            if mount is not None and mount[1]:
                stack.enter_context(handed_over(mount[0], uid, gid))
        passwd = stack.enter_context(
            _data(
                f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                f"sandbox:x:{uid}:{gid}:tickwork sandbox:/tmp:/bin/sh\n"
            )
        )
        group = stack.enter_context(_data(f"root:x:0:\nsandbox:x:{gid}:\n"))
        args = bwrap_args(
            command,
            workdir=root,
            env=inside,
            network=network,
            sandbox=sandbox,
            privileged=privileged,
            passwd_fd=passwd,
            group_fd=group,
            hidden=hidden,
            environment=mount,
        )
        try:
            return run_process(
                args,
                env={"PATH": os.defpath},
                timeout_s=timeout_s,
                max_output_bytes=sandbox.limits.output_bytes,
                stop=stop,
                pass_fds=(passwd, group),
            )
        except OSError as exc:  # e.g. bwrap was removed since it last worked
            _working.discard(sandbox)
            raise SandboxUnavailable(f"the command was not run: {exc}; {HOW_TO}") from exc


def bwrap_args(
    command: str,
    *,
    workdir: Path,
    env: Mapping[str, str],
    network: bool,
    sandbox: Sandbox,
    privileged: bool,
    passwd_fd: int,
    group_fd: int,
    hidden: tuple[str, ...] = (),
    environment: tuple[Path, bool] | None = None,
) -> list[str]:
    """The bwrap command line that runs `command` as described in this module's docstring;
    `environment`: (host directory, writable) mounted at /env."""
    args = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--hostname", "sandbox"]
    if not network:
        args.append("--unshare-net")
    if not privileged:
        args.append("--unshare-user")
    for top in SYSTEM:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):  # /dev/shm: POSIX semaphores (multiprocessing)
        args += ["--perms", "1777", "--size", str(sandbox.limits.tmp_bytes), "--tmpfs", scratch]
    args += ["--dir", "/etc"]
    for name in ETC + (ETC_NETWORK if network else ()):
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--perms", "0644", "--ro-bind-data", str(passwd_fd), "/etc/passwd"]
    args += ["--perms", "0644", "--ro-bind-data", str(group_fd), "/etc/group"]
    made: set[str] = set()
    for path in host_paths(sandbox.paths):
        for parent in reversed(Path(path).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind-try", path, path]
    args += ["--bind", str(workdir), WORKDIR]
    if environment is not None:
        args += ["--bind" if environment[1] else "--ro-bind", str(environment[0]), ENV_DIR]
    for path in hidden:  # an empty tmpfs over it
        args += ["--perms", "0000", "--tmpfs", str(Path(WORKDIR, Path(path).relative_to(workdir)))]
    args += ["--chdir", WORKDIR, "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    lim = sandbox.limits
    args += ["--", PRLIMIT, f"--cpu={lim.cpu_s}", f"--as={lim.memory_bytes}"]
    nproc = lim.processes if privileged else lim.processes + _tasks_of(os.getuid())
    args += [f"--nproc={nproc}", f"--fsize={lim.file_bytes}", "--core=0", "--"]
    if privileged:
        args += [SETPRIV, f"--reuid={sandbox.uid}", f"--regid={sandbox.gid}", "--clear-groups"]
        args += ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return [*args, "/bin/sh", "-c", command]


def host_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """The host directories bound read-only: the worker's Python outside /usr, and `extra`.

    The test command often names this interpreter (the demo's is `sys.executable -m
    unittest`), which may be a venv whose `python` links to an interpreter elsewhere.
    """
    found: list[str] = []
    prefixes = (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    executable = os.path.dirname(os.path.realpath(sys.executable))
    for path in (*prefixes, executable, *extra):
        real = os.path.realpath(path)
        if real == "/" or any(_below(real, top) for top in (*SYSTEM, *found)):
            continue
        found = [f for f in found if not _below(f, real)] + [real]
    return sorted(found)


def _below(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _tasks_of(uid: int) -> int:
    """Threads running as `uid` now: RLIMIT_NPROC counts them all, the worker's too."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1"))
    return count


@contextmanager
def _data(text: str) -> Iterator[int]:
    """A pipe's read end holding `text` (small: it fits the pipe's buffer), for bwrap."""
    read, write = os.pipe()
    try:
        os.write(write, text.encode())
        os.close(write)
        yield read
    finally:
        os.close(read)


def _hidden(root: Path, hide: tuple[str, ...]) -> tuple[str, ...]:
    """The directories of `hide` inside the working copy `root`, as real paths."""
    found = (os.path.realpath(path) for path in hide)
    return tuple(p for p in found if p != str(root) and _below(p, str(root)) and os.path.isdir(p))
