"""Dead letters made by a `tickwork worker` process, analysed and forked with `tickwork dlq`."""

from __future__ import annotations

import json
import uuid

from tests.e2e.conftest import TEST_KIND, Cli, Deployment, at_once, call, stop, until

LOOPING = {
    "replies": [{"content": "again", "tool_calls": [call("echo", text="same")]}],
    "repeat_last": True,
}


def test_dead_letters_from_a_worker_process(deployment: Deployment, cli: Cli) -> None:
    worker, log = cli.start("worker", "--concurrency", "2", "--dead-letters")
    try:
        two_steps = deployment.script(
            [{"content": "look", "tool_calls": [call("echo", text="1")]}, {"content": "fixed"}]
        )
        budget_id = cli("submit", TEST_KIND, "--model", two_steps, "--max-steps", "1").stdout
        budget_id = budget_id.strip()
        loop_path = deployment.tmp / "loop.json"
        loop_path.write_text(json.dumps(LOOPING))
        # a letter first: digits only name a dead letter's number, never an id's start
        loop_id = deployment.client.submit(
            TEST_KIND, {}, model=f"scripted:{loop_path}", session_id=f"d{uuid.uuid4().hex}"
        ).id
        for sid in (budget_id, loop_id):
            assert deployment.client.wait(sid, timeout=60).status.value == "failed"
        # --dead-letters: the worker also consumed the dead-letter queue
        until(
            lambda: log.read_text().count("dead letter: session") == 2,
            timeout=30,
            what="the worker to log both dead letters",
        )

        options = ["--from-step", "1", "--max-steps", "5", "--as", "erin", "--json"]
        fork = cli("dlq", "fork", budget_id, *options).json()
        assert fork["parent_id"] == budget_id and fork["fork_step"] == 1

        listed, by_id, stats, exported = cli.many(
            ("dlq", "ls", "--json"),
            ("dlq", "show", "1", "--json"),
            ("dlq", "stats", "--json"),
            ("dlq", "export", "--snapshot"),
        )
        letters = listed.json()
        assert {d["session_id"]: d["code"] for d in letters} == {
            budget_id: "BUDGET_STEPS",
            loop_id: "LOOP",
        }
        assert all("snapshot" not in d for d in letters)
        first = by_id.json()
        # the start of a session id names its dead letter as the whole id does
        by_start = cli.inline("dlq", "show", loop_id[:8], "--json").json()
        assert by_start["session_id"] == loop_id
        assert first["id"] == 1 and first["session"]["head"]["status"] == "failed"
        assert first["session"]["steps"][0]["calls"][0]["name"] == "echo"
        counts = stats.json()
        assert counts["total"] == 2 and set(counts["by"]) == {
            "code",
            "kind",
            "model",
            "last_tool",
            "error_signature",
        }
        assert sorted((r["value"], r["count"]) for r in counts["by"]["code"]) == [
            ("BUDGET_STEPS", 1),
            ("LOOP", 1),
        ]
        assert exported.code == 0 and not exported.stderr
        lines = [json.loads(line) for line in exported.stdout.splitlines()]
        assert {d["session_id"] for d in lines} == {budget_id, loop_id}
        assert all(d["snapshot"]["session"]["head"]["id"] == d["session_id"] for d in lines)

        unresolved = cli.inline("dlq", "ls", "--unresolved", "--json").json()
        assert [d["session_id"] for d in unresolved] == [loop_id]
        loops = cli.inline("dlq", "ls", "--code", "loop", "--since", "1h", "--json").json()
        assert [d["session_id"] for d in loops] == [loop_id]
        assert cli.inline("dlq", "ls", "--since", "2999-01-01T00:00", "--json").json() == []
        by_tool = cli.inline("dlq", "stats", "--by", "last_tool", "--since", "2d", "--json")
        assert [(r["value"], r["count"]) for r in by_tool.json()["by"]["last_tool"]] == [
            ("echo", 2)
        ]
        assert "dead letters by error_signature" in cli.inline("dlq", "stats").stdout
        recounted = cli.inline("dlq", "stats", "--recount", "--json").json()
        assert recounted["by"] == counts["by"]
        table = cli.inline("dlq", "ls").stdout
        assert "BUDGET_STEPS" in table and fork["id"] in table
        # in a narrow terminal every id in a listing is still whole, on one line, to copy
        narrow_dlq, narrow_ls = at_once(
            lambda: cli("dlq", "ls", COLUMNS="60"), lambda: cli("ls", COLUMNS="60")
        )
        for whole_id in (budget_id, loop_id, fork["id"]):
            assert whole_id in narrow_dlq.stdout and whole_id in narrow_ls.stdout, whole_id
        # an open dead letter says what to do about it; a forked one does not
        looped = cli.inline("dlq", "show", loop_id, COLUMNS="200").stdout
        # the two sessions fail in either order (two worker threads): numbers by session
        number = {d["session_id"]: d["id"] for d in letters}
        proposed = f'tickwork dlq fork {number[loop_id]} --from-step 0 --append-instruction "TEXT"'
        assert proposed in looped, looped
        by_session = cli.inline("dlq", "show", budget_id).stdout
        assert f"tickwork dlq fork {number[budget_id]}" not in by_session
        assert "BUDGET_STEPS" in by_session and "step 1" in by_session
        # the reason is stored naming the field; the command line prints the flag for it
        assert "1 step made, --max-steps is 1" in by_session, by_session
        assert "`max_steps` is 1" not in by_session  # the signature, a key, stays as stored
        assert {d["session_id"]: d["message"] for d in letters}[budget_id] == (
            "1 step made, `max_steps` is 1"
        )
        out = deployment.tmp / "export.jsonl"
        written = cli.inline("dlq", "export", "--code", "BUDGET_STEPS", "--out", str(out))
        assert "wrote 1 dead letter to" in written.stdout  # before: "1 dead letters"
        assert [json.loads(line)["session_id"] for line in out.read_text().splitlines()] == [
            budget_id
        ]

        done = deployment.client.wait(fork["id"], timeout=60)
        assert done.status.value == "completed" and done.final_answer == "fixed"
        resolved = deployment.client.dead_letter(budget_id)
        assert resolved.resolution is not None
        assert resolved.resolution["state"] == "forked"
        assert resolved.resolution["fork"] == fork["id"]
        assert [(f["fork"], f["by"]) for f in resolved.resolution["forks"]] == [
            (fork["id"], "erin")
        ]
    finally:
        stop(worker)
    assert worker.returncode == 0, log.read_text()[-2000:]


def _failed(deployment: Deployment, n: int, *, ids: tuple[str, ...] = ()) -> list[str]:
    """`n` sessions failed on their step budget, each with its dead letter (the first ones
    under `ids`, where given)."""
    script = deployment.script(
        [{"content": "look", "tool_calls": [call("echo", text="1")]}, {"content": "fixed"}]
    )
    named = [*ids, *[None] * (n - len(ids))]
    ids = tuple(
        deployment.client.submit(
            TEST_KIND, {}, model=script, budgets={"max_steps": 1}, session_id=session_id
        ).id
        for session_id in named
    )
    with deployment.worker():
        for sid in ids:
            assert deployment.client.wait(sid, timeout=60).status.value == "failed"
    return list(ids)


def test_a_dead_letter_is_forked_once_unless_again_and_keeps_every_fork(
    deployment: Deployment, cli: Cli
) -> None:
    (failed,) = _failed(deployment, 1)
    options = ("--from-step", "1", "--max-steps", "5", "--json")
    first = cli.inline("dlq", "fork", failed, *options, "--as", "erin").json()

    refused = cli("dlq", "fork", failed, *options, "--as", "frank", ok=False)
    refused.error(1, "already forked", first["id"], "by erin", "--again")
    # said first, before a budget the fork would need: raising it would only lead here
    short = ("--from-step", "1", "--max-steps", "1", "--as", "frank")
    cli("dlq", "fork", failed, *short, ok=False).error(
        1, "already forked", "; fork it once more on purpose with --again"
    )
    again = cli.inline("dlq", "fork", failed, *options, "--as", "frank", "--again").json()

    shown = cli.inline("dlq", "show", failed, "--json").json()
    assert [f["id"] for f in shown["forks"]] == [first["id"], again["id"]]
    assert [(f["fork"], f["by"]) for f in shown["resolution"]["forks"]] == [
        (first["id"], "erin"),
        (again["id"], "frank"),
    ]
    # the first fork stays referenced, with who made it and when
    assert shown["resolution"]["fork"] == first["id"]
    assert shown["resolution"]["by"] == "erin"
    assert shown["resolution"]["at"] == shown["resolution"]["forks"][0]["at"]
    session = cli.inline("show", failed, "--json").json()
    assert [f["id"] for f in session["forks"]] == [first["id"], again["id"]]
    table = cli.inline("dlq", "show", failed).stdout
    assert first["id"] in table and again["id"] in table
    # the listing names every fork, as `dlq show` does, and the one that resolved it
    listed = cli.inline("dlq", "ls", COLUMNS="200").stdout
    assert f"→ fork {first['id']} (resolved it)" in listed, listed
    assert f"→ fork {again['id']}" in listed and f"{again['id']} (resolved it)" not in listed


def test_forking_a_dead_lettered_session_resolves_its_dead_letter(
    deployment: Deployment, cli: Cli
) -> None:
    """QA4 #10: `tickwork fork` left the dead letter open while `dlq show` listed the fork,
    and the export's `forks` left it out; it resolves it as `dlq fork` does."""
    (failed,) = _failed(deployment, 1)
    options = ("--from-step", "1", "--max-steps", "5", "--json")
    first = cli.inline("fork", failed, *options, "--as", "erin").json()

    open_ones, shown, exported = cli.many(
        ("dlq", "ls", "--unresolved", "--json"),
        ("dlq", "show", failed, "--json"),
        (
            "dlq",
            "export",
        ),
    )
    assert open_ones.json() == []
    assert [f["id"] for f in shown.json()["forks"]] == [first["id"]]
    assert shown.json()["resolution"]["state"] == "forked"
    assert shown.json()["resolution"]["by"] == "erin"
    [row] = [json.loads(line) for line in exported.stdout.splitlines()]
    assert (row["status"], row["forks"], row["closed_by"]) == ("forked", [first["id"]], "erin")

    refused = cli("fork", failed, *options, "--as", "frank", ok=False)
    refused.error(1, "already forked", first["id"], "by erin", "--again")
    again = cli.inline("fork", failed, *options, "--as", "frank", "--again").json()
    exported = cli.inline("dlq", "export").stdout
    assert json.loads(exported)["forks"] == [first["id"], again["id"]]


def test_a_dead_letter_is_resolved_or_dismissed_without_a_fork(
    deployment: Deployment, cli: Cli
) -> None:
    fixed, noise = _failed(deployment, 2)

    resolved = cli(
        "dlq", "resolve", fixed, "--reason", "fixed upstream", "--as", "erin", "--json"
    ).json()
    dismissed = cli.inline("dlq", "dismiss", noise, "--reason", "a test run", "--json").json()

    assert resolved["resolution"]["state"] == "resolved"
    assert (resolved["resolution"]["by"], resolved["resolution"]["reason"]) == (
        "erin",
        "fixed upstream",
    )
    assert resolved["resolved_at"] is not None
    assert dismissed["resolution"]["state"] == "dismissed"
    assert cli.inline("dlq", "ls", "--unresolved", "--json").json() == []
    # closed once: a second closing or a fork is refused, naming who closed it and why
    cli.inline("dlq", "dismiss", fixed, "--reason", "x", ok=False).error(
        1, "already resolved by erin", "fixed upstream"
    )
    cli.inline("dlq", "fork", fixed, "--from-step", "1", "--max-steps", "5", ok=False).error(
        1, "already resolved by erin", "--again"
    )
    cli.inline("dlq", "resolve", noise, "--reason", "  ", ok=False).error(2, "--reason")
    assert "dismissed" in cli.inline("dlq", "show", noise).stdout
    listed = cli.inline("dlq", "ls").stdout  # each closed one says how it was closed
    rows = [line.split() for line in listed.splitlines()]  # ID SESSION CODE STATUS ...
    assert {row[1]: row[3] for row in rows if row[1:2] in ([noise], [fixed])} == {
        noise: "dismissed",
        fixed: "resolved",
    }, listed


def test_a_number_no_dead_letter_has_is_not_taken_for_the_start_of_a_session_id(
    deployment: Deployment, cli: Cli
) -> None:
    """`dlq dismiss 123456` with no dead letter 123456 must not close the letter of a
    session whose id happens to start with those digits: a mistyped number would act on
    another letter."""
    (failed,) = _failed(deployment, 1, ids=("12345678-digits-first",))

    cli.inline("dlq", "dismiss", "123456", "--reason", "noise", ok=False).error(
        1, "no dead letter", "123456", "digits", "whole session id"
    )

    assert [d["session_id"] for d in cli.inline("dlq", "ls", "--unresolved", "--json").json()] == [
        failed
    ]
    # the whole id, or a start with a letter in it, still names it
    assert cli.inline("dlq", "show", failed, "--json").json()["session_id"] == failed
    assert cli.inline("dlq", "show", "12345678-d", "--json").json()["session_id"] == failed


def test_fork_of_a_dead_letters_number_names_its_session_and_dlq_fork(
    deployment: Deployment, cli: Cli
) -> None:
    """`dlq ls` lists dead letters by number; `fork 1` (not `dlq fork 1`) said only "no
    session '1'", leaving the operator to find the session the letter is of."""
    (failed,) = _failed(deployment, 1)
    number = str(deployment.client.dead_letter(failed).id)

    said = cli.inline("fork", number, "--from-step", "1", "--max-steps", "5", ok=False).error(
        1, f"no session '{number}'", f"dead letter {number}", failed
    )
    assert f"`tickwork dlq fork {number}`" in said
    assert deployment.client.dead_letter(failed).resolved_at is None
    # a number no dead letter has says only that no session has it
    cli.inline("fork", "987654", "--from-step", "1", ok=False).error(1, "no session '987654'")


def test_digits_naming_a_letter_number_and_a_session_are_refused_and_hash_names_the_number(
    deployment: Deployment, cli: Cli
) -> None:
    """Digits were read as a letter's number first: the letter of a session whose id is
    those digits could not be named while a letter had that number."""
    (other,) = _failed(deployment, 1)
    number = deployment.client.dead_letter(other).id
    (digits,) = _failed(deployment, 1, ids=(str(number),))
    mine = deployment.client.store.dead_letter(digits).id  # the client's "1" is ambiguous too
    assert mine != number

    cli.inline("dlq", "show", str(number), "--json", ok=False).error(
        2, f"{number} names two dead letters", other, f"'#{number}' or '#{mine}'"
    )
    assert cli.inline("dlq", "show", f"#{number}", "--json").json()["session_id"] == other
    assert cli.inline("dlq", "show", f"#{mine}", "--json").json()["session_id"] == digits
    cli.inline("dlq", "show", "#987654", ok=False).error(1, "no dead letter has number 987654")
    cli.inline("dlq", "show", "#x1", ok=False).error(2, "'#x1' is no dead-letter number")
    closed = cli.inline("dlq", "dismiss", f"#{mine}", "--reason", "noise", "--json").json()
    assert closed["session_id"] == digits and closed["status"] == "dismissed"
    # the one letter both name is no ambiguity
    assert cli.inline("dlq", "show", str(mine), "--json").json()["id"] == mine


def test_dlq_show_of_a_fork_of_a_fork_shows_the_patches_before_its_own(
    deployment: Deployment, cli: Cli
) -> None:
    """A fork of a fork runs under every patch of its chain; `dlq show` listed its own."""
    (failed,) = _failed(deployment, 1)
    first = deployment.client.fork(failed, from_step=0, by="erin", append_instruction="try A")
    with deployment.worker():
        assert deployment.client.wait(first.id, timeout=60).status.value == "failed"
    second = deployment.client.fork(first.id, from_step=0, by="erin", append_instruction="try B")
    with deployment.worker():
        assert deployment.client.wait(second.id, timeout=60).status.value == "failed"

    shown = cli.inline("dlq", "show", second.id).stdout
    assert "earlier patches" in shown and first.id in shown
    assert "'try A'" in shown and "'try B'" in shown  # and its own, under `patch`
    chain = cli.inline("dlq", "show", second.id, "--json").json()["earlier_patches"]
    assert [(c["fork"], c["session_id"], c["patch"]) for c in chain] == [
        (first.id, failed, {"append_instruction": "try A"})
    ]
