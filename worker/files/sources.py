"""A repair job's source, stored once at submit: a git repository at a ref, or a directory.

Either is packed into the artifact store (its files as blobs, a manifest path -> entry as
one more blob), so every worker reaches it and the user's files are never touched. A
submission over the HTTP API is untrusted: its local paths must lie under the configured
roots (`TICKWORK_WORKSPACE_ROOTS`), and its remote repositories must be https URLs of
hosts on the public internet: a name that resolves to a loopback, private, link-local or
reserved address is refused (no requests into the server's own network), the address checked
is the one git connects to (pinned with `http.curloptResolve`), redirects are not followed,
and the clone's files are capped in size (`MAX_CLONE_BYTES`).
"""

from __future__ import annotations

import configparser
import contextlib
import ipaddress
import json
import os
import re
import resource
import socket
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tickwork.fsm.errors import InvalidInput, SourceUnreachable
from tickwork.store.artifacts import Artifacts
from tickwork.store.files import EXECUTABLE, PLAIN, Manifest, blob_hash, canonical, entry
from tickwork.worker.config.allowlist import public
from tickwork.worker.files import versions
from tickwork.worker.files.filetree import Ignore, walk

#: a source with more files or bytes than this is refused at submit
MAX_SOURCE_FILES = 20_000
MAX_SOURCE_BYTES = 200_000_000
#: blobs are put in batches of about this many bytes
BATCH_BYTES = 8_000_000
#: how many of the paths a workspace's .gitignore left out its source names
GITIGNORED_SHOWN = 5
#: how long a clone may take
GIT_TIMEOUT_S = 300.0
#: the largest file (in practice: the pack) an untrusted clone may write
MAX_CLONE_BYTES = 1_000_000_000
#: the most an untrusted source's checkout may write: its commit's files, summed (a pack
#: of a few KB may name one blob of zeros at a thousand paths), and how many there may be
MAX_CHECKOUT_BYTES = 2_000_000_000
MAX_CHECKOUT_FILES = 200_000
_REF = re.compile(r"^[A-Za-z0-9._/@{}^~-]{1,200}$")
#: what git (curl or ssh under it) says when a repository's host did not answer: no fault
#: of the URL's or the ref's, so not bad input
_UNREACHABLE = re.compile(
    r"could not resolve host|temporary failure in name resolution|failed to connect|"
    r"could(?: no|n')t connect|connection refused|connection reset|timed out|"
    r"network is unreachable|no route to host|returned error: 5\d\d",
    re.IGNORECASE,
)

#: what git says of a host name that does not resolve
_UNRESOLVED = re.compile(
    r"could not resolve host|temporary failure in name resolution", re.IGNORECASE
)


def _fail(message: str) -> InvalidInput:
    return InvalidInput(f"repair input: {message}")


def _clone_failed(message: str, exc: Exception) -> InvalidInput | SourceUnreachable:
    """A failed clone's error: the host not answering (`_UNREACHABLE`, or git's time running
    out) is `SourceUnreachable`; anything else (no such repository, not one) is bad input."""
    detail = str(getattr(exc, "stderr", "") or "")
    if _UNRESOLVED.search(detail):  # a misspelt host is likelier than a name server down
        return SourceUnreachable(
            f"repair input: {message}; check the URL's host, or try again once it answers"
        )
    if isinstance(exc, subprocess.TimeoutExpired) or _UNREACHABLE.search(detail):
        return SourceUnreachable(f"repair input: {message}; try again once it answers")
    return _fail(message)


def allowed(path: Path, roots: Sequence[Path]) -> bool:
    """Whether `path` (resolved) lies in one of `roots` (resolved)."""
    real = path.resolve()
    for root in roots:
        base = Path(root).expanduser().resolve()
        if real == base or base in real.parents:
            return True
    return False


def check_local(path: Path, *, what: str, trusted: bool, roots: Sequence[Path]) -> None:
    """Refuse a local path an untrusted submission may not name."""
    if trusted:
        return
    if not roots:
        raise _fail(
            f"this server does not accept local paths as a {what}; submit a repository URL "
            "(https://...), or ask the operator to set TICKWORK_WORKSPACE_ROOTS"
        )
    if not path.is_absolute():  # the server's own folder is nothing its client knows
        raise _fail(
            f"the {what} {str(path)!r} is relative; give its absolute path under the "
            f"directories this server accepts ({', '.join(str(r) for r in roots)}; "
            "TICKWORK_WORKSPACE_ROOTS)"
        )
    try:
        inside = allowed(path, roots)
    except (RuntimeError, OSError):  # a link that loops: Python's resolve() cannot follow it
        raise _fail(
            f"the {what} {str(path)!r} cannot be resolved: a link in it loops; give a path "
            "without one"
        ) from None
    if not inside:
        raise _fail(
            f"the {what} {str(path)!r} is outside the directories this server accepts "
            f"({', '.join(str(r) for r in roots)}; TICKWORK_WORKSPACE_ROOTS)"
        )


def pack(
    root: Path,
    artifacts: Artifacts,
    *,
    gitignore: bool = True,
    exclude: Path | None = None,
    left_out: list[str] | None = None,
) -> tuple[str, int]:
    """Store the tree's files and its manifest; (the manifest's blob hash, file count).
    `exclude` (tickwork's state dir) is skipped if it is inside the tree; `left_out` gets
    what the tree's `.gitignore` made it skip."""
    manifest: Manifest = {}
    batch: dict[str, bytes] = {}
    size = total = 0
    ignore = Ignore.of(root, gitignore=gitignore, exclude=exclude)
    for rel, info in walk(root, ignore, left_out=left_out):
        total += info.st_size
        if len(manifest) >= MAX_SOURCE_FILES or total > MAX_SOURCE_BYTES:
            raise _fail(
                f"the source {root} holds more than {MAX_SOURCE_FILES} files or "
                f"{MAX_SOURCE_BYTES // 1_000_000} MB (skipping VCS data, caches and what its "
                ".gitignore names); point it at the project itself, not a folder above it"
            )
        try:
            content = (root / rel).read_bytes()
        except OSError as exc:
            raise _fail(f"cannot read {rel} in {root}: {exc.strerror}") from None
        key = blob_hash(content)
        manifest[rel] = entry(EXECUTABLE if info.st_mode & 0o100 else PLAIN, key)
        if key not in batch:
            batch[key] = content
            size += len(content)
        if size >= BATCH_BYTES:
            artifacts.put(batch)
            batch, size = {}, 0
    listing = canonical(manifest)
    batch[blob_hash(listing)] = listing
    artifacts.put(batch)
    return blob_hash(listing), len(manifest)


def read_manifest(artifacts: Artifacts, key: str) -> Manifest:
    found: Manifest = json.loads(artifacts.get([key])[key])
    return found


def directory(
    value: Any,
    artifacts: Artifacts,
    *,
    trusted: bool,
    roots: Sequence[Path],
    state_dir: Path | None = None,
) -> dict[str, Any]:
    """Pack a local directory; the source's description with its manifest (`base`)."""
    path = Path(str(value)).expanduser()
    check_local(path, what="workspace", trusted=trusted, roots=roots)
    if state_dir is not None:
        state = Path(state_dir).expanduser().resolve()
        if path.resolve() == state:
            raise _fail(f"the workspace {path} is tickwork's state dir; give the project's folder")
        if not trusted and state in path.resolve().parents:  # every session's files, blobs
            raise _fail(
                f"the workspace {path} is inside tickwork's state dir ({state}); give the "
                "project's folder"
            )
    if not path.is_dir():
        raise _fail(
            f"the workspace {str(value)!r} is not an existing directory; give the project's folder"
        )
    left_out: list[str] = []
    base, count = pack(path.resolve(), artifacts, exclude=state_dir, left_out=left_out)
    found = {"kind": "workspace", "path": str(path.resolve()), "files": count, "base": base}
    packaging = _packaging(path.resolve(), left_out)
    version = versions.of_checkout(
        path.resolve(),
        packaging,
        git=trusted or _own_git_data(path.resolve(), roots),
        parents=trusted,
    )
    if version is not None:
        found["version"] = version
    # the version file a VCS plugin writes: the environment's build writes it anew and puts
    # it into the session's working copy (docs/ENVIRONMENTS.md), so the session sees it
    scm_ = versions.scm(packaging)
    rebuilt = set(scm_.version_files) if scm_ is not None else set()
    named = [path for path in left_out if not _build_metadata(path) and path not in rebuilt]
    if named:  # the session will not see them: say so, where its source is named
        found["gitignored"] = {"count": len(named), "first": named[:GITIGNORED_SHOWN]}
    return found


def _build_metadata(path: str) -> bool:
    """Whether a path the `.gitignore` left out is (in) a `*.egg-info` folder: metadata a
    build wrote, which an sdist ships and its `.gitignore` names, and which building or
    installing the project writes anew: naming it among what the session does not see is
    noise before what matters (it is still left out)."""
    return any(part.endswith(".egg-info") for part in path.rstrip("/").split("/"))


def _packaging(root: Path, left_out: Sequence[str] = ()) -> dict[str, bytes]:
    """The packaging files at the tree's root (regular files, not links) that were packed:
    not those its `.gitignore` left out (`left_out`), which setup never sees, and which
    no limit of the pack's bounded (a sparse file of any size would be read whole)."""
    found = {}
    for name in versions.PACKAGING:
        path = root / name
        if name not in left_out and path.is_file() and not path.is_symlink():
            found[name] = path.read_bytes()
    return found


def _own_git_data(root: Path, roots: Sequence[Path]) -> bool:
    """Whether an untrusted workspace's version may be read from git: it has a `.git` of
    its own whose data lies under `roots` (nothing outside them is read)."""
    if not (root / ".git").exists():
        return False
    try:
        _git_data_inside(root, str(root), roots)
    except (InvalidInput, RuntimeError, OSError):
        return False
    return True


def _git(*args: str, cwd: Path | None = None, limit: int | None = None) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    done = subprocess.run(
        ["git", "-c", "protocol.ext.allow=never", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
        preexec_fn=None if limit is None else _file_size_limit(limit),
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout.strip()


def _file_size_limit(limit: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _public_address(url: str) -> tuple[str, int, str]:
    """The host, port and public address an untrusted https URL's clone connects to."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    try:
        port = parsed.port or 443
    except ValueError:
        raise _fail(f"the repository {url!r} has an invalid port") from None
    if not host:
        raise _fail(f"the repository {url!r} names no host")
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise SourceUnreachable(
            f"repair input: the repository's host {host!r} does not resolve; check the URL, "
            "or try again once it answers"
        ) from None
    addresses = {info[4][0] for info in found}
    for address in sorted(addresses):
        if not public(ipaddress.ip_address(address.split("%")[0])):
            raise _fail(
                f"the repository's host {host!r} resolves to {address}, which is not a public "
                "address; this server clones from the internet only (submit it with the CLI "
                "on a trusted machine, or as a directory under TICKWORK_WORKSPACE_ROOTS)"
            )
    return host, port, sorted(addresses)[0]


def _clone_args(url: str, location: str, *, trusted: bool) -> list[str]:
    """`git clone` options: an untrusted clone goes to the address checked, and nowhere else."""
    if trusted:
        return ["clone", "--quiet", "--no-checkout", "--", location]
    if urlparse(url).scheme != "https":  # a path under the roots: copy, never hardlink
        return ["clone", "--quiet", "--no-checkout", "--no-local", "--", location]
    host, port, address = _public_address(url)
    pinned = f"[{address}]" if ":" in address else address
    return [
        "-c", f"http.curloptResolve={host}:{port}:{pinned}",
        "-c", "http.followRedirects=false",
        "-c", "protocol.allow=never",
        "-c", "protocol.https.allow=always",
        "clone", "--quiet", "--no-checkout", "--", location,
    ]  # fmt: skip


#: git's scp-like address, `user@host:path` (no scheme, a colon before the first slash)
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//)")


def _repo_location(url: str, *, trusted: bool, roots: Sequence[Path]) -> str:
    if not url or url.startswith("-") or "\x00" in url:
        raise _fail(f"`repo` {url!r} is not a git URL or path")
    parsed = urlparse(url)
    if _SCP_LIKE.match(url):  # git's user@host:path, which urlparse takes for a path
        if not trusted:
            raise _fail(
                f"the repository {url!r}: this server clones https:// URLs only; write it "
                "as https://HOST/PATH"
            )
        return url
    if parsed.scheme in ("", "file"):
        path = Path(unquote(parsed.path) if parsed.scheme else url).expanduser()
        check_local(path, what="repository", trusted=trusted, roots=roots)
        if not path.exists():
            raise _fail(f"the repository {url!r} does not exist; give a git URL or a local clone")
        if not trusted:
            try:
                _git_data_inside(path.resolve(), url, roots)
            except (RuntimeError, OSError) as exc:  # RuntimeError: a link that loops
                raise _fail(
                    f"the repository {url!r}: its git data cannot be read ({exc}); give a "
                    "repository whose .git holds no link that loops or cannot be followed"
                ) from None
        return str(path.resolve())
    if not trusted and parsed.scheme != "https":
        raise _fail(f"the repository {url!r}: this server clones https:// URLs only")
    return url


def _plain_directory(location: str) -> bool:
    """Whether `location` (`_repo_location`'s) is a local directory with neither a `.git`
    nor a bare repository's layout: a project given as a repository."""
    path = Path(location)
    if not path.is_absolute() or not path.is_dir():
        return False
    return not (path / ".git").exists() and not _bare(path)


def _bare(path: Path) -> bool:
    """Whether `path` has a bare repository's layout (git's own test: a HEAD file and an
    objects folder)."""
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


#: how deep git follows alternates of alternates
_ALTERNATES_DEPTH = 5


def _git_data_inside(path: Path, url: str, roots: Sequence[Path]) -> None:
    """Refuse a local repository (of an untrusted submission) whose git data lies outside
    `roots`: its `.git` a file (`gitdir: ...`) or a link pointing out, a worktree's
    `commondir`, an `objects` folder or `objects/info/alternates` elsewhere, or a link
    inside `objects` (a loose object's folder, a pack) or among the refs (`refs/`,
    `packed-refs`, `HEAD`, ...) pointing out. git reads all of these, so the clone would
    copy a repository the roots do not hold."""
    dot = path / ".git"
    if dot.is_file():
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
        if not text.startswith("gitdir:"):
            raise _fail(f"the repository {url!r}: its .git file is not `gitdir: PATH`")
        git_dir = (path / text.removeprefix("gitdir:").strip()).resolve()
    elif dot.exists():
        git_dir = dot.resolve()
    elif _bare(path):
        git_dir = path
    else:
        raise _fail(
            f"the repository {url!r} is not a git repository (no .git in it); give a "
            "project directory as `workspace`"
        )
    # a `.git` that is no repository is skipped, and a folder with a bare repository's
    # layout beside it read instead (by a clone and by discovery): both are checked
    candidates = [git_dir, path] if git_dir != path and _bare(path) else [git_dir]
    places = []
    for candidate in candidates:
        places.append(candidate)
        common = candidate / "commondir"
        if common.is_file():
            places.append((candidate / common.read_text(errors="replace").strip()).resolve())
    # git reads the files its configuration includes (`include.path`, `includeIf.*.path`),
    # and the files those include, as configuration: they must lie under the roots too
    configs = [place / name for place in places for name in _CONFIGS]
    # a configuration file that is a link is read where it points
    _refuse_outside([c.resolve() for c in configs if c.is_symlink()], url, roots)
    checked: set[Path] = set()
    for _ in range(_INCLUDE_DEPTH):  # each file once: a file including itself loops
        found = dict.fromkeys(i for config in configs for i in _includes(config))
        configs = [i for i in found if i not in checked]
        _refuse_outside(configs, url, roots)
        checked.update(configs)
    repositories = list(places)  # the git dirs, a worktree's common one too: refs are read
    stores = [(place / "objects").resolve() for place in places]
    seen: set[Path] = set()
    for _ in range(_ALTERNATES_DEPTH + 1):
        found = []
        for store in stores:
            if store in seen:
                continue
            seen.add(store)
            alternates = store / "info" / "alternates"
            if alternates.is_file():
                for line in alternates.read_bytes().splitlines():
                    if line.strip() and not line.startswith(b"#"):
                        found.append((store / _alternate(line.strip())).resolve())
        places += stores
        stores = found
    _refuse_outside(places, url, roots)
    # every store is inside now: a link in one (a loose object's folder, a pack) is read
    # through as well, and so is one among the refs and the files beside them
    _refuse_outside([link for store in sorted(seen) for link in _links(store)], url, roots)
    _refuse_outside([link for place in repositories for link in _ref_links(place)], url, roots)


#: a repository's configuration files, read by every git command run in it
_CONFIGS = ("config", "config.worktree")
#: how deep git follows includes of included files (config.c's MAX_INCLUDE_DEPTH)
_INCLUDE_DEPTH = 10


def _includes(config: Path) -> list[Path]:
    """The files `config` includes, as git resolves them (a relative path from the config's
    own folder, `~/` from the home folder); no includes if it is not a regular file."""
    if not config.is_file():
        return []
    try:
        listed = _git("config", "--file", str(config), "--no-includes", "--null", "--list")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:300]
        raise _fail(f"the repository's {config.name} cannot be read by git: {detail}") from None
    found = []
    for line in listed.split("\0"):
        key, _, value = line.partition("\n")
        if key.startswith(("include.", "includeif.")) and key.endswith(".path") and value:
            if value.startswith("%(prefix)/"):  # git's own installation folder
                path = Path("/", value.removeprefix("%(prefix)/"))
            else:
                path = Path(value).expanduser() if value.startswith("~") else Path(value)
            found.append((config.parent / path).resolve())
    return found


#: what git reads of a repository besides its objects and its config: the refs and
#: the files that name commits
_REF_FILES = ("HEAD", "packed-refs", "shallow", "ORIG_HEAD", "FETCH_HEAD", "commondir")
_REF_FOLDERS = ("refs", "info", "worktrees", "logs")


def _ref_links(git_dir: Path) -> Iterator[Path]:
    """Where the symbolic links among `git_dir`'s refs and the files beside them point
    (git writes none there; one pointing out of the roots is read there)."""
    for name in _REF_FILES:
        if (git_dir / name).is_symlink():
            yield (git_dir / name).resolve()
    for name in _REF_FOLDERS:
        folder = git_dir / name
        if folder.is_symlink():
            yield folder.resolve()
        elif folder.is_dir():
            yield from _links(folder)


def _links(folder: Path) -> Iterator[Path]:
    """Where the symbolic links under `folder` point (git writes none in a repository's
    objects)."""
    for top, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            if (Path(top) / name).is_symlink():
                yield (Path(top) / name).resolve()


def _refuse_outside(places: Sequence[Path], url: str, roots: Sequence[Path]) -> None:
    for place in places:
        if not allowed(place, roots):
            raise _fail(
                f"the repository {url!r} keeps its git data at {str(place)!r}, outside the "
                f"directories this server accepts ({', '.join(str(r) for r in roots)}; "
                "TICKWORK_WORKSPACE_ROOTS); give the repository itself, not a link to one"
            )


#: the escapes of git's C-style quoting (`unquote_c_style`) besides octal `\\ooo`
_C_ESCAPES = {
    ord(k): v for k, v in {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}.items()
} | {ord("\\"): ord("\\"), ord('"'): ord('"')}


def _alternate(line: bytes) -> str:
    """The path an `objects/info/alternates` line names, as git reads it: a line in double
    quotes is C-unquoted (`"\\057elsewhere"` is `/elsewhere`); one git cannot unquote is
    a path as written."""
    if not line.startswith(b'"'):
        return os.fsdecode(line)
    out, i = bytearray(), 1
    while i < len(line):
        c = line[i]
        if c == ord('"'):
            return os.fsdecode(bytes(out))
        if c == ord("\\") and i + 1 < len(line):
            nxt = line[i + 1]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            digits = line[i + 1 : i + 4]
            if re.fullmatch(rb"[0-3][0-7]{2}", digits):
                out.append(int(digits, 8))
                i += 4
                continue
            return os.fsdecode(line)  # git refuses the quoting: the line is a plain path
        out.append(c)
        i += 1
    return os.fsdecode(line)


@contextlib.contextmanager
def clone_at(url: str, commit: str, *, untrusted: bool = False) -> Iterator[Path]:
    """A temporary clone of `url` checked out at `commit`. `untrusted`: the URL came from an
    untrusted submission, and its https host is checked and pinned again as at submit (it
    may resolve elsewhere now, or redirect)."""
    with tempfile.TemporaryDirectory(prefix="tickwork-clone-") as tmp:
        clone = Path(tmp) / "repo"
        args = _clone_args(url, _local(url), trusted=not untrusted)
        try:
            _git(*args, str(clone), limit=MAX_CLONE_BYTES if untrusted else None)
            if untrusted:
                _check_checkout(clone, commit, url)
                no_filters(clone)
            _git("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit, cwd=clone)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:500]
            raise _clone_failed(f"cannot clone {url!r} at {commit[:12]}: {detail}", exc) from None
        yield clone


def _uncommitted(location: str) -> list[str]:
    """The files of a local clone's working tree that differ from its HEAD: the session
    starts from a commit and never sees those changes. None for a URL or a bare repository;
    asked of a trusted caller's clone only (its git config may run commands, as fsmonitor)."""
    path = Path(location)
    if not path.is_absolute() or not (path / ".git").exists():
        return []
    try:
        return _git("diff", "--name-only", "HEAD", cwd=path).splitlines()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return []  # no commit yet, or a clone git cannot read: the clone said what it could


def _local(url: str) -> str:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else url


def repository(
    url: Any, ref: Any, artifacts: Artifacts, *, trusted: bool, roots: Sequence[Path]
) -> dict[str, Any]:
    """Clone `url`, resolve `ref` to a commit, pack that commit's files."""
    url = str(url or "").strip()
    ref = str(ref or "HEAD").strip()
    if not _REF.match(ref) or ref.startswith("-"):
        raise _fail(f"`ref` {ref!r} is not a branch, tag or commit name")
    location = _repo_location(url, trusted=trusted, roots=roots)
    with tempfile.TemporaryDirectory(prefix="tickwork-clone-") as tmp:
        clone = Path(tmp) / "repo"
        try:
            args = _clone_args(url, location, trusted=trusted)
            _git(*args, str(clone), limit=None if trusted else MAX_CLONE_BYTES)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:500]
            if not trusted:  # git cannot tell a pack cut at the limit from a broken one
                detail += f" (this server's clones are capped at {MAX_CLONE_BYTES:,} bytes)"
            if _plain_directory(location):
                detail += (
                    "; it is a directory but no git repository: give a project directory as "
                    "`workspace`"
                )
            raise _clone_failed(f"cannot clone {url!r}: {detail}", exc) from None
        commit = ""
        for candidate in (ref, f"origin/{ref}"):
            try:
                commit = _git(
                    "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", cwd=clone
                )
                break
            except subprocess.CalledProcessError:
                continue
        if not commit:
            raise _fail(f"the repository {url!r} has no branch, tag or commit {ref!r}")
        if not trusted:
            _check_checkout(clone, commit, url)
            no_filters(clone)
        _git(
            "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit, cwd=clone
        )
        base, count = pack(clone, artifacts, gitignore=False)
        version = versions.of_checkout(clone, _packaging(clone), git=True, parents=False)
    found = {"kind": "repo", "url": url, "ref": ref, "commit": commit, "files": count, "base": base}
    if trusted and (changed := _uncommitted(location)):
        found["uncommitted"] = {"count": len(changed), "first": changed[:GITIGNORED_SHOWN]}
    if version is not None:
        found["version"] = version
    if not trusted:  # cloned again for a bundle: by the same rules
        found["untrusted"] = True
    return found


def _check_checkout(clone: Path, commit: str, url: str) -> None:
    """Refuse an untrusted commit whose files would pass `MAX_CHECKOUT_BYTES` or
    `MAX_CHECKOUT_FILES` once checked out, from its tree's sizes: before a byte is written."""
    try:
        listing = _git("ls-tree", "-r", "-l", "-z", "--full-tree", commit, cwd=clone)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip()[:300]
        raise _fail(f"cannot list the files of {url!r} at {commit[:12]}: {detail}") from None
    count = total = 0
    for item in listing.split("\0"):
        fields = item.split("\t", 1)[0].split()
        if len(fields) == 4 and fields[3].isdigit():
            count += 1
            total += int(fields[3])
    if count > MAX_CHECKOUT_FILES or total > MAX_CHECKOUT_BYTES:
        raise _fail(
            f"the repository {url!r} at {commit[:12]} holds {count:,} files of {total:,} bytes "
            f"once checked out; this server checks out at most {MAX_CHECKOUT_FILES:,} files "
            f"and {MAX_CHECKOUT_BYTES:,} bytes; point it at a smaller project"
        )


def no_filters(clone: Path) -> None:
    """No filter of the machine's git configuration runs on the files of `clone`: a clone
    of an untrusted repository, or one that is given a session's files (the model's,
    `.gitattributes` included: a bundle, an eval's check), whose `.gitattributes` would
    choose one (`filter=lfs`: git-lfs fetches from whatever `lfs.url` the `.lfsconfig`
    names, the machine's loopback too). The repository's own `info/attributes` comes
    before every `.gitattributes` of its tree."""
    info = clone / ".git" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "attributes").write_text("* -filter\n")


def describe(source: Any) -> str:
    """One line naming a job's source, for cards and prompts."""
    if not isinstance(source, dict):
        return "unknown"
    if source.get("kind") == "repo":
        url = re.sub(r"(://[^:/@\s]*:)[^@\s]+@", r"\1****@", str(source.get("url")))
        return f"{url} at {source.get('ref')} ({str(source.get('commit'))[:12]})"
    return f"directory {source.get('path')} (packed at submit; never changed{_gitignored(source)})"


#: a distribution's name as packaging metadata may give it (PEP 508)
_PROJECT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
#: the longest source name `project_name` gives
MAX_NAME_CHARS = 100


def project_name(source: Any, files: Mapping[str, bytes]) -> str:
    """The name of the project a source holds, for a listing of what was built for it:
    its packaging's (`[project] name` of pyproject.toml, else `[metadata] name` of
    setup.cfg, else an unpacked sdist's `Name:` in PKG-INFO, where a setup.py project's
    name is written down; `files`: path -> content at its root), else the source's own (a
    workspace's folder, a repository's last path part), else "". Both come from the
    submitter: a name that is not a distribution's is not taken, and the source's is cut
    and made printable."""
    try:
        meta = tomllib.loads(files.get("pyproject.toml", b"").decode("utf-8", "replace"))
    except (tomllib.TOMLDecodeError, RecursionError):
        meta = {}
    table = meta.get("project")
    names = [table.get("name") if isinstance(table, dict) else None]
    config = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        config.read_string(files.get("setup.cfg", b"").decode("utf-8", "replace"))
        names.append(config.get("metadata", "name", fallback=None))
    except configparser.Error:
        pass
    headers = files.get("PKG-INFO", b"").decode("utf-8", "replace").partition("\n\n")[0]
    sdist = re.search(r"^Name: *(\S+) *$", headers, re.MULTILINE)
    names.append(sdist.group(1) if sdist else None)
    for name in names:
        if isinstance(name, str) and _PROJECT.fullmatch(name.strip()):
            return name.strip()
    if not isinstance(source, Mapping):
        return ""
    where = str(source.get("path") or "")
    if not where:  # a URL's path alone: neither its credentials nor its query
        url = str(source.get("url") or "")
        where = urlparse(url).path if "://" in url else url
    last = re.split(r"[/:]", where.rstrip("/"))[-1].removesuffix(".git")
    return "".join(c if c.isprintable() else "?" for c in last)[:MAX_NAME_CHARS]


def _gitignored(source: dict[str, Any]) -> str:
    """What a workspace's .gitignore left out, for its one line ("" for nothing)."""
    left = source.get("gitignored")
    if not isinstance(left, dict) or not left.get("count"):
        return ""
    first = [str(p) for p in left.get("first") or ()]
    more = ", …" if int(left["count"]) > len(first) else ""
    return f"; its .gitignore left out {left['count']}: {', '.join(first)}{more}"
