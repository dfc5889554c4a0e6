"""One Settings object: its sections (`settings.webhooks`, `settings.metrics`, any
`settings.section(Kind)`) read the same TICKWORK_* variables as before, beside the flat ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_settings import BaseSettings, SettingsConfigDict
from tickwork.fsm.errors import ConfigurationError
from tickwork.worker.config.settings import SECTIONS, Settings


def test_the_sections_read_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_WEBHOOK_URL", "https://hooks.example/T1/secret")
    monkeypatch.setenv("TICKWORK_WEBHOOK_ATTEMPTS", "7")
    monkeypatch.setenv("TICKWORK_METRICS_PORT", "9109")
    monkeypatch.setenv("TICKWORK_LEASE_S", "12")
    settings = Settings()
    assert settings.webhooks.webhook_url == "https://hooks.example/T1/secret"
    assert settings.webhooks.webhook_attempts == 7
    assert settings.metrics.metrics_port == 9109
    assert settings.lease_s == 12.0  # the flat settings are where they were
    assert settings.webhooks is settings.webhooks  # read once


def test_tracing_and_retention_are_sections_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from tickwork.worker.observers.tracing import TracingSettings
    from tickwork.worker.tick.retention import RetentionSettings

    monkeypatch.setenv("TICKWORK_OTEL_CAPTURE_CONTENT", "true")
    monkeypatch.setenv("TICKWORK_RETENTION_COMPLETED_S", "3600")
    settings = Settings()
    assert settings.section(TracingSettings).otel_capture_content is True
    assert settings.section(RetentionSettings).policy().completed_s == 3600


def test_a_bad_section_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_WEBHOOK_ATTEMPTS", "0")
    settings = Settings()  # the flat settings load; the section fails where it is used
    with pytest.raises(ConfigurationError, match="TICKWORK_WEBHOOK_ATTEMPTS='0'"):
        settings.webhooks  # noqa: B018


def test_any_section_class_is_a_section(monkeypatch: pytest.MonkeyPatch) -> None:
    class Retention(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")
        retention_days: int = 30

    monkeypatch.setenv("TICKWORK_RETENTION_DAYS", "5")
    assert Settings().section(Retention).retention_days == 5


def test_config_shows_the_sections_after_the_flat_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_WEBHOOK_SECRET", "hush")
    shown = Settings().masked()
    names = list(shown)
    every = [name for kind in SECTIONS for name in kind.model_fields]
    assert names[-len(every) :] == every and names.index("state_dir") < names.index(every[0])
    assert shown["webhook_secret"] == "****" and shown["metrics_port"] is None


def settings_fields() -> dict[str, list[str]]:
    """TICKWORK_* variable -> the settings classes that read it, from the source: every
    class whose `model_config` has `env_prefix="TICKWORK_"`, in every installed package."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readers: dict[str, list[str]] = {}
    for folder in ("fsm", "store", "worker", "tasks", "tickwork"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ClassDef):
                    continue
                config = next(
                    (
                        ast.unparse(s)
                        for s in node.body
                        if isinstance(s, ast.Assign | ast.AnnAssign)
                        and "model_config" in ast.unparse(s).split("=")[0]
                    ),
                    "",
                )
                if "env_prefix='TICKWORK_'" not in config:
                    continue
                where = f"{path.relative_to(root)}:{node.name}"
                for s in node.body:
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                        readers.setdefault(f"TICKWORK_{s.target.id.upper()}", []).append(where)
    return readers


def test_each_setting_has_one_owner() -> None:
    """A TICKWORK_* variable is a field of one settings class; whoever else needs it
    imports that class, so its name, default and check cannot drift apart."""
    readers = settings_fields()
    assert "TICKWORK_PUBLIC_URL" in readers and "TICKWORK_API_PORT" in readers  # the scan sees
    shared = {name: where for name, where in readers.items() if len(where) > 1}
    assert not shared, f"settings read by more than one class: {shared}"


def test_the_public_url_is_the_webhooks_and_tickwork_config_shows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tickwork.api.settings import ApiSettings

    monkeypatch.setenv("TICKWORK_PUBLIC_URL", "https://tickwork.example")
    assert Settings().webhooks.public_url == "https://tickwork.example"
    assert Settings().masked(ApiSettings())["public_url"] == "https://tickwork.example"


def test_the_embedded_broker_names_its_host_so_kombu_warns_of_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`tickwork worker` on the embedded default logged kombu's "No hostname was supplied.
    Reverting to default 'localhost'" twice as a WARNING at every start: a new user's first
    worker looked misconfigured."""
    from kombu import Connection

    url, options = Settings(state_dir=tmp_path).broker()
    with caplog.at_level("WARNING", logger="kombu.connection"):
        Connection(url, transport_options=options).info()
    assert url.startswith("filesystem://")
    assert not [r for r in caplog.records if "hostname" in r.getMessage()]
