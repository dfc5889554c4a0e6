"""A repair job's environment (docs/DESIGN.md section 13): planned from its source, built once
per key in the sandbox, packed into the artifact store, mounted read-only at /env by its commands.

- **Plan** (`environment_plans.py`): the setup commands, given or chosen by `auto` from
  the source's packaging files; none: an empty environment, nothing built.
- **Key**: SHA-256 of the commands, the dependency files' contents, the package index and
  whether setup has egress, and the base toolchain as the sandbox sees it (its python3's
  version, the machine, a digest of the distributions python3 holds, the root
  filesystem's os-release and TICKWORK_SANDBOX_ROOTFS).
- **Build**: one per key across the fleet (`tickwork.store.environments`: a claim with a lease the
  builder renews); the setup runs in the sandbox on a throw-away copy of the session's
  source at /workspace, with this build's directory read-write at /env; the result is a
  deterministic tar (sorted, owners cleared), gzipped, stored in chunks in the artifact
  store. A session that finds another worker building it waits through a delayed tick.
- **Use**: a host without the key in its cache (`<workspaces>/environments/<key>`) unpacks
  it from the artifact store into a temporary folder and renames it into place.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import re
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tickwork.fsm import machine
from tickwork.fsm.errors import (
    BlobCorrupt,
    ConfigurationError,
    EnvironmentInUse,
    SandboxUnavailable,
)
from tickwork.fsm.machine import Change
from tickwork.fsm.values import Head
from tickwork.store.environments import EnvStatus, Verdict
from tickwork.store.files import Manifest, parse_entry
from tickwork.worker.config.process import Loop, owner_name
from tickwork.worker.config.settings import EnvironmentSettings
from tickwork.worker.files import sources
from tickwork.worker.files.environment_plans import (
    AUTO,
    MISSING,
    OFFLINE,
    Plan,
    dependency_files,
    plan,
    uses_pytest,
)
from tickwork.worker.sandbox.egress import offline_note, policy_for
from tickwork.worker.sandbox.runner import ENV_DIR, Sandbox, run_sandboxed, sandbox_of
from tickwork.worker.sandbox.shell import ShellResult, Stop

if TYPE_CHECKING:
    from tickwork.store import Store
    from tickwork.worker.config.settings import Settings
    from tickwork.worker.files.workspaces import Workspaces

log = logging.getLogger("tickwork.environments")


class Fence(Protocol):
    """Whether this worker still holds a tick's lease (`tickwork.worker.tick.runtime.Leases`)."""

    def lost(self, session_id: str, version: int) -> str | None: ...


class Runtime(Protocol):
    """What environments use of the worker's runtime (`tickwork.worker.tick.runtime.Runtime`):
    the settings, the store, this host's working copies, the clock and the tick's lease."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def workspaces(self) -> Workspaces: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def leases(self) -> Fence: ...


#: the build log kept on the session's card (its end; the table keeps more)
MAX_CARD_LOG = 4_000
#: why `auto` installed nothing of what the project declares, on the card beside `missing`
NO_NETWORK = (
    "setup had no network (TICKWORK_EGRESS_ALLOW is empty, or the job's `network` is "
    '"none"), so it installed only the project itself: let setup reach the package index, '
    "e.g. TICKWORK_EGRESS_ALLOW=pypi.org,files.pythonhosted.org on the workers"
)
#: the same, when not even the project could be installed (hatchling, poetry-core: a build
#: backend the system's Python lacks, or one too old, as toolz's setuptools>=77 beside the
#: system's 66, needs the network too); which of them, only the log says
NO_NETWORK_NO_PROJECT = NO_NETWORK.replace(
    "so it installed only the project itself",
    "so it installed nothing, not even the project (it could not be built with the "
    "system's tools: its build backend is missing or too old, the build log says which)",
)
#: the note of an `auto` environment with nothing to install (a plain folder of tests): what
#: the tests run with, and how to name what they need
EMPTY = (
    "no packaging or requirements files (pyproject.toml, setup.py, setup.cfg, "
    "requirements*.txt, tox.ini): an empty environment, the tests run with the system's "
    "Python and what it holds; name what they need in a requirements.txt at the source's "
    "root, or give `--setup` commands"
)
#: what `auto` says of a project's noxfile.py: its sessions' installs are Python code, run
#: by nox in environments of its own, not a list it can read
NOXFILE = (
    "noxfile.py not read: its sessions' installs are code nox runs; name what the tests "
    "need in a requirements file or give `--setup` commands"
)
#: what pip says when asked to install into the system's Python (PEP 668)
EXTERNALLY_MANAGED = "externally-managed-environment"
#: what to do about it: given setup commands make the venv /env is
NO_VENV = (
    "pip refused to install into the system's Python (externally-managed-environment): "
    "given setup commands make the environment's venv at /env first and install into it, "
    'e.g. --setup "python3 -m venv /env" --setup "/env/bin/pip install NAME"; see '
    "docs/ENVIRONMENTS.md (`tickwork docs environments`)"
)
#: a packed environment is stored in pieces of this size (a blob each)
CHUNK_BYTES = 8 << 20
#: a build's or unpack's scratch folder this old was left by a killed worker
STALE_SCRATCH_S = 6 * 3600.0


_toolchains: dict[tuple[Sandbox, str], str] = {}
_toolchains_lock = threading.Lock()
#: what the key takes of the base toolchain: python3's version and machine, a digest of the
#: distributions it holds (a venv of `auto` sees them: `--system-site-packages`, so a host
#: without one of them must not reuse an environment that relied on it) and os-release
PROBE = (
    "python3 -c 'import sys, platform, hashlib, importlib.metadata as m; "
    "print(sys.version); print(platform.machine()); "
    'held = sorted((d.metadata.get("Name") or "") + "==" + d.version '
    "for d in m.distributions()); "
    'print("distributions:", hashlib.sha256(repr(held).encode()).hexdigest())\' 2>&1; '
    "cat /usr/lib/os-release /etc/os-release 2>/dev/null | head -5"
)


def toolchain(sandbox: Sandbox, scratch: Path, rootfs: str = "") -> str:
    """The base toolchain as setup sees it in the sandbox (asked once per process)."""
    with _toolchains_lock:
        known = _toolchains.get((sandbox, rootfs))
    if known is not None:
        return known
    scratch.mkdir(parents=True, exist_ok=True)
    probe = scratch / f".probe-{uuid.uuid4().hex[:8]}"
    probe.mkdir()
    try:
        result = run_sandboxed(PROBE, workdir=probe, timeout_s=60.0, sandbox=sandbox)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    identity = f"{result.stdout.strip()}\nrootfs: {rootfs}"
    with _toolchains_lock:
        _toolchains[(sandbox, rootfs)] = identity
    return identity


def pack(folder: Path) -> bytes:
    """`folder` as a gzipped tar: entries sorted, owners cleared, no gzip timestamp, so
    the same files always give the same bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = [folder, *sorted(folder.rglob("*"), key=lambda p: str(p.relative_to(folder)))]
        for path in paths:
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)


def unpack(data: bytes, folder: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r") as tar:
        tar.extractall(folder, filter="tar")


def cache_dir(rt: Runtime) -> Path:
    return rt.settings.workspaces_path / "environments"


def local(rt: Runtime, key: str) -> Path:
    """This host's copy of the environment `key`, unpacked from the artifact store if it
    has none (into a temporary folder, renamed into place: never half there)."""
    target = cache_dir(rt) / key
    if target.is_dir():
        return target
    found = rt.store.environments.get(key)
    if found is None or found.status is not EnvStatus.READY:
        raise ConfigurationError(
            f"environment {key} is not in the store (removed with `tickwork env rm`?); fork "
            "the session to build it again"
        )
    try:
        blobs = rt.workspaces.artifacts.get(found.chunks)
    except BlobCorrupt as exc:
        # no good copy anywhere: failed, so the next session with this key builds it again
        rt.store.environments.spoil(key, why=f"stored copy corrupt: {exc}", now=rt.clock())
        raise
    data = b"".join(blobs[c] for c in found.chunks)
    scratch = cache_dir(rt) / f".unpack-{key[:16]}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        unpack(data, scratch)
        try:
            scratch.rename(target)
        except OSError:
            if not target.is_dir():  # not another tick that put it there first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("environment %s unpacked from the artifact store (%d bytes)", key, len(data))
    return target


def ready(record: object) -> bool:
    """Whether a session's environment record (its result's `environment`) is one built and
    ready, which its commands mount at /env and which installed the project."""
    return isinstance(record, Mapping) and record.get("status") == EnvStatus.READY


def mounted(rt: Runtime, head: Head) -> Path | None:
    """The environment the session's commands mount at /env on this host, if it has one."""
    record = head.result.get("environment")
    if not ready(record) or not record.get("key"):
        return None
    return local(rt, str(record["key"]))


@dataclass
class _Renewal:
    """Renews a build's claim from a thread while the setup runs (`start` to `end`)."""

    rt: Runtime
    key: str
    owner: str
    lease_s: float
    #: the tick whose lease fences the build too
    session_id: str = ""
    version: int = 0
    lost: bool = False
    loop: Loop = field(init=False)

    def __post_init__(self) -> None:
        self.loop = Loop(
            "env-build",
            self.renew,
            every_s=self.lease_s / 3,
            log=log,
            what=f"the renewal of the build of environment {self.key[:12]}",
        )

    def start(self) -> None:
        self.loop.start()

    def end(self) -> None:
        self.loop.stop()
        self.loop.join(5)

    def renew(self) -> None:
        held = self.rt.store.environments.renew(
            self.key, owner=self.owner, now=self.rt.clock(), lease_s=self.lease_s
        )
        if not held:
            self.lost = True
            self.loop.stop()

    def stop(self) -> str | None:
        """Why the setup must stop now: the build's claim, or the session's lease, is no
        longer this worker's (a stalled builder must not build beside its successor)."""
        if self.lost:
            return f"the build of environment {self.key[:12]} was taken over by another worker"
        return self.rt.leases.lost(self.session_id, self.version) if self.session_id else None


def _source_copy(rt: Runtime, manifest: Manifest, folder: Path) -> None:
    """The session's source (its base files) written into `folder` for setup."""
    folder.mkdir(parents=True)
    blobs = rt.workspaces.blobs({parse_entry(e)[1] for e in manifest.values()})
    for rel, entry in manifest.items():
        mode, key = parse_entry(entry)
        path = folder / rel
        if path.resolve().parent != path.parent.resolve() or ".." in rel.split("/"):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blobs[key])
        path.chmod(0o755 if mode == "100755" else 0o644)


def _setup_env(settings: EnvironmentSettings, head: Head, plan_: Plan) -> dict[str, str]:
    # the sandbox gives PATH, HOME and the proxy's variables itself: nothing of the worker's
    extra = {
        **dict(plan_.variables),
        "TICKWORK_SESSION_ID": head.id,
        "PIP_NO_CACHE_DIR": "1",
        "VIRTUAL_ENV": ENV_DIR,
    }
    if settings.pip_index_url:
        extra["PIP_INDEX_URL"] = extra["UV_INDEX_URL"] = settings.pip_index_url
    return extra


def _run_setup(
    rt: Runtime,
    head: Head,
    plan_: Plan,
    source: Path,
    env_dir: Path,
    limit_s: float,
    *,
    stop: Stop | None = None,
) -> tuple[bool, str]:
    """Run the plan's commands in order in the sandbox; (all passed, their output).
    `stop`: why a running command must be killed (the build's claim or the tick's lease
    lost: another worker builds it now)."""
    settings = rt.settings.section(EnvironmentSettings)
    deadline = time.monotonic() + limit_s
    out: list[str] = []
    for command in plan_.commands:
        left = deadline - time.monotonic()
        if left <= 0:
            out.append(f"setup stopped: it ran past {limit_s:g}s")
            return False, "\n".join(out)
        result = run_sandboxed(
            command,
            workdir=source,
            timeout_s=left,
            env=_setup_env(settings, head, plan_),
            egress=policy_for(head.config, rt.settings, setup=True),
            offline=offline_note(head.config, rt.settings, setup=True),
            sandbox=sandbox_of(rt.settings),
            environment=env_dir,
            environment_writable=True,
            stop=stop,
        )
        out.append(f"$ {command}\n{result.describe()}")
        if result.exit_code != 0:
            # last, so that the log's end, all a card keeps of a long one, says it
            out.append(f"setup stopped at `{_short(command)}`: {_why(result, limit_s)}")
            return False, "\n".join(out)
    return True, "\n".join(out)


def _short(command: str, limit: int = 120) -> str:
    line = " ".join(command.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _why(result: ShellResult, limit_s: float) -> str:
    """Why a setup command failed, in a line."""
    if result.timed_out:
        return (
            f"it ran past the setup's time limit ({limit_s:g}s: "
            "TICKWORK_ENVIRONMENT_SETUP_TIMEOUT_S, at most a tick's longest call) and was killed"
        )
    if result.killed:
        return f"it was killed: {result.killed}"
    return f"it exited {result.exit_code}"


def _record(plan_: Plan, key: str | None, status: str, **more: Any) -> dict[str, Any]:
    setup = plan_.setup if isinstance(plan_.setup, str) else list(plan_.setup)
    record: dict[str, Any] = {"setup": setup, "key": key, "status": status}
    if plan_.detected:
        record["detected"] = list(plan_.detected)
    if plan_.version:
        record["version"] = dict(plan_.version)
    if plan_.elsewhere:
        record["elsewhere"] = dict(plan_.elsewhere)
    record.update(more)
    return record


def _missing(output: str) -> list[str]:
    return [
        line[len(MISSING) :].strip() for line in output.splitlines() if line.startswith(MISSING)
    ]


def _identity(manifest: Manifest) -> str:
    """The source tree's identity: every path with its mode and content hash."""
    return hashlib.sha256(json.dumps(dict(sorted(manifest.items()))).encode()).hexdigest()


def _root_file(rt: Runtime, manifest: Manifest, path: str) -> dict[str, bytes]:
    """`{path: content}` of a file of the source, or {} if it has none."""
    if path not in manifest:
        return {}
    blob = parse_entry(manifest[path])[1]
    return {path: rt.workspaces.blobs({blob})[blob]}


def prepare(rt: Runtime, head: Head, *, node: str | None = None) -> Change | Head:
    """The session's environment before its first model call: the head with it recorded
    (found ready, or nothing to build: the tick goes on to THINK), or a change (built by
    this tick, waiting for another worker's build, or failed: `ENV_SETUP`). A build is
    claimed as `owner_name(node)` (`node`: the Celery worker's name), as the tick's lease."""
    now = rt.clock()
    spec = head.config.get("environment") or {}
    setup = spec.get("setup", AUTO)
    settings = rt.settings.section(EnvironmentSettings)
    sandbox = sandbox_of(rt.settings)
    manifest = rt.workspaces.base(head.config["files"]) if head.config.get("files") else {}
    paths = dependency_files(manifest)
    contents = rt.workspaces.blobs({parse_entry(manifest[p])[1] for p in paths}) if paths else {}
    files = {p: contents[parse_entry(manifest[p])[1]] for p in paths}
    pytest = setup == AUTO and uses_pytest(
        manifest, rt.workspaces.blobs, str(head.config.get("test_command") or "")
    )
    source = head.config.get("source")
    plan_ = plan(
        setup,
        files,
        uses_pytest=pytest,
        online=policy_for(head.config, rt.settings, setup=True) is not None,
        index_url=settings.pip_index_url,
        version=source.get("version") if isinstance(source, Mapping) else None,
    )
    nox = setup == AUTO and "noxfile.py" in manifest
    if nox:
        plan_ = replace(plan_, detected=(*plan_.detected, NOXFILE))
    if not plan_.commands:
        note = f"{EMPTY}; {NOXFILE}" if nox else EMPTY
        return _with(head, _record(plan_, None, "empty", note=note))
    if sandbox.mode == "none":
        why = (
            "TICKWORK_SANDBOX=none: there is no sandbox to mount /env in, so no environment "
            "is built; commands use the host's tools, with the working copy's src/ (else "
            "its root) first on PYTHONPATH, so that its tests import the session's files"
        )
        if setup != AUTO:
            return machine.environment_failed(head, _record(plan_, None, "failed"), why, now=now)
        return _with(head, _record(plan_, None, "skipped", note=why))
    try:
        egress = policy_for(head.config, rt.settings, setup=True)
        key = plan_.key(
            toolchain(sandbox, cache_dir(rt), sandbox.rootfs or ""),
            source=_identity(manifest),
            egress="" if egress is None else str(egress.allow),
        )
    except SandboxUnavailable as exc:
        return machine.environment_failed(head, _record(plan_, None, "failed"), str(exc), now=now)
    owner = owner_name(node)
    # which project it was built for, as `tickwork env ls` shows it (the key does not say)
    named = {**files, **_root_file(rt, manifest, "PKG-INFO")}
    project = sources.project_name(source, named)
    verdict, row = rt.store.environments.claim(
        key,
        owner=owner,
        now=now,
        lease_s=settings.environment_lease_s,
        asked_at=head.created_at,
        detail=_record(plan_, key, "building", project=project),
    )
    if verdict is Verdict.WAIT:
        return machine.environment_wait(head, key=key, delay_s=settings.environment_wait_s, now=now)
    if verdict is Verdict.FAILED:
        record = _record(plan_, key, "failed", log=card_log(row.log))
        return machine.environment_failed(
            head, record, _failure(key, row.log, auto=setup == AUTO), now=now
        )
    if verdict is Verdict.READY:
        local(rt, key)
        rt.store.environments.use(key, head.id, now=now)
        record = {**row.detail, "status": "ready", "key": key, "size": row.size, "built": False}
        if plan_.elsewhere:  # the plan's, also for an environment built before it was recorded
            record["elsewhere"] = dict(plan_.elsewhere)
        record["log"] = card_log(row.log)
        return _with(head, record)
    return _build(rt, head, plan_, key, owner, settings, manifest, project)


def card_log(output: str) -> str:
    """The end of a setup's log a session's card keeps: at most MAX_CARD_LOG characters,
    from a line's start (`tickwork env show` has it whole)."""
    tail = output[-MAX_CARD_LOG:]
    if len(output) > MAX_CARD_LOG and "\n" in tail:
        tail = "…" + tail[tail.index("\n") :]
    return tail


def _failure(key: str, output: str, *, auto: bool) -> str:
    """The failed setup's message: first which command stopped it and why, with the first
    connection the sandbox refused and what to do next (what `dlq ls` and a card's first
    line show), then the log's end from a line's start. `auto`: the setup was `auto`'s."""
    lines = output.splitlines()
    stopped = next((ln for ln in reversed(lines) if ln.startswith("setup stopped at ")), "")
    refused = next((ln for ln in lines if ln.startswith("egress refused ")), "")
    head = "; ".join(filter(None, (stopped, refused))) or "see its log"
    # what a command printed, not the logged command (`$ ...`) that may name it
    managed = any(EXTERNALLY_MANAGED in ln for ln in lines if not ln.startswith("$ "))
    if managed and refused:
        head += f". {NO_VENV}"
    unfound = _unfound(lines) if not refused and OFFLINE_MARK not in output else ""
    step = _next_step(auto=auto, refused=bool(refused), managed=managed, unfound=unfound)
    head += f". Next: {step}; the whole log: `tickwork env show {key[:12]}`"
    return f"the environment's setup failed (environment {key[:12]}): {head}\n{card_log(output)}"


def _next_step(*, auto: bool, refused: bool, managed: bool, unfound: str) -> str:
    """What to do about a failed setup, its message's next step: a listing (`dlq ls`)
    keeps it whole, while it cuts what went wrong before it (a long command) to its width,
    so a cause that says what to do (pip's refusal of the system's Python, a requirement
    the index lacks) is said here."""
    fix = "give `--setup` commands that build it" if auto else "fix the `--setup` commands"
    if refused:
        # the setup was likely right: what it needed was a connection the operator allows
        return (
            "if the setup needs that connection, let the workers make it "
            "(TICKWORK_EGRESS_ALLOW, docs/REPAIR.md (`tickwork docs repair`)) and fork the "
            "session from its start (`tickwork dlq fork ID --from-step 0`), which builds it "
            f"again; else {fix} and submit the job again"
        )
    if managed:
        return f"{NO_VENV}; then submit the job again"
    if unfound:
        return (
            f"{_index_lacks(unfound)}, and fork the session from its start "
            "(`tickwork dlq fork ID --from-step 0`), which builds it again; else "
            f"{fix} without {unfound} and submit the job again"
        )
    return (
        f"{fix} and submit the job again (a fork runs the same setup again: it "
        "helps only once what failed it outside the job is mended, such as the network)"
    )


#: what pip prints of a requirement its index holds no distribution of
NOT_FOUND = "ERROR: No matching distribution found for "
#: what a command's output ends with when the sandbox gave it no network
OFFLINE_MARK = "--- no network in the sandbox ---"


def _unfound(lines: list[str]) -> str:
    """The first requirement pip found no distribution of in a setup's log, else ''."""
    return next((ln[len(NOT_FOUND) :].strip() for ln in lines if ln.startswith(NOT_FOUND)), "")


def _index_lacks(requirement: str) -> str:
    """What a setup stopped by a requirement the package index lacks says of it: the
    first line named only the command, and pip's reason was deep in the log."""
    return (
        f"pip found no distribution of {requirement} on the package index (none there, or "
        "none for the sandbox's Python): make the index hold it (TICKWORK_PIP_INDEX_URL "
        "names the index setup uses)"
    )


def _with(head: Head, record: dict[str, Any]) -> Head:
    return head.model_copy(update={"result": {**head.result, "environment": record}})


def _build(
    rt: Runtime,
    head: Head,
    plan_: Plan,
    key: str,
    owner: str,
    settings: EnvironmentSettings,
    manifest: Manifest,
    project: str,
) -> Change:
    """Build `key` (this worker holds its claim), store it, record it on the session."""
    envs = rt.store.environments
    scratch = cache_dir(rt) / f".build-{key[:16]}-{uuid.uuid4().hex[:8]}"
    renewal = _Renewal(
        rt, key, owner, settings.environment_lease_s, session_id=head.id, version=head.version
    )
    started = time.monotonic()
    renewal.start()
    try:
        _source_copy(rt, manifest, scratch / "source")
        env_dir = scratch / "env"
        env_dir.mkdir()
        limit = min(settings.environment_setup_timeout_s, rt.settings.longest_call_s)
        try:
            ok, output = _run_setup(
                rt, head, plan_, scratch / "source", env_dir, limit, stop=renewal.stop
            )
        except SandboxUnavailable as exc:
            ok, output = False, str(exc)
        missing = _missing(output)
        took = round(time.monotonic() - started, 3)
        if not ok:
            envs.finish(key, owner=owner, now=rt.clock(), ok=False, log=output)
            record = _record(plan_, key, "failed", log=card_log(output), build_s=took)
            return machine.environment_failed(
                head, record, _failure(key, output, auto=plan_.setup == AUTO), now=rt.clock()
            )
        data = pack(env_dir)
        chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        hashes = tuple(hashlib.sha256(c).hexdigest() for c in chunks)
        rt.workspaces.artifacts.put(dict(zip(hashes, chunks, strict=True)))
        more: dict[str, Any] = {"project": project, "missing": missing}
        if missing and not plan_.online:
            # the line the failed install echoes, not the logged command that holds it
            unbuilt = re.search(rf"^{re.escape(OFFLINE)}$", output, re.MULTILINE)
            more["note"] = NO_NETWORK_NO_PROJECT if unbuilt else NO_NETWORK
        detail = _record(plan_, key, "ready", **more)
        if not (
            renewal.lost
            or envs.finish(
                key,
                owner=owner,
                now=rt.clock(),
                ok=True,
                log=output,
                size=len(data),
                chunks=hashes,
                detail=detail,
            )
        ):
            # taken over (this worker was too slow to renew): the other build's is the one
            log.warning("the build of environment %s was taken over; its result is dropped", key)
            return machine.environment_wait(
                head, key=key, delay_s=settings.environment_wait_s, now=rt.clock()
            )
        target = cache_dir(rt) / key
        try:
            env_dir.rename(target)
        except OSError:
            if not target.is_dir():
                raise
        envs.use(key, head.id, now=rt.clock())
        record = {
            **detail,
            "size": len(data),
            "built": True,
            "build_s": took,
            "log": card_log(output),
        }
        log.info("environment %s built in %.1fs (%d bytes packed)", key, took, len(data))
        return machine.environment_ready(head, record, now=rt.clock())
    finally:
        renewal.end()
        shutil.rmtree(scratch, ignore_errors=True)


def drop_unused(rt: Runtime, *, now: datetime) -> int:
    """Retention's part: remove the environments no live session uses that were not used
    for `environment_retention_s`, this host's copies of environments no longer stored and
    scratch folders killed workers left; how many rows were removed. (Their chunks stay in
    the artifact store, like other blobs.)"""
    keep = rt.settings.section(EnvironmentSettings).environment_retention_s
    removed = 0
    for env in rt.store.environments.unused(before=now - timedelta(seconds=keep)):
        try:
            rt.store.environments.delete(env.key)
        except EnvironmentInUse:
            continue  # a session took it up since it was listed
        removed += 1
    folder = cache_dir(rt)
    if folder.is_dir():
        known = {e.key for e in rt.store.environments.find(limit=100_000)}
        stale = time.time() - STALE_SCRATCH_S
        for path in folder.iterdir():
            if re.fullmatch(r"[0-9a-f]{64}", path.name) and path.name not in known:
                shutil.rmtree(path, ignore_errors=True)
            elif path.name.startswith((".build-", ".unpack-")) and path.stat().st_mtime < stale:
                shutil.rmtree(path, ignore_errors=True)  # left by a worker killed meanwhile
    return removed
