"""The docs' `tickwork submit` examples run as written (issue 22): every one is taken from
the bash blocks of the README and the pages under docs/, its placeholders (`~/src/project`,
the example repository, `...`) filled with a small project of ours, and submitted through
the real command; the README's first one, `--test-cmd "pytest -q"` with the default setup,
repairs that project."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from tickwork.fsm.values import Status

from tests.e2e.conftest import ROOT, Cli, Deployment
from tickwork.package_index import Index
from tickwork.testing import git

#: the examples' stand-ins, and what they become here
PROJECT = "~/src/project"
REPOSITORY = "https://git.example.com/app.git"
ELIDED = "..."
#: the project: a failing pytest test, packaged so an environment's `auto` setup finds it
FILES = {
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n'
    '[project.optional-dependencies]\ntest = ["pytest"]\n'
    '[tool.setuptools]\npy-modules = ["calc"]\n',
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
FIX = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
    "-    return a - b\n+    return a + b\n"
)

#: the pages whose bash blocks hold submit examples, and how many each holds at least (so an
#: example moved to a page this test does not read fails here instead of going untested)
PAGES = {"README.md": 1, "docs/MODELS.md": 3, "docs/REPAIR.md": 3, "docs/OPERATIONS.md": 1}

#: the README's commands on the embedded default: what a new user runs first
EMBEDDED = pytest.mark.parametrize("deployment", ["embedded"], indirect=True)


def submit_examples(page: str) -> list[list[str]]:
    """The `tickwork submit` command lines of a page's bash blocks, as argument lists
    (continuation lines joined, a quote that spans lines read whole, comments dropped)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", page, re.DOTALL):
        command = ""
        for line in block.replace("\\\n", " ").splitlines():
            command = f"{command}\n{line}" if command else line
            try:
                words = shlex.split(command, comments=True)
            except ValueError:  # a quote still open: its command goes on on the next line
                continue
            command = ""
            if words[:2] == ["tickwork", "submit"]:
                found.append(words[2:])
        assert not command, f"a quote never closed in: {command!r}"
    return found


def page_examples() -> dict[str, list[list[str]]]:
    """The submit examples of the README and of every page under docs/, by page."""
    pages = ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]
    return {page: submit_examples((ROOT / page).read_text(encoding="utf-8")) for page in pages}


def all_examples() -> list[list[str]]:
    return [example for examples in page_examples().values() for example in examples]


def project(root: Path) -> Path:
    root.mkdir()
    for name, text in FILES.items():
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "calc, with a bug")
    return root


def filled(words: list[str], where: Path) -> list[str]:
    """An example with its stand-ins replaced by our project."""
    out: list[str] = []
    for word in words:
        if word == ELIDED:
            out += ["--workspace", str(where), "--test-cmd", "pytest -q"]
        else:
            out.append(
                str(where) if word == PROJECT else word.replace(REPOSITORY, f"file://{where}")
            )
    return out


def with_model(words: list[str], spec: str) -> list[str]:
    at = words.index("--model")
    return [*words[:at], "--model", spec, *words[at + 2 :]]


def test_the_docs_have_the_submit_examples_this_test_runs() -> None:
    found = page_examples()
    for page, least in PAGES.items():
        assert len(found[page]) >= least, (page, found[page])
    assert any(PROJECT in e and "pytest -q" in e for e in found["README.md"])
    assert any(REPOSITORY in e for e in all_examples())


@EMBEDDED
def test_every_docs_submit_example_is_accepted_as_written(deployment: Deployment, cli: Cli) -> None:
    where = project(deployment.tmp / "project")
    examples = all_examples()
    # an OpenAI-compatible server that needs no key; nothing runs, so none need answer
    # an example without --model uses the deployment's (docs/OPERATIONS.md's settings say how);
    # a key for the hosted models, as their users have: a submit without one notes it
    served = {
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "TICKWORK_MODEL": "openai:gpt-4o-mini",
        "ANTHROPIC_API_KEY": "sk-ant-unused",
    }
    for words in examples:
        head = cli.inline("submit", *filled(words, where), "--json", **served).json()
        assert head["status"] == "ready", words
        assert head["config"]["test_command"] == "pytest -q", words
        if "--model" in words:
            assert head["model"] == words[words.index("--model") + 1]
        source = head["config"]["source"]
        assert source.get("path") == str(where) or source.get("url") == f"file://{where}"


@EMBEDDED
def test_the_readme_repair_example_repairs_a_pytest_project(
    index: Index, deployment: Deployment, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the operator's package index, as docs/REPAIR.md's environment section says to list it
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    allowed = deployment.settings.model_copy(update={"egress_allow": index.address})
    monkeypatch.setattr(deployment, "settings", allowed)  # the in-process worker's
    # as a user runs it: tickwork installed in a venv that is not activated
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    where = project(deployment.tmp / "project")
    first = next(e for e in submit_examples((ROOT / "README.md").read_text()) if PROJECT in e)
    script = deployment.script(
        [
            {"content": "reproduce", "tool_calls": [{"name": "run_tests", "arguments": {}}]},
            {
                "content": "fix",
                "tool_calls": [{"name": "apply_patch", "arguments": {"patch": FIX}}],
            },
            {"content": "check", "tool_calls": [{"name": "run_tests", "arguments": {}}]},
            {"content": "fixed the sign in add()"},
        ]
    )
    # the README's line as written, but for the model: a scripted one stands in for OpenAI
    words = with_model(filled(first, where), script)
    assert words[words.index("--test-cmd") + 1] == "pytest -q"
    sid = cli("submit", *words, "--json").json()["id"]
    with deployment.worker():
        waiting = deployment.client.wait(sid, timeout=120)
        assert waiting.status is Status.WAITING_APPROVAL, waiting.error_message
        deployment.client.approve(sid, waiting.awaiting[0], approver="alice")
        done = deployment.client.wait(sid, timeout=120)
    assert done.status is Status.COMPLETED, done.error_message
    result = done.result
    assert result["outcome"] == "repaired", (result["tests"]["output"], result.get("environment"))
