"""One Settings object: its sections (`settings.webhooks`, `settings.metrics`, any
`settings.section(Kind)`) read the same TICKWORK_* variables as before, beside the flat ones."""

from __future__ import annotations

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
