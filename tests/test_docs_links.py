"""Every relative link in the docs leads somewhere: the file (or folder) it names exists, and
its `#anchor`, if any, is a heading of that file as GitHub makes anchors from headings.

The docs are README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md, ops/**/*.md and
examples/*.md. Links inside code (fenced blocks, `inline code`) are text, not links; links
with a scheme (https:, mailto:) are left to the reader."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

from tickwork.manuals import slug

ROOT = Path(__file__).resolve().parent.parent
#: an inline link or image `[text](target)` or `[text](target "title")`
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: a reference definition `[name]: target`
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    found += sorted((ROOT / "docs").glob("*.md"))
    found += sorted((ROOT / "ops").rglob("*.md"))
    found += sorted((ROOT / "examples").glob("*.md"))
    return [p for p in found if p.is_file()]


def prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence[1]
            elif fence[1] == fenced:
                fenced = None
            continue
        if fenced is None:
            lines.append((number, line))
    return lines


def without_code(line: str) -> str:
    """The line with its inline code spans blanked out."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m[0]), line)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (a repeated one gets `-1`, `-2`, ...)."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in prose(page.read_text(encoding="utf-8")):
        heading = HEADING.match(line)
        if heading:
            base = slug(heading[2])
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative link on the page."""
    found = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        text = without_code(line)
        for target in [*INLINE.findall(text), *REFERENCE.findall(text)]:
            if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                found.append((number, target))
    return found


def broken(page: Path) -> list[str]:
    """What is wrong with each broken link of the page, one line each."""
    wrong = []
    for number, target in links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / unquote(path)).resolve() if path else page
        at = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not where.exists():
            wrong.append(f"{at}: no such file")
        elif anchor and where.is_dir():
            wrong.append(f"{at}: a folder has no headings")
        elif anchor and where.suffix == ".md" and unquote(anchor) not in anchors(where):
            wrong.append(f"{at}: no heading with this anchor in {where.relative_to(ROOT)}")
    return wrong


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_a_heading(page: Path) -> None:
    wrong = broken(page)
    assert not wrong, "broken links:\n" + "\n".join(wrong)


def sources() -> list[Path]:
    """The code, tests and docs of the repository: its .py and .md files."""
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    for folder in ("fsm", "store", "worker", "tasks", "tickwork", "tests", "ops", "docs"):
        found += [
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in (".py", ".md") and "__pycache__" not in path.parts
        ]
    return found


def test_nothing_points_outside_the_repository_for_its_design() -> None:
    outside = "../" + "shared"  # spelled in two parts, so this file does not name it
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside in line or "shared/" + "DESIGN" in line
    ]
    why = "these point outside the repository (use docs/DESIGN.md):\n"
    assert not found, why + "\n".join(found)


def test_every_design_section_named_in_the_repository_exists() -> None:
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (\d+)\. ", design, re.M))
    named = re.compile(r"DESIGN\.md\s+sections?\s+(\d+)(?:\s+and\s+(\d+))?")
    wrong = []
    for path in sources():
        for found in named.finditer(path.read_text(encoding="utf-8")):
            wrong += [
                f"{path.relative_to(ROOT)}: section {n}"
                for n in found.groups()
                if n and n not in sections
            ]
    assert not wrong, "no such section of docs/DESIGN.md:\n" + "\n".join(wrong)


#: the pages that describe the code as it is now (the CHANGELOG and the benchmark results
#: are history: they name paths as they were)
CURRENT = ("README.md", "CONTRIBUTING.md", "docs", "ops/RUNBOOK.md")
#: a path into the repository, in backticks: `worker/tick/advance.py`, `tests/store/`
NAMED_PATH = re.compile(r"`((?:fsm|store|worker|tasks|tickwork|ops|tests|docs|examples)/[\w./-]*)`")


def test_every_path_the_current_docs_name_exists() -> None:
    named = [
        (path, number, found)
        for where in CURRENT
        for path in (
            [ROOT / where] if where.endswith(".md") else sorted((ROOT / where).glob("*.md"))
        )
        for number, line in prose(path.read_text(encoding="utf-8"))
        for found in NAMED_PATH.findall(line)
    ]
    assert len(named) > 100, "the pattern finds too few paths to be looking"
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {found}"
        for path, number, found in named
        if not (ROOT / found).exists()
    ]
    assert not wrong, "paths named that do not exist:\n" + "\n".join(wrong)


def test_the_anchors_are_githubs() -> None:
    assert slug("3. Durability: what a tick guarantees") == "3-durability-what-a-tick-guarantees"
    assert slug("The environment: `--setup`") == "the-environment---setup"
    assert slug("Sizing a fleet of model-bound workers") == "sizing-a-fleet-of-model-bound-workers"
    assert slug("`tickwork.approval_requested`") == "tickworkapproval_requested"
    assert slug("Postgres + Redis, **fast**") == "postgres--redis-fast"


def test_a_broken_link_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# A heading\n\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading) [gone](missing.md) [no anchor](other.md#not-a-heading)\n"
        "`[code](missing.md)` [web](https://example.org/x.md) [here](#title)\n"
        "# Title\n"
    )
    assert [w.split(": ", 2)[1:] for w in broken(page)] == [
        ["missing.md", "no such file"],
        ["other.md#not-a-heading", "no heading with this anchor in other.md"],
    ]
