"""The CLI with --server: the commands the API serves go through the remote client and
print what they print locally; the others refuse, saying so.

The same checks run in both modes (`cli` is local or remote); in remote mode `--as NAME`
becomes NAME's token, since the server takes who acts from the token.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tickwork.fsm.errors import SessionNotFound
from tickwork.fsm.values import Status
from tickwork.worker.jobs import Jobs

from tests.api.test_adoption_previews import adopting
from tests.e2e.conftest import Cli, Result, call
from tests.remote.conftest import TEST_KIND, TOKEN, Remote, Served, until
from tickwork.remote import RemoteError
from tickwork.remote.errors import SETTINGS_CODES

DANGERS = [call("danger", value="a"), call("danger", value="b"), call("danger", value="c")]


class ModeCli:
    """`tickwork ...` locally (the deployment's database) or with --server (the API)."""

    def __init__(self, remote: Remote, mode: str) -> None:
        self.remote, self.mode = remote, mode
        env = remote.env() if mode == "remote" else dict(remote.served.env)
        self.cli = Cli(env, remote.deployment.tmp)

    def _argv(self, args: tuple[str, ...], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        argv = list(args)
        if self.mode == "remote" and "--as" in argv:
            at = argv.index("--as")
            env = {**env, "TICKWORK_TOKEN": TOKEN[argv[at + 1]]}
            del argv[at : at + 2]
        return argv, env

    def __call__(self, *args: str, ok: bool = True, **env: str) -> Result:
        argv, env = self._argv(args, env)
        return self.cli(*argv, ok=ok, **env)

    def inline(self, *args: str, ok: bool = True, **env: str) -> Result:
        argv, env = self._argv(args, env)
        return self.cli.inline(*argv, ok=ok, **env)

    def many(self, *argvs: tuple[str, ...]) -> list[Result]:
        from tests.e2e.conftest import at_once

        return at_once(*(lambda a=a: self(*a, ok=False) for a in argvs))


@pytest.fixture(params=["local", "remote"])
def cli(remote: Remote, request: pytest.FixtureRequest) -> ModeCli:
    return ModeCli(remote, request.param)


def _mine(rows: list[dict[str, Any]], *ids: str) -> list[str]:
    return [r["id"] for r in rows if r["id"] in ids]


def test_submit_decide_watch_show_ls_fork(remote: Remote, cli: ModeCli) -> None:
    script = remote.script(
        [{"content": "three risky calls", "tool_calls": DANGERS}, {"content": "all done"}]
    )
    sink = json.dumps(remote.input())
    budgets = ["--max-steps", "5", "--deadline", "600"]
    head = cli("submit", TEST_KIND, "--input", sink, "--model", script, *budgets, "--json").json()
    sid = head["id"]
    assert head["kind"] == TEST_KIND
    assert head["budgets"]["max_steps"] == 5 and head["budgets"]["deadline_s"] == 600
    remote.wait(sid, Status.WAITING_APPROVAL)
    seen = remote.deployment.client.load(sid).call("s1c0")
    assert seen is not None
    approved, edited, rejected = cli.many(
        (
            "approve",
            sid,
            "s1c0",
            "--as",
            "alice",
            "--comment",
            "fine",
            "--fingerprint",
            seen.fingerprint,
            "--json",
        ),
        ("edit", sid, "s1c1", "--args", '{"value": "B"}', "--as", "bob", "--json"),
        ("reject", sid, "s1c2", "--feedback", "not c", "--as", "carol", "--json"),
    )
    heads = [approved.json(), edited.json(), rejected.json()]
    assert sorted(len(h["awaiting"]) for h in heads) == [0, 1, 2]

    followed = cli("watch", sid, "--timeout", "60").stdout
    assert f"session {sid} is completed" in followed and "all done" in followed
    assert "approval_decided   s1c0: approve by alice (fine)" in followed
    watched = cli.inline("watch", sid, "--timeout", "60", "--json").json()
    assert watched["timed_out"] is False and watched["head"]["status"] == "completed"
    kinds = [e["kind"] for e in watched["events"]]
    assert kinds[:4] == ["created", "model_called", "step_recorded", "approval_requested"]
    assert kinds.count("approval_decided") == 3 and kinds[-1] == "completed"

    patch = ["--tool-output", "s1c2=patched by hand", "--append-instruction", "be careful"]
    # the server checks a fork's model as a submit's, and names the option
    bad = cli.inline("fork", sid, "--from-step", "1", "--model", "gemini:pro", ok=False)
    bad.error(2, "--model: unknown model spec 'gemini:pro'")
    second = remote.script([{"content": "unused"}, {"content": "done by the second model"}])
    more = ["--max-steps", "9", "--model", second, "--as", "frank", "--json"]
    forked = cli("fork", sid, "--from-step", "1", *patch, *more).json()
    assert forked["parent_id"] == sid and forked["fork_step"] == 1
    assert forked["budgets"]["max_steps"] == 9 and forked["submitted_by"] == "frank"
    assert forked["model"] == second
    remote.wait(forked["id"], Status.COMPLETED)
    done = remote.deployment.client.get(forked["id"])
    assert done.final_answer == "done by the second model"

    view = cli.inline("show", sid, "--json").json()
    assert view["head"]["status"] == "completed" and view["head"]["final_answer"] == "all done"
    calls = {c["call_id"]: c for c in view["steps"][0]["calls"]}
    assert calls["s1c0"]["decision"]["approver"] == "alice"
    assert calls["s1c1"]["observation"]["content"] == (
        'bob edited this call before it ran; it ran with {"value": "B"}\ndestroyed B'
    )
    assert calls["s1c2"]["observation"]["content"] == "rejected by carol: not c"
    assert [f["id"] for f in view["forks"]] == [forked["id"]]
    listed = cli.inline("ls", "--limit", "500", "--json").json()
    assert _mine(listed, sid, forked["id"]) == [forked["id"], sid]  # newest first
    timeline = cli.inline("show", sid).stdout
    for text in ("approve by alice", "rejected by carol: not c", "total: 2 steps · 3 calls"):
        assert text in timeline, text
    only_done = cli.inline(
        "ls", "--status", "completed", "--kind", TEST_KIND, "--limit", "1", "--json"
    ).json()
    assert len(only_done) == 1 and only_done[0]["status"] == "completed"
    assert forked["id"] in cli.inline("ls", "--limit", "500").stdout

    held = cli.inline("submit", TEST_KIND, "--input", sink, "--model", script, "--json").json()
    remote.wait(held["id"], Status.WAITING_APPROVAL)
    assert cli.inline("watch", held["id"], "--json").json()["head"]["awaiting"] == [
        "s1c0",
        "s1c1",
        "s1c2",
    ]
    cancelled = cli.inline("cancel", held["id"], "--as", "dave", "--json").json()
    assert cancelled["status"] == "cancelled"
    refused = cli.inline("approve", held["id"], "s1c0", ok=False)
    refused.error(1, held["id"], "cancelled before this decision", "was not recorded")
    cli.inline("cancel", held["id"], ok=False).error(1, "already cancelled")


def test_show_previews_an_adoption_as_the_childs_patch(
    remote: Remote, cli: ModeCli, tmp_path: Path
) -> None:
    session_id, child = adopting(remote.deployment, tmp_path)
    shown = cli.inline("show", session_id).stdout
    note = f"the patch of child 0 ({child.id}, explorer), outcome {child.result['outcome']}"
    assert f"s2c0 adopt_patch: {note}" in shown, shown
    assert "-    return a - b" in shown and "+    return a + b" in shown
    # `ls --tree` draws the tree through the server as it does here (it was refused)
    [drawn] = [t for t in cli.inline("ls", "--tree", "--json").json() if t["id"] == session_id]
    assert [(c["id"], c["role"]) for c in drawn["children"]] == [(child.id, "explorer")]
    assert child.id in cli.inline("ls", "--tree").stdout


def _failed(remote: Remote, n: int) -> list[str]:
    script = remote.script(
        [{"content": "look", "tool_calls": [call("echo", text="1")]}, {"content": "fixed"}]
    )
    client = remote.deployment.client
    ids = [
        client.submit(TEST_KIND, {}, model=script, budgets={"max_steps": 1}).id for _ in range(n)
    ]
    for sid in ids:
        remote.wait(sid, Status.FAILED)
    return ids


def test_a_fork_with_a_tool_output_past_what_is_taken_names_the_call(
    remote: Remote, cli: ModeCli, tmp_path: Path
) -> None:
    (session_id,) = _failed(remote, 1)
    # past the API's body limit too (1 MB): the server's 413 names the bytes, not the call
    big = tmp_path / "output.txt"
    big.write_text("x" * 1_100_000)
    cli.inline(
        "dlq",
        "fork",
        session_id,
        "--from-step",
        "1",
        "--max-steps",
        "5",
        "--tool-output-file",
        f"s1c0={big}",
        ok=False,
    ).error(2, "s1c0", "1,100,000 ", "TICKWORK_MAX_OUTPUT_CHARS", "give a shorter one")
    assert remote.deployment.client.dead_letter(session_id).resolved_at is None


def test_a_fork_whose_tool_outputs_together_are_past_the_body_limit_names_their_total(
    remote: Remote, tmp_path: Path
) -> None:
    """Neither output alone is over the API's body limit (1 MB): the refusal names their
    total and the limit, not the longest as if it were over a limit of its own."""
    (session_id,) = _failed(remote, 1)
    short, long = tmp_path / "short.txt", tmp_path / "long.txt"
    short.write_text("x" * 500_000)
    long.write_text("y" * 600_000)
    refused = ModeCli(remote, "remote").inline(
        "fork",
        session_id,
        "--from-step",
        "1",
        "--tool-output-file",
        f"s1c0={short}",
        "--tool-output-file",
        f"s1c1={long}",
        ok=False,
    )
    refused.error(
        2,
        "over 1048576 bytes (TICKWORK_API_MAX_BODY_BYTES)",
        "the 2 tool outputs given are 1,100,000 bytes in all",
        "s1c1's, 600,000",
    )
    assert "TICKWORK_MAX_OUTPUT_CHARS" not in refused.stderr


def _at_rest(remote: Remote, timeout_s: float = 60.0) -> None:
    """Wait until no session of the deployment is runnable (each finished or waiting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = [h.id for h in remote.deployment.client.sessions(limit=1000) if h.status.runnable]
        if not running:
            return
        assert time.monotonic() < deadline, f"sessions still running: {running}"
        time.sleep(0.1)


def test_fork_of_a_dead_letters_number_names_its_session_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """`fork 4`, 4 being the number `dlq ls` lists a dead letter by, names the letter's
    session and `dlq fork 4` with a server too: it said only "no session '4'" there."""
    (failed,) = _failed(remote, 1)
    number = str(remote.deployment.client.dead_letter(failed).id)
    said = cli.inline("fork", number, "--from-step", "1", "--max-steps", "5", ok=False).error(
        1, f"no session '{number}'", f"dead letter {number}", failed
    )
    assert f"`tickwork dlq fork {number}`" in said, said
    assert remote.deployment.client.dead_letter(failed).resolved_at is None
    cli.inline("fork", "987654", "--from-step", "1", ok=False).error(1, "no session '987654'")


def test_dead_letters_listed_shown_counted_exported_forked_and_closed(
    remote: Remote, cli: ModeCli
) -> None:
    forked_one, fixed, noise = _failed(remote, 3)
    options = ("--from-step", "1", "--max-steps", "5", "--json")
    first = cli.inline("dlq", "fork", forked_one, *options, "--as", "erin").json()
    assert first["parent_id"] == forked_one and first["fork_step"] == 1
    cli.inline("dlq", "fork", forked_one, *options, "--as", "frank", ok=False).error(
        1, "already forked", first["id"], "by erin", "--again"
    )
    again = cli.inline("dlq", "fork", forked_one, *options, "--as", "frank", "--again").json()
    shown = cli.inline("dlq", "show", forked_one, "--json").json()
    assert [f["id"] for f in shown["forks"]] == [first["id"], again["id"]]
    assert shown["session"]["head"]["status"] == "failed"
    assert [(f["fork"], f["by"]) for f in shown["resolution"]["forks"]] == [
        (first["id"], "erin"),
        (again["id"], "frank"),
    ]
    by_id = cli.inline("dlq", "show", str(shown["id"]), "--json").json()
    # the forks run meanwhile (a worker serves them), so only their status may differ
    assert _without_fork_status(by_id) == _without_fork_status(shown)

    for blank in ("", "  "):  # refused with what to give, before anything is sent
        cli.inline("dlq", "resolve", fixed, "--reason", blank, ok=False).error(
            2, "say why the dead letter is resolved: give a reason (--reason TEXT)"
        )
    resolved = cli.inline(
        "dlq", "resolve", fixed, "--reason", "fixed upstream", "--as", "erin", "--json"
    ).json()
    assert resolved["resolution"]["state"] == "resolved"
    assert (resolved["resolution"]["by"], resolved["resolution"]["reason"]) == (
        "erin",
        "fixed upstream",
    )
    dismissed = cli.inline("dlq", "dismiss", noise, "--reason", "a test run", "--json").json()
    assert dismissed["resolution"]["state"] == "dismissed"
    cli.inline("dlq", "dismiss", fixed, "--reason", "x", ok=False).error(
        1, "already resolved by erin", "fixed upstream"
    )
    mine = {forked_one, fixed, noise}
    unresolved = cli.inline("dlq", "ls", "--unresolved", "--limit", "1000", "--json").json()
    assert not mine & {d["session_id"] for d in unresolved}
    listed = cli.inline("dlq", "ls", "--code", "budget_steps", "--since", "1h", "--json").json()
    assert mine <= {d["session_id"] for d in listed}
    table = cli.inline("dlq", "ls", "--limit", "1000").stdout
    assert "STATUS" in table
    assert all(state in table for state in ("forked", "resolved", "dismissed"))
    cli.inline("dlq", "ls", "--since", "yesterday", ok=False).error(2, "--since 'yesterday'")

    counts = cli.inline("dlq", "stats", "--json").json()
    assert set(counts["by"]) == {"code", "kind", "model", "last_tool", "error_signature"}
    assert counts["total"] >= 3
    # the forks run meanwhile and may fail: the open ones only grow
    before = len(cli.inline("dlq", "ls", "--unresolved", "--limit", "1000", "--json").json())
    still_open = cli.inline("dlq", "stats", "--unresolved", "--json").json()["total"]
    after = len(cli.inline("dlq", "ls", "--unresolved", "--limit", "1000", "--json").json())
    assert before <= still_open <= after
    assert still_open < cli.inline("dlq", "stats", "--json").json()["total"]
    by_tool = cli.inline("dlq", "stats", "--by", "last_tool", "--since", "2d", "--json").json()
    assert list(by_tool["by"]) == ["last_tool"] and by_tool["since"]
    assert "dead letters by error_signature" in cli.inline("dlq", "stats").stdout

    exported = cli("dlq", "export", "--snapshot")
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert mine <= {d["session_id"] for d in lines}
    assert all(d["snapshot"]["session"]["head"]["id"] == d["session_id"] for d in lines)
    out = remote.deployment.tmp / f"export-{cli.mode}.csv"
    written = cli.inline("dlq", "export", "--format", "csv", "--unresolved", "--out", str(out))
    count = len(out.read_text().splitlines()) - 1
    assert f"wrote {count} dead letters to {out} (csv)" in written.stdout


def test_remote_prints_what_local_prints(remote: Remote) -> None:
    local, served = ModeCli(remote, "local"), ModeCli(remote, "remote")
    script = remote.script([{"content": "go", "tool_calls": DANGERS}, {"content": "done"}])
    waiting = remote.deployment.client.submit(TEST_KIND, remote.input(), model=script).id
    (failed,) = _failed(remote, 1)
    remote.wait(waiting, Status.WAITING_APPROVAL)
    _at_rest(remote)  # the earlier tests' forks too: the listings below read every session
    for argv in (
        ("show", waiting, "--json"),
        ("show", failed, "--json"),
        ("show", waiting),
        ("show", failed),
        ("ls", "--limit", "500", "--json"),
        ("ls", "--status", "failed", "--limit", "500"),
        ("watch", waiting, "--json"),
        ("dlq", "ls", "--limit", "1000", "--json"),
        ("dlq", "ls", "--limit", "1000"),
        ("dlq", "show", failed, "--json"),
        ("dlq", "show", failed),
        ("dlq", "stats", "--by", "code", "--json"),
        ("dlq", "stats", "--by", "kind"),
        ("dlq", "export", "--format", "csv"),
    ):
        here, there = local.inline(*argv), served.inline(*argv)
        assert there.stdout == here.stdout, argv
    for argv in (
        ("show", "no-such-session"),
        ("patch", waiting),
        ("dlq", "show", "98765"),
        ("approve", waiting, "s9c9"),
    ):
        here, there = local.inline(*argv, ok=False), served.inline(*argv, ok=False)
        assert there.code == here.code == 1, (argv, here, there)
        assert there.stdout == "" and there.stderr.startswith("error: ")
    served.inline("approve", waiting, "s9c9", ok=False).error(1, "no call 's9c9'", "s1c0")
    unknown = served.inline("show", "no-such-session", ok=False)
    unknown.error(
        1,
        "no session 'no-such-session', and no session id starts with it; list sessions with "
        "`tickwork ls` (asked the server",
    )
    assert "API" not in unknown.stderr  # the API's way to list is for API callers
    served.inline("patch", waiting, ok=False).error(1, "patch")
    # the server's refusal, its way to list the command line's: no API route, no API words
    missing = served.inline("dlq", "show", "98765", ok=False)
    missing.error(
        1, "no dead letter has id or session id '98765'; list them with `tickwork dlq ls`"
    )
    assert "/api/" not in missing.stderr and "API" not in missing.stderr


def test_a_bad_priority_or_key_is_refused_in_the_same_words_with_a_server(
    cli: ModeCli,
) -> None:
    """Through a server the API's 422 spoke pydantic ('Input should be less than or equal
    to 1000'); the CLI checks them as locally before any server is asked."""
    submit = ("submit", TEST_KIND, "--model", "scripted:x.json")
    cli.inline(*submit, "--priority", "5000", ok=False).error(
        2, "--priority 5000 is out of bounds: give a whole number from -1000 to 1000"
    )
    cli.inline(*submit, "--concurrency-key", "", ok=False).error(
        2, "the concurrency key (--concurrency-key) is empty"
    )
    # the CLI's flags, not the API's fields the shared check names by default
    cli.inline(*submit, "--max-per-key", "2", ok=False).error(
        2, "--max-per-key needs a concurrency key: give --concurrency-key with it"
    )


def test_a_context_window_out_of_bounds_is_refused_by_its_flag_and_nothing_stored(
    remote: Remote, cli: ModeCli
) -> None:
    """Locally the client's check names `context_window`, which the command line prints as
    the flag; through a server the body's check said "invalid --context-window: it must be
    at least 1,024, not 100", with no unit and no upper bound. The command line checks it
    first, in the same words either way, and neither a submit nor a fork is stored."""
    script = remote.script([{"content": "done"}])
    sid = cli.inline("submit", TEST_KIND, "--model", script, "--json").json()["id"]
    remote.wait(sid, Status.COMPLETED)
    for window in ("100", "20000000"):
        said = f"--context-window must be between 1,024 and 10,000,000 tokens, got {int(window):,}"
        for argv in (
            ("submit", TEST_KIND, "--model", script),
            ("fork", sid, "--from-step", "0"),
            ("dlq", "fork", sid, "--from-step", "0"),
        ):
            new = f"window-{cli.mode}-{argv[0]}-{argv[1][:4]}-{window}"
            given = (*argv, "--context-window", window, "--id", new)
            line = cli.inline(*given, ok=False).error(2, said)
            assert "context_window" not in line and "`" not in line, line
            with pytest.raises(SessionNotFound):
                remote.deployment.client.get(new)


def test_a_refusal_by_the_server_s_settings_keeps_their_words(remote: Remote) -> None:
    """A roles file whose role has an empty `system_prompt` refuses a submit of its kind
    with the file's key, a 422 the page and API callers read as it is. Through a server
    the command line printed it as "--system-prompt must be non-empty text": a flag of
    `fork`, which no submit takes and which cannot mend a file. It prints what the same
    file says locally."""
    kind = Jobs([TEST_KIND]).get(TEST_KIND).name  # the file names a kind by its name
    roles = remote.deployment.tmp / f"roles-{uuid.uuid4().hex[:6]}.json"
    roles.write_text(json.dumps({kind: {"tester": {"system_prompt": " "}}}))
    env = {**remote.served.env, "TICKWORK_ROLES_FILE": str(roles)}
    served = Served(env, remote.deployment.tmp)
    served.start()
    try:
        script = remote.script([{"content": "done"}])
        said = f"roles file {roles} (TICKWORK_ROLES_FILE), kind {kind!r}, role 'tester': "
        said += "`system_prompt` must be non-empty text"
        answer = httpx.post(
            f"{served.url}/api/v1/sessions",
            json={"kind": TEST_KIND, "input": remote.input(), "model": script},
            headers={"Authorization": f"Bearer {TOKEN['fuzz']}"},
        )
        assert answer.status_code == 422, answer.text
        assert answer.json() == {"code": "configuration_error", "message": said}
        argv = ("submit", TEST_KIND, "--model", script)
        there = Cli({**remote.env(), "TICKWORK_SERVER": served.url}, remote.deployment.tmp)
        here = Cli(env, remote.deployment.tmp)
        assert there.inline(*argv, ok=False).error(2) == here.inline(*argv, ok=False).error(2)
        assert there.inline(*argv, ok=False).error(2) == f"error: {said}"
    finally:
        served.stop()


def test_every_refusal_of_the_server_s_settings_is_said_in_their_words() -> None:
    """`SETTINGS_CODES` holds the API's code of each kind of ConfigurationError."""
    from tickwork.fsm import errors

    from tickwork.api.errors import snake

    kinds = [
        found
        for found in vars(errors).values()
        if isinstance(found, type) and issubclass(found, errors.ConfigurationError)
    ]
    assert {snake(kind.__name__) for kind in kinds} == SETTINGS_CODES


def test_a_budget_or_a_source_refused_is_named_by_its_flag_locally_and_with_a_server(
    cli: ModeCli,
) -> None:
    """The client's checks name the API's fields (`max_steps`, `workspace`): the command
    line said "max_steps must be ..." to a user who typed --max-steps, locally and in the
    server's 422 alike. It names the flag, the API its field."""
    script = cli.remote.deployment.script([{"content": "done"}])
    folder = str(cli.remote.deployment.tmp)
    submit = ("submit", "repair", "--test-cmd", "true", "--model", script, "--workspace", folder)
    for given, said in (
        (("--max-steps", "0"), "invalid budget: --max-steps must be a positive finite number"),
        (("--deadline", "-1"), "invalid budget: --deadline must be a positive finite number"),
        (("--max-tokens", str(2**60)), "invalid budget: --max-tokens must be at most"),
        (("--repo", folder), "give either --repo (with --ref) or --workspace, not both"),
    ):
        line = cli.inline(*submit, *given, ok=False).error(2, said)
        assert "max_" not in line and "deadline_s" not in line and "`" not in line, line
    with cli.remote.client() as client, pytest.raises(RemoteError) as refused:
        client.submit(
            "repair",
            {"workspace": folder, "test_command": "true"},
            model=script,
            budgets={"max_steps": 0},
        )
    assert refused.value.status == 422 and "`max_steps` must be" in refused.value.message


def test_a_fork_keeps_the_original_s_priority_and_concurrency_key_unless_given(
    remote: Remote, cli: ModeCli
) -> None:
    """`fork` and `dlq fork` made forks of priority 0 and no concurrency key, whatever the
    original's; they keep them, or take --priority, --concurrency-key, --max-per-key."""
    key = f"github.com/org/repo-{cli.mode}"
    admission = ("--priority", "4", "--concurrency-key", key, "--max-per-key", "3")
    script = remote.script([{"content": "done"}])
    submit = ("submit", TEST_KIND, "--model", script, *admission, "--json")
    sid = cli.inline(*submit).json()["id"]
    remote.wait(sid, Status.COMPLETED)

    kept = cli.inline("fork", sid, "--from-step", "0", "--json").json()

    assert (kept["priority"], kept["concurrency_key"], kept["max_per_key"]) == (4, key, 3)
    given = ("--priority", "-1", "--concurrency-key", "other", "--json")
    changed = cli.inline("fork", sid, "--from-step", "0", *given).json()
    assert (changed["priority"], changed["concurrency_key"], changed["max_per_key"]) == (
        -1,
        "other",
        1,
    )
    shown = cli.inline("show", changed["id"]).stdout
    assert "priority: -1" in shown and "concurrency key: other" in shown
    for bad, said in (
        (("--priority", "5000"), "--priority 5000 is out of bounds"),
        (("--concurrency-key", ""), "the concurrency key (--concurrency-key) is empty"),
        (("--max-per-key", "0"), "--max-per-key 0 is out of bounds"),
    ):
        cli.inline("fork", sid, "--from-step", "0", *bad, ok=False).error(2, said)
        cli.inline("dlq", "fork", sid, "--from-step", "0", *bad, ok=False).error(2, said)


def test_fork_and_dlq_fork_take_a_price_checked_as_a_submit_s(remote: Remote, cli: ModeCli) -> None:
    """A fork onto a model the deployment has no price for could not be priced but by
    TICKWORK_PRICES (or no cost budget); `fork` and `dlq fork` take --price, checked as a
    submit's --price, locally and with a server, and a refused one stores no fork."""
    client = remote.deployment.client
    done = remote.script([{"content": "done"}])
    fails = remote.script(
        [{"content": "look", "tool_calls": [call("echo", text="1")]}, {"content": "fixed"}]
    )
    sid = cli.inline("submit", TEST_KIND, "--model", done, "--json").json()["id"]
    failed = client.submit(TEST_KIND, remote.input(), model=fails, budgets={"max_steps": 1}).id
    remote.wait(sid, Status.COMPLETED)
    remote.wait(failed, Status.FAILED)
    other = remote.script([{"content": "done on the other"}])

    forked = cli.inline("fork", sid, "--from-step", "0", "--model", other, "--price", "1,2")
    assert client.get(forked.stdout.strip()).config["price"] == {"prompt": 1, "completion": 2}
    dlq = ("dlq", "fork", failed, "--from-step", "1", "--max-steps", "5", "--price", "3,4,0.5")
    fork = cli.inline(*dlq, "--json").json()
    assert client.get(fork["id"]).config["price"] == {"prompt": 3, "completion": 4, "cached": 0.5}

    before = len(client.forks(sid)), len(client.forks(failed))
    for fork_of in (("fork", sid), ("dlq", "fork", failed, "--again")):
        base = (*fork_of, "--from-step", "0")
        cli.inline(*base, "--price", "1", ok=False).error(
            2, "--price takes PROMPT,COMPLETION", "it has one number"
        )
        cli.inline(
            *base, "--model", "openai:gpt-4o-mini", "--price", "0.001,0.002", ok=False
        ).error(2, "the price given for model 'openai:gpt-4o-mini'", "below the configured price")
    if cli.mode == "remote":  # a caller over the API does not price a model the server has not
        cli.inline(
            "fork", sid, "--from-step", "0", "--model", "openai:other", "--price", "3,4", ok=False
        ).error(2, "a fork over the API may not price a model", "fork without --price")
    assert (len(client.forks(sid)), len(client.forks(failed))) == before


def test_every_submit_value_the_api_refuses_names_its_option_and_what_to_do(
    remote: Remote,
) -> None:
    """Through a server, a submit's value the API's body refuses was named by a guess at
    its option (`--price 0` for the prompt price), in pydantic's words ("Value error, ..."),
    and a text the whole body refused read "invalid Submit: body.input.goal ...". Each
    names the option given and what to give instead; none is sent."""
    served = ModeCli(remote, "remote").cli
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    submit = ("submit", TEST_KIND, "--model", "scripted:x.json")
    for argv, fragments in (
        (("submit", "k" * 201), ("invalid KIND: it is 201 characters long; at most 200 ", "kind")),
        (("submit", ""), ("invalid KIND: it is empty", "give the name of a job kind")),
        (("submit", TEST_KIND, "--model", "m" * 501), ("invalid --model: it is 501 characters",)),
        ((*submit, "--id", "-bad"), ("invalid --id: session id '-bad' may only hold",)),
        ((*submit, "--id", "i" * 65), ("invalid --id: it is 65 characters", "leave --id out")),
        (
            (*submit, "--price", "-1,2"),
            ("--price takes PROMPT,COMPLETION", "PROMPT '-1' is below 0"),
        ),
        ((*submit, "--price", "1,inf"), ("COMPLETION 'inf' is not a finite number",)),
        ((*submit, "--price", "1,2e6"), ("COMPLETION '2e6' is above 1,000,000",)),
        ((*submit, "--price", "1,2,0.1,-1"), ("CACHE_WRITE '-1' is below 0",)),
        ((*submit, "--price", "1,2,0.1,1.25,9"), ("it has 5 numbers",)),
        ((*submit, "--context-window", "5"), ("--context-window must be between 1,024 and",)),
        ((*submit, "--tenant", "Bad Tenant"), ("--tenant 'Bad Tenant' is not a tenant name",)),
        ((*submit, "--priority", "5000"), ("--priority 5000 is out of bounds",)),
        ((*submit, "--max-per-key", "0"), ("--max-per-key 0 is out of bounds",)),
        (("submit", "repair", "--goal", "g" * 20_001), ("invalid --goal: it is 20001 characters",)),
        (("submit", "repair", "--goal", "a\udcffb"), ("invalid --goal: it is not valid UTF-8",)),
        ((*submit, "--input", '{"note": "a\\udcffb"}'), ("invalid --input's note: it is not",)),
        ((*submit, "--input", json.dumps({"a": deep})), ("--input's a: it is nested deeper",)),
        ((*submit, "--input", json.dumps({"a": "x" * 70_000})), ("at most 65536", "smaller")),
    ):
        said = served.inline(*argv, ok=False).error(2, *fragments)
        assert "Submit" not in said and "Value error" not in said and "body." not in said, said


def test_a_rate_of_the_price_the_api_refuses_is_named_by_its_place() -> None:
    """The API's body names a refused rate by its index (price.3); the refusal before a
    --server request names the rate and its place in --price, from `PRICE_RATES`."""
    from tickwork.cli_remote import refusal

    for at, kind, bound, given, said in (
        (0, "greater_than_equal", {"ge": 0}, -1, "the prompt price (the first) must be at least"),
        (1, "less_than_equal", {"le": 1e6}, 2e6, "the completion price (the second) must be at"),
        (2, "finite_number", {}, "nan", "the cached price (the third) must be a finite number"),
        (3, "greater_than_equal", {"ge": 0}, -1, "the cache-write price (the fourth) must be"),
    ):
        error = {"loc": ("price", at), "type": kind, "ctx": bound, "input": given, "msg": "?"}
        assert (refusal("Submit", error) or "").startswith(f"invalid --price: {said}")


def test_a_refused_field_is_named_by_the_option_that_gives_it() -> None:
    """A field whose option is not its name: `tool_outputs` is --tool-output, as
    `tickwork.flags.FLAG_OF` says it, and a tool's `arguments` is --args."""
    from pydantic import ValidationError

    from tickwork.api.bodies import MAX_ENTRIES, Fork
    from tickwork.cli_remote import refusal

    outputs = {f"s1c{n}": "x" for n in range(MAX_ENTRIES + 1)}
    with pytest.raises(ValidationError) as refused:
        Fork.model_validate({"from_step": 1, "tool_outputs": outputs})
    said = refusal("Fork", refused.value.errors()[0]) or ""
    assert said.startswith("invalid --tool-output: "), said
    error = {"loc": ("arguments",), "type": "dict_type", "input": [], "msg": "not an object"}
    assert refusal("Decide", error) == "invalid --args: not an object"


def test_a_value_over_an_api_limit_names_the_option_and_the_limit(remote: Remote) -> None:
    """The API's body model refused it in its own words, naming the body's field: "invalid
    comment: String should have at most 10000 characters"; the option is named."""
    served = ModeCli(remote, "remote").cli
    decided = ("s-none", "s1c0", "--fingerprint", "a" * 64)
    for argv, option, limit in (
        (("approve", *decided, "--comment", "c" * 10_001), "--comment", "10000 characters"),
        (("reject", *decided, "--feedback", "f" * 100_001), "--feedback", "100000 characters"),
        (("dlq", "resolve", "1", "--reason", "r" * 2001), "--reason", "2000 characters"),
        (("fork", "s-none", "--from-step", "0", "--id", "i" * 65), "--id", "64 characters"),
    ):
        said = served.inline(*argv, ok=False).error(2, f"invalid {option}: ", limit)
        assert "invalid comment" not in said and "invalid feedback" not in said, said


def test_a_misspelt_kind_is_refused_in_the_same_words_with_a_server(cli: ModeCli) -> None:
    """With a server `ls --kind NOSUCH` printed "no sessions match" (exit 0) where the local
    CLI refuses a kind no session has and this deployment has not."""
    cli.inline("ls", "--kind", "nosuch", ok=False).error(
        2, "unknown job kind 'nosuch': no session has it", "known: ", "repair"
    )
    cli.inline("ls", "--kind", "repair", "--status", "cancelled", "--limit", "1")


def test_with_a_server_other_commands_refuse_and_names_come_from_the_token(
    remote: Remote,
) -> None:
    served = ModeCli(remote, "remote").cli
    for argv, fragment in (
        (("gc", "--dry-run"), "`tickwork gc` is not served by the HTTP API"),
        (("worker",), "`tickwork worker` is not served"),
        (("db", "current"), "`tickwork db current` is not served"),
        (("env", "ls"), "`tickwork env ls` is not served"),
        (("dlq", "stats", "--recount"), "--recount` is not served"),
        (("patch", "x", "--bundle", "/tmp/x.bundle"), "--bundle` is not served"),
        (("submit", TEST_KIND, "--as", "mallory"), "--as does not go with --server"),
        (("cancel", "x", "--as", "mallory"), "--as does not go with --server"),
    ):
        then = "TICKWORK_TOKEN" if "--as" in argv else "without --server"
        served.inline(*argv, ok=False).error(2, fragment, then)
    # --server on the command line names the server as TICKWORK_SERVER does
    env = {k: v for k, v in remote.env().items() if k != "TICKWORK_SERVER"}
    flagged = Cli(env, remote.deployment.tmp)
    assert flagged.inline("--server", remote.url, "ls", "--json").code == 0
    flagged.inline("ls", "--server", remote.url, ok=False).error(
        2, "No such option: --server", "tickwork --server URL COMMAND"
    )
    nowhere = flagged.inline("--server", "http://127.0.0.1:9", "ls", ok=False)
    nowhere.error(1, "cannot reach the tickwork server at http://127.0.0.1:9", "TICKWORK_SERVER")
    no_token = Cli({**remote.env(), "TICKWORK_TOKEN": ""}, remote.deployment.tmp)
    no_token.inline("ls", ok=False).error(2, "TICKWORK_TOKEN")
    bad_token = Cli({**remote.env(), "TICKWORK_TOKEN": "x" * 20}, remote.deployment.tmp)
    bad_token.inline("ls", ok=False).error(1, "token")
    wrong_role = Cli(remote.env("sam"), remote.deployment.tmp)
    wrong_role.inline("cancel", "whatever", ok=False).error(1, "role")


def test_a_repair_shown_approved_and_patched_through_the_server(remote: Remote) -> None:
    from tests.tasks.test_repair import WRITE, submit_demo

    local, served = ModeCli(remote, "local"), ModeCli(remote, "remote")
    session_id, workspace = submit_demo(remote.deployment)
    waiting = served.inline("show", session_id).stdout
    assert waiting == local.inline("show", session_id).stdout
    assert f"{WRITE} write_file calc.py: against the session's current file" in waiting
    approved = served.inline("approve", session_id, WRITE, "--comment", "looks right").stdout
    assert f"approved {WRITE} of {session_id} as fuzz" in approved
    assert remote.wait(session_id) is Status.COMPLETED
    patch = served.inline("patch", session_id).stdout
    assert patch == local.inline("patch", session_id).stdout and "calc.py" in patch
    applied = served.inline("patch", session_id, "--apply", str(workspace)).stdout
    assert applied.strip() and "len(numbers) + 1" not in (workspace / "calc.py").read_text()


def _without_fork_status(shown: dict[str, Any]) -> dict[str, Any]:
    """A dead letter as `dlq show --json` prints it, its forks' statuses left out."""
    forks = [{k: v for k, v in fork.items() if k != "status"} for fork in shown["forks"]]
    return {**shown, "forks": forks}


def test_a_start_of_an_id_names_one_session_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """Every command of one session takes a unique start of its id, 6 characters or more,
    with a server as locally, and refuses one too short, one no id has, or one that starts
    several ids (naming them) in the same words."""
    # a letter first: digits only name a dead letter's number, never an id's start (dlq)
    start = "d" + uuid.uuid4().hex[:7]
    client = remote.deployment.client
    script = remote.script([{"content": "risky", "tool_calls": DANGERS}, {"content": "all done"}])
    fails = remote.script(
        [{"content": "look", "tool_calls": [call("echo", text="1")]}, {"content": "fixed"}]
    )

    def made(tail: str, **kw: Any) -> str:
        given = f"{start}{tail}-{cli.mode}"
        return client.submit(TEST_KIND, remote.input(), session_id=given, **kw).id

    waiting = made("0", model=script)
    twins = sorted(made(f"1{c}", model=script) for c in "ab")
    failed = made("2", model=fails, budgets={"max_steps": 1})
    for session_id in (waiting, *twins):
        remote.wait(session_id, Status.WAITING_APPROVAL)
    remote.wait(failed, Status.FAILED)

    assert cli.inline("show", f"{start}0", "--json").json()["head"]["id"] == waiting
    assert cli.inline("watch", f"{start}0", "--json").json()["head"]["id"] == waiting
    cli.inline("show", f"{start}1", ok=False).error(
        2, f"'{start}1' is the start of 2 session ids ({', '.join(twins)}); give more characters"
    )
    cli.inline("cancel", start[:5], ok=False).error(
        1, f"no session '{start[:5]}' (give at least 6 characters to name one by its id's start)"
    )
    cli.inline("approve", f"{start}f", "s1c0", ok=False).error(
        1, f"no session '{start}f', and no session id starts with it"
    )

    approved = cli.inline("approve", f"{start}0", "s1c0", "--as", "alice").stdout
    assert f"approved s1c0 of {waiting} as alice" in approved
    cli.inline("edit", f"{start}0", "s1c1", "--args", '{"value": "B"}', "--as", "bob")
    cli.inline("reject", f"{start}0", "s1c2", "--feedback", "not c", "--as", "carol")
    remote.wait(waiting, Status.COMPLETED)
    forked = cli.inline("fork", f"{start}0", "--from-step", "1", "--as", "frank", "--json").json()
    assert forked["parent_id"] == waiting
    cancelled = cli.inline("cancel", twins[0][: len(start) + 2], "--as", "dave", "--json").json()
    assert (cancelled["id"], cancelled["status"]) == (twins[0], "cancelled")

    assert cli.inline("dlq", "show", f"{start}2", "--json").json()["session_id"] == failed
    cli.inline("dlq", "show", f"{start}1", ok=False).error(2, f"'{start}1' is the start of 2")
    closed = cli.inline("dlq", "resolve", f"{start}2", "--reason", "seen", "--json").json()
    assert closed["session_id"] == failed and closed["resolution"]["state"] == "resolved"


def test_show_of_no_session_says_what_to_do_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """`show nothere` said less with a server ("no session 'nothere'; list sessions with
    `tickwork ls`") than locally: with a server it says that no id starts with it, or that
    no id has a character given, and where it asked, as a local command says where it
    looked."""
    local = cli.mode == "local"
    shown = cli.inline("show", "nothere", ok=False).error(
        1, "no session 'nothere', and no session id starts with it", "; list sessions with"
    )
    odd = cli.inline("show", "no such", ok=False).error(1, "no session 'no such'")
    said = ", and no session id starts with it" if local else "no session id has that character"
    assert said in odd, odd
    start = "c0ffee" + uuid.uuid4().hex[:6]
    none = cli.inline("show", start, ok=False).error(
        1, f"no session '{start}', and no session id starts with it; list sessions with"
    )
    for message in (shown, odd, none):
        asked = "(asked the server --server or TICKWORK_SERVER names" in message
        assert asked is not local, message
        assert local or "An archived session is named by its whole id" in message


def test_a_whole_uuid_of_no_session_is_no_session_once(remote: Remote, cli: ModeCli) -> None:
    """A whole uuid that is no session's id is "no session '<id>'" (exit 1), said once
    for each command: asked for whole, then looked for once as the start of a custom id,
    before the command asks anything more (`watch` does not poll, `approve` decides
    nothing): the server's 404 says the id is no archived session's either."""
    given = uuid.uuid4().hex
    argvs = (("approve", given, "s1c0"), ("cancel", given), ("watch", given), ("show", given))
    for argv in argvs:
        cli.inline(*argv, ok=False).error(
            1, f"no session '{given}', and no session id starts with it; list sessions"
        )
    if cli.mode == "remote":
        # the access log is written as the server answers: wait for each refusal's look-up
        until(
            lambda: remote.served.log.read_text().count(f"id_prefix={given}&") >= len(argvs),
            timeout=10,
            what="the server's access log",
        )
        asked = [line for line in remote.served.log.read_text().splitlines() if given in line]
        whole = f"GET /api/v1/sessions/{given}/events?limit=1 "
        assert sum(whole in line for line in asked) == len(argvs), asked
        assert sum(f"id_prefix={given}&" in line for line in asked) == len(argvs), asked
        assert len(asked) == 2 * len(argvs), asked  # nothing more than those two each


def test_with_a_server_a_whole_id_is_asked_for_without_a_listing(remote: Remote) -> None:
    """A command given a session's whole id (a uuid, as tickwork makes them or written with
    its dashes) asks the server for that session at once; only a start of one is looked up
    in the listing first (`GET /api/v1/sessions?id_prefix=`, in the server's access log)."""
    cli = ModeCli(remote, "remote")
    client = remote.deployment.client
    done = remote.script([{"content": "all done"}])
    made = client.submit(TEST_KIND, remote.input(), model=done).id
    dashed = client.submit(TEST_KIND, remote.input(), model=done, session_id=str(uuid.uuid4())).id
    for whole in (made, dashed):
        remote.wait(whole)
        assert cli.inline("show", whole, "--json").json()["head"]["id"] == whole
        assert cli.inline("watch", whole, "--json").json()["head"]["id"] == whole
    start = made[:12]
    assert cli.inline("show", start, "--json").json()["head"]["id"] == made
    asked = remote.served.log.read_text()
    assert f"GET /api/v1/sessions?id_prefix={start}&" in asked
    assert f"id_prefix={made}" not in asked and f"id_prefix={dashed}" not in asked


def test_a_repeated_cancel_says_it_was_requested_already_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """A cancel of a session whose tick a worker holds waits for its next tick; asked
    again, the command says the cancel was requested already, and `ls` and `show` say
    `(cancelling)` until the tick ends it."""
    script = remote.script([{"content": "done", "delay_s": 10}])
    sid = cli.inline("submit", TEST_KIND, "--input", "{}", "--model", script).stdout.strip()
    until(
        lambda: remote.deployment.client.store.lease(sid) is not None,
        timeout=60,
        what="a worker to take the session's tick",
    )
    first = cli.inline("cancel", sid, "--as", "dave").stdout
    assert first == f"cancel requested for {sid}; it stops at its next tick\n"
    again = cli.inline("cancel", sid, "--as", "dave").stdout
    assert again == f"cancel already requested for {sid}; it stops at its next tick\n"
    (row,) = [ln for ln in cli.inline("ls", "--limit", "500").stdout.splitlines() if sid in ln]
    assert "ready (cancelling)" in row, row
    shown = cli.inline("show", sid).stdout
    assert "requested: it stops at its next tick, which a worker runs" in shown, shown
    assert remote.wait(sid) is Status.CANCELLED


def test_a_submit_whose_model_lacks_its_key_notes_it_only_where_the_key_is_looked_for(
    remote: Remote, cli: ModeCli
) -> None:
    """Locally, a submit whose model this process has no API key for notes that the
    workers need one. With a server, this machine's keys are not the server's workers':
    the submit says nothing of them, and the session is stored all the same."""
    submit = ("submit", TEST_KIND, "--input", "{}", "--model", "openai:gpt-4o-mini")
    noted = cli.inline(*submit, ok=False)
    sid = noted.stdout.strip()
    assert noted.code == 0 and len(sid.split()) == 1, noted
    # no worker may call the model: the session ends cancelled, no dead letter left
    cli.inline("cancel", sid, ok=False)
    if cli.mode == "remote":
        assert noted.stderr == "", noted
    else:
        (line,) = noted.stderr.splitlines()
        assert line.startswith("note: model 'openai:gpt-4o-mini' needs an API key"), line
        assert "the workers that run the session need one, or it fails MODEL_ERROR" in line
    assert remote.deployment.client.get(sid).model == "openai:gpt-4o-mini"
    remote.wait(sid)


def test_a_watch_with_a_server_rides_out_a_restart_as_the_client_s_watch_does(
    remote: Remote,
) -> None:
    """`tickwork --server URL watch` that loses the server mid-watch (a restart, a deploy)
    says so on standard error and asks again, as the remote client's `watch` does, rather
    than end at the first refused poll; it then prints what came meanwhile and ends as
    locally."""
    script = remote.script([{"content": "done after a while", "delay_s": 6}])
    sid = (
        ModeCli(remote, "remote")
        .inline("submit", TEST_KIND, "--input", "{}", "--model", script)
        .stdout.strip()
    )
    watching, log = Cli(remote.env(), remote.deployment.tmp).start("watch", sid, "--timeout", "120")
    try:
        until(lambda: "created" in log.read_text(), timeout=60, what="the watch's first events")
        remote.served.stop()
        try:
            assert remote.wait(sid) is Status.COMPLETED
        finally:
            remote.served.start()
        assert watching.wait(90) == 0, log.read_text()
    finally:
        if watching.poll() is None:
            watching.kill()
    said = log.read_text()
    assert "note: the server stopped answering; trying again for up to 60s" in said, said
    assert "note: the server answers again" in said, said
    assert "model_called" in said and f"session {sid} is completed" in said, said


def test_watch_left_at_waiting_children_draws_the_tree_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """A parent waiting for its children has neither ended nor asked a person: `watch`
    draws its tree and says to follow a child, remotely as locally."""
    sink = str(remote.deployment.sink)
    slow = remote.script([{"content": "slow", "delay_s": 30}])
    child = {"role": "explorer", "input": {"task": "x", "sink": sink}, "model": slow}
    spawn = {"name": "spawn_agents", "arguments": {"children": [child]}}
    script = remote.script([{"content": "split", "tool_calls": [spawn]}, {"content": "done"}])
    root = cli(
        "submit", "tests.jobs:TREE", "--input", json.dumps({"sink": sink}), "--model", script
    ).stdout.strip()
    watched = cli("watch", root, "--timeout", "60")
    [spawned] = remote.deployment.client.store.children(root)
    said = " ".join(watched.stdout.split())
    assert f"session {root} is waiting_children" in said, said
    assert spawned.id in said and "explorer" in said  # the tree, drawn
    assert "`tickwork watch CHILD` follows one" in said
    remote.deployment.client.cancel(root)


#: the remote CLI's refusals made before or without a server's answer, as a user meets
#: them: (argv, environment, exit code, what docs/REMOTE.md's row of that code says)
BEFORE_ANY_ANSWER = [
    (("ls",), {"TICKWORK_SERVER": "http://127.0.0.1:1"}, 2, "no `TICKWORK_TOKEN`"),
    (("--server", "notaurl", "ls"), {"TICKWORK_TOKEN": "t" * 20}, 2, "no http:// or https://"),
    (
        ("--server", "http://127.0.0.1:1", "ls"),
        {"TICKWORK_TOKEN": "t" * 20, "TICKWORK_SERVER_TIMEOUT_S": "soon"},
        2,
        "`TICKWORK_SERVER_TIMEOUT_S` that is no number",
    ),
    (("--server", "http://127.0.0.1:1", "gc"), {}, 2, "a command the API does not serve"),
    (
        ("--server", "http://127.0.0.1:1", "ls", "--status", "bogus"),
        {"TICKWORK_TOKEN": "t" * 20},
        2,
        "a malformed value",
    ),
    (("--server", "http://127.0.0.1:1", "ls"), {"TICKWORK_TOKEN": "t" * 20}, 1, "no server"),
]


@pytest.mark.parametrize(("argv", "env", "code", "row"), BEFORE_ANY_ANSWER)
def test_the_remote_cli_exits_with_the_code_docs_remote_md_gives(
    tmp_path: Path, argv: tuple[str, ...], env: dict[str, str], code: int, row: str
) -> None:
    """docs/REMOTE.md said "2 for bad input (422, 413, 400), 1 for the rest (... no
    server)": a missing TICKWORK_TOKEN exits 2, unsaid. Its table of exit codes says, in
    the row of the code each exits with, why."""
    said = Cli(env, tmp_path).inline(*argv, ok=False).error(code)
    doc = (Path(__file__).parents[2] / "docs" / "REMOTE.md").read_text()
    rows = {
        line.split("|")[1].strip(): line
        for line in doc.split("the exit code says whose they are", 1)[1].splitlines()
        if line.startswith("| ")
    }
    assert row in rows[str(code)], (said, rows)


def test_ls_archived_lists_the_archived_sessions_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """`ls --archived` was refused with a server (the API listed no archived session); it
    lists them from the server's `GET /sessions?archived=true`, as locally."""
    from tickwork.store.retention import Policy, archive_pass

    from tickwork.testing.store_ticks import LEASE_S, Clock, new_session, reply, think_change

    client, clock = remote.deployment.client, Clock()
    store = client.store
    session_id = f"archived-{cli.mode}-{uuid.uuid4().hex[:8]}"
    store.create(new_session(session_id, now=clock()), now=clock())
    # the lease by the wall clock: the server's relay revived a lease taken by the test's
    # clock (long expired) between the claim and the save, and the save was refused
    claimed = store.claim(session_id, 0, owner="worker-1", now=datetime.now(UTC), lease_s=LEASE_S)
    assert claimed is not None
    done = think_change(claimed, reply(content="done"), now=clock())
    assert store.save(done, version=0, owner="worker-1", now=clock()).status.terminal
    # completed long ago (by this clock): the pass archives it, and no other test's session
    archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    listed = cli.inline("ls", "--archived", "--status", "completed", "--json").json()
    [row] = [r for r in listed if r["id"] == session_id]
    assert (row["status"], row["kind"], row["parent_id"]) == ("completed", "repair", None)
    # the same row either way: who submitted it, its dates in UTC as `...Z`
    assert "submitted_by" in row and row["archived_at"].endswith("Z"), row
    assert session_id in cli.inline("ls", "--archived", "--limit", "500").stdout
    cli.inline("ls", "--archived", "--error-code", "LOOP", ok=False).error(2, "--archived")
    # was ignored: every archived session listed as one of that outcome (the API refuses it)
    refused = cli.inline("ls", "--archived", "--outcome", "repaired", ok=False)
    refused.error(2, "--outcome does not go with --archived", "--status completed")


def test_ls_archived_refuses_tree_in_both_modes(cli: ModeCli) -> None:
    """`ls --archived --tree` listed the archived sessions and ignored --tree (no tree of
    an archived session is drawn): refused, locally and with a server alike."""
    refused = cli.inline("ls", "--archived", "--tree", "--json", ok=False)
    refused.error(2, "--tree does not go with --archived", "without --tree", "drop --archived")
    assert refused.stdout == ""


#: every command that takes a session's id, or a dead letter's (argv, what it names)
ID_TAKERS = [
    (("show", "{id}"), "a session id"),
    (("watch", "{id}"), "a session id"),
    (("fork", "{id}", "--from-step", "1"), "a session id"),
    (("patch", "{id}"), "a session id"),
    (("approve", "{id}", "c1"), "a session id"),
    (("edit", "{id}", "c1", "--args", "{}"), "a session id"),
    (("reject", "{id}", "c1"), "a session id"),
    (("provide-output", "{id}", "c1", "--output", "x"), "a session id"),
    (("cancel", "{id}"), "a session id"),
    (("dlq", "show", "{id}"), "a dead letter's id or session id"),
    (("dlq", "fork", "{id}", "--from-step", "1"), "a dead letter's id or session id"),
    (("dlq", "resolve", "{id}", "--reason", "fixed"), "a dead letter's id or session id"),
    (("dlq", "dismiss", "{id}", "--reason", "noise"), "a dead letter's id or session id"),
]


@pytest.mark.parametrize(("argv", "one"), ID_TAKERS, ids=[" ".join(a[:2]) for a, _ in ID_TAKERS])
def test_an_id_longer_than_any_is_refused_in_the_same_words_in_both_modes(
    cli: ModeCli, argv: tuple[str, ...], one: str
) -> None:
    """The dlq commands sent an over-long id to the server, whose 422 said `path.key:
    String should have at most 64 characters`; locally it was `no dead letter has id or
    session id` quoting all of it (exit 1). Each says what `show` says, before any request."""
    given = "x" * 65
    refused = cli.inline(*(a.replace("{id}", given) for a in argv), ok=False)
    line = refused.error(2, f"is 65 characters long, not {one} (at most 64); list ")
    assert given not in line, "quoted whole"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("i" * 65, "it is 65 characters long; at most 64 characters are taken; give a shorter id"),
        ("a b", "session id 'a b' may only hold letters, digits, '_', '-' and '.', up to 64"),
        ("", "it is empty; give an id, or leave --id out for a random one"),
        ("a\n", "session id 'a\\n' may only hold letters, digits, '_', '-' and '.', up to 64"),
    ],
    ids=["long", "spaced", "empty", "newline"],
)
def test_a_bad_new_id_is_refused_in_the_same_words_in_both_modes(
    cli: ModeCli, given: str, said: str
) -> None:
    """A new session's --id the API refuses was said in the remote CLI's words with a
    server, and locally as `session id '<all of it>' may only hold letters, ...` (a long
    one quoted whole, said to hold wrong characters). Both say the remote CLI's line."""
    for argv in (
        ("submit", TEST_KIND, "--model", "scripted:x.json", "--id", given),
        ("fork", "nope", "--from-step", "0", "--id", given),
        ("dlq", "fork", "98765", "--from-step", "0", "--id", given),
    ):
        line = cli.inline(*argv, ok=False).error(2, f"invalid --id: {said}")
        assert len(line) < 300, line


#: an option of a command naming a session refused with --server, as the command's own
#: check words it: (argv after the server, what the refusal names)
REFUSED_OPTIONS = [
    (("cancel", "abcdef", "--as", "bob"), "--as does not go with --server"),
    (("approve", "abcdef", "c1", "--as", "bob"), "--as does not go with --server"),
    (("approve", "abcdef", "c1", "--fingerprint", "zz"), "--fingerprint"),
    (("edit", "abcdef", "c1", "--args", "[1]"), "--args"),
    (("reject", "abcdef", "c1", "--fingerprint", "zz"), "--fingerprint"),
    (("provide-output", "abcdef", "c1"), "--output TEXT or --output-file PATH"),
    (("fork", "abcdef", "--from-step", "1", "--as", "bob"), "--as does not go with --server"),
    (("fork", "abcdef", "--from-step", "1", "--price", "x"), "--price"),
    (("dlq", "fork", "abcdef", "--from-step", "1", "--as", "bob"), "--as does not go with"),
    (("patch", "abcdef", "--bundle", "x.bundle"), "--bundle` is not served"),
    (("show", "abcdef", "--tenant", "team-a"), "--tenant goes with the local mode"),
]


@pytest.mark.parametrize(("argv", "fragment"), REFUSED_OPTIONS)
def test_an_option_refused_with_a_server_is_refused_before_the_id_is_looked_up(
    tmp_path: Path, argv: tuple[str, ...], fragment: str
) -> None:
    """The start of a session's id was looked up on the server before the command checked
    its options: with no server there, `cancel abcdef --as bob` said "cannot reach" (exit
    1), not that --as does not go with --server (exit 2); with one, the refusal cost a
    request. A server that does not answer shows that none is asked."""
    env = {"TICKWORK_TOKEN": "t" * 20}
    said = Cli(env, tmp_path).inline("--server", "http://127.0.0.1:1", *argv, ok=False)
    said.error(2, fragment)


def test_a_custom_id_is_named_by_its_start_with_a_server_as_locally(
    remote: Remote, cli: ModeCli
) -> None:
    """A custom id (`submit --id job_1.v2`) was named by its start locally only: the API's
    `id_prefix` took hex digits and '-', so with a server `show job_1.v` said to give the id
    whole. It takes every character an id may hold; '_' is no wildcard in its look-up."""
    tail = uuid.uuid4().hex[:6]
    script = remote.script([{"content": "all done"}])
    client = remote.deployment.client
    mine = client.submit(
        TEST_KIND, remote.input(), session_id=f"job_{tail}.v2-{cli.mode}", model=script
    ).id
    # what `job_...` would match if '_' were LIKE's any character
    client.submit(TEST_KIND, remote.input(), session_id=f"jobX{tail}.v2-{cli.mode}", model=script)
    assert cli.inline("show", f"job_{tail}.v", "--json").json()["head"]["id"] == mine
    cli.inline("show", f"job_{tail}!", ok=False).error(1, f"no session 'job_{tail}!'")


def test_a_decision_by_a_token_of_no_role_says_it_needs_the_approver_role(
    remote: Remote,
) -> None:
    """`tickwork approve|edit|reject` with a token of no role said "reading needs a role"
    (the session's id is looked up first, a read): a decision needs the approver role,
    whether the session is named whole or by a start, with a fingerprint or without."""
    script = remote.script([{"content": "risky", "tool_calls": DANGERS}, {"content": "done"}])
    sid = remote.deployment.client.submit(TEST_KIND, remote.input(), model=script).id
    remote.wait(sid, Status.WAITING_APPROVAL)
    nobody = Cli(remote.env("nobody"), remote.deployment.tmp)
    for given in (sid, sid[:8]):
        for decision in (
            ("approve", given, "s1c0"),
            ("approve", given, "s1c0", "--fingerprint", "0" * 64),
            ("edit", given, "s1c1", "--args", '{"value": "B"}'),
            ("reject", given, "s1c2", "--feedback", "no"),
        ):
            said = nobody.inline(*decision, ok=False).error(
                1, "nobody holds no role; this needs the approver role"
            )
            assert "reading" not in said, (decision, said)
        nobody.inline("cancel", given, ok=False).error(
            1, "nobody holds no role; this needs the approver or operator role"
        )
    assert remote.deployment.client.load(sid).head.status is Status.WAITING_APPROVAL


def test_a_fork_or_dead_letter_action_by_a_token_of_no_role_says_it_needs_the_operator_role(
    remote: Remote,
) -> None:
    """`tickwork fork` with a token of no role said "reading needs a role" (the session's
    id is looked up first, a read): a fork needs the operator role, as `dlq fork`, `dlq
    resolve` and `dlq dismiss` say. `patch` reads, and says reading needs a role."""
    (failed,) = _failed(remote, 1)
    nobody = Cli(remote.env("nobody"), remote.deployment.tmp)
    for given in (failed, failed[:8]):
        for action in (
            ("fork", given, "--from-step", "1", "--max-steps", "5"),
            ("dlq", "fork", given, "--from-step", "1", "--max-steps", "5"),
            ("dlq", "resolve", given, "--reason", "fixed upstream"),
            ("dlq", "dismiss", given, "--reason", "a test run"),
        ):
            said = nobody.inline(*action, ok=False).error(
                1, "nobody holds no role; this needs the operator role"
            )
            assert "reading" not in said, (action, said)
        nobody.inline("patch", given, ok=False).error(1, "nobody holds no role; reading needs")
    assert remote.deployment.client.dead_letter(failed).resolved_at is None
