"""Commands in the OS sandbox: bubblewrap (docs/DESIGN.md section 10).

`run_sandboxed` runs one shell command with
- the working copy read-write at /workspace (its cwd); the system read-only (/usr and the
  /bin, /sbin, /lib* beside it, a few files of /etc: generated passwd, group and hosts, no
  shadow), from the host or from the operator's root filesystem (`rootfs`); on the host's,
  the base interpreter the worker's Python comes from where it is outside /usr (not the
  worker's venv); the operator's `paths` read-only at their own place; nothing else of the
  host: not the worker's home, state dir, sockets (/run) or other sessions. /tmp is a
  private tmpfs (also HOME), /proc is the sandbox's own, /dev minimal;
- the environment is tickwork's alone: PATH `/env/bin:/usr/local/bin:/usr/bin:/bin` (an
  environment's tools first), HOME, TMPDIR, LANG and the caller's `env`; nothing of the
  worker's;
- new PID, IPC, UTS, cgroup and network namespaces: the network is the sandbox's own
  loopback, and a command given `egress` reaches further only through the egress proxy
  (`egress.py`); no new user namespaces inside (a seccomp filter, `seccomp.py`); bwrap's
  options are passed through a file descriptor, so /proc/1/cmdline shows no host path;
  `--die-with-parent` and `--new-session`: killing bwrap (the tick's timeout, a cancel, the
  worker dying) kills everything inside;
- an unprivileged user: a worker running as root starts bwrap as root and drops to
  `uid:gid` inside with setpriv, the working copy handed to that user for the run and taken
  back after; a worker running as another user runs bwrap in a user namespace as itself;
- limits (prlimit, on the host side of bwrap, so a root filesystem needs none): CPU
  seconds, address space, processes, file size, no core files; the output is capped while
  it is read; for the command as a whole, where the worker may make cgroups, memory and
  processes (`cgroups.py`), and always the session's disk quota and the filesystem's
  reserve, watched while it runs (`quota.py`).

Where bubblewrap cannot run, commands are refused (`SandboxUnavailable`), except those of
the session `tickwork demo` makes from its own shipped example (`sandbox_for`).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tickwork.fsm.errors import SandboxUnavailable, ToolError
from tickwork.worker.sandbox import cgroups, quota, seccomp
from tickwork.worker.sandbox import egress as egress_proxy
from tickwork.worker.sandbox.egress import EgressPolicy
from tickwork.worker.sandbox.ownership import handed_over
from tickwork.worker.sandbox.shell import ShellResult, Stop, command_env, run_process, run_shell

if TYPE_CHECKING:
    from tickwork.worker.config.settings import Settings

log = logging.getLogger("tickwork.sandbox")

MODES = ("bwrap", "none")
#: where the working copy is inside the sandbox
WORKDIR = "/workspace"
#: where a session's environment is mounted (worker/files/environments.py)
ENV_DIR = "/env"
#: a command's PATH in the sandbox: an environment mounted at /env first (issue 22)
PATH = "/env/bin:/usr/local/bin:/usr/bin:/bin"
#: host directories bound read-only (or re-created as the symlinks they are)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: files of /etc a program may need; nothing that identifies the host's users or secrets
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone")
#: and the ones TLS and name lookups of the sandbox's own loopback need, for a command
#: with egress (names are resolved by the proxy: no resolv.conf)
ETC_NETWORK = ("nsswitch.conf", "host.conf", "gai.conf", "ssl", "ca-certificates")
HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
PRLIMIT, SETPRIV = "/usr/bin/prlimit", "/usr/bin/setpriv"
#: host directories a working copy may not lie in
SYSTEM_ONLY = (*SYSTEM, "/etc", "/boot", "/dev", "/proc", "/sys", "/run")
#: tickwork's own code: a working copy holding it could change what the worker runs next
CODE = str(Path(__file__).resolve().parents[2])
HOW_TO = (
    "install bubblewrap (`apt-get install bubblewrap`) and let it create namespaces (see "
    "`tickwork runbook sandbox`), or set TICKWORK_SANDBOX=none to run commands unconfined on "
    "purpose"
)


@dataclass(frozen=True)
class Limits:
    """What one command may use; each applies per process, `processes` per user, and where
    cgroups can be made `memory_bytes` and `processes` to the command as a whole too; the
    disk ones to the session's working copy (`quota.py`)."""

    cpu_s: int = 600
    memory_bytes: int = 4 << 30
    processes: int = 256
    file_bytes: int = 1 << 30
    #: stdout and stderr together; past it the command is killed
    output_bytes: int = 10 << 20
    #: the private /tmp (a tmpfs, so it is memory)
    tmp_bytes: int = 256 << 20
    #: the session's working copy: bytes on disk, files and directories
    disk_bytes: int = 2 << 30
    disk_files: int = 300_000
    #: free space on the workspaces filesystem a command may not take
    reserve_bytes: int = 256 << 20


@dataclass(frozen=True)
class Sandbox:
    """How commands run: `bwrap`, or `none` (on the host, unconfined)."""

    mode: str = "bwrap"
    #: the user and group commands run as when the worker is root
    uid: int = 65534
    gid: int = 65534
    limits: Limits = field(default_factory=Limits)
    #: host paths bound read-only at the same place, besides the system and the worker's Python
    paths: tuple[str, ...] = ()
    #: host paths hidden from commands when the working copy holds them (the state dir:
    #: the embedded default keeps `.tickwork/` in the directory tickwork runs in)
    hide: tuple[str, ...] = ()
    #: a root filesystem whose /usr, /bin, /lib* and /etc files replace the host's
    rootfs: str | None = None


#: what a command without network is told where its output shows it looked for some, when
#: its caller has no words of the session's (`egress.offline_note`)
OFFLINE = "this command runs without network: the sandbox gives it none"


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
            disk_bytes=settings.session_disk_bytes,
            disk_files=settings.session_disk_files,
            reserve_bytes=settings.disk_reserve_bytes,
        ),
        paths=tuple(settings.sandbox_paths),
        hide=(str(settings.state_dir.expanduser().resolve()),),
        rootfs=str(settings.sandbox_rootfs) if settings.sandbox_rootfs else None,
    )


def run_sandboxed(
    command: str,
    *,
    workdir: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    egress: EgressPolicy | None = None,
    sandbox: Sandbox | None = None,
    stop: Stop | None = None,
    environment: Path | None = None,
    environment_writable: bool = False,
    offline: str = OFFLINE,
) -> ShellResult:
    """Run `command` with /bin/sh in `workdir` inside the sandbox; `SandboxUnavailable` if
    bubblewrap cannot run here (unless the mode is `none`). `environment`: a host directory
    mounted at /env (`ENV_DIR`), read-only unless `environment_writable` (the setup that
    builds it), with /env/bin first on PATH (worker/files/environments.py).

    `env`: the variables tickwork sets for this command; in the sandbox they are all it
    gets besides PATH, HOME, TMPDIR and LANG. `egress`: where it may connect through the
    egress proxy; None: nowhere (its own loopback only), which a command whose output shows
    it looked for the network is then told, in `offline`'s words.
    """
    sandbox = sandbox or Sandbox()
    lim = sandbox.limits
    if sandbox.mode != "none" and (why := check(sandbox)) is not None:
        raise SandboxUnavailable(f"the command was not run: {why}; {HOW_TO}")
    # a writable environment (setup building it) counts against the quota too
    watched = (
        [workdir] if environment is None or not environment_writable else [workdir, environment]
    )
    with quota.Watch(
        watched,
        disk_bytes=lim.disk_bytes,
        disk_files=lim.disk_files,
        reserve_bytes=lim.reserve_bytes,
    ) as disk:
        stops = _first(stop, disk)
        if sandbox.mode == "none":
            result = run_shell(
                command,
                cwd=workdir,
                timeout_s=timeout_s,
                env=command_env(env),
                max_output_bytes=lim.output_bytes,
                stop=stops,
            )
        else:
            mount = None if environment is None else (environment, environment_writable)
            result = _run(
                command, workdir, timeout_s, dict(env or {}), egress, sandbox, stops, mount
            )
            if egress is None:  # a lookup fails as on a host with no DNS: say it is the sandbox
                result = dataclasses.replace(result, offline=offline)
    if not (result.killed or result.timed_out) and (why := disk.last()) is not None:
        # it wrote faster than the watch walks: said all the same, as its failure
        result = dataclasses.replace(result, killed=f"{why} (found as it ended)")
    return result


def _first(*stops: Stop | None) -> Stop:
    """A `Stop` saying the first reason any of `stops` gives."""
    found = [s for s in stops if s is not None]
    return lambda: next((why for s in found if (why := s()) is not None), None)


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
    if not os.access(PRLIMIT, os.X_OK):
        return f"{PRLIMIT} (util-linux) is missing"
    why = rootfs_problem(sandbox.rootfs)
    if why is not None:
        return why
    if os.geteuid() == 0 and not os.path.lexists(_system(sandbox) + SETPRIV):
        return (
            f"{SETPRIV} (util-linux) is missing{' in the root filesystem' * bool(sandbox.rootfs)}"
        )
    with tempfile.TemporaryDirectory(prefix="tickwork-probe-") as probe:
        try:
            result = _run("id -u", Path(probe), 30.0, {}, None, sandbox, None)
        except SandboxUnavailable as exc:
            return f"bwrap could not start: {exc.__cause__}"
    if result.exit_code != 0:
        said = " ".join((result.stderr or result.stdout).split())[:300]
        return f"bwrap failed (exit code {result.exit_code}): {said or 'no message'}"
    if result.stdout.strip() == "0":
        return "commands would run as root inside the sandbox; set TICKWORK_SANDBOX_UID"
    _working.add(sandbox)
    return None


#: the session config key only `tickwork demo` sets, on the session it creates from its own
#: shipped example and scripted model: on a machine where bubblewrap cannot run, that
#: session's commands run unconfined (the demo says so in a banner); every other session's
#: are refused. A job's input cannot set it (`prepare` takes only its own keys) and the
#: API and `tickwork submit` never do.
DEMO_UNCONFINED = "demo_unconfined"
#: how to install bubblewrap, for messages that end "... until you install bubblewrap: "
BWRAP_INSTALL = (
    "`apt-get install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap` (Fedora), "
    "`pacman -S bubblewrap` (Arch); see `tickwork runbook sandbox`"
)


def sandbox_for(config: Mapping[str, object], sandbox: Sandbox) -> Sandbox:
    """The sandbox a session's commands run in: `sandbox`, except for the demo's own session
    (`DEMO_UNCONFINED`) on a machine where it cannot run: then on the host, unconfined."""
    if config.get(DEMO_UNCONFINED) is not True or sandbox.mode == "none":
        return sandbox
    why = check(sandbox)
    if why is None:
        return sandbox
    log.warning("the demo's shipped session runs its commands UNCONFINED: %s", why)
    return replace(sandbox, mode="none")


def rootfs_problem(rootfs: str | None) -> str | None:
    """What is wrong with an operator's root filesystem, or None."""
    if rootfs is None:
        return None
    if not os.path.isdir(rootfs):
        return f"TICKWORK_SANDBOX_ROOTFS={rootfs} is not a directory; unpack an image there"
    if not any(os.path.lexists(os.path.join(rootfs, p)) for p in ("bin/sh", "usr/bin/sh")):
        return (
            f"TICKWORK_SANDBOX_ROOTFS={rootfs} has no /bin/sh; it must be a whole root "
            "filesystem (e.g. an unpacked container image), not a single directory of it"
        )
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
    base = f"root filesystem {sandbox.rootfs}" if sandbox.rootfs else "the host's system"
    where = cgroups.hierarchy()
    whole = (
        f"memory {lim.memory_bytes} B and {lim.processes} processes per command as a whole "
        f"({where.describe()})"
        if isinstance(where, cgroups.Hierarchy)
        else f"memory and processes per process only ({where})"
    )
    return (
        f"commands run in bubblewrap as {who} on {base}: cpu {lim.cpu_s}s, memory "
        f"{lim.memory_bytes} B, {lim.processes} processes, files {lim.file_bytes} B, output "
        f"{lim.output_bytes} B; {whole}; working copy {lim.disk_bytes} B and "
        f"{lim.disk_files} files, watched while commands run, {lim.reserve_bytes} B of the "
        "workspaces filesystem kept free; a command is killed once its tick's lease is lost "
        "or about to run out (a watchdog process beside the worker); network only through "
        "the egress proxy"
    )


def working_copy(workdir: Path, sandbox: Sandbox) -> Path:
    """`workdir`'s real path, or a `ToolError` if it is no place to give a command.

    Not a system directory, and not one that holds the worker's home, Python or code (a
    root worker hands the working copy to the sandbox's user for the run).
    """
    root = workdir.resolve(strict=True)
    inside = next((top for top in SYSTEM_ONLY if _below(str(root), top)), None)
    held = [*SYSTEM_ONLY, "/var", str(Path.home()), CODE, sys.prefix, *host_paths(sandbox.paths)]
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
    env: dict[str, str],
    egress: EgressPolicy | None,
    sandbox: Sandbox,
    stop: Stop | None,
    mount: tuple[Path, bool] | None = None,
) -> ShellResult:
    root = working_copy(workdir, sandbox)
    hidden = _hidden(root, sandbox.hide)
    privileged = os.geteuid() == 0
    uid, gid = (sandbox.uid, sandbox.gid) if privileged else (os.getuid(), os.getgid())
    inside = {
        "PATH": PATH,
        "LANG": "C.UTF-8",
        **env,
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PWD": WORKDIR,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        **(egress_proxy.proxy_env() if egress is not None else {}),
    }
    with ExitStack() as stack:
        if privileged:
            stack.enter_context(handed_over(root, uid, gid, skip=hidden))
            if mount is not None and mount[1]:
                stack.enter_context(handed_over(mount[0], uid, gid))
        proxy = None
        refused: list[str] = []
        if egress is not None:
            owner = (uid, gid) if privileged else None
            proxy = stack.enter_context(egress_proxy.serving(egress, owner=owner, refused=refused))
        data = {
            "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"sandbox:x:{uid}:{gid}:tickwork sandbox:/tmp:/bin/sh\n",
            "group": f"root:x:0:\nsandbox:x:{gid}:\n",
            "hosts": HOSTS,
        }
        fds = {name: stack.enter_context(_data(text.encode())) for name, text in data.items()}
        filter_ = seccomp.program()
        if filter_ is not None:
            fds["seccomp"] = stack.enter_context(_data(filter_))
        options = bwrap_options(
            workdir=root,
            env=inside,
            sandbox=sandbox,
            privileged=privileged,
            fds=fds,
            hidden=hidden,
            proxy=proxy,
            environment=mount,
        )
        fds["args"] = stack.enter_context(_data(b"\0".join(o.encode() for o in options) + b"\0"))
        own = _cgroup(sandbox.limits)
        if own is not None:
            stack.callback(own.close)
        counted = own is not None and own.counts_processes
        args = [*limits_args(sandbox.limits, privileged, counted), shutil.which("bwrap") or "bwrap"]
        args += [
            "--args",
            str(fds["args"]),
            "--",
            *inner_command(command, sandbox, privileged, proxy),
        ]
        if own is not None:
            args, stop = own.wrap(args), _first(stop, own.breach)
        try:
            result = run_process(
                args,
                env={"PATH": os.defpath},
                timeout_s=timeout_s,
                max_output_bytes=sandbox.limits.output_bytes,
                stop=stop,
                pass_fds=tuple(fds.values()),
            )
            # a refusal reaches the command as a 403 its tool may word as it likes (pip:
            # "Tunnel connection failed"): its output says what was refused and why
            if refused:
                return dataclasses.replace(result, refused=tuple(refused))
            return result
        except OSError as exc:
            raise _not_started(exc, sandbox) from exc


#: why a process could not be started that says nothing of the sandbox: the command's
#: size, or this machine's resources at the moment
_NOT_THE_SANDBOX = {
    errno.E2BIG: "the command and its environment pass what Linux takes to start a program "
    "(128 KiB an argument); shorten the command, or write a script file and run it",
    errno.EAGAIN: "this worker cannot start another process now (its process limit is "
    "reached); try again later",
    errno.ENOMEM: "this worker has no memory to start another process now; try again later",
    errno.EMFILE: "this worker has too many files open to start a process now; try again later",
    errno.ENFILE: "this machine has too many files open to start a process now; try again later",
}


def _not_started(exc: OSError, sandbox: Sandbox) -> ToolError:
    """The error of a command whose process did not start: its own reason where the
    sandbox is not at fault (the sandbox stays known to work), else `SandboxUnavailable`
    (e.g. bwrap removed since it last worked)."""
    why = _NOT_THE_SANDBOX.get(exc.errno or 0)
    if why is not None:
        return ToolError(f"the command was not run: {exc.strerror}: {why}")
    _working.discard(sandbox)
    return SandboxUnavailable(f"the command was not run: {exc}; {HOW_TO}")


def limits_args(lim: Limits, privileged: bool, counted: bool = False) -> list[str]:
    """prlimit before bwrap: every process inside inherits the limits.

    `counted`: the command's processes are counted by a cgroup of its own, so no limit per
    user (which all sessions' commands share: one session's fork bomb would stop the others')."""
    args = [PRLIMIT, f"--cpu={lim.cpu_s}", f"--as={lim.memory_bytes}"]
    if not counted:  # else the worker's own limit stays, as high as prlimit may leave it
        nproc = lim.processes if privileged else lim.processes + _tasks_of(os.getuid())
        args.append(f"--nproc={nproc}")
    return [*args, f"--fsize={lim.file_bytes}", "--core=0", "--"]


def _cgroup(limits: Limits) -> cgroups.Group | None:
    """The command's own cgroup where this worker can make one, else None (then only the
    per-process limits hold; `describe` says so at start)."""
    where = cgroups.hierarchy()
    if isinstance(where, str):
        return None
    try:
        return cgroups.Group(where, memory_bytes=limits.memory_bytes, processes=limits.processes)
    except OSError as exc:
        log.warning("the command runs without a cgroup of its own: %s", exc)
        return None


def inner_command(
    command: str, sandbox: Sandbox, privileged: bool, proxy: Path | None
) -> list[str]:
    """What bwrap starts: setpriv for a root worker, the forwarder with egress, the shell."""
    args: list[str] = []
    if privileged:
        args += [SETPRIV, f"--reuid={sandbox.uid}", f"--regid={sandbox.gid}", "--clear-groups"]
        args += ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    if proxy is not None:
        inside = egress_proxy.INSIDE
        args += [forwarder_python(sandbox), "-I", "-S", f"{inside}/{egress_proxy.FORWARDER.name}"]
        args += [str(egress_proxy.PORT), f"{inside}/{egress_proxy.SOCKET}"]
    return [*args, "/bin/sh", "-c", command]


def forwarder_python(sandbox: Sandbox) -> str:
    """A python3 inside the sandbox for the forwarder: the system's (a path that says
    nothing of the host), else, on the host's system, the worker's base interpreter."""
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.lexists(_system(sandbox) + candidate):
            return candidate
    if sandbox.rootfs is None:
        return os.path.realpath(sys.executable)
    raise ToolError(
        f"egress needs python3 in TICKWORK_SANDBOX_ROOTFS={sandbox.rootfs} (for its forwarder); "
        "use an image that has it"
    )


def bwrap_options(
    *,
    workdir: Path,
    env: Mapping[str, str],
    sandbox: Sandbox,
    privileged: bool,
    fds: Mapping[str, int],
    hidden: tuple[str, ...] = (),
    proxy: Path | None = None,
    environment: tuple[Path, bool] | None = None,
) -> list[str]:
    """bwrap's options (passed with `--args FD`) for the sandbox of this module's docstring."""
    args = ["--die-with-parent", "--new-session", "--unshare-net"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--hostname", "sandbox"]
    if not privileged:
        args.append("--unshare-user")
        if supports("--disable-userns"):  # bwrap 0.8+: the kernel's own limit, besides seccomp
            args.append("--disable-userns")
    if "seccomp" in fds:
        args += ["--seccomp", str(fds["seccomp"])]
    system = _system(sandbox)
    for top in SYSTEM:
        source = system + top
        if os.path.islink(source):
            args += ["--symlink", os.readlink(source), top]
        elif os.path.isdir(source):
            args += ["--ro-bind", source, top]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):  # /dev/shm: POSIX semaphores (multiprocessing)
        args += ["--perms", "1777", "--size", str(sandbox.limits.tmp_bytes), "--tmpfs", scratch]
    args += ["--dir", "/etc"]
    for name in ETC + (ETC_NETWORK if proxy is not None else ()):
        args += ["--ro-bind-try", f"{system}/etc/{name}", f"/etc/{name}"]
    for name in ("passwd", "group", "hosts"):
        args += ["--perms", "0644", "--ro-bind-data", str(fds[name]), f"/etc/{name}"]
    made: set[str] = set()
    for path in [] if sandbox.rootfs else host_paths(sandbox.paths):
        for parent in reversed(Path(path).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind-try", path, path]
    if sandbox.rootfs:
        for path in sandbox.paths:
            args += ["--ro-bind-try", path, path]
    if proxy is not None:
        args += ["--perms", "0755", "--dir", "/run", "--ro-bind", str(proxy), egress_proxy.INSIDE]
    args += ["--bind", str(workdir), WORKDIR]
    if environment is not None:  # (host directory, writable)
        args += ["--bind" if environment[1] else "--ro-bind", str(environment[0]), ENV_DIR]
    for path in hidden:  # an empty tmpfs over it
        args += ["--perms", "0000", "--tmpfs", str(Path(WORKDIR, Path(path).relative_to(workdir)))]
    args += ["--chdir", WORKDIR, "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


@functools.cache
def supports(option: str) -> bool:
    """Whether this machine's bwrap knows `option` (its --help lists it)."""
    try:
        shown = subprocess.run(
            [shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return f" {option} " in shown.stdout + shown.stderr


def _system(sandbox: Sandbox) -> str:
    """The prefix of the system's directories: "" for the host's, else the root filesystem."""
    return (sandbox.rootfs or "").rstrip("/")


def host_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """The host directories bound read-only: the base interpreter of the worker's Python
    outside /usr (e.g. pyenv's; not the worker's venv), and `extra`."""
    found: list[str] = []
    prefixes = (sys.base_prefix, sys.base_exec_prefix)
    for path in (*prefixes, *extra):
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
def _data(content: bytes) -> Iterator[int]:
    """A file descriptor reading `content` from its start (a memory file: no size limit)."""
    fd = os.memfd_create("tickwork-sandbox")
    try:
        os.write(fd, content)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def _hidden(root: Path, hide: tuple[str, ...]) -> tuple[str, ...]:
    """The directories of `hide` inside the working copy `root`, as real paths."""
    found = (os.path.realpath(path) for path in hide)
    return tuple(p for p in found if p != str(root) and _below(p, str(root)) and os.path.isdir(p))
