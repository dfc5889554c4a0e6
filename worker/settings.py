"""Settings from `TICKWORK_*` environment variables, built by a function, never at import."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fsm.values import Budgets

SECRET_NAMES = re.compile(r"key|secret|token|password", re.IGNORECASE)


class Settings(BaseSettings):
    """Everything a worker, the CLI and the client read; see `tickwork config`."""

    model_config = SettingsConfigDict(
        env_prefix="TICKWORK_", env_nested_delimiter="__", extra="ignore"
    )

    #: where the embedded default keeps its SQLite file and broker folder
    state_dir: Path = Path(".tickwork")
    #: SQLAlchemy URL; default: SQLite in `state_dir`
    database_url: str = ""
    #: Celery broker URL; default: kombu's `filesystem://` in `state_dir`
    broker_url: str = ""
    #: model spec used when a submit names none: `scripted:PATH`, `openai:MODEL`
    model: str = ""
    #: `module:attr` job kinds workers can run by name, besides the built-in `repair`
    imports: list[str] = []
    queue: str = "tickwork.ticks"
    dead_letter_queue: str = "tickwork.dead_letter"
    #: how long a claim holds a session; long calls renew it every third of this
    lease_s: float = 20.0
    #: how often the relay runs inside each worker
    relay_period_s: float = 2.0
    #: an outbox row still unclaimed this long after it fell due is published again
    relay_after_s: float = 10.0
    #: Redis redelivers an unacknowledged message after this; longer than the longest tick
    visibility_timeout_s: float = 2 * 3600.0
    #: filesystem:// broker poll interval
    poll_interval_s: float = 0.05
    max_output_chars: int = 20_000
    model_timeout_s: float = 120.0
    #: model -> [prompt, completion] USD per million tokens, added to the built-in table
    prices: dict[str, tuple[float, float]] = {}
    #: regexes whose matches are masked in stored events, logs and `tickwork config`
    secret_patterns: list[str] = [r"sk-[A-Za-z0-9_\-]{8,}"]
    budgets: Budgets = Field(default_factory=Budgets)
    #: transcripts each worker process keeps, so a THINK tick reads only the new steps
    #: (each holds a session's whole history; 0 reads every transcript whole every time)
    transcript_cache: int = Field(default=64, ge=0)
    #: send Celery task events (Flower's task list); 4 broker publishes more per tick, so off
    #: by default as in Celery; ignored on the filesystem broker, which has no fanout for them
    task_events: bool = False
    #: where repair jobs' files are stored: empty for the database, `file:///dir`, `s3://b/p`
    artifacts_url: str = ""
    #: this worker's working copies of sessions' files (a cache); default: `state_dir/workspaces`
    workspaces_dir: Path | None = None
    #: the cache of working copies and blobs is pruned back below this many bytes
    workspaces_max_bytes: int = Field(default=2_000_000_000, ge=0)
    #: directories (and their subdirectories) the HTTP API accepts as a `workspace` or local
    #: `repo`; empty: the API refuses local paths (the CLI and Python client are trusted)
    workspace_roots: list[Path] = []
    #: chaos knob: fraction of tick publications deliberately dropped after commit
    drop_publish_rate: float = 0.0

    @field_validator("drop_publish_rate")
    @classmethod
    def _rate(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError("drop_publish_rate must be between 0 and 1")
        return value

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.state_dir / 'tickwork.db').absolute()}"

    @property
    def workspaces_path(self) -> Path:
        return (self.workspaces_dir or self.state_dir / "workspaces").expanduser().absolute()

    @property
    def embedded_broker(self) -> bool:
        return not self.broker_url or self.broker_url.startswith("filesystem")

    @property
    def broker_folder(self) -> Path:
        return (self.state_dir / "broker").absolute()

    def broker(self) -> tuple[str, dict[str, Any]]:
        """The broker URL and its transport options."""
        if self.embedded_broker:
            folder = self.broker_folder
            folder.mkdir(parents=True, exist_ok=True)
            return "filesystem://", {
                "data_folder_in": str(folder),
                "data_folder_out": str(folder),
                "control_folder": str(folder / "control"),
                "polling_interval": self.poll_interval_s,
                "store_processed": False,
            }
        return self.broker_url, {"visibility_timeout": self.visibility_timeout_s}

    def masked(self) -> dict[str, Any]:
        """The settings in force, with secrets masked."""
        shown = self.model_dump(mode="json")
        shown["database_url"], shown["broker_url"] = self.db_url, self.broker()[0]
        for name, value in list(shown.items()):
            if SECRET_NAMES.search(name) and value:
                shown[name] = "****"
            elif isinstance(value, str):
                shown[name] = mask(value, self.secret_patterns)
        return shown


def mask(text: str, patterns: list[str]) -> str:
    """`text` with passwords in URLs and anything matching `patterns` replaced by ****."""
    text = re.sub(r"(://[^:/@\s]*:)[^@\s]+@", r"\1****@", text)
    for pattern in patterns:
        text = re.sub(pattern, "****", text)
    return text


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)
