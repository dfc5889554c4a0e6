"""Session commands: submit, ls, show, watch and fork."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from tickwork.fsm.admission import check_concurrency, check_priority
from tickwork.fsm.context import check_window
from tickwork.fsm.errors import (
    InvalidInput,
    MissingCredentials,
    SessionNotFound,
    TickworkError,
)
from tickwork.fsm.kinds import graph_of
from tickwork.fsm.outcomes import Outcome
from tickwork.fsm.tenants import DEFAULT_TENANT, UNLIMITED
from tickwork.fsm.values import Head, Session, Status

from . import cli_remote, options, render, views
from .context import Context

if TYPE_CHECKING:
    from tickwork.remote.client import Client
    from tickwork.worker.config.tenants import Tenants
    from tickwork.worker.jobs import Jobs
    from tickwork.worker.models import Providers

    from .reads import Reads

#: the input keys the repair options fill, as the repair kind reads them
REPAIR_INPUT = {
    "workspace": "workspace",
    "repo": "repo",
    "ref": "ref",
    "test_cmd": "test_command",
    "goal": "goal",
}
#: how often `watch` looks for new events
POLL_S = 0.1
#: how long a session waiting for a worker stands still before `show` and `watch` ask, when
#: no worker holds a sign of life on its database, whether one runs
STILL_S = 5.0


#: what a session's ID argument takes
ID_HELP = "The session id, or its first 6 characters or more if no other id starts with them."
#: a session id, or a start of one, checked for its form only: each command looks it up
#: (`Reads.session_id`; with --server, `Client.session_id`, a request) after checking its
#: options, so that a refused option costs no request and is not hidden by an answer
SessionId = Annotated[str, typer.Argument(metavar="ID", help=ID_HELP, callback=options.session_id)]


def register(app: typer.Typer) -> None:
    app.command()(submit)
    app.command("ls")(list_sessions)
    app.command()(show)
    app.command()(watch)
    app.command()(fork)
    app.command()(patch)


def submit(
    kind: Annotated[str, typer.Argument(help="`repair`, or a job kind as module:attr.")],
    input: Annotated[
        str | None,
        typer.Option("--input", metavar="JSON", help="The job's input: a JSON object, or @FILE."),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            help="Repair: a project directory, packed at submit and never changed.",
            rich_help_panel="Repair",
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            metavar="URL_OR_PATH",
            help="Repair: a git repository to start from (any URL git clones).",
            rich_help_panel="Repair",
        ),
    ] = None,
    ref: Annotated[
        str | None,
        typer.Option(
            help="Repair: the branch, tag or commit of --repo.",
            show_default="HEAD",
            rich_help_panel="Repair",
        ),
    ] = None,
    test_cmd: Annotated[
        str | None,
        typer.Option(help="Repair: the command that runs the tests.", rich_help_panel="Repair"),
    ] = None,
    goal: Annotated[
        str | None, typer.Option(help="Repair: what to fix.", rich_help_panel="Repair")
    ] = None,
    setup: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CMD",
            help=(
                "Repair: how its environment (/env) is built: `auto` (from the project's "
                "packaging files), `none`, or a shell command (repeatable, run in order)."
            ),
            show_default="auto",
            rich_help_panel="Repair",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="SPEC",
            help="openai:MODEL, anthropic:MODEL, react:openai:MODEL or scripted:PATH.",
            show_default="$TICKWORK_MODEL",
        ),
    ] = None,
    price: options.Price = None,
    max_steps: options.MaxSteps = None,
    max_tokens: options.MaxTokens = None,
    max_cost_usd: options.MaxCostUsd = None,
    deadline: options.Deadline = None,
    context_window: options.ContextWindow = None,
    priority: options.Priority = 0,
    concurrency_key: options.ConcurrencyKey = None,
    max_per_key: options.MaxPerKey = None,
    session_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="The new session's id.",
            show_default="a random one",
            callback=options.new_session_id,
        ),
    ] = None,
    submitter: Annotated[
        str | None,
        typer.Option(
            "--as",
            metavar="NAME",
            help="Who submits it, recorded on the session.",
            show_default="$USER",
        ),
    ] = None,
    tenant: options.Tenant = None,
    json_output: options.Json = False,
) -> None:
    """Submit a session of job KIND; prints its id."""
    data = options.json_object(input, option="--input") if input is not None else {}
    given = {
        "workspace": str(workspace.expanduser().absolute()) if workspace else None,
        "repo": repo,
        "ref": ref,
        "test_cmd": test_cmd,
        "goal": goal,
    }
    for option, value in given.items():
        if value is not None:  # an option overrides its field, under either name the input takes
            data.pop(option, None)
            data[REPAIR_INPUT[option]] = value
    if setup:
        data["setup"] = setup[0] if setup in (["auto"], ["none"]) else list(setup)
    budgets = options.budgets(
        max_steps=max_steps, max_tokens=max_tokens, max_cost_usd=max_cost_usd, deadline=deadline
    )
    price_pair = options.price(price)
    # before a server is asked too (its body's refusal speaks pydantic), and before a local
    # submit makes the state folder's database: the client's own checks come after that
    check_priority(priority, what="--priority")
    check_concurrency(concurrency_key, max_per_key, **options.ADMISSION_FLAGS)
    if context_window is not None:
        check_window(context_window, what="--context-window")
    remote = cli_remote.client()
    if remote is not None:
        cli_remote.no_name(submitter)
        with remote:
            head = remote.submit(
                kind,
                data,
                model=model,
                budgets=budgets,
                session_id=session_id,
                price=price_pair,
                context_window=context_window,
                tenant=options.remote_tenant(tenant),
                priority=priority,
                concurrency_key=concurrency_key,
                max_per_key=max_per_key,
            )
        print_head(head, json_output, head.id)
        left_out_note(head)
        return
    by = options.approver(submitter, doing="submitting")
    with Context(creates=True) as ctx:
        head = ctx.client.submit(
            kind,
            data,
            model=options.model_spec(model, ctx.client.providers),
            budgets=budgets,
            session_id=session_id,
            price=price_pair,
            submitted_by=by,
            context_window=context_window,
            tenant=options.local_tenant(tenant) or DEFAULT_TENANT,
            priority=priority,
            concurrency_key=concurrency_key,
            max_per_key=max_per_key,
        )
        lacking = missing_credentials(head.model, ctx.client.providers)
        unheld = unlisted_tenant(ctx.client.tenants, head) if tenant is not None else None
    print_head(head, json_output, head.id)
    left_out_note(head)
    if unheld:
        render.note(unheld)
    if lacking:
        render.note(
            f"{lacking}. This process has no key; the workers that run the session need one, "
            "or it fails MODEL_ERROR once its retries are spent"
        )


def unlisted_tenant(tenants: Tenants, head: Head) -> str | None:
    """What to say of a session submitted into a tenant the tenants file does not name while
    its `*` sets no quota: stored, as documented, but held by no quota at all, which is what
    a mistyped `--tenant` (`tema-a` for `team-a`) silently gets."""
    table = tenants.table()
    if tenants.path is None or head.tenant in table.names or table.others != UNLIMITED:
        return None
    named = ", ".join(sorted(table.names)) or "no tenant"
    return (
        f"tenant {head.tenant} is not named in TICKWORK_TENANTS_FILE {tenants.path} (it names "
        f'{named}) and the file sets no quotas for the others ("*"): no quota holds session '
        f"{head.id}. If --tenant is mistyped, `tickwork cancel {head.id}` and submit it again"
    )


def missing_credentials(spec: str, providers: Providers) -> str:
    """What `spec`'s model lacks to be called from this process (its API key), "" if
    nothing: the session is stored anyway, since its workers may run elsewhere with the key."""
    from tickwork.worker.models import make_model

    try:
        make_model(spec, providers=providers)
    except MissingCredentials as exc:
        return exc.message
    return ""


def left_out_note(head: Head) -> None:
    """Say on stderr what the session's files leave out of what was named: what the
    workspace's .gitignore names (tests that need a generated `_version.py` fail), or the
    changes a local clone has not committed (the session starts from the commit)."""
    source = (head.config or {}).get("source")
    if not isinstance(source, dict):
        return
    if ignored := _some(source.get("gitignored"), "files or folders"):
        render.note(
            f"the workspace's .gitignore names {ignored}: they are left out, the session "
            "does not see them; if its tests need one, submit a copy whose .gitignore does "
            "not name it"
        )
    if changed := _some(source.get("uncommitted"), "files"):
        commit = str(source.get("commit"))[:12]
        render.note(
            f"the clone {source.get('url')} has uncommitted changes to {changed}: "
            f"the session starts from commit {commit} and does not see them; commit them "
            "and submit again, or submit the folder with --workspace"
        )


def _some(listed: Any, what: str) -> str:
    """`{"count": N, "first": [...]}` as "N of its `what` (a, b, …)", or ""."""
    if not isinstance(listed, dict) or not listed.get("count"):
        return ""
    first = ", ".join(str(p) for p in listed.get("first") or ())
    more = ", …" if listed["count"] > len(listed.get("first") or ()) else ""
    return f"{listed['count']} of its {what} ({first}{more})"


def _archived_rows(
    status: list[Status], kind: str | None, limit: int, tenant: str | None, *, json_output: bool
) -> list[dict[str, Any]]:
    """`ls --archived`'s rows, from the archive's index: the server's (GET
    /sessions?archived=true) with --server, else the database's."""
    remote = cli_remote.client()
    if remote is not None:
        with remote:
            found = remote.archived_sessions(
                status=status,
                kind=kind,
                tenant=options.remote_tenant(tenant, many=True),
                limit=limit,
            )
        return [a.model_dump(mode="json") for a in found]
    with Context() as ctx:
        chosen: dict[str, Any] = dict(status=[s.value for s in status], kind=kind, limit=limit)
        rows = ctx.reads.archived_sessions(**chosen, tenant=options.local_tenant(tenant, many=True))
        if kind is not None and not rows:
            options.check_kind(ctx, kind)
        if tenant is None and not json_output:
            everyone = ctx.store.retention.listing(**chosen, tenant=None)
            options.note_other_tenants("archived sessions", everyone, limit)
    return rows


def list_sessions(
    status: Annotated[
        list[Status] | None,
        typer.Option(help="Only sessions in this status (repeatable).", case_sensitive=False),
    ] = None,
    kind: Annotated[str | None, typer.Option(help="Only sessions of this job kind.")] = None,
    error_code: Annotated[
        str | None, options.error_code_option("Only failed sessions with this code")
    ] = None,
    outcome: Annotated[
        Outcome | None,
        typer.Option(
            help="Only finished repairs with this outcome: repaired, tests_failing, "
            "tests_not_run or no_changes.",
            case_sensitive=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=options.MAX_LIMIT, help="At most this many.")
    ] = 50,
    archived: Annotated[
        bool,
        typer.Option(
            "--archived",
            help="List the sessions retention archived instead, the latest archived first "
            "(from the archive's index: no archive is read; with --server, the server's).",
        ),
    ] = False,
    tenant: options.Tenant = None,
    tree: Annotated[
        bool,
        typer.Option(
            "--tree",
            help="Draw each listed session's tree of child sessions under it; children are "
            "not listed on their own. See docs/DESIGN.md section 16 "
            "(`tickwork docs design 16`).",
        ),
    ] = False,
    json_output: options.Json = False,
) -> None:
    """List sessions, newest first."""
    if archived:
        if tree:
            raise InvalidInput(
                "--tree does not go with --archived (archived sessions have no tree view); "
                "list them without --tree (FORK OF names each one's parent), or drop "
                "--archived to draw the trees of live sessions"
            )
        if error_code is not None:
            raise InvalidInput(
                "--error-code does not go with --archived (the archive's index has no error "
                "codes); filter by --status failed, then `tickwork show ID`"
            )
        if outcome is not None:
            raise InvalidInput(
                "--outcome does not go with --archived (the archive's index has no outcomes); "
                "filter by --status completed, then `tickwork show ID`"
            )
        rows = _archived_rows(status or [], kind, limit, tenant, json_output=json_output)
        render.listing(
            rows, render.archived_table, json_output=json_output, none="no archived sessions match"
        )
        return
    remote = cli_remote.client()
    drawn: list[dict[str, Any]] = []
    if remote is not None:
        with remote:
            heads = remote.sessions(
                status=status or (),
                kind=kind,
                error_code=error_code,
                outcome=outcome.value if outcome else None,
                tenant=options.remote_tenant(tenant, many=True),
                limit=limit,
            )
            if tree:
                # the API draws a session's tree in its answer (only what the token sees);
                # a root without children has none there, and is drawn alone, as here
                drawn = [
                    remote.timeline(h.id).get("tree") or views.tree(h, [])
                    for h in heads
                    if h.root_id is None
                ]
    else:
        with Context() as ctx:
            wanted: dict[str, Any] = dict(
                status=[s.value for s in status or ()],
                kind=kind,
                error_code=error_code,
                outcome=outcome.value if outcome else None,
                limit=limit,
            )
            heads = ctx.store.list_sessions(
                **wanted, tenant=options.local_tenant(tenant, many=True)
            )
            if kind is not None and not heads:
                options.check_kind(ctx, kind)
            if tenant is None and not json_output:
                # the default tenant's only, unasked: say that others' match too (counted
                # among the newest `limit` of every tenant: a hint, not a census)
                everyone = ctx.store.list_sessions(**wanted, tenant=None)
                options.note_other_tenants("sessions", everyone, limit)
    if tree:
        if remote is None:
            with Context() as ctx:
                # a tree holds its root's tenant only (children inherit it; a stray row of
                # another tenant under it is not drawn)
                drawn = [
                    views.tree(h, [c for c in ctx.store.tree(h.id) if c.tenant == h.tenant])
                    for h in heads
                    if h.root_id is None
                ]
        if json_output:
            views.emit(drawn)
        elif not drawn:
            render.show(Text("no sessions match"))
        else:
            render.show(*(render.tree(t) for t in drawn))
        return
    found = [views.head(h) for h in heads]
    render.listing(found, render.sessions_table, json_output=json_output, none="no sessions match")


def show(
    session_id: SessionId, tenant: options.Tenant = None, json_output: options.Json = False
) -> None:
    """Show a session as a timeline: steps, calls and outputs, decisions, costs, outcome.
    With --tenant, only a session of that tenant ('no session' for another's)."""
    remote = cli_remote.client()
    if remote is not None:
        if tenant is not None:
            raise InvalidInput(
                "--tenant goes with the local mode for show; with --server the token's tenant "
                "decides what you see"
            )
        with remote:
            view = remote.timeline(remote.session_id(session_id))
            previews = {} if json_output else cli_remote.previews(remote, view)
        if json_output:
            views.emit(view)
        else:
            render.show(render.timeline(view, previews))
        return
    with Context() as ctx:
        # another tenant's session is no session: its id is not said, even by its start
        only = None if tenant is None else options.local_tenant(tenant)
        session_id = ctx.reads.session_id(session_id, tenant=only)
        try:
            whole = ctx.store.load(session_id)
        except SessionNotFound:
            archived = ctx.reads.archived(
                session_id
            )  # issue 16: pruned, read back from the archive
            if archived is None:
                raise
            _in_tenant(archived.session.head, tenant)
            view = views.shown(
                archived.session,
                lease=None,
                found_forks=ctx.reads.forks(session_id),
                earlier=ctx.reads.earlier_patches(archived.session),
            )
            where = f"{ctx.reads.archive.url.rstrip('/')}/{archived.entry.location}"
            view["archived"] = {
                "at": views.date(archived.entry.archived_at),
                "location": where,
            }
            if json_output:
                views.emit(view)
            else:
                render.show(
                    render.timeline(view, {}),
                    Text(f"archived {render.when(view['archived']['at'])} in {where}"),
                )
            return
        _in_tenant(whole.head, tenant)
        view = views.shown(
            whole,
            lease=views.lease(ctx.store.lease(session_id), now=datetime.now(UTC)),
            found_forks=ctx.reads.forks(session_id),
            earlier=ctx.reads.earlier_patches(whole),
            tree=ctx.reads.tree(session_id),
        )
        previews = {} if json_output else pending_previews(whole, ctx.reads)
        note = None if json_output else no_worker_note(ctx, whole.head)
        if note is None and not json_output and graph_of(whole.head) is not None:
            note = version_note(jobs_here(ctx), whole.head)  # the kinds built for a graph only
    if json_output:
        views.emit(view)
    else:
        render.show(render.timeline(view, previews))
        if note is not None:
            render.show(Text(note, style="yellow"))


def _in_tenant(head: Head, tenant: str | None) -> None:
    """SessionNotFound, as for no session at all, if --tenant names another tenant."""
    if tenant is not None and head.tenant != options.local_tenant(tenant):
        raise SessionNotFound.of(head.id)


def no_worker_note(ctx: Context, head: Head) -> str | None:
    """What to ask a person whose session waits for a worker, has stood still for `STILL_S`
    and finds no worker holding a sign of life on its database (none started, or one
    started in another folder: the embedded default's state is the folder's); None where
    it cannot be told (TICKWORK_LIVENESS=false, a database without signs)."""
    if not head.status.moving or not ctx.settings.liveness:
        return None
    if (datetime.now(UTC) - head.updated_at).total_seconds() < STILL_S:
        return None
    if ctx.store.workers_alive() is not False:
        return None
    from tickwork.store.urls import sqlite_file

    path = sqlite_file(ctx.settings.db_url)
    if path is not None and not ctx.settings.database_url:
        where = (
            f"{path}; start one with `tickwork worker` from the folder you submitted from, "
            "or with the same TICKWORK_STATE_DIR"
        )
    else:
        where = "TICKWORK_DATABASE_URL; start one with `tickwork worker` on the same settings"
    return (
        f"session {head.id} is {head.status.value}, and no worker holds a sign of life on "
        f"its database ({where}): is one running?"
    )


def jobs_here(ctx: Context) -> Jobs:
    """The job kinds this process has, as its settings name them."""
    from tickwork.worker.config.settings import RoleSettings
    from tickwork.worker.jobs import Jobs

    roles = ctx.settings.section(RoleSettings).roles_file
    return Jobs(ctx.settings.imports, roles_file=roles)


def version_note(jobs: Jobs, head: Head) -> str | None:
    """What to tell a person whose graph session waits for a worker while this process has
    another version of its graph: a worker with that code refuses its ticks and says so only
    in its log, while `show` read `executing` with a live lease. None otherwise, or where
    this process cannot have the kind."""
    wanted = graph_of(head)
    if wanted is None or not head.status.moving:
        return None
    try:
        here = jobs.graph(head.kind).graph
    except TickworkError:
        return None
    if (here.name, here.version) == (wanted.name, wanted.version):
        return None
    return (
        f"session {head.id} runs graph {wanted.name!r} version {wanted.version!r}; this "
        f"process has version {here.version!r}. A worker with that version refuses its ticks "
        f"(its log says so), so it moves only on a worker with version {wanted.version!r}; "
        "or fork it here to move it to this version (`tickwork runbook graph version`)"
    )


def pending_previews(whole: Session, reads: Reads) -> dict[str, dict[str, Any] | None]:
    """For each call that has not run and would change files: a diff against the session's
    current file as stored, the patch, or the child's patch an adoption would take."""
    pending = [c for s in whole.steps for c in s.calls if whole.observation(c.call_id) is None]
    if not pending:
        return {}
    from .api.previews import preview  # the page's diff, shown alike; loads the API only here

    read, children = reads.file_reader(whole.head), functools.partial(reads.children, whole.head)
    found = {c.call_id: preview(c, read, children, whole.decision(c.call_id)) for c in pending}
    return {call_id: shown for call_id, shown in found.items() if shown is not None}


def watch(
    session_id: SessionId,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0, help="Give up after this many seconds.", show_default="wait as long as it runs"
        ),
    ] = None,
    json_output: options.Json = False,
) -> None:
    """Follow a session's events live until it waits for a person or its children, or ends."""
    remote = cli_remote.client()
    if remote is not None:
        with remote:
            cli_remote.watch(remote, remote.session_id(session_id), timeout, json_output)
        return
    with Context() as ctx:
        session_id = ctx.reads.session_id(session_id)
        store = ctx.store
        seen: list[dict[str, Any]] = []
        last, started = 0, time.monotonic()
        asked = json_output  # whether a worker runs: asked once, in words
        looked = started - STILL_S  # when `watch` last looked for a worker's sign
        while True:
            head = store.get(session_id)  # before the events: they include all of its changes
            batch = store.events_after(session_id, last)
            for event_id, event in batch:
                last = event_id
                seen.append(views.event(event_id, event))
                if not json_output:
                    render.show(render.event_line(seen[-1]))
            if batch and len(batch) >= 1000:
                continue
            if not asked and time.monotonic() - looked >= STILL_S:
                looked = time.monotonic()
                if (note := no_worker_note(ctx, head)) is not None:
                    asked = True
                    render.show(Text(note, style="yellow"))
            if not head.status.moving:
                break
            if timeout is not None and time.monotonic() - started > timeout:
                if json_output:
                    views.emit({"head": views.head(head), "events": seen, "timed_out": True})
                raise TimeoutError(
                    f"session {session_id} is still {head.status.value} after "
                    f"{timeout:g}s; is a worker running? (`tickwork worker`)"
                )
            time.sleep(POLL_S)
        if json_output:
            views.emit({"head": views.head(head), "events": seen, "timed_out": False})
            return
        view = views.session(store.load(session_id))
        tree = ctx.reads.tree(session_id) if head.status is Status.WAITING_CHILDREN else None
    outcome = view["head"]["outcome"]
    render.show(
        Text(f"session {session_id} is {head.status.value}" + (f": {outcome}" if outcome else "")),
        *render.outcome(view["head"], view["steps"]),
    )
    if tree is not None:
        render.show(*render.waiting_children(tree, session_id))


@options.fork_options
def fork(session_id: SessionId, fork: options.Fork) -> None:
    """Fork a session from step K with a patch; prints the new session's id. A dead letter
    of the session is resolved, as by `dlq fork`. Steps 1..K are kept: their model calls,
    tokens and cost count against the fork's budgets, so give each above what they used;
    the deadline runs from the fork."""
    fork_session(session_id, fork, dead_letter=False)


def fork_session(key: str, fork: options.Fork, *, dead_letter: bool) -> None:
    """What `fork` and `dlq fork` do: `key` is a session id, or with `dead_letter` a
    dead letter's key. Either way the session's dead letter, if it has one, is resolved."""
    remote = cli_remote.client()
    if remote is not None:
        cli_remote.no_name(fork.by)
        given = fork.client_args()
        del given["by"]  # the server takes the person from the token
        with remote, _outputs_too_large(given["tool_outputs"]):
            if dead_letter:
                head = remote.fork_dead_letter(key, **given)
            else:
                head = _remote_fork(remote, key, given)
        print_head(head, fork.json_output, head.id)
        return
    given = fork.client_args()
    with Context() as ctx:
        session_id = ctx.dead_letter(key).session_id if dead_letter else _session_to_fork(ctx, key)
        given["model"] = options.model_spec(given["model"], ctx.client.providers)
        head = ctx.client.fork(session_id, **given)
    print_head(head, fork.json_output, head.id)


def _session_to_fork(ctx: Context, key: str) -> str:
    """The session `fork KEY` names; a number no session id is, but a dead letter's (as `dlq
    ls` lists them), is refused naming the letter's session and `dlq fork`."""
    from tickwork.store.dead_letters import DeadLetterNotFound

    try:
        return ctx.reads.session_id(key)
    except SessionNotFound as exc:
        if not _a_number(key):
            raise
        try:
            letter = ctx.store.dead_letter(int(key))
        except DeadLetterNotFound:
            raise exc from None
        raise SessionNotFound.of(
            key, hint=f"{exc.hint}; {_letter_hint(key, letter.session_id)}"
        ) from None


def _remote_fork(remote: Client, key: str, given: dict[str, Any]) -> Head:
    """`fork KEY` with a server: a number no session id is, but a dead letter's the token
    sees, is refused naming the letter's session and `dlq fork`, as locally."""
    from tickwork.remote.errors import RemoteError

    try:
        return remote.fork(cli_remote.acted_on(remote, key, "operator"), **given)
    except RemoteError as exc:
        if exc.status != 404 or exc.code != "session_not_found" or not _a_number(key):
            raise
        try:
            letter = remote.dead_letter(int(key))
        except RemoteError:
            raise exc from None
        raise RemoteError(
            f"{exc.message}; {_letter_hint(key, letter['session_id'])}",
            code=exc.code,
            status=exc.status,
            details=exc.details,
        ) from None


def _a_number(key: str) -> bool:
    """Whether `key` could be a dead letter's number (`dlq show 7`)."""
    from tickwork.store.dead_letters import MAX_NUMBER

    return key.isascii() and key.isdigit() and int(key) <= MAX_NUMBER


def _letter_hint(key: str, session_id: str) -> str:
    return (
        f"{key} is the number of dead letter {key}, of session {session_id}: fork it with "
        f"`tickwork dlq fork {key}` (or `tickwork fork {session_id}`)"
    )


@contextlib.contextmanager
def _outputs_too_large(outputs: dict[str, str]) -> Iterator[None]:
    """A server's 413 to a fork whose tool outputs make its body too large names them: its
    own words name only the body's bytes, which the person never typed."""
    from tickwork.remote.errors import RemoteError

    try:
        yield
    except RemoteError as exc:
        if exc.status != 413 or not outputs:
            raise
        raise RemoteError(
            f"{exc.message}: {_outputs_said(outputs, exc.details.get('limit'))}",
            code=exc.code,
            status=exc.status,
            details=exc.details,
        ) from None


def _outputs_said(outputs: dict[str, str], limit: object) -> str:
    """Which of the tool `outputs` given make a body over the server's `limit` (bytes; None
    from a server that does not say it): the one over it alone, else all of them; none of
    them when they are within it, and the rest of the fork is what takes the body over."""
    # as the body holds them: JSON strings, where a newline or a quote takes two bytes
    sizes = {
        call: len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2
        for call, text in outputs.items()
    }
    call, largest = max(sizes.items(), key=lambda item: item[1])
    total = sum(sizes.values())
    if isinstance(limit, int) and total <= limit:
        return (
            f"the tool outputs given are {total:,} bytes in all, within those {limit:,}: "
            "the rest of the fork (its system prompt or instruction) takes it over; give "
            "a shorter system prompt or instruction, or shorter outputs"
        )
    if len(sizes) == 1 or (isinstance(limit, int) and largest > limit):
        return (
            f"the tool output given for {call} is {largest:,} bytes, more than a whole request "
            "may be; a tool's output is at most the server's TICKWORK_MAX_OUTPUT_CHARS "
            "characters (20,000 unless its operator set another): give a shorter one"
        )
    return (
        f"the {len(sizes)} tool outputs given are {total:,} bytes in all (the "
        f"largest, {call}'s, {largest:,}), more than a whole request may be: give shorter "
        "ones, or fewer"
    )


def print_head(head: Head, json_output: bool, line: str) -> None:
    if json_output:
        views.emit(views.head(head))
    else:
        render.show(Text(line))


def patch(
    session_id: SessionId,
    apply: Annotated[
        Path | None,
        typer.Option(
            "--apply", metavar="DIR", help="Apply the patch to this directory instead of printing."
        ),
    ] = None,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            metavar="FILE",
            help="Write a git bundle with the branch tickwork/ID instead (a --repo source).",
        ),
    ] = None,
) -> None:
    """Print a repair session's patch against its source (or apply it to DIR); exits 1,
    saying why, if it has none."""
    remote = cli_remote.client()
    if remote is not None:
        if bundle is not None:
            cli_remote.local_only(
                "`tickwork patch --bundle`", " (the bundle is made from the store)"
            )
        with remote:
            text = remote.patch(remote.session_id(session_id))
    else:
        text = _local_patch(session_id, bundle)
        if text is None:
            return
    if apply is None:
        # a model wrote it: a terminal gets it without what it would obey (a line erased
        # from what a person reads before --apply); a pipe gets it whole, for git apply
        # (not through typer.echo, which takes ANSI sequences out of what it pipes)
        sys.stdout.write(text.translate(render.CONTROLS) if sys.stdout.isatty() else text)
        return
    from .patches import apply_patch

    typer.echo(apply_patch(apply.expanduser(), text))


def _local_patch(session_id: str, bundle: Path | None) -> str | None:
    """The patch from the store; None once a --bundle is written instead."""
    if bundle is not None:
        bundle = options.output_file(bundle, option="--bundle")
    with Context() as ctx:
        session_id = ctx.reads.session_id(session_id)
        if bundle is not None:
            branch = ctx.reads.bundle(session_id, bundle)
            typer.echo(f"wrote {bundle}: git fetch {bundle} {branch}")
            return None
        return ctx.reads.patch(session_id, required=True)
