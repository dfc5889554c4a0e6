"""The pages tickwork ships beside its code, so that what a message points to can be read
from any install: the docs (docs/*.md, `tickwork docs`) and the operators' runbook
(`tickwork runbook`). Each is package data in a wheel (`tickwork/docs`,
`tickwork/ops`) and a folder at the top of a checkout."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tickwork.fsm.errors import InvalidInput, NotInstalled

_HERE = Path(__file__).resolve().parent
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def shipped(folder: str) -> Path:
    """`folder` as package data of an installed wheel (`tickwork/<folder>`), or at the top
    of a checkout; the wheel's place when neither is there. (Beside an install, in
    site-packages, a `docs` folder is another distribution's.)"""
    checkout = (_HERE.parent / "pyproject.toml").is_file()
    for where in (_HERE / folder, *([_HERE.parent / folder] if checkout else [])):
        if where.is_dir():
            return where
    return _HERE / folder


def read(path: Path, what: str) -> str:
    """The text of a shipped page, or NotInstalled saying which file this install lacks."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise missing(what, path) from None


def missing(what: str, path: Path) -> NotInstalled:
    """The error for a shipped page or folder this install lacks."""
    return NotInstalled(
        f"this install lacks {what}: {path} is missing. Reinstall tickwork from its "
        "wheel (`pip install --force-reinstall tickwork`), or read it in tickwork's source"
    )


@dataclass(frozen=True)
class Section:
    """A heading of a page and its text, up to the next heading of its level or above."""

    level: int  #: 1 for `#`, 2 for `##`, ...
    title: str
    anchor: str  #: GitHub's anchor for the heading (`#key-one-build-per-key-reuse`)
    text: str
    lines: tuple[int, int]  #: where the text is among the page's lines, [start, end)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lowercased, every character but letters, marks,
    digits, `_`, spaces and `-` dropped, spaces made `-` (tests/test_docs_links.py checks
    the docs' links with it)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    kept = (
        c
        for c in text.lower()
        if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    )
    return "".join(kept).replace(" ", "-")


def sections(text: str) -> list[Section]:
    """Every heading of a Markdown page (none inside a fenced code block), in order."""
    lines = text.splitlines()
    starts: list[tuple[int, int, str]] = []
    fenced: str | None = None
    for number, line in enumerate(lines):
        fence = FENCE.match(line)
        if fence:
            fenced = fence[1] if fenced is None else (None if fence[1] == fenced else fenced)
        elif fenced is None and (heading := HEADING.match(line)):
            starts.append((number, len(heading[1]), heading[2]))
    seen: Counter[str] = Counter()
    found = []
    for i, (start, level, title) in enumerate(starts):
        end = next((s for s, lv, _ in starts[i + 1 :] if lv <= level), len(lines))
        base = slug(title)
        anchor = base if not seen[base] else f"{base}-{seen[base]}"
        seen[base] += 1
        body = "\n".join(lines[start:end]).rstrip() + "\n"
        found.append(Section(level, title, anchor, body, (start, end)))
    return found


def choose(found: list[Section], asked: str, page: str) -> list[Section]:
    """The sections `asked` names: `#anchor` exactly, or else the headings (below the page's
    title) holding every word of it, case aside, none inside another one chosen; InvalidInput
    listing the page's sections when none does."""
    below = [s for s in found if s.level > 1]
    if asked.startswith("#"):
        chosen = [s for s in below if s.anchor == asked[1:].lower()]
        if not chosen:
            listed = ", ".join(f"#{s.anchor}" for s in below if s.level == 2)
            raise InvalidInput(f"{page} has no section {asked}; its sections: {listed}")
        return chosen
    words = asked.lower().split()
    chosen = []
    for section in below:
        (start, end) = section.lines
        inside = any(c.lines[0] <= start and end <= c.lines[1] for c in chosen)
        if all(w in section.title.lower() for w in words) and not inside:
            chosen.append(section)
    if not chosen:
        listed = "; ".join(s.title for s in below if s.level == 2)
        raise InvalidInput(f"no heading of {page} holds {asked!r}; its sections: {listed}")
    return chosen
