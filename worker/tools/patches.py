"""Unified diffs: parsing, applying to text, and applying to a workspace all-or-nothing.

Pure Python, so the worker needs neither `patch` nor `git`. Every context and removed
line is checked against the file; a hunk may sit at another line than its header says
(the nearest match wins, as with `patch`), and lines that differ only in trailing
whitespace still match. Hunk line counts are read but not trusted: models often get them
wrong, and the context check is what keeps a patch honest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tickwork.fsm.errors import ToolError
from tickwork.worker.tools.confinement import (
    lexical,
    read_regular,
    relative,
    resolve,
    workspace_root,
    write_text,
)

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: git's C-style escapes (quote.c); every other byte below 0x20 or from 0x7f is octal
_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}
#: a file mode that makes a symbolic link (git's 120000); the applier writes no links
_SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode|deleted file mode|old mode) 120000\s*$")


def quote_path(name: str) -> str:
    """`name` as git writes it in a patch (core.quotePath, the default): as it is when it
    needs nothing, else in double quotes with C escapes and non-ASCII bytes in octal. A
    name holding a newline can then never start a header line of its own."""
    raw = name.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b >= 0x7F or b in (34, 92) for b in raw):
        return name
    out = []
    for b in raw:
        if b in _ESCAPES:
            out.append("\\" + _ESCAPES[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def unquote_path(text: str) -> str:
    """The name `quote_path` (or git) wrote as `text`; as it is when it is not quoted."""
    if not (len(text) > 1 and text[0] == text[-1] == '"'):
        return text
    raw, body, i = bytearray(), text[1:-1], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            raw += c.encode("utf-8")
            i += 1
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            raw.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        elif i + 1 < len(body) and body[i + 1] in _UNESCAPES:
            raw.append(_UNESCAPES[body[i + 1]])
            i += 2
        else:
            raise ToolError(f"the quoted file name {text} has a bad escape at {body[i : i + 4]!r}")
    return raw.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Hunk:
    header: str
    old_start: int
    old_count: int
    #: (" " | "-" | "+", text without the line ending)
    lines: tuple[tuple[str, str], ...]
    #: the new side's last line has no newline ("\ No newline at end of file")
    new_no_eol: bool = False

    @property
    def old(self) -> list[str]:
        return [text for op, text in self.lines if op != "+"]

    def without_trailing_blanks(self) -> Hunk | None:
        """The hunk without blank context lines at its end (often spacing), if it has any."""
        lines = list(self.lines)
        while lines and lines[-1] == (" ", ""):
            lines.pop()
        if len(lines) == len(self.lines) or not lines:
            return None
        return Hunk(self.header, self.old_start, self.old_count, tuple(lines), self.new_no_eol)


@dataclass(frozen=True)
class FilePatch:
    #: None for /dev/null: the file is created (old) or deleted (new)
    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]
    #: the header's paths as written, where two differing first folders were dropped
    #: (`old/x`, `new/x`): in a workspace holding `old/x` they mean a move, not `x`
    written: tuple[str, str] | None = None

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


def parse_patch(text: str) -> list[FilePatch]:
    """The file patches of a unified diff, or a `ToolError` saying what is malformed."""
    lines = text.splitlines()
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _is_file_header(lines, i):
            old_given, new_given = _header_path(line[4:]), _header_path(lines[i + 1][4:])
            old, new = _strip_prefixes(old_given, new_given)
            # kept where two differing first folders were dropped, but not git's own `a/` and
            # `b/`, which are never folders of the workspace
            written = (
                (old_given, new_given)
                if old_given and new_given and old != old_given and not old_given.startswith("a/")
                else None
            )
            i += 2
            hunks = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _parse_hunk(lines, i)
                hunks.append(hunk)
            if old is None and new is None:
                raise ToolError("a file diff has /dev/null on both sides")
            if not hunks:
                raise ToolError(f"the diff for {new or old} has no hunks (@@ -l,n +l,n @@ lines)")
            files.append(FilePatch(old, new, tuple(hunks), written))
        elif line.startswith("@@"):
            raise ToolError(f"line {i + 1}: a hunk comes before any '--- a/x' / '+++ b/x' header")
        elif line.startswith(("GIT binary patch", "Binary files ")):
            raise ToolError("binary patches are not supported; write the file instead")
        elif _SYMLINK_MODE.match(line):
            raise ToolError(
                "the diff makes or changes a symbolic link (mode 120000); the applier writes "
                "regular files only. Nothing was changed."
            )
        else:
            i += 1  # `diff --git`, `index ...`, mode lines and prose
    if not files:
        raise ToolError(
            "no file diffs found; expected a unified diff: '--- a/path', '+++ b/path', then "
            "hunks starting '@@ -start,count +start,count @@' ('--- /dev/null' for new files)"
        )
    return files


def _is_file_header(lines: Sequence[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _header_path(raw: str) -> str | None:
    path = unquote_path(raw.split("\t", 1)[0].strip())
    return None if path == "/dev/null" else path


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Drop git's `a/` and `b/` when the diff uses them, and any other pair of first
    folders that differ in front of the same path (`git diff -R`'s `b/x` and `a/x`, `diff
    -ru old new`'s `old/x` and `new/x`), as `git apply` does."""
    old_prefixed = old is None or old.startswith("a/")
    new_prefixed = new is None or new.startswith("b/")
    if old_prefixed and new_prefixed:
        return (old[2:] if old else None), (new[2:] if new else None)
    if old is not None and new is not None and "/" in old and "/" in new:
        old_first, old_rest = old.split("/", 1)
        new_first, new_rest = new.split("/", 1)
        if old_first != new_first and old_rest == new_rest and old_rest:
            return old_rest, new_rest
    return old, new


def _parse_hunk(lines: Sequence[str], i: int) -> tuple[Hunk, int]:
    header = lines[i]
    match = _HUNK_HEADER.match(header)
    if not match:
        raise ToolError(
            f"malformed hunk header {header!r}; expected '@@ -start,count +start,count @@'"
        )
    old_count = 1 if match[2] is None else int(match[2])
    body: list[tuple[str, str]] = []
    new_no_eol = False
    i += 1
    while i < len(lines) and not lines[i].startswith("@@") and not _is_file_header(lines, i):
        line = lines[i]
        if line.startswith("\\"):
            new_no_eol = bool(body) and body[-1][0] != "-"
        elif line == "" or line[0] in " -+":
            body.append((line[:1] or " ", line[1:]))  # an empty line is empty context
        else:
            break
        i += 1
    if not body:
        raise ToolError(f"the hunk {header!r} has no lines")
    hunk = Hunk(header, int(match[1]), old_count, tuple(body), new_no_eol)
    return hunk, i


def _split(text: str) -> tuple[list[str], str, bool]:
    """Lines without endings, the line ending, and whether the text ends with one."""
    eol = "\r\n" if "\r\n" in text else "\n"
    final = text.endswith("\n")
    body = text[:-1] if final else text
    lines = body.split("\n") if (body or final) else []
    if eol == "\r\n":
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines, eol, final


def apply_hunks(text: str, hunks: Sequence[Hunk], *, path: str) -> str:
    """`text` with `hunks` applied in order; a `ToolError` naming the hunk that does not fit."""
    lines, eol, final = _split(text)
    out: list[str] = []
    cursor = 0
    for number, given in enumerate(hunks, 1):
        hunk, position = given, None
        for hunk in filter(None, (given, given.without_trailing_blanks())):
            position = _locate(lines, hunk.old, _expected(hunk), cursor)
            if position is not None:
                break
        if position is None:
            at = max(_expected(given), cursor)
            raise ToolError(_mismatch(path, number, given, lines, at))
        out.extend(lines[cursor:position])
        file_line = position
        for op, content in hunk.lines:
            if op == " ":
                out.append(lines[file_line])  # the file's own text, whitespace and all
            elif op == "+":
                out.append(content)
            if op != "+":
                file_line += 1
        cursor = position + len(hunk.old)
        if cursor == len(lines):
            final = not hunk.new_no_eol
    out.extend(lines[cursor:])
    if not out:
        return ""
    return eol.join(out) + (eol if final else "")


def _expected(hunk: Hunk) -> int:
    """Where the hunk's old lines start (0-based); a pure insertion goes after `old_start`."""
    return hunk.old_start if not hunk.old else hunk.old_start - 1


def _locate(lines: list[str], old: list[str], expected: int, cursor: int) -> int | None:
    if not old:
        return max(expected, cursor) if max(expected, cursor) <= len(lines) else None
    for same in (str.__eq__, lambda a, b: a.rstrip() == b.rstrip()):
        found = [
            p
            for p in range(cursor, len(lines) - len(old) + 1)
            if all(same(lines[p + k], old[k]) for k in range(len(old)))
        ]
        if found:
            return min(found, key=lambda p: (abs(p - expected), p))
    return None


def _mismatch(path: str, number: int, hunk: Hunk, lines: list[str], at: int) -> str:
    old = hunk.old
    wanted = "\n".join(f"  |{line}" for line in old[:12])
    actual = "\n".join(f"  |{line}" for line in lines[at : at + min(len(old), 12)])
    return (
        f"hunk {number} ({hunk.header}) of {path} does not apply: these lines were not found "
        f"at or after line {at + 1}:\n{wanted}\nthe file has there:\n{actual or '  (end of file)'}"
        "\nNothing was changed. Read the file again and make the patch from its current text."
    )


def apply_patch(workspace: Path, text: str) -> str:
    """Apply a unified diff inside `workspace`: every file changes, or none does."""
    changes: dict[Path, str | None] = {}  # real path -> new text, None to delete
    shown: dict[Path, str] = {}
    summary: list[str] = []
    for patch in parse_patch(text):
        patch = _as_meant(workspace, patch)
        for given in (patch.old_path, patch.new_path):
            if given is not None:
                _check_path(workspace, given)
        source = resolve(workspace, patch.old_path) if patch.old_path else None
        target = resolve(workspace, patch.new_path) if patch.new_path else None
        for path in (source, target):
            if path is not None:
                shown[path] = relative(workspace, path)
        if source is None:
            assert target is not None
            if _current(target, changes) is not None:
                raise ToolError(
                    f"{patch.path} already exists; a diff from /dev/null creates "
                    "a new file. Nothing was changed."
                )
            original = ""
        else:
            found = _current(source, changes)
            if found is None:
                raise ToolError(f"{shown[source]} does not exist; nothing was changed")
            original = found
        result = apply_hunks(original, patch.hunks, path=patch.path)
        if target is None:
            assert source is not None
            if result.strip():
                raise ToolError(
                    f"the diff deletes {shown[source]} but does not remove all of "
                    "its lines. Nothing was changed."
                )
            changes[source] = None
            summary.append(f"deleted {shown[source]}")
            continue
        changes[target] = result
        if source is not None and source != target:
            changes[source] = None
            summary.append(f"renamed {shown[source]} to {shown[target]}")
        else:
            verb = "created" if source is None else "patched"
            summary.append(f"{verb} {shown[target]} ({len(patch.hunks)} hunk(s))")
    _commit(changes, shown)
    return "\n".join(summary)


def _as_meant(workspace: Path, patch: FilePatch) -> FilePatch:
    """`patch` with the first folders it dropped put back where the workspace holds its old
    path as written and not the one without them: `old/x` to `new/x` there is a move."""
    if patch.written is None or patch.old_path is None:
        return patch
    old, new = patch.written
    try:
        held = resolve(workspace, old).is_file() and resolve(workspace, new) is not None
        meant = held and not resolve(workspace, patch.old_path).exists()
    except ToolError:  # one leaves the workspace: the paths without the folders stand
        return patch
    return FilePatch(old, new, patch.hunks) if meant else patch


def check_patch(text: str) -> None:
    """A `ToolError` for what a patch's text alone makes `apply_patch` refuse, no workspace
    needed: a malformed diff, a path that leaves the workspace or has a `.git` part (a
    person's edit is refused at once, while it can be corrected)."""
    for patch in parse_patch(text):
        for given in (patch.old_path, patch.new_path):
            if given is not None:
                lexical(given)
                _refuse_git(given)


def _refuse_git(given: str) -> None:
    """A `.git` part (any case, with the trailing dots and spaces some file systems drop: a
    `.git` file or folder would make a later git command run what the patch chose)."""
    if any(part.rstrip(". ").casefold() == ".git" for part in PurePosixPath(given).parts):
        raise ToolError(
            f"the diff touches {given!r}, inside a .git part; patches may not change git's "
            "own files. Nothing was changed."
        )


def _check_path(workspace: Path, given: str) -> None:
    """Refuse what `git apply` refuses beyond `resolve`'s checks: a `.git` part, a path
    through a symbolic link, and writing to a symbolic link."""
    _refuse_git(given)
    parts = PurePosixPath(given).parts
    here = workspace_root(workspace)
    for number, part in enumerate(parts, 1):
        here = here / part
        if here.is_symlink():
            where = "is" if number == len(parts) else "is beyond"
            raise ToolError(
                f"{given!r} {where} a symbolic link ({'/'.join(parts[:number])}); patch "
                "the file it points to by its own path. Nothing was changed."
            )


def _current(path: Path, changes: dict[Path, str | None]) -> str | None:
    """The file's text as this patch has left it so far; None if it does not exist."""
    if path in changes:
        return changes[path]
    if not path.exists():
        return None
    if not path.is_file():
        raise ToolError(f"{path.name} is not a regular file; nothing was changed")
    try:
        # no newline translation; a FIFO swapped in since is refused, never waited on
        return read_regular(path, path.name).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{path.name} is not UTF-8 text ({exc}); nothing was changed") from exc


def _commit(changes: dict[Path, str | None], shown: dict[Path, str]) -> None:
    """Write every change; if one write fails, put back what was already written."""
    originals = {path: path.read_bytes() if path.is_file() else None for path in changes}
    done: list[Path] = []
    try:
        for path, text in changes.items():
            if text is None:
                path.unlink(missing_ok=True)
            else:
                write_text(path, text)
            done.append(path)
    except OSError as exc:
        for path in done:
            before = originals[path]
            if before is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(before)
        raise ToolError(
            f"could not write {shown.get(path, path.name)}: {exc}; "
            "the files already written were restored"
        ) from exc
