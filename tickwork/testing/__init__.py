"""Testing job kinds, tools and deployments: what tickwork's own suite uses, for your tests too.

- `embedded_settings(folder)`: a fresh embedded deployment (SQLite + filesystem broker) in
  `folder`, its schema made, with queues of its own; or pass any `Settings` (Postgres,
  Redis, RabbitMQ) to the helpers below.
- `running_worker(settings)`: a real Celery worker in a thread of this process
  (`celery.contrib.testing.worker.start_worker`) with the relay, for as long as the `with`.
- `reply`, `call`, `write_script`, `scripted_model`: scripted models from a list of
  replies (the format of `worker/models/scripted.py`).
- `SessionDriver`: submit a session, run it until a status, decide its calls, and get its
  snapshot.
- `git(folder, *args)`: git as a test author, e.g. to make a repository a repair job takes.
- `tickwork.testing.store_contract`: the store contract as a conformance kit a store of your
  own runs with pytest, with its helpers in `tickwork.testing.store_ticks`: docs/CONFORMANCE.md
  (`tickwork docs conformance`).
- `check_job_kind(spec, good=..., bad=..., replies=..., folder=...)`: the conformance checks
  of a job kind of your own (`job_kinds.py`): its interface, its tools' schemas, that it
  refuses bad input clearly, and a session of it run to its end through a real worker.

It needs no pytest: failures raise `AssertionError` (a wait that runs out, a session that
ends in another status), which every test runner reports.

    with tempfile.TemporaryDirectory() as tmp:
        settings = embedded_settings(Path(tmp), imports=["myjobs:KIND"])
        with running_worker(settings), SessionDriver(settings) as driver:
            session = driver.run(
                driver.submit("myjobs:KIND", {"task": "x"}, replies=[reply("done")])
            )
        assert session.head.final_answer == "done"
"""

from tickwork.testing.job_kinds import (
    Conformance,
    JobKindNonconformant,
    check_job_kind,
)
from tickwork.testing.sessions import (
    Decide,
    SessionDriver,
    approve_all,
    call,
    embedded_settings,
    git,
    prepare_database,
    reply,
    running_worker,
    scripted_model,
    until,
    write_script,
)

__all__ = [
    "Conformance",
    "Decide",
    "JobKindNonconformant",
    "SessionDriver",
    "approve_all",
    "call",
    "check_job_kind",
    "embedded_settings",
    "git",
    "prepare_database",
    "reply",
    "running_worker",
    "scripted_model",
    "until",
    "write_script",
]
