"""Which model a spawn entry may name for a child (`worker/tick/trees.py`): the entry is
the model's writing, so a script path or a provider it names is checked like a submit over
the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.worker.config.settings import RoleSettings
from tickwork.worker.tick.trees import allowed_child_model


def _script(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[{"content": "done"}]')
    return path


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """The parent's script directory, with a sibling script and one outside it."""
    _script(tmp_path / "scripts" / "parent.json")
    _script(tmp_path / "scripts" / "child.json")
    _script(tmp_path / "outside" / "secret.json")
    return tmp_path / "scripts"


def _allowed(spec: str, scripts: Path, **settings: object) -> str:
    return allowed_child_model(
        spec,
        parent=f"scripted:{scripts / 'parent.json'}",
        role=None,
        settings=RoleSettings(**settings),  # type: ignore[arg-type]
        child="explorer",
    )


def test_a_script_beside_the_parents_own_is_taken_resolved(scripts: Path) -> None:
    spec = f"scripted:{scripts / 'child.json'}"
    assert _allowed(spec, scripts) == f"scripted:{(scripts / 'child.json').resolve()}"
    wrapped = f"react:scripted:{scripts / 'child.json'}"
    assert _allowed(wrapped, scripts) == f"react:scripted:{(scripts / 'child.json').resolve()}"


@pytest.mark.parametrize(
    "path",
    [
        "{outside}/secret.json",  # outside the parent's directory
        "{scripts}/../outside/secret.json",  # a `..` escape
        "{scripts}/link.json",  # a symlink inside pointing outside
        "{outside}/missing.json",  # the same answer whether the file exists or not
        "child.json",  # not absolute
        "/",
    ],
)
def test_a_script_elsewhere_is_refused_naming_the_child_and_what_is_allowed(
    scripts: Path, path: str
) -> None:
    outside = scripts.parent / "outside"
    (scripts / "link.json").symlink_to(outside / "secret.json")
    spec = "scripted:" + path.format(scripts=scripts, outside=outside)
    with pytest.raises(InvalidInput) as caught:
        _allowed(spec, scripts)
    said = str(caught.value)
    assert "child 'explorer'" in said and "not allowed" in said
    assert str(scripts) in said and "TICKWORK_CHILD_SCRIPTED_ROOTS" in said
    assert "exist" not in said


def test_an_operators_root_lets_in_its_scripts_and_a_prefix_never_does(scripts: Path) -> None:
    outside = scripts.parent / "outside"
    spec = f"scripted:{outside / 'secret.json'}"
    assert _allowed(spec, scripts, child_scripted_roots=[outside]).endswith("secret.json")
    with pytest.raises(InvalidInput):
        _allowed(spec, scripts, child_models=["scripted:", "react:"])


def test_a_parent_that_is_not_scripted_lets_in_no_script(tmp_path: Path) -> None:
    script = _script(tmp_path / "child.json")
    with pytest.raises(InvalidInput, match="no directory here"):
        allowed_child_model(
            f"scripted:{script}",
            parent="openai:gpt-4o",
            role=None,
            settings=RoleSettings(),
            child="explorer",
        )


def test_another_provider_needs_the_operators_leave() -> None:
    def allowed(spec: str, **settings: object) -> str:
        return allowed_child_model(
            spec,
            parent="openai:gpt-4o",
            role="anthropic:claude-haiku",
            settings=RoleSettings(**settings),  # type: ignore[arg-type]
            child="reviewer",
        )

    assert allowed("openai:gpt-4o") == "openai:gpt-4o"  # the parent's
    assert allowed("anthropic:claude-haiku") == "anthropic:claude-haiku"  # its role's
    with pytest.raises(InvalidInput) as caught:
        allowed("openai:gpt-4o-mini")
    said = str(caught.value)
    assert "child 'reviewer'" in said and "'openai:gpt-4o' (yours)" in said
    assert "'anthropic:claude-haiku' (its role's)" in said and "TICKWORK_CHILD_MODELS" in said
    assert allowed("openai:gpt-4o-mini", child_models=["openai:"]) == "openai:gpt-4o-mini"
