"""The model-provider registry: shipped providers, TICKWORK_IMPORTS and entry points."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
from tickwork.fsm.errors import ConfigurationError, InvalidModelSpec
from tickwork.worker.models import Price, Providers, check_spec, make_model
from tickwork.worker.models.pricing import session_price
from tickwork.worker.models.providers import ENTRY_POINTS, Provider

from tests.providers import CANNED, CannedModel

CANNED_IMPORT = "tests.providers:CANNED"


def test_an_imported_provider_is_checked_made_priced_and_labelled() -> None:
    providers = Providers([CANNED_IMPORT])

    assert check_spec("canned:hello", providers) == "canned:hello"
    model = make_model("canned:hello", timeout_s=7, providers=providers)
    assert isinstance(model, CannedModel) and (model.word, model.timeout_s) == ("hello", 7)
    assert session_price("canned:hello", {}, {}, providers=providers) == Price(10.0, 100.0)
    assert providers.label("canned:hello") == "canned"


def test_a_providers_signature_is_read_once_not_at_every_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A THINK prices its session twice (the budgets' check, the bill): each time the
    registry read the provider's function's signature again to know which keywords it
    takes. It reads it once a function."""
    import inspect

    read: list[object] = []
    signature = inspect.signature

    def counting(fn: Any, *args: Any, **kw: Any) -> inspect.Signature:
        read.append(fn)
        return signature(fn, *args, **kw)

    providers = Providers([CANNED_IMPORT])
    monkeypatch.setattr(inspect, "signature", counting)
    for _ in range(5):
        assert session_price("canned:hello", {}, {}, providers=providers) == Price(10.0, 100.0)
        assert session_price("scripted:/s.json", {}, {}, providers=providers) == Price(0.0, 0.0)
    assert len(read) == len(set(read)) <= 2


def test_an_unhashable_callable_provider_is_still_called() -> None:
    """A provider's function may be any callable, one that cannot be a cache's key too."""

    class Pricer:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, rest: str, *, spec: str) -> Price:
            return Price(1.0, 2.0) if spec == f"unhashable:{rest}" else Price(0.0, 0.0)

    pricer = Provider(prefix="unhashable", help="unhashable:M", make=CannedModel, price=Pricer())
    providers = Providers(shipped=[pricer], entry_points=False)
    assert session_price("unhashable:m", {}, {}, providers=providers) == Price(1.0, 2.0)


def test_the_provider_check_refuses_what_it_cannot_make() -> None:
    with pytest.raises(InvalidModelSpec, match="one word of letters and digits"):
        check_spec("canned:two-words", Providers([CANNED_IMPORT]))


def test_a_spec_of_a_provider_nobody_registered_is_refused() -> None:
    with pytest.raises(InvalidModelSpec, match="unknown model spec 'canned:hello'"):
        check_spec("canned:hello", Providers())
    with pytest.raises(ConfigurationError) as unknown:
        make_model("canned:hello", providers=Providers())
    assert "unknown model spec 'canned:hello'" in str(unknown.value)
    assert "'canned' is a provider, this process must see it too" in str(unknown.value)


def test_an_unknown_prefix_lists_every_registered_provider() -> None:
    with pytest.raises(InvalidModelSpec) as refused:
        check_spec("nope:x", Providers([CANNED_IMPORT]))

    message = str(refused.value)
    assert "unknown model spec 'nope:x'" in message
    for form in ("openai:MODEL", "react:openai:MODEL", "scripted:PATH", "canned:WORD"):
        assert form in message
    assert "canned:WORD (answers WORD)" in Providers([CANNED_IMPORT]).help


def test_react_wraps_an_imported_provider() -> None:
    providers = Providers([CANNED_IMPORT])

    assert check_spec("react:canned:hello", providers) == "react:canned:hello"
    assert make_model("react:canned:hello", providers=providers).inner.word == "hello"
    assert providers.price("react:canned:hello") == Price(10.0, 100.0)
    assert providers.label("react:canned:hello") == "canned"
    with pytest.raises(InvalidModelSpec, match="one word"):
        check_spec("react:canned:a-b", providers)


def test_a_price_override_beats_the_provider() -> None:
    providers = Providers([CANNED_IMPORT])

    assert providers.price("canned:hello", {"canned:hello": [1, 2]}) == Price(1, 2)
    assert providers.price("canned:hello", {"hello": [3, 4]}) == Price(3, 4)


def test_the_labels_of_the_shipped_providers_hold_no_paths() -> None:
    providers = Providers()

    assert providers.label("scripted:/secret/dir/a.json") == "scripted"
    assert providers.label("react:scripted:/secret/dir/a.json") == "scripted"
    assert providers.label("react:openai:llama3") == "react:openai:llama3"
    assert providers.label("openai:gpt-4o") == "openai:gpt-4o"
    assert providers.label("x" * 300) == "x" * 100


def test_job_kinds_in_the_same_imports_are_left_to_the_jobs() -> None:
    providers = Providers(["tests.jobs:TEST", CANNED_IMPORT])

    assert list(providers.known) == ["openai", "anthropic", "react", "scripted", "canned"]


def entry_points_of(*points: importlib.metadata.EntryPoint):
    def entry_points(*, group: str) -> importlib.metadata.EntryPoints:
        return importlib.metadata.EntryPoints(p for p in points if p.group == group)

    return entry_points


def point(value: str, name: str = "canned") -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINTS)


def test_an_entry_point_registers_a_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points_of(point(CANNED_IMPORT)))

    assert check_spec("canned:hello") == "canned:hello"
    assert isinstance(make_model("canned:hello"), CannedModel)
    assert "canned:WORD" in Providers().help
    assert Providers(entry_points=False).get("canned") is None


def test_an_entry_point_that_is_no_provider_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata, "entry_points", entry_points_of(point("tests.jobs:TEST", "bad"))
    )

    with pytest.raises(ConfigurationError, match=r"entry point 'bad'.*not a .*Provider"):
        check_spec("openai:gpt-4o")


def test_a_taken_prefix_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    other = Provider(prefix="openai", help="openai:X", make=CannedModel)
    monkeypatch.setattr("tests.providers.OTHER", other, raising=False)

    with pytest.raises(ConfigurationError, match=r"prefix 'openai' from tests\.providers:OTHER"):
        check_spec("openai:gpt-4o", Providers(["tests.providers:OTHER"]))


def test_a_prefix_must_be_a_plain_word() -> None:
    bad = Provider(prefix="Has:Colon", help="x", make=CannedModel)

    with pytest.raises(ConfigurationError, match="prefix 'Has:Colon'"):
        Providers(shipped=[CANNED, bad]).get("canned")


def test_the_same_provider_registered_twice_is_one() -> None:
    providers = Providers([CANNED_IMPORT, CANNED_IMPORT])

    assert list(providers.known).count("canned") == 1


def test_the_submitting_host_resolves_a_script_path_through_react(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "s.json").write_text('[{"content": "hi"}]')
    monkeypatch.chdir(tmp_path)
    providers = Providers([CANNED_IMPORT])

    assert providers.resolve("react:scripted:s.json") == f"react:scripted:{tmp_path}/s.json"
    assert providers.resolve("canned:hello") == "canned:hello"
    with pytest.raises(ConfigurationError, match="cannot read script"):
        providers.resolve("scripted:missing.json")


def test_a_script_path_is_stored_without_dot_dot(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scripted:../s.json` was stored as `scripted:/x/u1/../s.json`: the same script
    spelled two ways grouped apart in `dlq stats --by model`."""
    (tmp_path / "s.json").write_text('[{"content": "hi"}]')
    (tmp_path / "u1").mkdir()
    monkeypatch.chdir(tmp_path / "u1")

    assert Providers([]).resolve("scripted:../s.json") == f"scripted:{tmp_path}/s.json"
