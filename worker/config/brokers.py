"""What a broker's refusal says about TICKWORK_BROKER_URL: an error no retry mends (a Redis
database number the server does not have, a RabbitMQ virtual host it has not, a login the
broker does not take), in words that name the setting and the fix."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote, urlsplit, urlunsplit

from tickwork.worker.config.secrets import mask

#: Redis's answer to a SELECT of a database it does not have (Valkey's too)
OUT_OF_RANGE = "DB index is out of range"
#: what a broker answers a user or password it does not take: RabbitMQ's ACCESS_REFUSED,
#: Redis's WRONGPASS (as redis-py words it) and NOAUTH (a server that needs a password)
LOGIN_REFUSED = (
    "ACCESS_REFUSED",
    "invalid username-password pair",
    "WRONGPASS",
    "Authentication required",
    "NOAUTH",
    "invalid password",
)
#: RabbitMQ's answer to a connection to a virtual host it does not have (530)
VHOST_NOT_ALLOWED, VHOST_NOT_FOUND = "NOT_ALLOWED", "not found"
#: how many databases a Redis server has unless its redis.conf says otherwise
REDIS_DEFAULT_DATABASES = 16
#: how long asking the server how many databases it has may take
ASK_TIMEOUT_S = 2.0


def redis_database(url: str) -> int | None:
    """The database number a redis:// or rediss:// URL names (its path; none: 0), or None
    for another kind of URL or a path that is no number."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss"):
        return None
    path = parts.path.strip("/")
    return int(path) if path.isascii() and path.isdigit() else 0 if not path else None


def database_count(url: str) -> int | None:
    """How many databases the Redis server at `url` has (`CONFIG GET databases`, asked on
    its database 0); None if it does not answer or will not say (CONFIG is often renamed
    or refused on a managed Redis)."""
    import redis

    parts = urlsplit(url)
    client = redis.Redis.from_url(
        urlunsplit(parts._replace(path="/0")),
        socket_timeout=ASK_TIMEOUT_S,
        socket_connect_timeout=ASK_TIMEOUT_S,
    )
    try:
        found = client.config_get("databases").get("databases")
        return int(found) if found is not None else None
    except (redis.RedisError, ValueError, OSError):
        return None
    finally:
        client.close()


def refused_database(
    url: str, said: str, *, databases: Callable[[str], int | None] = database_count
) -> str | None:
    """What to tell an operator when the broker at `url` refused with `said` because the
    URL names a Redis database the server does not have; None for any other refusal (a
    broker that is down: retrying mends that). `databases` asks the server how many it has."""
    if OUT_OF_RANGE not in said:
        return None
    first = next((u.strip() for u in url.split(";") if u.strip()), "")
    number = redis_database(first)
    if number is None:
        return None
    start = f"TICKWORK_BROKER_URL {mask(first)} names Redis database {number}"
    count = databases(first)
    if count is not None and count > 0:
        return (
            f"{start}, and the Redis server there has {count} (0 to {count - 1}): put a "
            f"number from 0 to {count - 1} at the end of the URL (redis://HOST:6379/0), or "
            "raise `databases` in the server's redis.conf"
        )
    last = REDIS_DEFAULT_DATABASES - 1
    return (
        f"{start}, which the Redis server there refuses ({OUT_OF_RANGE}): put a database "
        "number it has at the end of the URL (a Redis server has "
        f"{REDIS_DEFAULT_DATABASES} unless its redis.conf says otherwise: 0 to {last})"
    )


def refused_login(url: str, said: str) -> str | None:
    """What to tell an operator when the broker at `url` refused with `said` because it does
    not take the URL's user or password; None for any other refusal. Retrying never mends
    it: a worker retried for ever (Redis) or died with a traceback (RabbitMQ)."""
    if not any(words in said for words in LOGIN_REFUSED):
        return None
    first = next((u.strip() for u in url.split(";") if u.strip()), "")
    return (
        f"the broker at {mask(first)} (TICKWORK_BROKER_URL) refused its login "
        f"({' '.join(said.split())[:200]}): put a user and password the broker takes in the "
        "URL, as USER:PASSWORD@ before its host"
    )


def amqp_vhost(url: str) -> str | None:
    """The virtual host an amqp:// or amqps:// URL names (its path, unquoted; `//` or none:
    RabbitMQ's default, `/`), or None for another kind of URL."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("amqp", "amqps", "pyamqp"):
        return None
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
    return path or "/"


def refused_vhost(url: str, said: str) -> str | None:
    """What to tell an operator when RabbitMQ refused with `said` because the URL names a
    virtual host it does not have (530 NOT_ALLOWED, `vhost NAME not found`); None for any
    other refusal (a virtual host that is down, as while the server starts, comes back).
    Retrying never mends it: a worker logged a reconnect and a traceback many times a second
    and took no tick, after a warning that the broker did not answer."""
    if not (VHOST_NOT_ALLOWED in said and "vhost" in said and VHOST_NOT_FOUND in said):
        return None
    first = next((u.strip() for u in url.split(";") if u.strip()), "")
    vhost = amqp_vhost(first)
    if vhost is None:
        return None
    user = urlsplit(first).username or "USER"
    return (
        f"the RabbitMQ server at {mask(first)} (TICKWORK_BROKER_URL) has no virtual host "
        f"{vhost!r} ({' '.join(said.split())[:200]}): create it there (`rabbitmqctl "
        f"add_vhost {vhost}`, then `rabbitmqctl set_permissions -p {vhost} {user} '.*' '.*' "
        "'.*'`), or name one it has at the end of the URL (amqp://USER:PASSWORD@HOST:5672/"
        "VHOST; `//` names the default one, `/`)"
    )


def refused(
    url: str, said: str, *, databases: Callable[[str], int | None] = database_count
) -> str | None:
    """What to tell an operator when no retry mends the broker's refusal `said` (a login it
    does not take, a Redis database or a RabbitMQ virtual host it has not), or None: a
    broker that is down."""
    return (
        refused_login(url, said)
        or refused_database(url, said, databases=databases)
        or refused_vhost(url, said)
    )
