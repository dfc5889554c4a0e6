"""The Python client API: submit, inspect, decide, cancel, fork, analyse dead letters."""

from __future__ import annotations

import functools
import getpass
import logging
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from celery import Celery

from tickwork.fsm.context import Policy, check_window
from tickwork.fsm.errors import (
    CallNotFound,
    ConfigurationError,
    InvalidBudget,
    InvalidInput,
    NoPatch,
    SessionNotFound,
    UnpricedModel,
)
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.kinds import SessionKind, kind_of
from tickwork.fsm.values import Budgets, Decision, DecisionKind, Head, Session
from tickwork.store import Store
from tickwork.store import dead_letters as dl
from tickwork.store.archive import Archive
from tickwork.store.archived import ArchivedSession, saved_of
from tickwork.store.artifacts import Artifacts
from tickwork.store.files import Saved, applied, parse_entry
from tickwork.worker.config.secrets import mask_decision, masker_for
from tickwork.worker.config.settings import Settings, load_settings
from tickwork.worker.files.workspaces import Workspaces, session_files
from tickwork.worker.jobs import Jobs, Submission
from tickwork.worker.models import Providers, check_spec, pricing
from tickwork.worker.models.pricing import Price, PriceLike, as_price, session_price
from tickwork.worker.tick.app import TICK, make_app
from tickwork.worker.tick.runtime import build_store, utc_now

from .parsing import storable

log = logging.getLogger("tickwork.client")
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: blobs read back from the archive at a time when a fork of an archived session is made
BRING_BACK_CHUNK = 256


class Tickwork:
    """One handle on a tickwork deployment, configured from settings."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        app: Celery | None = None,
        store: Store | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings or load_settings()
        self._app = app
        self.store = store or build_store(self.settings)
        self.jobs = Jobs(self.settings.imports)
        #: the model providers, the workers' too when both read the same TICKWORK_IMPORTS
        self.providers = Providers(self.settings.imports)
        self.clock = clock

    @property
    def app(self) -> Celery:
        if self._app is None:
            self._app = make_app(self.settings, relay=False)
        return self._app

    def close(self) -> None:
        self.store.close()

    @functools.cached_property
    def artifacts(self) -> Artifacts:
        from tickwork.worker.tick.retention import restoring  # blobs retention moved are read back

        return restoring(self.store.artifacts(self.settings.artifacts_url), self.settings)

    @functools.cached_property
    def files(self) -> Workspaces:
        """Sessions' stored files, read through this process's cache."""
        return Workspaces(
            self.settings.workspaces_path,
            self.store,
            self.artifacts,
            max_bytes=self.settings.workspaces_max_bytes,
        )

    def patch(self, session_id: str, *, required: bool = False) -> str:
        """The patch from the session's source to its files as stored now (its result's
        patch once it has finished; an archived session's from the archive): "" if it
        changed nothing, or with `required` `NoPatch` saying why; `NoPatch` for a session
        without files (another job kind)."""
        try:
            head, saved = self.store.get(session_id), None
        except SessionNotFound:
            found = self.archived(session_id)
            if found is None:
                raise
            head, saved = found.session.head, saved_of(found.record)
        stored = head.result.get("patch")
        if isinstance(stored, str) and not head.result.get("patch_truncated"):
            text = stored
        else:
            from tickwork.worker.jobs.repair import diff_manifests, legacy, session_patch

            files = session_files(head)
            if files is None and not legacy.is_legacy(head):
                raise NoPatch(f"session {session_id} has no patch: a {head.kind} job has no files")
            if files is None or saved is None:
                text = session_patch(head, self.files)[0]
            else:
                before = after = self.files.base(files)
                for change in saved:  # the archived session's file changes, as its record holds
                    after = applied(after, change.changes)
                text = diff_manifests(before, after, self.files.blobs)[0]
        if not text and required:
            raise NoPatch(f"session {session_id} has no patch: {_unchanged(head)}")
        return text

    def bundle(self, session_id: str, dest: Path) -> str:
        """A git bundle at `dest` holding the branch `tickwork/<session_id>`: the source's
        commit plus one commit with the session's files. Returns the branch name."""
        head = self.store.get(session_id)
        source = head.config.get("source")
        if not isinstance(source, dict) or source.get("kind") != "repo":
            raise InvalidInput(
                f"session {session_id} did not start from a git repository; use "
                f"`tickwork patch {session_id}` for its patch"
            )
        from tickwork.worker.files.sources import clone_at

        before = self.files.base(head.config["files"])
        after, _ = self.files.manifest(head)
        branch = f"tickwork/{session_id}"
        with clone_at(str(source["url"]), str(source["commit"])) as clone:
            for rel in before:
                if rel not in after:
                    (clone / rel).unlink(missing_ok=True)
            blobs = self.files.blobs(value.split(" ", 1)[1] for value in after.values())
            for rel, value in after.items():
                target = clone / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blobs[value.split(" ", 1)[1]])
                target.chmod(0o755 if value.startswith("100755") else 0o644)
            git = ["git", "-c", "user.name=tickwork", "-c", "user.email=tickwork@localhost"]
            for args in (
                ["checkout", "--quiet", "-b", branch],
                ["add", "--all"],
                ["commit", "--quiet", "--allow-empty", "-m", f"tickwork session {session_id}"],
                ["bundle", "create", "--quiet", str(dest.absolute()), branch],
            ):
                subprocess.run([*git, *args], cwd=clone, check=True, capture_output=True)
        return branch

    def read_file(self, session_id: str, path: str) -> bytes | None:
        """One file of the session as stored now; None if it has none there."""
        read = self.file_reader(self.store.get(session_id))
        return None if read is None else read(path)

    def file_reader(self, head: Head) -> Callable[[str], bytes | None] | None:
        """Reads one file of the session as it is now (None: no such file), for previews;
        None if the session has no files. A legacy session's are in its project folder."""
        from tickwork.worker.jobs.repair import legacy

        if session_files(head) is not None:
            return functools.partial(self.files.read, head)
        if legacy.is_legacy(head):
            return functools.partial(legacy.read_file, head)
        return None

    def _submission(self, *, trusted: bool) -> Submission:
        """What a kind's `configure` is told about a submission from this client."""
        return Submission(
            state_dir=self.settings.state_dir,
            trusted=trusted,
            workspace_roots=tuple(self.settings.workspace_roots),
            artifacts=self.artifacts,
        )

    def publish(self, session_id: str, version: int) -> None:
        """Wake a worker; if the broker is down the outbox row stays and the relay publishes."""
        try:
            self.app.send_task(TICK, args=(session_id, version), queue=self.settings.queue)
        except Exception as exc:
            log.warning(
                "could not publish the tick of %s (%s); the session is saved and a worker's "
                "relay will publish it once the broker is back (within TICKWORK_RELAY_AFTER_S=%gs)",
                session_id,
                exc,
                self.settings.relay_after_s,
            )

    def submit(
        self,
        kind: str,
        input: Mapping[str, Any] | None = None,
        *,
        model: str | None = None,
        budgets: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        price: PriceLike | None = None,
        trusted: bool = True,
        submitted_by: str | None = None,
        own_config: Mapping[str, Any] | None = None,
        context_window: int | None = None,
    ) -> Head:
        """Store a new session of job kind `kind` and enqueue its first tick.

        `price` is the model's price in USD per million tokens, `(prompt, completion)`, for
        a model the price table (`TICKWORK_PRICES`) does not know. A session whose model has
        no price is refused while it has a cost budget: pass a price, or `max_cost_usd=0`.
        `trusted=False` marks a submission from outside (the HTTP API): the kind's `prepare`
        then refuses local paths outside `TICKWORK_WORKSPACE_ROOTS`. `submitted_by` is
        recorded on the session [default: the login name]. `own_config` adds to the session's
        configuration what only tickwork's own commands set (the demo's
        `demo_unconfined`); neither the API nor `tickwork submit` passes it. `context_window`
        (tokens) overrides the model's window from the model table (`tickwork.fsm.context`: old
        observations are masked, then the transcript compacted, to keep the prompt under it).
        """
        by = _login() if submitted_by is None else submitted_by.strip()
        storable(by, name="the submitter's name")
        storable(dict(input or {}), name="")
        storable(model or "", name="the model")
        storable(session_id or "", name="the session id")
        if len(by) > 200:
            raise InvalidInput("submitted_by is longer than 200 characters")
        job = self.jobs.get(kind)
        if own_config and not trusted:
            raise InvalidInput("a submission from outside cannot set the session's config")
        config = job.configure(dict(input or {}), self._submission(trusted=trusted))
        config.update(own_config or {})
        spec = model or self.settings.model or str(config.pop("default_model", ""))
        if not spec:
            raise InvalidInput(
                "no model given: pass --model (scripted:PATH or openai:MODEL) or set TICKWORK_MODEL"
            )
        check_spec(spec, self.providers)
        if session_id is not None and not SESSION_ID.match(session_id):
            raise InvalidInput(
                f"session id {session_id!r} may only hold letters, digits, "
                "'_', '-' and '.', up to 64 characters"
            )
        self._check_unused(session_id)
        limits = self.budgets(job.budgets, budgets or {})
        if price is not None:
            given = _given_price(spec, price)._asdict()
            config["price"] = {k: v for k, v in given.items() if v is not None}
        _check_priced(spec, limits, config, self.settings.prices, self.providers)
        window = pricing.context_window(spec) if context_window is None else context_window
        config["context"] = Policy(window=check_window(window)).to_config()
        now = self.clock()
        head = Head(
            id=session_id or uuid.uuid4().hex,
            kind=kind,
            created_at=now,
            updated_at=now,
            model=spec,
            input=dict(input or {}),
            budgets=limits,
            config={"system_prompt": job.system_prompt, **config},
            submitted_by=by,
        )
        self.store.create(Session(head=head), now=now)
        self.publish(head.id, head.version)
        return head

    def budgets(self, *layers: Mapping[str, Any]) -> Budgets:
        merged = self.settings.budgets.model_dump()
        for layer in layers:
            unknown = sorted(set(layer) - set(merged))
            if unknown:
                raise InvalidBudget(
                    f"unknown budget {', '.join(unknown)}; known: {', '.join(merged)}"
                )
            merged.update({k: v for k, v in layer.items() if v is not None})
        try:
            return Budgets(**merged)
        except ValueError as exc:
            raise InvalidBudget(f"invalid budget: {_first_error(exc)}") from None

    def get(self, session_id: str) -> Head:
        return self.store.get(session_id)

    def load(self, session_id: str) -> Session:
        return self.store.load(session_id)

    def sessions(self, **filters: Any) -> list[Head]:
        """Sessions newest first, filtered by status, kind, error_code, outcome, submitted_by,
        parent_id; paged by limit, offset."""
        return self.store.list_sessions(**filters)

    def wait(self, session_id: str, *, timeout: float = 60.0, poll: float = 0.05) -> Head:
        """The session once it is suspended or finished; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"session {session_id} still {head.status.value} after "
                    f"{timeout}s; is a worker running (`tickwork worker`)?"
                )
            time.sleep(poll)

    def decide(
        self,
        session_id: str,
        call_id: str,
        kind: DecisionKind | str,
        *,
        approver: str,
        fingerprint: str | None = None,
        comment: str = "",
        arguments: Mapping[str, Any] | None = None,
        feedback: str = "",
        output: str = "",
    ) -> Head:
        """Decide one waiting call; `fingerprint` binds the decision to what the approver saw
        (None binds it to the call as stored now)."""
        kind = DecisionKind(kind)
        storable(
            {"approver": approver, "comment": comment, "feedback": feedback, "output": output},
            name="",
        )
        storable(arguments, name="the arguments")
        head, call = self.store.find_call(session_id, call_id)
        if call is None:
            raise CallNotFound(
                f"session {session_id} has no call {call_id!r}; waiting: "
                f"{', '.join(head.awaiting) or 'none'}"
            )
        graph = self.jobs.graph(head.kind) if kind_of(head) is SessionKind.GRAPH else None
        if kind is DecisionKind.EDIT:
            if arguments is not None and not isinstance(arguments, Mapping):
                raise InvalidInput(
                    f"the arguments of an edit of call {call_id} must be a JSON "
                    f"object, got {type(arguments).__name__}"
                )
            if arguments is None:
                raise InvalidInput(f"an edit of call {call_id} needs the new arguments")
            tools = self.jobs.tools(head.kind)
            if graph is not None:  # the edit patches the state (issue 15)
                arguments = graph.validate_patch(
                    head, dict(arguments), by=f"the edit of node {call.name!r}"
                )
            elif call.name in tools:
                arguments = tools.get(call.name).validate(dict(arguments))
        if kind is DecisionKind.PROVIDE_OUTPUT and graph is not None:
            graph.validate_output(head, call.name, output)  # a node's update (issue 15)
        decision = Decision(
            call_id=call_id,
            kind=kind,
            approver=approver,
            at=self.clock(),
            fingerprint=call.fingerprint if fingerprint is None else fingerprint,
            comment=comment,
            feedback=feedback,
            output=output,
            arguments=dict(arguments) if arguments is not None else None,
        )
        # what a person types is stored for ever and shown to the model, like a tool's output
        decision = mask_decision(decision, masker_for(self.settings))
        head = self.store.decide(session_id, decision, now=decision.at)
        if head.status.runnable:
            self.publish(head.id, head.version)
        return head

    def approve(self, session_id: str, call_id: str, *, approver: str, **kw: Any) -> Head:
        return self.decide(session_id, call_id, DecisionKind.APPROVE, approver=approver, **kw)

    def edit(
        self,
        session_id: str,
        call_id: str,
        arguments: Mapping[str, Any],
        *,
        approver: str,
        **kw: Any,
    ) -> Head:
        return self.decide(
            session_id, call_id, DecisionKind.EDIT, approver=approver, arguments=arguments, **kw
        )

    def reject(
        self, session_id: str, call_id: str, feedback: str, *, approver: str, **kw: Any
    ) -> Head:
        return self.decide(
            session_id, call_id, DecisionKind.REJECT, approver=approver, feedback=feedback, **kw
        )

    def provide_output(
        self, session_id: str, call_id: str, output: str, *, approver: str, **kw: Any
    ) -> Head:
        return self.decide(
            session_id, call_id, DecisionKind.PROVIDE_OUTPUT, approver=approver, output=output, **kw
        )

    def cancel(self, session_id: str, *, by: str = "") -> Head:
        return self.store.request_cancel(session_id, now=self.clock(), by=by)

    def fork(
        self,
        session_id: str,
        *,
        from_step: int,
        by: str,
        system_prompt: str | None = None,
        append_instruction: str | None = None,
        tool_outputs: Mapping[str, str] | None = None,
        budgets: Mapping[str, Any] | None = None,
        resolve_dead_letter: bool = False,
        new_id: str | None = None,
        again: bool = False,
        state: Mapping[str, Any] | None = None,
    ) -> Head:
        """A new session from `session_id`'s step `from_step` with a declared patch; with
        `resolve_dead_letter`, a dead letter forked (or closed) before is refused unless
        `again`."""
        if new_id is not None and not SESSION_ID.match(new_id):
            raise InvalidInput(
                f"session id {new_id!r} may only hold letters, digits, "
                "'_', '-' and '.', up to 64 characters"
            )
        self._check_unused(new_id)
        parent, archived = self._fork_source(session_id)
        if budgets:
            self.budgets(budgets)  # names and values checked before anything is written
            raised = Budgets(**{**parent.budgets.model_dump(), **budgets})
            _check_priced(parent.model, raised, parent.config, self.settings.prices, self.providers)
        graph_version = None
        origin = parent  # live, or read back from the archive
        if state or kind_of(origin) is SessionKind.GRAPH:
            # a graph session (issue 15): the fork runs on the graph as this process has it
            # (how a session moves to a new version), its state patch checked against it
            if kind_of(origin) is not SessionKind.GRAPH:
                raise InvalidInput(
                    f"session {session_id} is not a graph session; only a graph's state is patched"
                )
            kind = self.jobs.graph(origin.kind)
            state = kind.validate_patch(origin, dict(state or {}), by="the fork's state patch")
            graph_version = kind.graph.version
        patch = ForkPatch(
            system_prompt=system_prompt,
            append_instruction=append_instruction,
            tool_outputs=dict(tool_outputs or {}),
            budgets=dict(budgets or {}),
            state=dict(state or {}),
            graph_version=graph_version,
        )
        forking = functools.partial(
            self.store.fork,
            session_id,
            new_id=new_id or uuid.uuid4().hex,
            from_step=from_step,
            patch=patch,
            by=by,
            now=self.clock(),
            resolve_dead_letter=resolve_dead_letter,
            again=again,
        )
        if archived is not None:
            self._bring_back(*archived)
        try:
            head = forking(archived=archived)
        except SessionNotFound:
            if archived is not None:
                raise
            # archived since we looked: fork it from the archive
            archived = self._fork_source(session_id)[1]
            assert archived is not None, "an archived session reads back whole"
            self._bring_back(*archived)
            head = forking(archived=archived)
        if head.status.runnable:
            self.publish(head.id, head.version)
        return head

    @functools.cached_property
    def archive(self) -> Archive:
        """Where retention archives finished sessions (TICKWORK_RETENTION_ARCHIVE_URL)."""
        from tickwork.worker.config.settings import read_settings
        from tickwork.worker.tick.retention import RetentionSettings

        return read_settings(RetentionSettings).archive(self.settings)

    def archived(self, session_id: str) -> ArchivedSession | None:
        """An archived session read back from the archive; None if it is not archived."""
        if self.store.retention.entry(session_id) is None:
            return None  # the archive is opened only for a session it holds
        return self.store.retention.load(self.archive, session_id)

    def _bring_back(self, parent: Session, saved: Sequence[Saved]) -> None:
        """Copy the blobs of an archived session's files from the archive back into the
        artifact store (the client has the archive's URL; workers need not), so a fork of it
        runs on any worker: its source and every version of its files it saved."""
        files = session_files(parent.head)
        if files is None:
            return
        base = str(files["base"])
        self.artifacts.get([base])  # read back from the archive and put back if it was moved
        keys = {parse_entry(value)[1] for value in self.files.base(files).values()}
        keys.update(
            parse_entry(value)[1]
            for change in saved
            for value in change.changes.values()
            if value is not None
        )
        ordered = sorted(keys)
        for start in range(0, len(ordered), BRING_BACK_CHUNK):
            self.artifacts.get(ordered[start : start + BRING_BACK_CHUNK])

    def _fork_source(self, session_id: str) -> tuple[Head, tuple[Session, list[Saved]] | None]:
        """The head of the session to fork, and the session whole if it is archived."""
        try:
            return self.store.get(session_id), None
        except SessionNotFound:
            found = self.archived(session_id)
            if found is None:
                raise
            return found.session.head, (found.session, saved_of(found.record))

    def _check_unused(self, session_id: str | None) -> None:
        """An id an archived session had is not given to a new one."""
        if session_id is not None and SESSION_ID.match(session_id):
            taken = self.store.retention.entry(session_id)
            if taken is not None:
                raise InvalidInput(
                    f"session id {session_id!r} belonged to a session archived at "
                    f"{taken.archived_at}; choose another id"
                )

    def dead_letters(self, **filters: Any) -> list[dl.DeadLetter]:
        return self.store.dead_letters(**filters)

    def dead_letter(self, key: int | str) -> dl.DeadLetter:
        return self.store.dead_letter(key)

    def close_dead_letter(
        self, key: int | str, *, state: dl.Closing, by: str, reason: str
    ) -> dl.DeadLetter:
        """Resolve or dismiss a dead letter without forking it."""
        return self.store.close_dead_letter(
            key, state=state, by=by, reason=reason, now=self.clock()
        )

    def dead_letter_stats(
        self, *, by: str = "code", since: datetime | None = None
    ) -> list[dict[str, Any]]:
        return self.store.dead_letter_stats(by=by, since=since)


def _unchanged(head: Head) -> str:
    """Why a session's patch is empty, in a few words."""
    if head.status.terminal:
        outcome = head.result.get("outcome")
        error = head.result.get("patch_error")
        if error:
            return f"it could not be made ({error})"
        return f"it changed no files ({head.status.value}{f', {outcome}' if outcome else ''})"
    return f"it has changed no files yet ({head.status.value}, step {head.step})"


def _given_price(spec: str, price: PriceLike) -> Price:
    try:
        return as_price(spec, price)
    except ConfigurationError as exc:
        raise InvalidInput(exc.message.replace("price override", "the price", 1)) from None


def _check_priced(
    spec: str,
    budgets: Budgets,
    config: Mapping[str, Any],
    prices: Mapping[str, PriceLike],
    providers: Providers,
) -> None:
    """Refuse a session whose cost budget could not limit it: its model has no price."""
    if not budgets.limits_cost:
        return
    if session_price(spec, config, prices, providers=providers) is not None:
        return
    name = spec.rsplit(":", 1)[-1]
    raise UnpricedModel(
        f"model {spec!r} has no price, so max_cost_usd (${budgets.max_cost_usd:g}) cannot "
        "limit its cost; give its price in USD per million tokens, prompt and completion: "
        f"with the submit (--price 0.5,1.5, or price=(0.5, 1.5) in Python), or for every "
        f"session with TICKWORK_PRICES='{{\"{name}\": [0.5, 1.5]}}'; or turn the cost "
        "budget off with --max-cost-usd 0 (max_cost_usd=0)"
    )


def _login() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)


def apply_patch(directory: Path, patch: str) -> str:
    """Apply a session's patch to `directory` (with `git apply` if git is installed);
    all of it or nothing. Returns what was done."""
    if not directory.is_dir():
        raise InvalidInput(f"{directory} is not a directory; give the project's folder")
    if not patch:
        return "the patch is empty: nothing to apply"
    if shutil.which("git"):
        done = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            cwd=directory,
            input=patch.encode(),
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise InvalidInput(
                f"the patch does not apply to {directory}: "
                + " ".join(done.stderr.decode(errors="replace").split())[:500]
            )
        return f"applied the patch to {directory}"
    from tickwork.worker.tools import patches

    return patches.apply_patch(directory, patch)
