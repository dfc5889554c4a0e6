"""The chaos run: sessions on a fleet of `celery worker` processes that keep being killed,
on a Redis and a Postgres that are each restarted once; then the invariants, as figures.

`run(plan)` is used by `ops/chaos/run.py` (the full run, 200 sessions) and by
`tests/chaos/test_chaos.py` (the CI-sized run). The job kind is the test suite's
`tests.jobs:TEST`, whose tools append `"<idempotency key> <value>"` to a sink folder:
`idem_effect` (idempotent), `effect` (not idempotent) and `danger` (needs approval, not
idempotent); a background approver approves every call that asks. Beside them, tree
roots (`tests.jobs:TREE`) spawn children, and some kills are aimed at their joins
(`ops/chaos/trees.py`).
"""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tickwork.fsm.values import Status  # noqa: E402
from tickwork.store.migrate import upgrade  # noqa: E402
from tickwork.worker.config.settings import Settings  # noqa: E402

from .disk import Disk, check_files  # noqa: E402
from .driver import Driver, PublishFailures, resolve_in_doubt, settle  # noqa: E402
from .fleet import Fleet  # noqa: E402
from .invariants import check, dump, worker_log_figures  # noqa: E402
from .plan import CI_PLAN, Plan  # noqa: E402
from .report import Report  # noqa: E402
from .services import PrivatePostgres, PrivateRedis, stop_quietly  # noqa: E402
from .trees import Aim, aimed_figures, check_trees, root_ids, tree_ids  # noqa: E402

__all__ = ["CI_PLAN", "Plan", "Report", "run"]

#: the least time between a kill and a kill aimed at a tree
AIM_GAP_S = 1.0


@contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tickwork-chaos-") as tmp:
        yield Path(tmp)


def run(
    plan: Plan,
    *,
    workdir: Path | None = None,
    say: Callable[[str], None] = print,
    broker_url: str = "",
) -> Report:
    """One chaos run; every server and worker it starts is stopped before it returns.

    `broker_url` (e.g. `amqp://guest:guest@127.0.0.1:5672//`): run on that broker instead of
    a private Redis; it is shared, so it is never restarted (the plan's Redis restart is
    left out) and the run's queues, named for it, are deleted at the end."""
    from tickwork.client import Tickwork

    random.seed(plan.seed)
    report = Report(plan)
    t0 = time.monotonic()

    def mark(what: str) -> None:
        report.timeline.append((round(time.monotonic() - t0, 1), what))
        say(f"[{time.monotonic() - t0:6.1f}s] {what}")

    with _workdir(workdir) as work:
        report.workdir = str(work)
        redis = None if broker_url else PrivateRedis(work / "redis")
        queue = f"tickwork.chaos.{uuid.uuid4().hex[:8]}" if broker_url else "tickwork.chaos"
        postgres = PrivatePostgres()
        fleet: Fleet | None = None
        driver: Driver | None = None
        disk: Disk | None = None
        client = None
        publish_failures = PublishFailures()
        logging.getLogger("tickwork.client").addHandler(publish_failures)
        try:
            postgres.init()
            postgres.start()
            if redis is not None:
                redis.start()
            url = postgres.create_database("tickwork_chaos")
            upgrade(url)
            where = f"Redis on :{redis.port}" if redis is not None else _shown(broker_url)
            mark(f"Postgres on :{postgres.port}, {where}")
            workspaces = work / "workspaces"
            disk = Disk(workspaces, plan.workspaces_mb)
            mark(disk.describe())
            settings = Settings(
                workspaces_dir=workspaces,
                database_url=url,
                broker_url=redis.url if redis is not None else broker_url,
                state_dir=work / "state",
                queue=queue,
                dead_letter_queue=f"{queue}.dead",
                lease_s=plan.lease_s,
                relay_period_s=plan.relay_period_s,
                relay_after_s=plan.relay_after_s,
            )
            sink, scripts = work / "sink", work / "scripts"
            sink.mkdir(exist_ok=True)
            scripts.mkdir(exist_ok=True)
            client = Tickwork(settings)
            fleet = Fleet(settings, work / "workers", plan.concurrency)
            survivor = fleet.spawn()
            survivor_log = fleet.logs[survivor.pid]
            for _ in range(plan.workers - 1):
                fleet.spawn()
            mark(f"{plan.workers} workers started (the first one is never killed)")

            driver = Driver(client, plan, sink, scripts)
            driver.start()
            chaos_start = time.monotonic()
            aim = Aim(client.store.engine, plan, fleet, survivor)
            survivor_marks = _chaos(plan, fleet, survivor, redis, postgres, mark, disk, aim)
            mark(
                f"chaos over: {fleet.killed} workers killed, {fleet.started} started; "
                f"{len(driver.submitted)} sessions submitted"
            )
            settled = settle(
                client,
                [f"chaos-{n:04d}" for n in range(plan.sessions)]
                + [f"chaos-files-{n:04d}" for n in range(plan.file_sessions)]
                + root_ids(plan),
                timeout=plan.drain_timeout_s,
                driver=driver,
                fleet=fleet,
            )
            mark("sessions settled" if settled else "sessions did NOT settle in time")
            driver.approving.clear()
            ids = list(driver.submitted)
            before = [client.load(i) for i in ids]
            waiting_before = sum(1 for s in before if s.head.status is Status.WAITING_APPROVAL)
            report.add("sessions waiting on an in-doubt call after the chaos", waiting_before)
            if plan.resolve_in_doubt and waiting_before:
                done = resolve_in_doubt(client, before, sink)
                report.add("in-doubt calls decided by the operator", done)
                driver.approving.set()
                settled = settle(
                    client, ids, timeout=plan.drain_timeout_s, driver=None, fleet=fleet
                )
                mark(f"in-doubt calls decided ({done}); settled again: {settled}")
            driver.stop()
            fleet.stop_all()
            mark("workers stopped; checking")
            report.add("run", f"{time.monotonic() - chaos_start:.0f}s from the first submit")
            _run_figures(report, fleet, redis, postgres, driver, publish_failures)
            aimed_figures(report, aim)
            # the trees' children are checked as every session is, and their joins apart
            ids += [i for i in tree_ids(client, plan) if i not in ids]
            check(report, client, ids, sink)
            check_trees(report, client, plan)
            check_files(report, client, ids, disk)
            report.add(
                "ticks put back for want of space (worker logs)",
                sum(
                    p.read_text(errors="replace").count("no space on this host")
                    for p in fleet.logs.values()
                ),
            )
            if workdir is not None:
                dump(client, ids, work / "sessions.jsonl")
            worker_log_figures(report, fleet, survivor_marks, survivor_log)
        finally:
            logging.getLogger("tickwork.client").removeHandler(publish_failures)
            if driver is not None:
                driver.stop()
            if fleet is not None:
                fleet.stop_all()
            if client is not None:
                client.close()
            if broker_url:
                _delete_queues(broker_url, queue)
            stop_quietly(*[s for s in (redis, postgres) if s is not None])
            if disk is not None:
                disk.release()
        mark("done")
    return report


def _shown(url: str) -> str:
    """A broker URL without its password, for the log."""
    from kombu.utils.url import maybe_sanitize_url

    return str(maybe_sanitize_url(url))


def _delete_queues(broker_url: str, queue: str) -> None:
    from kombu import Connection

    try:
        with Connection(broker_url, connect_timeout=5) as conn:
            channel = conn.channel()
            for name in (queue, f"{queue}.dead"):
                channel.queue_delete(name)
                channel.exchange_delete(name)
    except Exception as exc:  # the report stands; say what is left behind
        logging.getLogger(__name__).warning("could not delete the queue %s: %s", queue, exc)


def _chaos(
    plan: Plan,
    fleet: Fleet,
    survivor: subprocess.Popen[bytes],
    redis: PrivateRedis | None,
    postgres: PrivatePostgres,
    mark: Callable[[str], None],
    disk: Disk,
    aim: Aim,
) -> dict[str, int]:
    """Kill workers and restart the servers for `plan.chaos_s`; for each restart, where
    the survivor's log stood when the server was back."""
    survivor_log = fleet.logs[survivor.pid]
    chaos_start = time.monotonic()
    survivor_marks: dict[str, int] = {}
    restarts: list[tuple[float, str]] = []
    if plan.redis_restart_at is not None and redis is not None:
        restarts.append((plan.redis_restart_at * plan.chaos_s, "Redis"))
    if plan.postgres_restart_at is not None:
        restarts.append((plan.postgres_restart_at * plan.chaos_s, "Postgres"))
    if plan.corrupt_cache_at is not None:
        restarts.append((plan.corrupt_cache_at * plan.chaos_s, "cache"))
    if plan.disk_full_at is not None and disk.mounted:
        restarts.append((plan.disk_full_at * plan.chaos_s, "disk"))
    restarts.sort()
    next_kill = chaos_start + random.uniform(0.5, 1.5) * plan.kill_every_s
    last_kill = chaos_start
    mark(f"chaos for {plan.chaos_s:g}s: a SIGKILL every ~{plan.kill_every_s:g}s")
    while (now := time.monotonic()) < chaos_start + plan.chaos_s:
        if restarts and now - chaos_start >= restarts[0][0]:
            _, what = restarts.pop(0)
            if what == "cache":
                rotted = disk.rot()
                if not rotted:  # nothing cached yet: look again in a second
                    restarts.append((now - chaos_start + 1.0, "cache"))
                    restarts.sort()
                    continue
                mark(f"blobs in the workers' cache overwritten with rot: {rotted}")
                continue
            if what == "disk":
                mark(f"workspaces filesystem full for {plan.down_s:g}s")
                disk.fill(plan.down_s)
                mark("workspaces filesystem has room again")
                continue
            mark(f"restarting {what} (down {plan.down_s:g}s)")
            server = redis if what == "Redis" else postgres
            assert server is not None  # a Redis restart is planned only with a private Redis
            server.restart(plan.down_s)
            survivor_marks[what] = survivor_log.stat().st_size
            mark(f"{what} is back")
            continue
        fleet.replace_exited()
        # an aimed kill comes up to a period before the planned one, in its place, and a
        # second after the last kill at the soonest
        ready = now >= next_kill - plan.kill_every_s and now >= last_kill + AIM_GAP_S
        aimed = aim.victim(now, ready=ready)
        if aimed is not None:
            fleet.kill(aimed[0])
            fleet.spawn()
            last_kill = now
            next_kill = now + random.uniform(0.5, 1.5) * plan.kill_every_s
        elif now >= next_kill:
            victims = [p for p in fleet.procs if p is not survivor]
            if victims:
                fleet.kill(random.choice(victims))
                fleet.spawn()
                last_kill = now
            next_kill = now + random.uniform(0.5, 1.5) * plan.kill_every_s
        time.sleep(0.05)
    return survivor_marks


def _run_figures(
    report: Report,
    fleet: Fleet,
    redis: PrivateRedis | None,
    postgres: PrivatePostgres,
    driver: Driver,
    publish_failures: PublishFailures,
) -> None:
    """How hard the run was: kills, restarts, retries, approvals."""
    report.add("workers killed with SIGKILL", fleet.killed)
    report.add("workers started", fleet.started)
    report.add("workers that exited on their own (replaced)", len(fleet.exited))
    for why in sorted(set(fleet.exited)):
        report.add("  why", why)
    if redis is not None:
        report.add(
            "Redis restarts (seconds down)",
            f"{int(redis.downtime_s > 0)} ({redis.downtime_s:.1f}s)",
        )
    else:
        report.add("broker (shared, never restarted)", _shown(fleet.settings.broker_url))
    report.add(
        "Postgres restarts (seconds down)",
        f"{int(postgres.downtime_s > 0)} ({postgres.downtime_s:.1f}s)",
    )
    report.add("submits retried after a database error", driver.submit_retries)
    report.add("ticks the client could not publish (left to the relay)", publish_failures.count)
    report.add("approvals given", driver.approvals)
    report.add("approvals refused as already decided", driver.already_decided)
    report.add("approver passes failed on a database error", driver.approver_errors)
    report.add("driver errors", len(driver.errors), not driver.errors)
    for error in driver.errors[:5]:
        report.add("driver error", error)
