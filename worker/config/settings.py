"""Settings from `TICKWORK_*` environment variables, built by a function, never at import."""

from __future__ import annotations

import json
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError
from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import Budgets, over_bound
from tickwork.worker.config.allowlist import parse
from tickwork.worker.config.secrets import SECRET_NAMES, mask
from tickwork.worker.config.tenants import TenantSettings

#: broker URL schemes of the transports tickwork installs: Redis, RabbitMQ, the embedded one
BROKER_SCHEMES = ("redis", "rediss", "sentinel", "amqp", "amqps", "pyamqp", "filesystem", "memory")
#: `module:attr`, as `TICKWORK_IMPORTS` lists job kinds
IMPORTABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
S = TypeVar("S", bound=BaseSettings)
#: how the JSON-valued settings are written
JSON_EXAMPLES = {
    "imports": '["mypackage.jobs:KIND"]',
    "prices": '{"gpt-4o": [2.5, 10.0]}',
    "secret_patterns": '["tok-[0-9a-f]{32}"]',
    "budgets": '{"max_steps": 50}',
    "api_models": '["openai:"]',
    "child_models": '["openai:"]',
    "api_tokens": '{"TOKEN": {"name": "alice", "roles": ["approver"]}}',
}
#: the cards the webhook can send (TICKWORK_WEBHOOK_EVENTS)
WEBHOOK_EVENTS = ("approval_requested", "finished")
#: seconds a tick keeps between its longest call and the broker's delivery timeout: the
#: claim, the save, the lease's renewal and the acknowledgement fit in it
DELIVERY_MARGIN_S = 300.0


class WebhookSettings(BaseSettings):
    """The approval webhook's (`worker/observers/webhooks.py`): `Settings.webhooks`."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: where cards are POSTed; empty: no webhook
    webhook_url: str = ""
    #: HMAC-SHA256 key for the X-Tickwork-Signature header; empty: cards are not signed
    webhook_secret: str = ""
    webhook_attempts: int = Field(default=5, ge=1)
    webhook_timeout_s: float = Field(default=5.0, gt=0)
    #: the pause after the first failed attempt; it doubles after each one
    webhook_backoff_s: float = Field(default=1.0, ge=0)
    #: the base URL of `tickwork serve` as people reach it, for the card's links (its one
    #: owner: `tickwork serve` reads no setting of that name)
    public_url: str = ""
    #: which cards are sent, comma-separated (`WEBHOOK_EVENTS`): `approval_requested` (a
    #: session waits for a person) and/or `finished` (it completed, failed or was cancelled)
    webhook_events: str = "approval_requested"
    #: a card goes out only for a wait or an end younger than this when a dispatcher first
    #: sees it: turning webhooks (or `finished`) on sends the last day's, not one card for
    #: every session that ever waited or finished
    webhook_max_age_s: float = Field(default=86400.0, gt=0)

    @field_validator("webhook_events")
    @classmethod
    def _known_events(cls, value: str) -> str:
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in WEBHOOK_EVENTS]
        if unknown or not names:
            what = f"unknown {', '.join(repr(n) for n in unknown)}" if unknown else "none given"
            raise ValueError(
                f"{what}: name one or more of {', '.join(WEBHOOK_EVENTS)}, comma-separated "
                "(e.g. approval_requested,finished); unset the webhook URL to send none"
            )
        return ",".join(n for n in WEBHOOK_EVENTS if n in names)

    @property
    def sends_approvals(self) -> bool:
        return "approval_requested" in self.webhook_events.split(",")

    @property
    def sends_finished(self) -> bool:
        return "finished" in self.webhook_events.split(",")


class MetricsSettings(BaseSettings):
    """Where a worker serves /metrics (`worker/observers/metrics.py`), read when the worker is
    ready: `Settings.metrics`."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: the port a worker serves /metrics on; unset: none
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_addr: str = "0.0.0.0"


class EnvironmentSettings(BaseSettings):
    """How environments are built (`Settings.section(EnvironmentSettings)`)."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: the package index setup commands use (PIP_INDEX_URL and UV_INDEX_URL in the sandbox);
    #: empty: pip's own default
    pip_index_url: str = ""
    #: a session whose environment another worker builds looks again after this
    environment_wait_s: float = Field(default=2.0, gt=0)
    #: the build's claim; its builder renews it every third of this
    environment_lease_s: float = Field(default=30.0, gt=0)
    #: the longest a setup runs in all (also bounded by the longest call a tick may make)
    environment_setup_timeout_s: float = Field(default=900.0, gt=0)
    #: retention drops an environment no live session uses once it was not used this long
    environment_retention_s: float = Field(default=7 * 86400.0, gt=0)


class RoleSettings(BaseSettings):
    """Roles an operator adds or changes for child sessions (`worker/jobs/roles.py`)."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: a JSON file: job kind -> role name -> role (system_prompt, tools, model, budgets,
    #: description); unset: the kinds' own roles only
    roles_file: Path | None = None
    #: model spec prefixes (e.g. `openai:`) a spawn entry may name for a child besides its
    #: parent's model and its role's; empty: only those two. Never lets in a scripted model.
    child_models: list[str] = []
    #: directories whose script files a spawn entry may name as `scripted:PATH` (besides
    #: the directory of the parent's own script); empty: none
    child_scripted_roots: list[Path] = []


class Settings(BaseSettings):
    """Everything a worker, the CLI and the client read; see `tickwork config`.

    The flat fields are the deployment's; its sections (`webhooks`, `metrics`, or any
    `section(Kind)`) read their own `TICKWORK_*` variables on first use.
    """

    model_config = SettingsConfigDict(
        env_prefix="TICKWORK_", env_nested_delimiter="__", extra="ignore", allow_inf_nan=False
    )

    #: where the embedded default keeps its SQLite file and broker folder
    state_dir: Path = Path(".tickwork")
    #: SQLAlchemy URL; default: SQLite in `state_dir`
    database_url: str = ""
    #: a process's pool of connections to the database (not an in-memory SQLite's): how
    #: many it keeps open (unset: 30 in a worker on Postgres, 10 in `tickwork serve` and the
    #: clients; SQLAlchemy's 5 on SQLite) and how many more it opens at busy times, each
    #: closed once given back (unset: 10 in a worker on Postgres, 40 elsewhere; 10 on SQLite)
    database_pool_size: int | None = Field(default=None, ge=1)
    database_pool_overflow: int | None = Field(default=None, ge=0)
    #: how long a request waits for a connection while all of the pool's are in use: past
    #: it the store raises StoreBusy, and the API answers 503 server_busy with a Retry-After
    #: of as long (`tickwork.api.errors.busy_retry_s`)
    database_pool_timeout_s: float = Field(default=30.0, gt=0)
    #: Celery broker URL; default: kombu's `filesystem://` in `state_dir`
    broker_url: str = ""
    #: model spec used when a submit names none: `scripted:PATH`, `openai:MODEL`
    model: str = ""
    #: `module:attr` job kinds workers can run by name, besides the built-in `repair`, and
    #: model providers (tickwork.worker.models.providers.Provider) by their spec prefix
    imports: list[str] = []
    queue: str = Field(default="tickwork.ticks", min_length=1)
    dead_letter_queue: str = Field(default="tickwork.dead_letter", min_length=1)
    #: how long a claim holds a session; long calls renew it every third of this
    lease_s: float = Field(default=20.0, gt=0)
    #: how often the relay runs inside each worker
    relay_period_s: float = Field(default=2.0, gt=0)
    #: an outbox row still unclaimed this long after it fell due is published again
    relay_after_s: float = Field(default=10.0, ge=0)
    #: workers hold a sign of life and the relay takes a dead worker's sessions over at
    #: once (off: only when their lease runs out; e.g. behind a transaction-mode pooler)
    liveness: bool = True
    #: how often a worker checks its own sign of life and the relay looks for leases whose
    #: worker is gone (docs/DESIGN.md section 3)
    liveness_period_s: float = Field(default=0.25, gt=0)
    #: how long a sign stays gone before the relay takes its sessions over; longer than
    #: the period, so a worker that lost its connection kills its commands first
    liveness_grace_s: float = Field(default=1.0, ge=0)
    #: RabbitMQ closes a channel holding a delivery unacknowledged this long (its
    #: `consumer_timeout`, 30 minutes by default); tickwork declares its queues with it
    #: (`x-consumer-timeout`, RabbitMQ 3.12+) and keeps every tool and model call shorter
    #: by DELIVERY_MARGIN_S
    delivery_timeout_s: float = Field(default=1800.0, gt=DELIVERY_MARGIN_S)
    #: the type of tickwork's queues on RabbitMQ: `quorum` (replicated, with a delivery
    #: limit) or `classic`; a queue's type is fixed when it is first declared
    rabbitmq_queue_type: str = "quorum"
    #: kombu's acknowledgement emulation on Redis: each delivered tick copied to Redis's
    #: `unacked` hash and removed at its ack (two MULTI/EXEC round trips a tick), so that
    #: Redis gives back what a killed worker held after `visibility_timeout_s`. Off: the
    #: outbox and the relay bring such a tick back long before (docs/DESIGN.md section 3),
    #: and a worker stopping cleanly still puts back what it had not started
    redis_ack_emulation: bool = False
    #: with `redis_ack_emulation`, Redis redelivers an unacknowledged message after this;
    #: longer than the longest tick
    visibility_timeout_s: float = Field(default=2 * 3600.0, gt=0)
    #: the longest a model retry waits (a Retry-After above it is cut to it); the wait is
    #: an outbox row with a due time, published by the relay when due
    max_retry_delay_s: float = Field(default=600.0, gt=0)
    #: filesystem:// broker poll interval
    poll_interval_s: float = Field(default=0.05, gt=0)
    max_output_chars: int = Field(default=20_000, ge=1)
    model_timeout_s: float = Field(default=120.0, gt=0)
    #: model -> [prompt, completion] USD per million tokens, added to the built-in table; or
    #: {"prompt", "completion", "cached", "cache_write", "max_completion", "context_window"}
    #: (tickwork.worker.models.pricing)
    #: (each read as a price by `tickwork.context.load_settings`, which names a bad one)
    prices: dict[str, Any] = {}
    #: regexes whose matches are masked in stored events, logs and `tickwork config`
    secret_patterns: list[str] = [r"sk-[A-Za-z0-9_\-]{8,}"]
    budgets: Budgets = Field(default_factory=Budgets)

    @field_validator("budgets", mode="before")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        # the defaults of every session: within the bounds a submission is held to
        given = json.loads(value) if isinstance(value, str | bytes) else value
        if isinstance(given, Mapping) and (why := over_bound(given)) is not None:
            raise ValueError(why)
        return value

    #: transcripts each worker process keeps, so a THINK tick reads only the new steps
    #: (each holds a session's whole history; 0 reads every transcript whole every time);
    #: unset, a threads, gevent or eventlet worker keeps one per tick it runs at once, if more
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
    #: where run_command and test commands run: `bwrap` (bubblewrap) or `none` (the host,
    #: unconfined: only on purpose, a warning is logged at every worker start)
    sandbox: str = "bwrap"
    #: the user and group commands run as in the sandbox when the worker runs as root
    sandbox_uid: int = Field(default=65534, ge=1)
    sandbox_gid: int = Field(default=65534, ge=1)
    #: per-command limits: CPU seconds, address space, processes of the sandbox's user,
    #: the largest file written, stdout+stderr kept (past it the command is killed), /tmp
    sandbox_cpu_s: int = Field(default=600, gt=0)
    sandbox_memory_bytes: int = Field(default=4 << 30, gt=0)
    sandbox_processes: int = Field(default=256, gt=0)
    sandbox_file_bytes: int = Field(default=1 << 30, gt=0)
    sandbox_output_bytes: int = Field(default=10 << 20, gt=0)
    sandbox_tmp_bytes: int = Field(default=256 << 20, gt=0)
    #: more host directories bound read-only into the sandbox (e.g. a toolchain in /opt)
    sandbox_paths: list[str] = []
    #: a session's working copy at most: bytes on disk and files (commands past it are
    #: killed, file tools refuse to write), and the free space of the workspaces filesystem
    #: no command or file tool may take (issue 24)
    session_disk_bytes: int = Field(default=2 << 30, gt=0)
    session_disk_files: int = Field(default=300_000, gt=0)
    disk_reserve_bytes: int = Field(default=256 << 20, ge=0)
    #: a root filesystem (e.g. an unpacked container image) commands run on instead of the
    #: host's /usr, /bin, /lib and /etc; empty: the host's
    sandbox_rootfs: Path | None = None
    #: the hosts sandboxed commands may reach through the egress proxy, comma-separated:
    #: `host`, `host:port`, `*.example.org`; loopback, private and link-local addresses only
    #: as an exact `ip:port`; empty: no network for any command
    egress_allow: str = ""
    egress_connect_timeout_s: float = Field(default=10.0, gt=0)
    #: a connection through the proxy that moves nothing this long is closed
    egress_idle_timeout_s: float = Field(default=120.0, gt=0)
    #: connections through one command's proxy at once
    egress_max_connections: int = Field(default=64, ge=1)
    #: how often a running tool's session is checked for a cancel or a spent deadline or cost
    stop_poll_s: float = Field(default=1.0, gt=0)

    @field_validator("database_url")
    @classmethod
    def _database(cls, value: str, info: ValidationInfo) -> str:
        if value:
            check_database_url(value, state_dir=info.data.get("state_dir"))
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker(cls, value: str) -> str:
        # kombu reads a URL without a scheme as amqp:// and retries it for ever
        for url in filter(None, value.split(";")):  # failover URLs are joined by ';'
            scheme, sep, _ = url.strip().partition("://")
            if not sep or scheme.lower() not in BROKER_SCHEMES:
                raise ValueError(
                    "not a broker URL tickwork can use; write "
                    "redis://HOST:6379/0 or amqp://USER:PASSWORD@HOST:5672// (empty: the "
                    "embedded filesystem broker)"
                )
        return value

    @field_validator("imports")
    @classmethod
    def _imports(cls, value: list[str]) -> list[str]:
        for spec in value:
            if not IMPORTABLE.fullmatch(spec.strip()):
                raise ValueError(
                    f"{spec!r} is not module:attr; list job kinds as '[\"mypackage.jobs:KIND\"]'"
                )
        return [spec.strip() for spec in value]

    @field_validator("drop_publish_rate")
    @classmethod
    def _rate(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError("drop_publish_rate must be between 0 and 1")
        return value

    @field_validator("sandbox")
    @classmethod
    def _sandbox(cls, value: str) -> str:
        if value not in ("bwrap", "none"):
            raise ValueError(
                f"sandbox must be bwrap (the default) or none (commands unconfined), not {value!r}"
            )
        return value

    @field_validator("rabbitmq_queue_type")
    @classmethod
    def _queue_type(cls, value: str) -> str:
        if value not in ("quorum", "classic"):
            raise ValueError(f"rabbitmq_queue_type must be quorum or classic, not {value!r}")
        return value

    @field_validator("sandbox_paths")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"sandbox_paths must be absolute paths, got {path!r}")
        return value

    @field_validator("sandbox_rootfs", mode="before")
    @classmethod
    def _rootfs(cls, value: Any) -> Path | None:
        if value is None or value == "":
            return None
        value = Path(value)
        if not value.is_absolute():
            raise ValueError(f"sandbox_rootfs must be an absolute path, got {str(value)!r}")
        return value

    @field_validator("egress_allow")
    @classmethod
    def _allow_list(cls, value: str) -> str:
        parse(value)  # a bad pattern is named here, at start, not at a command's first request
        return value

    @field_validator("visibility_timeout_s")
    @classmethod
    def _redelivered_after_the_longest_tick(cls, value: float, info: ValidationInfo) -> float:
        delivery = info.data.get("delivery_timeout_s", value)
        redis = str(info.data.get("broker_url", "")).startswith(("redis", "sentinel"))
        if redis and info.data.get("redis_ack_emulation") and value < delivery:
            raise ValueError(
                f"{value:g} is shorter than delivery_timeout_s={delivery:g}: Redis would "
                "deliver a tick again while a worker still runs it; raise it"
            )
        return value

    @field_validator("model_timeout_s")
    @classmethod
    def _fits_the_delivery_timeout(cls, value: float, info: ValidationInfo) -> float:
        delivery = info.data.get("delivery_timeout_s")
        if delivery is not None and value > delivery - DELIVERY_MARGIN_S:
            raise ValueError(
                f"{value:g} leaves a tick no time before the broker's delivery timeout "
                f"(delivery_timeout_s={delivery:g} less a {DELIVERY_MARGIN_S:g}s margin); "
                "lower it or raise delivery_timeout_s"
            )
        return value

    _sections: dict[type[BaseSettings], BaseSettings] = PrivateAttr(default_factory=dict)

    def section(self, kind: type[S]) -> S:
        """The settings of `kind` (a `BaseSettings` with the `TICKWORK_` prefix), read from
        the environment on first use and kept; a bad value is a ConfigurationError."""
        held = self._sections.get(kind)
        if held is None:
            held = self._sections[kind] = read_settings(kind)
        return held  # type: ignore[return-value]

    @property
    def webhooks(self) -> WebhookSettings:
        return self.section(WebhookSettings)

    @property
    def metrics(self) -> MetricsSettings:
        return self.section(MetricsSettings)

    @property
    def longest_call_s(self) -> float:
        """The longest a tool or model call may take: the delivery timeout less the margin."""
        return self.delivery_timeout_s - DELIVERY_MARGIN_S

    def database_pool(self, defaults: Mapping[str, int]) -> dict[str, Any]:
        """What `make_engine` takes for the pool as TICKWORK_DATABASE_POOL_SIZE, _OVERFLOW
        and _TIMEOUT_S size it; `defaults`, else the engine's own, for a size they leave
        unset. Nothing for an in-memory SQLite database, whose one connection is no pool."""
        from tickwork.store.urls import sqlite_file

        if self.db_url.startswith("sqlite") and sqlite_file(self.db_url) is None:
            return {}
        given = {"pool_size": self.database_pool_size, "max_overflow": self.database_pool_overflow}
        sized = {name: value for name, value in given.items() if value is not None}
        return {**defaults, **sized, "pool_timeout": self.database_pool_timeout_s}

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
            return "filesystem://localhost/", {
                "data_folder_in": str(folder),
                "data_folder_out": str(folder),
                "control_folder": str(folder / "control"),
                "polling_interval": self.poll_interval_s,
                "store_processed": False,
            }
        if self.broker_url.startswith(("amqp", "pyamqp")):
            # publisher confirms: a tick is published once RabbitMQ has it (on a quorum
            # queue, a majority of its nodes), and a worker cut off from RabbitMQ waits in
            # publish instead of handing its relay's ticks to a dead socket
            return self.broker_url, {"confirm_publish": True}
        if self.redis_ack_emulation:
            return self.broker_url, {"visibility_timeout": self.visibility_timeout_s}
        return self.broker_url, {"ack_emulation": False}

    @property
    def publish_options(self) -> dict[str, Any]:
        """What each publish passes to Celery: on RabbitMQ, how long to wait for the
        publisher confirm (without it a publish into a partition waits forever)."""
        if self.broker_url.startswith(("amqp", "pyamqp")):
            return {"confirm_timeout": CONFIRM_TIMEOUT_S}
        return {}

    def masked(self, *others: BaseSettings) -> dict[str, Any]:
        """The settings in force, its sections' (`SECTIONS`), then those of `others` (e.g.
        `tickwork serve`'s) not already shown, with secrets masked."""
        shown = self.model_dump(mode="json")
        shown["database_url"] = self.db_url
        shown["broker_url"] = "filesystem://" if self.embedded_broker else self.broker_url
        for other in (*(self.section(kind) for kind in SECTIONS), *others):
            for name, value in other.model_dump(mode="json").items():
                shown.setdefault(name, value)
        return {name: _hidden(name, value, self.secret_patterns) for name, value in shown.items()}


#: how long a publish on RabbitMQ waits for its confirm before Celery's retries (a new
#: connection, up to three times) and then the publish fail; the relay covers the tick
CONFIRM_TIMEOUT_S = 10.0

#: the sections `tickwork config` shows and a worker checks at start, after the flat settings
SECTIONS: tuple[type[BaseSettings], ...] = (
    MetricsSettings,
    WebhookSettings,
    EnvironmentSettings,
    TenantSettings,
    RoleSettings,
)


def _hidden(name: str, value: Any, patterns: list[str]) -> Any:
    """`value` with secrets masked: whole if the setting's name says secret (a key, a token),
    else what `mask` finds in its text."""
    if SECRET_NAMES.search(name) and not name.endswith("_file") and value:
        return "****"
    if isinstance(value, str):
        return mask(value, patterns)
    if isinstance(value, list):
        return [_hidden("", v, patterns) for v in value]
    if isinstance(value, dict):
        return {mask(str(k), patterns): _hidden("", v, patterns) for k, v in value.items()}
    return value


def check_database_url(url: str, *, state_dir: Path | None = None) -> None:
    """Refuse what tickwork cannot run on, and a SQLite file in a folder that does not exist
    (but the state dir, which tickwork makes as it makes the embedded default's)."""
    from tickwork.store.urls import check_url

    check_url(url, state_dir=state_dir)


def read_settings(kind: type[S], **overrides: Any) -> S:
    """`kind` read from the environment; a bad value is a ConfigurationError naming it."""
    try:
        return kind(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        name = "TICKWORK_" + "__".join(str(p) for p in loc).upper()
        entry = _json_entry(kind, loc)
        if entry is not None:  # inside a JSON value: its keys are the user's, not variables
            name = f"TICKWORK_{str(loc[0]).upper()}"
        keys = _section_keys(kind, loc)
        if keys is not None and name.lower() not in {k.lower() for k in os.environ}:
            # a key of the section's JSON (TICKWORK_BUDGETS), not a variable of its own
            name, entry = f"TICKWORK_{str(loc[0]).upper()}", repr(loc[1])
        # the settings did not load, so only the default secret patterns are known here
        patterns = Settings.model_fields["secret_patterns"].default
        given = first.get("input")
        shown = f"={mask(str(given), patterns)!r}" if isinstance(given, str | int | float) else ""
        if SECRET_NAMES.search(name) or entry is not None:  # an entry's is not the variable's
            shown = ""
        reason = mask(str(first["msg"]).removeprefix("Value error, "), patterns)
        if keys is not None and first["type"] == "extra_forbidden":
            reason = f"no such key; TICKWORK_{str(loc[0]).upper()} takes {', '.join(keys)}"
        example = JSON_EXAMPLES.get(str(loc[0])) if len(loc) == 1 or entry else None
        if entry is not None:
            # a token's entry is keyed by the token itself: never print it
            where = "one of its entries" if SECRET_NAMES.search(name) else f"its entry {entry}"
            where = f"its key {entry}" if keys is not None else where
            reason = f"{where}: {reason}"
        if example is not None and (entry is not None or first["type"] in _WRONG_SHAPE):
            # JSON of the wrong shape (a list for a mapping): say which shape it takes
            reason += f"; write it as JSON of this shape, e.g. {name}='{example}'"
        raise ConfigurationError(f"invalid setting {name}{shown}: {reason}") from None
    except SettingsError as exc:
        raise ConfigurationError(_not_json(kind, exc)) from None


_WRONG_SHAPE = ("dict_type", "list_type", "model_type")


def _section_keys(kind: type[BaseSettings], loc: tuple[Any, ...]) -> tuple[str, ...] | None:
    """The keys a section read as JSON or as one variable per key takes (TICKWORK_BUDGETS,
    or TICKWORK_BUDGETS__MAX_STEPS), where the error `loc` lies inside one; else None."""
    field = kind.model_fields.get(str(loc[0])) if len(loc) >= 2 else None
    section = field.annotation if field is not None else None
    if not (isinstance(section, type) and issubclass(section, BaseModel)):
        return None
    return tuple(section.model_fields)


def _json_entry(kind: type[BaseSettings], loc: tuple[Any, ...]) -> str | None:
    """Where in a setting whose value is JSON (a mapping or a list, as TICKWORK_API_TOKENS)
    the error `loc` lies, as the user wrote it (`["alice"]["roles"]`); None for a setting
    read whole or a section's field (TICKWORK_BUDGETS__MAX_STEPS is a variable)."""
    field = kind.model_fields.get(str(loc[0])) if loc else None
    if field is None or len(loc) < 2:
        return None
    if typing.get_origin(field.annotation) not in (dict, list):
        return None
    return "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in loc[1:])


def _not_json(kind: type[BaseSettings], exc: SettingsError) -> str:
    """What to write instead of a value that had to be JSON and was not."""
    found = re.search(r'field "(\w+)"', str(exc))
    if found is None:
        return f"invalid setting: {exc}"
    field = found[1]
    annotation = kind.model_fields[field].annotation if field in kind.model_fields else None
    origin = typing.get_origin(annotation) or annotation
    example = JSON_EXAMPLES.get(field) or ('["..."]' if origin is list else '{"...": ...}')
    return (
        f"invalid setting TICKWORK_{field.upper()}: it is not valid JSON; "
        f"write it as JSON, e.g. TICKWORK_{field.upper()}='{example}'"
    )


def load_settings(**overrides: Any) -> Settings:
    """The deployment's settings; a bad value is a ConfigurationError naming its variable."""
    return read_settings(Settings, **overrides)
