"""`tickwork docs`: the docs ship with tickwork (tests/e2e/test_install.py), and what points
to a page of them names one that exists, a section it has, and, where a user reads it, the
command that prints it: "docs/ENVIRONMENTS.md (`tickwork docs environments`)"."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT
from tickwork import cli_docs, manuals
from tickwork.cli import main
from tickwork.cli_docs import find, pages, topic_of
from tickwork.manuals import choose, sections

#: the folders of the code that prints messages: what a wheel installs
CODE = ("tickwork", "worker", "store", "tasks", "fsm")
#: a page named anywhere: in a message, a docstring, a comment
PAGE = re.compile(r"docs/([A-Z_]+)\.md")
#: the one way a message names a page: its path (and section), then the command
POINTER = re.compile(r"docs/([A-Z_]+)\.md(?: section (\d+))? \(`tickwork docs ([^`]+)`\)")
COMMAND = re.compile(r"`tickwork docs ([^`]+)`")
DESIGN_SECTIONS = re.compile(r"docs/DESIGN\.md\s+sections?\s+(\d+)(?:\s+and\s+(\d+))?")


def _sources() -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8")
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


def _messages(source: str) -> list[str]:
    """The source's strings a user is shown (errors, hints, help): every literal but the
    docstrings, which are for readers of the code."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_every_page_the_code_names_is_a_topic_of_tickwork_docs() -> None:
    """A renamed or removed page would leave its pointers behind; so would a section of
    DESIGN.md renumbered."""
    titles = [s.title for s in sections((ROOT / "docs" / "DESIGN.md").read_text())]
    named = set()
    for path, text in _sources().items():
        for page in PAGE.findall(text):
            named.add(page)
            assert (ROOT / "docs" / f"{page}.md").is_file(), f"{path}: docs/{page}.md"
            assert find(page).path.name == f"{page}.md", path
        flat = " ".join(text.replace("#", " ").split())
        for numbers in DESIGN_SECTIONS.findall(flat):
            for number in filter(None, numbers):
                assert any(t.startswith(f"{number}. ") for t in titles), f"{path}: {number}"
    assert {"DESIGN", "EVAL", "JOB_KINDS", "CONFORMANCE"} <= named


def test_every_message_that_names_a_page_names_the_command_that_prints_it() -> None:
    pointers = set()
    for path, text in _sources().items():
        for message in _messages(text):
            flat = " ".join(message.split())
            named = PAGE.findall(flat)
            found = POINTER.findall(flat)
            assert len(found) == len(named), f"{path}: {flat!r}"
            for page, section, command in found:
                topic, *words = command.split()
                assert topic == topic_of(page), f"{path}: {flat!r}"
                assert not section or words == [section], f"{path}: {flat!r}"
                pointers.add(command)
    assert {"job-kinds", "eval task set", "design 16", "conformance"} <= pointers


def test_every_tickwork_docs_command_named_prints_one_page_or_section() -> None:
    """In the code, the README and the docs: `tickwork docs TOPIC` names a page, and the
    words or anchor after it one section of it."""
    texts = {str(p): t for p, t in _sources().items()}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        texts[str(page)] = page.read_text(encoding="utf-8")
    commands = set()
    for name, text in texts.items():
        for command in COMMAND.findall(" ".join(text.split())):
            topic, *words = command.split()
            if topic.isupper() or any(w.isupper() for w in words):
                continue  # `tickwork docs TOPIC`: the command's form, not a pointer
            commands.add(command)
            page, _, anchor = topic.partition("#")
            doc = find(page)
            if anchor or words:
                asked = f"#{anchor}" if anchor else " ".join(words)
                found = choose(sections(doc.path.read_text()), asked, doc.name)
                assert len(found) == 1, f"{name}: `tickwork docs {command}`"
    assert {"design 16", "eval task set"} <= commands


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = list(args) if args[:1] == ("--server",) else ["docs", *args]
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exited,
    ):
        main(argv)
    assert isinstance(exited.value.code, int)
    return exited.value.code, out.getvalue(), err.getvalue()


def test_docs_lists_the_pages_and_prints_one_or_a_section_of_it() -> None:
    code, out, _ = _run()
    assert code == 0
    for page in (ROOT / "docs").glob("*.md"):
        title = page.read_text().splitlines()[0].removeprefix("# ")
        assert re.search(rf"^  {re.escape(topic_of(page.name))} +{re.escape(title)}$", out, re.M)
    assert "  job-kinds  " in out
    environments = (ROOT / "docs" / "ENVIRONMENTS.md").read_text()
    for name in ("environments", "ENVIRONMENTS", "docs/ENVIRONMENTS.md"):
        assert _run(name) == (0, environments, "")
    code, out, _ = _run("environments#key-one-build-per-key-reuse")
    assert code == 0 and out.startswith("## Key, one build per key, reuse\n")
    assert "## Seeing and pruning them" not in out  # the section only
    code, out, _ = _run("design", "16")
    assert code == 0 and out.startswith("## 16. Session trees\n")
    assert "### Roles and repair workspaces" in out and "## 17." not in out  # with its parts
    code, out, _ = _run("job_kinds", "registering")
    assert code == 0 and out.startswith("## Registering a kind\n")
    code, out, _ = _run("--server", "http://127.0.0.1:9", "docs", "eval", "task", "set")
    assert code == 0 and out.startswith("## The task set\n")  # reads no server


def test_docs_refuses_what_it_does_not_have_and_lists_what_it_has() -> None:
    topics = ", ".join(d.topic for d in pages())
    code, out, err = _run("nope")
    assert (code, out) == (2, "")
    assert err == f"error: no doc is called 'nope'; the topics are {topics}\n"
    assert "job-kinds" in topics and "environments" in topics
    code, _, err = _run("eval", "no", "such")
    assert code == 2 and err.startswith("error: no heading of docs/EVAL.md holds 'no such'; ")
    assert "its sections: Try it offline; The task set; Running;" in err
    code, _, err = _run("eval#nope")
    assert code == 2 and err.startswith("error: docs/EVAL.md has no section #nope; ")
    assert "its sections: #try-it-offline, #the-task-set," in err
    code, _, err = _run("eval#running", "figures")
    assert code == 2 and "by its anchor (eval#running) or by words, not both" in err


def test_an_install_without_the_docs_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An install that lacks its package data (a repackaging that left it out) names what is
    missing and what to do, not a file the user never named."""
    monkeypatch.setattr(cli_docs, "DOCS", tmp_path / "docs")
    for args in ((), ("environments",)):
        code, out, err = _run(*args)
        assert (code, out) == (1, ""), err
        assert err.startswith(f"error: this install lacks the docs: {tmp_path / 'docs'} is ")
        assert "Reinstall tickwork from its wheel" in err


def test_the_pages_of_an_install_are_its_own_never_a_docs_folder_beside_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In site-packages, a `docs` folder beside `tickwork/` is another distribution's; only
    a checkout (its pyproject.toml) has tickwork's pages there."""
    package = tmp_path / "tickwork"
    (tmp_path / "docs").mkdir(parents=True)
    package.mkdir()
    monkeypatch.setattr(manuals, "_HERE", package)
    assert manuals.shipped("docs") == package / "docs"  # missing: the error names it
    (tmp_path / "pyproject.toml").write_text("")
    assert manuals.shipped("docs") == tmp_path / "docs"
    (package / "docs").mkdir()
    assert manuals.shipped("docs") == package / "docs"  # the wheel's first


#: an operators' page at the top of ops/, named anywhere: `ops/RUNBOOK.md`, not `ops/bench/...`
OPS_PAGE = re.compile(r"(?<![\w/])ops/([A-Z_]+)\.md")


def test_every_operators_page_a_shipped_page_names_ships_too() -> None:
    """docs/OPERATIONS.md sent operators sizing a fleet to ops/CAPACITY.md, which no wheel
    held (only the runbook, `tickwork runbook`, ships from ops/); the capacity model is a
    page of the docs now, `tickwork docs capacity`."""
    shipped = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "ops" / "RUNBOOK.md"]
    named = {
        f"{page.relative_to(ROOT)}: ops/{found}.md"
        for page in shipped
        for found in OPS_PAGE.findall(page.read_text(encoding="utf-8"))
        if found != "RUNBOOK"
    }
    assert not named, "pages a wheel does not hold:\n" + "\n".join(sorted(named))
    code, out, _ = _run("capacity", "1M sessions")
    assert code == 0 and out.startswith("## At 1M sessions a day"), out
