"""Bad TICKWORK_* settings through the `tickwork` command as a process: one `error:` line
that names the variable and what to write instead, exit code 2, no traceback, nothing made."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tickwork.worker.config.settings import Settings, load_settings

from tests.e2e.conftest import ROOT, TEST_KIND, Cli, at_once
from tests.services import postgres_database

PASSWORD = "hunter2-db-secret"
KEY = "sk-proj-AbCdEf0123456789xyz"

#: (command, variable, value, what the error line must also say)
CASES = [
    ("ls", "TICKWORK_DATABASE_URL", "notaurl", "postgresql://"),
    ("ls", "TICKWORK_DATABASE_URL", f"mysql://tick:{PASSWORD}@db/tw", "not mysql"),
    ("ls", "TICKWORK_DATABASE_URL", "postgresql+psycopg2://db/tw", "psycopg 3"),
    ("submit", "TICKWORK_BROKER_URL", "http://broker.internal:80", "redis://HOST:6379/0"),
    ("submit", "TICKWORK_BROKER_URL", "localhost:6379", "redis://HOST:6379/0"),
    ("ls", "TICKWORK_IMPORTS", "nope", "mypackage.jobs:KIND"),
    ("ls", "TICKWORK_IMPORTS", '["nope"]', "module:attr"),
    ("ls", "TICKWORK_IMPORTS", f'["jobs:{KEY}"]', "module:attr"),
    ("ls", "TICKWORK_PRICES", "cheap", "JSON"),
    (
        "ls",
        "TICKWORK_PRICES",
        '{"gpt-4o": 1}',
        "'gpt-4o': it is neither a list nor an object; write [prompt",
    ),
    ("ls", "TICKWORK_PRICES", '{"my-vllm": [-1, 2]}', "'my-vllm' must be finite and not negative"),
    ("ls", "TICKWORK_PRICES", "[2.5, 10]", "valid dictionary; write it as JSON of this shape"),
    ("ls", "TICKWORK_IMPORTS", '{"jobs": "KIND"}', """e.g. TICKWORK_IMPORTS='["mypackage"""),
    ("ls", "TICKWORK_LEASE_S", "-1", "greater than 0"),
    ("ls", "TICKWORK_LEASE_S", "nan", "finite"),
    ("ls", "TICKWORK_RELAY_PERIOD_S", "0", "greater than 0"),
    ("ls", "TICKWORK_RELAY_AFTER_S", "-5", "greater than or equal to 0"),
    ("ls", "TICKWORK_VISIBILITY_TIMEOUT_S", "0", "greater than 0"),
    ("ls", "TICKWORK_POLL_INTERVAL_S", "0", "greater than 0"),
    ("ls", "TICKWORK_MAX_OUTPUT_CHARS", "0", "greater than or equal to 1"),
    ("ls", "TICKWORK_MODEL_TIMEOUT_S", "-1", "greater than 0"),
    ("ls", "TICKWORK_TRANSCRIPT_CACHE", "-1", "greater than or equal to 0"),
    ("ls", "TICKWORK_QUEUE", "", "at least 1 character"),
    ("worker", "TICKWORK_WEBHOOK_ATTEMPTS", "0", "greater than or equal to 1"),
    ("worker", "TICKWORK_WEBHOOK_TIMEOUT_S", "inf", "finite"),
    ("worker", "TICKWORK_WEBHOOK_EVENTS", "finshed", "approval_requested, finished"),
    ("worker", "TICKWORK_WEBHOOK_MAX_AGE_S", "0", "greater than 0"),
    ("worker", "TICKWORK_METRICS_PORT", "70000", "less than or equal to 65535"),
    ("config", "TICKWORK_API_PORT", "-1", "greater than or equal to 0"),
    # an entry of a JSON value: the variable is TICKWORK_API_TOKENS, not one named after the
    # token (which it printed, the token being the entry's key)
    ("config", "TICKWORK_API_TOKENS", f'{{"{KEY}": 1}}', "one of its entries: Input should"),
    ("config", "TICKWORK_API_MODELS", '["openai:", 3]', "its entry [1]: Input should"),
]


def _bare_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {**env, "PYTHONPATH": str(ROOT), **settings}


def _worker(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`tickwork worker` run to its end (a worker that refuses to start), its output kept."""
    return subprocess.run(
        [sys.executable, "-m", "tickwork", "worker", "--pool", "solo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _submitted_unpublished(cli: Cli, tmp_path: Path) -> tuple[str, str]:
    """A session submitted where its tick could not be published: its id (it is saved) and
    the one warning line submit printed of why."""
    script = tmp_path / "script.json"
    script.write_text('[{"content": "done"}]')
    submitted = cli("submit", TEST_KIND, "--input", "{}", "--model", f"scripted:{script}", ok=False)
    assert submitted.code == 0, submitted  # the session is saved
    (warning,) = submitted.stderr.splitlines()
    return submitted.stdout.strip(), warning


def _given_up(worker: subprocess.CompletedProcess[str]) -> str:
    """The error a worker refused by its broker ended with, having said first (with the same
    reason) that it asks again before giving up: a deployment may make the user, database or
    virtual host just after the broker answers."""
    warned, line = worker.stderr.splitlines()
    assert warned.startswith("warning: ") and warned.endswith(
        "; asking again for 8 s before the worker gives up"
    ), warned
    assert warned.removeprefix("warning: ").split("; asking again")[0] == line.removeprefix(
        "error: "
    ), (warned, line)
    return line


def test_each_bad_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
    argv = {
        "ls": ["ls"],
        "submit": ["submit", "repair"],
        "worker": ["worker"],
        "config": ["config"],
    }
    results = at_once(
        *(
            functools.partial(cli, *argv[command], ok=False, **{name: value})
            for command, name, value, _ in CASES
        )
    )
    for (_, name, _, says), result in zip(CASES, results, strict=True):
        line = result.error(2, f"invalid setting {name}", says)
        assert PASSWORD not in line and KEY not in line
    # refused before anything was made: no state folder, no database, no broker folder
    assert not state.exists()


def test_a_sqlite_file_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    url = f"sqlite:///{missing}/x.db"
    refused, upgrade = at_once(
        lambda: cli("ls", ok=False, TICKWORK_DATABASE_URL=url),
        lambda: cli("db", "upgrade", ok=False, TICKWORK_DATABASE_URL=url),
    )
    for result in (refused, upgrade):
        result.error(2, "TICKWORK_DATABASE_URL", str(missing), "does not exist")
    assert not (tmp_path / "no").exists()
    # the embedded default still makes its own state folder, and a file in an existing one
    # works; a command that makes sessions, or `db upgrade`, makes the database (`ls` reads)
    state = tmp_path / "named" / "state"
    places = [
        (
            {"TICKWORK_STATE_DIR": str(tmp_path / "new" / "state")},
            tmp_path / "new" / "state" / "tickwork.db",
        ),
        ({"TICKWORK_DATABASE_URL": f"sqlite:///{tmp_path}/here.db"}, tmp_path / "here.db"),
        # a file named in the state folder is made with it, as the default is
        (
            {"TICKWORK_STATE_DIR": str(state), "TICKWORK_DATABASE_URL": f"sqlite:///{state}/tw.db"},
            state / "tw.db",
        ),
    ]
    for env, made in places:
        cli("db", "upgrade", **env)
        assert made.exists() and cli.inline("ls", "--json", **env).json() == [], env


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "rediss://:pw@cache.internal:6380/1",
        "sentinel://s1:26379;sentinel://s2:26379",
        "amqp://guest:guest@127.0.0.1:5672//",
        "pyamqp://guest@rabbit//",
        "filesystem://",
        "",
    ],
)
def test_the_supported_brokers_are_accepted(url: str) -> None:
    assert Settings(broker_url=url).broker_url == url


def test_a_failover_list_is_checked_whole() -> None:
    from tickwork.fsm.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="TICKWORK_BROKER_URL"):
        load_settings(broker_url="redis://a:6379;b:6379")


def test_a_broker_that_does_not_answer_is_one_whole_warning(tmp_path: Path) -> None:
    cli = Cli(
        _bare_env(
            TICKWORK_STATE_DIR=str(tmp_path / "state"), TICKWORK_BROKER_URL="redis://127.0.0.1:1/0"
        ),
        tmp_path,
    )
    script = tmp_path / "script.json"
    script.write_text('[{"content": "done"}]')
    submitted = cli(
        "submit",
        TEST_KIND,
        "--input",
        json.dumps({"sink": str(tmp_path)}),
        "--model",
        f"scripted:{script}",
        ok=False,
    )
    assert submitted.code == 0, submitted
    session_id = submitted.stdout.strip()
    (warning,) = submitted.stderr.splitlines()
    assert warning.startswith(f"could not publish the tick of {session_id} (")
    assert warning.endswith(
        "the session is saved and a worker's relay will publish it once the broker is back "
        "(within TICKWORK_RELAY_AFTER_S=10s)"
    )
    assert [h["id"] for h in cli("ls", "--json").json()] == [session_id]


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("TICKWORK_ARTIFACTS_URL", "ftp://blobs.internal/x", "unknown artifact store"),
        ("TICKWORK_ARTIFACTS_URL", "file:///no-such-mount/blobs", "does not exist on this host"),
        ("TICKWORK_ARTIFACTS_URL", "s3:/bucket", "TICKWORK_ARTIFACTS_URL"),
        ("TICKWORK_WORKSPACES_DIR", "/proc/no-such-cache", "cannot make or write the folder"),
        ("TICKWORK_STATE_DIR", "/proc/no-such-state", "TICKWORK_STATE_DIR=/proc/no-such-state"),
        ("TICKWORK_IMPORTS", '["no_such_jobs_module:KIND"]', "cannot import 'no_such_jobs_module'"),
    ],
)
def test_a_worker_that_could_not_load_what_its_ticks_need_does_not_start(
    tmp_path: Path, name: str, value: str, says: str
) -> None:
    # before, it started and failed every session it ticked (dead-lettered, not retried)
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    cli("worker", ok=False, **{name: value}).error(2, says)


def test_a_worker_on_a_tenants_file_it_cannot_take_does_not_start(tmp_path: Path) -> None:
    # before, it started and failed every relay pass: no admission, no republished tick
    bad = tmp_path / "tenants.json"
    bad.write_text('{"team-a": {"max_in_flight": -2}}')
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    cli("worker", ok=False, TICKWORK_TENANTS_FILE=str(bad)).error(
        2, "team-a.max_in_flight", str(bad)
    )
    missing = tmp_path / "no-such-tenants.json"
    refused = cli("worker", ok=False, TICKWORK_TENANTS_FILE=str(missing))
    refused.error(2, "cannot read", str(missing))


def test_a_worker_on_a_database_without_the_schema_does_not_start(tmp_path: Path) -> None:
    # before, it started and logged a failed relay pass every period, ticking nothing
    with postgres_database() as url:
        cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
        cli("worker", ok=False, TICKWORK_DATABASE_URL=url).error(
            2, "has no tickwork schema", "tickwork db upgrade"
        )


def test_a_worker_on_a_database_behind_its_migrations_does_not_start(tmp_path: Path) -> None:
    # before, it started on the older schema and its relay failed every pass (no
    # republication, no admission), its ticks every save; a newer database stays allowed
    from tickwork.store.migrate import behind, head, upgrade

    with postgres_database() as url:
        upgrade(url, "0018_admission")
        cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
        cli("worker", ok=False, TICKWORK_DATABASE_URL=url).error(
            2, "is at schema revision 0018_admission, older than", "tickwork db upgrade"
        )
        assert behind(url, "0018_admission") and not behind(url, head(url))
        assert not behind(url, "0099_from_a_later_release")


def test_a_worker_loads_the_model_providers_of_its_imports_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tickwork.worker.config.settings import Settings

    from tickwork.cli_ops import check_what_ticks_load
    from tickwork.context import ensure_schema

    state = tmp_path / "state"
    state.mkdir()
    good = Settings(state_dir=state, imports=["tests.providers:CANNED", "tests.jobs:TEST"])
    ensure_schema(good)
    check_what_ticks_load(good)  # a provider beside a job kind is no error
    (tmp_path / "clash.py").write_text(
        "from tests.providers import CANNED\n"
        "import dataclasses\n"
        "CLASH = dataclasses.replace(CANNED, prefix='openai')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Exception, match="prefix 'openai'"):
        check_what_ticks_load(Settings(state_dir=state, imports=["clash:CLASH"]))


def test_the_demo_refuses_a_timeout_that_is_not_positive(tmp_path: Path) -> None:
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    said = cli("demo", "--yes", "--timeout", "-1", ok=False).error(2, "--timeout")
    assert "Traceback" not in said
    assert not (tmp_path / "state" / "demo").exists()  # refused before anything was made


def test_a_reading_command_makes_no_database_and_says_there_is_none(tmp_path: Path) -> None:
    """Run where there is no database, `ls` (and every command that only reads or changes
    what exists) says so, naming the file and the settings, and leaves nothing behind; a
    command that makes sessions, or `db upgrade`, still makes it."""

    done = subprocess.run(
        [sys.executable, "-m", "tickwork", "ls"],
        cwd=tmp_path,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == "", done
    said = done.stderr
    assert said.startswith("error: no tickwork database at ") and "Traceback" not in said
    assert str(tmp_path / ".tickwork" / "tickwork.db") in said
    assert "TICKWORK_STATE_DIR" in said and "tickwork submit" in said
    state = tmp_path / "state"
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
    for argv in (["show", "s"], ["dlq", "ls"], ["dlq", "stats"], ["watch", "s"], ["env", "ls"]):
        cli.inline(*argv, ok=False).error(1, f"no tickwork database at {state / 'tickwork.db'}")
    cli.inline("reject", "s", "s1c0", "--as", "ann", ok=False).error(1, "no tickwork database")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    cli.inline("db", "upgrade")
    assert (state / "tickwork.db").is_file()


def test_a_refused_submit_makes_no_database(tmp_path: Path) -> None:
    """The first `tickwork submit` in a folder, refused for a mistyped --workspace, model,
    budget or id, or a model without a price, made `.tickwork/tickwork.db` before it
    refused (and packed the workspace into it): each is refused before the database is
    made; the first submit that passes makes it."""
    state = tmp_path / "state"
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "done"}]))
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
    repair = ["submit", "repair", "--test-cmd", "pytest", "--workspace", str(project)]
    scripted = ["--model", f"scripted:{script}"]
    refused = [
        ([*repair[:-1], str(tmp_path / "projetc"), *scripted], "is not an existing directory"),
        ([*repair, "--model", "opneai:gpt-4o"], "unknown model spec 'opneai:gpt-4o'"),
        ([*repair, "--model", "openai:my-local"], "has no price"),  # after the pack
        ([*repair, *scripted, "--max-steps", "-3"], "--max-steps"),
        ([*repair, *scripted, "--id", "a b"], "--id"),
        (["submit", "nosuch:kind", *scripted], "cannot import 'nosuch'"),
    ]
    for argv, said in refused:
        cli.inline(*argv, ok=False).error(2, said)
        assert not state.exists(), argv
    done = cli.inline(*repair, *scripted)
    assert (state / "tickwork.db").is_file() and done.stdout.strip()


def test_first_submits_at_once_make_one_database_and_keep_both(tmp_path: Path) -> None:
    """Two first `tickwork submit`s at once where there is no database (two terminals):
    each makes it once its checks pass, one of them wins, and both sessions are in it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "done"}]))
    repair = ["submit", "repair", "--workspace", str(project), "--test-cmd", "pytest"]
    for n in range(10):
        state = tmp_path / f"state-{n}"
        cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
        made = cli.many(*([*repair, "--model", f"scripted:{script}"] for _ in range(2)))
        assert [r.code for r in made] == [0, 0], made
        listed = cli.inline("ls", "--json").stdout
        assert sorted(h["id"] for h in json.loads(listed)) == sorted(r.stdout.strip() for r in made)


def test_a_session_not_found_on_the_embedded_default_says_where_it_looked(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(state)), tmp_path)
    cli("db", "upgrade")
    said = cli("show", "nope", ok=False).error(1, "no session 'nope'", "tickwork ls")
    assert f"looked in {state / 'tickwork.db'}" in said and "TICKWORK_STATE_DIR" in said


def test_a_worker_whose_broker_does_not_answer_says_which_setting_points_there(
    tmp_path: Path,
) -> None:
    """It starts anyway (a broker may come up after it) and Celery keeps trying; the line
    names TICKWORK_BROKER_URL, which Celery's own retry lines do not."""

    env = _bare_env(
        TICKWORK_STATE_DIR=str(tmp_path / "state"),
        TICKWORK_BROKER_URL="redis://:secret@127.0.0.1:1/0",
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "tickwork", "worker", "--pool", "solo"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert worker.stderr is not None
        line = worker.stderr.readline()  # the warning comes before Celery starts
    finally:
        os.killpg(worker.pid, 9)
        worker.wait(30)
        if worker.stderr is not None:
            worker.stderr.close()
    assert line.startswith("warning: the broker at redis://:****@127.0.0.1:1/0"), line
    assert "(TICKWORK_BROKER_URL) does not answer" in line and "secret" not in line


def test_a_redis_database_the_server_has_not_is_named_with_the_ones_it_has(
    tmp_path: Path,
) -> None:
    """`redis://HOST:PORT/99` on a server with 4 databases: submit said "DB index is out
    of range" and that a relay publishes the tick "once the broker is back", and a worker
    warned the broker "does not answer" and retried for ever; no retry mends the URL. The
    server is the test's own, started with `--databases 4`, so the count it is named with
    can only come from that server (not the shared Redis, whose CONFIG may be refused)."""

    from tests.services import own_redis

    with own_redis("--databases", "4") as server:
        at = server.removeprefix("redis://").removesuffix("/0")
        env = _bare_env(
            TICKWORK_STATE_DIR=str(tmp_path / "state"),
            TICKWORK_BROKER_URL=f"redis://:secret@{at}/99",
        )
        session_id, warning = _submitted_unpublished(Cli(env, tmp_path), tmp_path)
        worker = _worker(env, tmp_path)
    assert warning.startswith(f"could not publish the tick of {session_id}: "), warning
    for said in (
        f"TICKWORK_BROKER_URL redis://:****@{at}/99 names Redis database 99",
        "the Redis server there has 4 (0 to 3)",
        "a number from 0 to 3",
    ):
        assert said in warning, (said, warning)
    assert "secret" not in warning and "once the broker is back" not in warning

    assert worker.returncode == 2, worker
    line = _given_up(worker)
    assert line.startswith(f"error: TICKWORK_BROKER_URL redis://:****@{at}/99 names"), line
    assert "has 4 (0 to 3)" in line and "secret" not in line, line


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_login_the_broker_refuses_is_named_and_the_worker_does_not_start(
    tmp_path: Path, broker: str
) -> None:
    """A wrong user or password in TICKWORK_BROKER_URL: a worker on RabbitMQ died with
    Celery's traceback (ACCESS_REFUSED), one on Redis warned the broker "does not answer"
    and retried for ever, and submit said a relay publishes the tick "once the broker is
    back"; no retry mends a login. The session submitted is kept."""
    from urllib.parse import urlsplit

    from tests.services import rabbitmq_url, redis_url

    if broker == "redis":
        # a user the server has not: Redis answers WRONGPASS, whatever its configuration
        at = urlsplit(redis_url())
        url = f"redis://nobody-fix7:secret-pw@{at.hostname}:{at.port}/0"
        masked, words = f"redis://nobody-fix7:****@{at.hostname}:{at.port}/0", "username-password"
    else:
        at = urlsplit(rabbitmq_url())
        url = f"amqp://{at.username}:secret-pw@{at.hostname}:{at.port}//"
        masked, words = f"amqp://{at.username}:****@{at.hostname}:{at.port}//", "ACCESS_REFUSED"
    env = _bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state"), TICKWORK_BROKER_URL=url)
    cli = Cli(env, tmp_path)
    session_id, warning = _submitted_unpublished(cli, tmp_path)
    assert warning.startswith(
        f"could not publish the tick of {session_id}: the broker at "
        f"{masked} (TICKWORK_BROKER_URL) refused its login ("
    ), warning
    assert words in warning and "USER:PASSWORD@ before its host" in warning, warning
    assert "secret-pw" not in warning and "once the broker is back" not in warning
    assert cli("show", session_id, "--json").json()["head"]["status"] == "ready"

    worker = _worker(env, tmp_path)
    assert worker.returncode == 2, worker
    line = _given_up(worker)
    assert line.startswith(f"error: the broker at {masked} (TICKWORK_BROKER_URL) refused its")
    assert words in line and "USER:PASSWORD@ before its host" in line, line
    assert "secret-pw" not in line and "Traceback" not in worker.stdout


def test_a_rabbitmq_virtual_host_the_server_has_not_is_named_and_the_worker_does_not_start(
    tmp_path: Path,
) -> None:
    """A virtual host RabbitMQ does not have in TICKWORK_BROKER_URL: the worker warned that
    the broker "does not answer", then logged a reconnect and a traceback many times a
    second and took no tick; /readyz and submit said only that it could not connect. No
    retry mends it: the worker does not start, naming the virtual host and how to make it.
    The session submitted is kept."""
    from urllib.parse import urlsplit

    from tests.services import rabbitmq_url

    at = urlsplit(rabbitmq_url())
    vhost = f"nosuch-{uuid.uuid4().hex[:8]}"
    url = f"amqp://{at.username}:{at.password}@{at.hostname}:{at.port}/{vhost}"
    masked = f"amqp://{at.username}:****@{at.hostname}:{at.port}/{vhost}"
    env = _bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state"), TICKWORK_BROKER_URL=url)
    cli = Cli(env, tmp_path)
    session_id, warning = _submitted_unpublished(cli, tmp_path)
    assert warning.startswith(
        f"could not publish the tick of {session_id}: the RabbitMQ server at {masked} "
        f"(TICKWORK_BROKER_URL) has no virtual host '{vhost}'"
    ), warning
    assert "once the URL names a virtual host the server has" in warning, warning
    assert cli("show", session_id, "--json").json()["head"]["status"] == "ready"

    worker = _worker(env, tmp_path)
    assert worker.returncode == 2, worker
    line = _given_up(worker)
    assert line.startswith(
        f"error: the RabbitMQ server at {masked} (TICKWORK_BROKER_URL) has no virtual host "
        f"'{vhost}' ("
    ), line
    assert f"`rabbitmqctl add_vhost {vhost}`" in line, line
    assert f"rabbitmqctl set_permissions -p {vhost} {at.username} " in line, line
    assert "Traceback" not in worker.stdout + worker.stderr


def test_a_virtual_host_that_is_down_is_waited_for_not_refused() -> None:
    """A virtual host RabbitMQ has but has not started (its boot, a failed node) comes back:
    only one it does not have is refused; and only an amqp:// URL's."""
    from tickwork.worker.config.brokers import refused, refused_vhost

    down = "NotAllowed: Connection.open: (530) NOT_ALLOWED - vhost team-a is down"
    assert refused("amqp://guest:pw@rabbit:5672/team-a", down) is None
    gone = "NotAllowed: Connection.open: (530) NOT_ALLOWED - vhost team-a not found"
    said = refused("amqp://guest:pw@rabbit:5672/team-a", gone)
    assert said is not None and said.startswith(
        "the RabbitMQ server at amqp://guest:****@rabbit:5672/team-a (TICKWORK_BROKER_URL) "
        "has no virtual host 'team-a'"
    ), said
    default = refused_vhost("amqp://guest:pw@rabbit:5672//", gone.replace("team-a", "/"))
    assert default is not None and "no virtual host '/'" in default
    assert refused_vhost("redis://cache:6379/0", gone) is None


def test_a_redis_server_that_will_not_say_how_many_databases_it_has_is_quoted() -> None:
    """CONFIG is often renamed or refused (managed Redis): the server's own words then."""
    from tickwork.worker.config.brokers import refused_database

    said = refused_database(
        "redis://cache:6379/20",
        "OperationalError: DB index is out of range",
        databases=lambda url: None,
    )
    assert said == (
        "TICKWORK_BROKER_URL redis://cache:6379/20 names Redis database 20, which the Redis "
        "server there refuses (DB index is out of range): put a database number it has at "
        "the end of the URL (a Redis server has 16 unless its redis.conf says otherwise: "
        "0 to 15)"
    )
    assert refused_database("redis://cache:6379/2", "Error 111 connecting: refused") is None
    assert refused_database("amqp://guest@rabbit//", "DB index is out of range") is None


def test_config_refuses_a_roles_file_for_an_imported_kind_as_a_worker_would(
    tmp_path: Path,
) -> None:
    # before, `tickwork config` checked the roles file against the built-in kinds only: a
    # role of a kind from TICKWORK_IMPORTS naming a tool that kind lacks passed the check
    # and stopped the worker at its start
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    roles = tmp_path / "roles.json"
    role = '{"test": {"explorer": {"system_prompt": "You explore.", "tools": ["%s"]}}}'
    roles.write_text(role % "no_such_tool")
    imported = {"TICKWORK_IMPORTS": f'["{TEST_KIND}"]', "TICKWORK_ROLES_FILE": str(roles)}
    cli("config", ok=False, **imported).error(2, str(roles), "no_such_tool")
    roles.write_text(role % "echo")
    assert cli.inline("config", "--json", **imported).json()["roles_file"] == str(roles)


def test_config_refuses_the_files_a_worker_or_the_api_would_refuse(tmp_path: Path) -> None:
    # before, `tickwork config` printed the files' names and exited 0 while a worker or
    # `tickwork serve` refused them at start (and, running, kept the old one): an operator
    # checking an edit with it was told nothing was wrong
    cli = Cli(_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")), tmp_path)
    tenants = tmp_path / "tenants.json"
    tenants.write_text('{"team-a": {"max_inflight": 3}}')
    roles = tmp_path / "roles.json"
    roles.write_text('{"repair": {"explorer": {"tools": ["no_such_tool"]}}}')
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"short": {"name": "alice", "roles": ["approver"]}}')
    tenants_refused, roles_refused, tokens_refused = at_once(
        lambda: cli("config", ok=False, TICKWORK_TENANTS_FILE=str(tenants)),
        lambda: cli("config", ok=False, TICKWORK_ROLES_FILE=str(roles)),
        lambda: cli("config", ok=False, TICKWORK_API_TOKENS_FILE=str(tokens)),
    )
    tenants_refused.error(2, str(tenants), "team-a.max_inflight")
    roles_refused.error(2, str(roles), "no_such_tool")
    tokens_refused.error(2, "alice", "shorter than 16 characters")
    tenants.write_text('{"team-a": {"max_in_flight": 3}}')
    roles.write_text('{"repair": {"explorer": {"tools": ["read_file"]}}}')
    tokens.write_text('{"a-long-enough-token-0123": {"name": "alice", "roles": ["approver"]}}')
    shown = cli.inline(
        "config",
        "--json",
        TICKWORK_TENANTS_FILE=str(tenants),
        TICKWORK_ROLES_FILE=str(roles),
        TICKWORK_API_TOKENS_FILE=str(tokens),
    ).json()
    assert shown["tenants_file"] == str(tenants)


def test_a_refusal_that_clears_while_the_worker_asks_again_lets_it_start() -> None:
    """A deployment that makes its RabbitMQ virtual host (or user) just after the broker
    answers: a worker that asked first exited 2 at once, and a restart policy that does not
    restart on a configuration error left it down. It asks again, and starts once the
    refusal clears; a broker still refusing after every try is a ConfigurationError."""
    from types import SimpleNamespace

    from tickwork.fsm.errors import ConfigurationError

    from tickwork.cli_ops import REFUSAL_TRIES, _say_if_the_broker_is_away

    settings = SimpleNamespace(broker_url="amqp://guest:pw@rabbit:5672/team-a")
    gone = "NotAllowed: Connection.open: (530) NOT_ALLOWED - vhost team-a not found"
    answers = iter([gone, gone, None])
    paused: list[float] = []
    _say_if_the_broker_is_away(
        None, settings, probe=lambda _app: next(answers), pause=paused.append
    )  # type: ignore[arg-type]
    assert paused == [2.0, 2.0]

    paused.clear()
    with pytest.raises(ConfigurationError, match="has no virtual host 'team-a'"):
        _say_if_the_broker_is_away(None, settings, probe=lambda _app: gone, pause=paused.append)  # type: ignore[arg-type]
    assert len(paused) == REFUSAL_TRIES - 1
