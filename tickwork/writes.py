"""The client's write facade: submit, decide, cancel and fork sessions, fork and close dead
letters; each change stored, then its tick published."""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from celery import Celery

from tickwork.fsm.admission import Admission, check_concurrency, check_priority
from tickwork.fsm.context import Policy, check_window
from tickwork.fsm.errors import (
    CallNotFound,
    ConfigurationError,
    InvalidBudget,
    InvalidInput,
    InvalidModelSpec,
    SessionExists,
    SessionNotFound,
    ToolError,
    UnpricedModel,
)
from tickwork.fsm.forks import (
    ForkPatch,
    TokenPrice,
    check_instruction,
    check_system_prompt,
    fork_admission,
)
from tickwork.fsm.kinds import SessionKind, kind_of
from tickwork.fsm.people import check_name
from tickwork.fsm.tenants import DEFAULT_TENANT, check_tenant
from tickwork.fsm.values import Budgets, Decision, DecisionKind, Head, Session, over_bound
from tickwork.fsm.wording import plain
from tickwork.store import Store
from tickwork.store import dead_letters as dl
from tickwork.store.archived import saved_of
from tickwork.store.artifacts import Artifacts, DirectoryArtifacts
from tickwork.store.files import Saved
from tickwork.worker.config.secrets import mask_decision, masker_for
from tickwork.worker.config.settings import Settings
from tickwork.worker.files.sources import BATCH_BYTES
from tickwork.worker.jobs import Role, Submission, session_config
from tickwork.worker.jobs.graphs import GraphKind
from tickwork.worker.models import Providers, check_spec, pricing
from tickwork.worker.models.base import estimate_prompt
from tickwork.worker.models.pricing import (
    Price,
    PriceLike,
    as_price,
    below,
    discounted,
    session_price,
)
from tickwork.worker.tick.admission import policy
from tickwork.worker.tick.app import TICK, make_app
from tickwork.worker.tick.runtime import utc_now

from .blobs import bring_back
from .deployment import Deployment
from .parsing import SESSION_ID, new_session_id, storable

#: the client's log, named as before the facades (operators filter on it)
log = logging.getLogger("tickwork.client")


class Writes(Deployment):
    """What changes a deployment's sessions: each change is stored, then its tick published
    (a worker picks it up; the relay publishes it if the broker is down)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        app: Celery | None = None,
        store: Store | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        super().__init__(settings, store=store, clock=clock)
        self._app = app
        #: the app is made here (on first publish), so `close` closes it
        self._owns_app = app is None

    def close(self) -> None:
        """Close the store, and the Celery app made here (one passed in is the caller's)."""
        if self._owns_app and self._app is not None:
            self._app.close()
            self._app = None
        super().close()

    @property
    def admission(self) -> Admission:
        """Admission's view of the tenants file: in-flight limits and weights."""
        return policy(self.tenants.table())

    @property
    def app(self) -> Celery:
        if self._app is None:
            self._app = make_app(self.settings, relay=False)
        return self._app

    def publish(self, session_id: str, version: int) -> None:
        """Wake a worker; if the broker is down the outbox row stays, offered at once to the
        relays (as a relay gives back a tick it could not publish), so the first relay pass
        once the broker answers publishes it, not one a threshold later."""
        try:
            self.app.send_task(
                TICK,
                args=(session_id, version),
                queue=self.settings.queue,
                **self.settings.publish_options,
            )
        except Exception as exc:
            due = self.clock() - timedelta(seconds=self.settings.relay_after_s)
            with contextlib.suppress(Exception):  # a store away too: the threshold holds
                self.store.offer_again(session_id, version, now=due)
            from tickwork.worker.config.brokers import (
                refused_database,
                refused_login,
                refused_vhost,
            )

            login = refused_login(self.settings.broker_url, str(exc))
            if login is not None:  # no wait for the broker mends a login either
                log.warning(
                    "could not publish the tick of %s: %s; the session is saved, and a "
                    "worker's relay publishes it once TICKWORK_BROKER_URL holds a login the "
                    "broker takes",
                    session_id,
                    login,
                )
                return
            wrong = refused_database(self.settings.broker_url, str(exc))
            mended = "a database"
            if wrong is None:
                wrong, mended = refused_vhost(self.settings.broker_url, str(exc)), "a virtual host"
            if wrong is not None:  # no wait for the broker mends this: say what does
                log.warning(
                    "could not publish the tick of %s: %s; the session is saved, and a "
                    "worker's relay publishes it once the URL names %s the server has",
                    session_id,
                    wrong,
                    mended,
                )
                return
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
        tenant: str = DEFAULT_TENANT,
        priority: int = 0,
        concurrency_key: str | None = None,
        max_per_key: int | None = None,
    ) -> Head:
        """Store a new session of job kind `kind` in `tenant` and enqueue its first tick, or
        store it `queued` when its tenant is at its in-flight limit or its concurrency key at
        `max_per_key` (a key alone: one at a time); the relay admits it later, by
        `priority` (higher first, -1000 to 1000) then age: docs/DESIGN.md section 15
        (`tickwork docs design 15`).

        `price` is the model's price in USD per million tokens, `(prompt, completion)`,
        `(prompt, completion, cached)` or `(prompt, completion, cached, cache_write)`
        (cached: prompt tokens read from the provider's cache; cache_write: those written to
        it; left out, at the model's discount on the given prompt rate, or the prompt rate): for
        a model the price table (`TICKWORK_PRICES`, the built-in list prices) does not know,
        from a trusted caller only; for one it knows, at least the table's (it may raise the
        bill, never lower it). A session whose model has no price is refused while it has a
        cost budget (pass a price, or `max_cost_usd=0`) or its tenant a dollar quota.
        `trusted=False` marks a submission from outside (the HTTP API): the kind's `prepare`
        then refuses local paths outside `TICKWORK_WORKSPACE_ROOTS`. `submitted_by` is
        recorded on the session [default: the login name]. `own_config` adds to the session's
        configuration what only tickwork's own commands set (the demo's
        `demo_unconfined`); neither the API nor `tickwork submit` passes it. `context_window`
        (tokens) overrides the model's window from the model table (`tickwork.fsm.context`: old
        observations are masked, then the transcript compacted, to keep the prompt under it).
        """
        by = _login() if submitted_by is None else check_name(submitted_by, what="submitted_by")
        check_tenant(tenant)
        check_priority(priority)
        key, per_key = check_concurrency(concurrency_key, max_per_key)
        storable(by, name="the submitter's name")
        storable(dict(input or {}), name="")
        storable(model or "", name="the model")
        storable(session_id or "", name="the session id")
        # what the caller gave is checked before the kind's `configure` may store a file
        # (the store made then, if it is the embedded one not made yet): a refused submit
        # leaves no database behind
        if model:
            check_spec(model, self.providers)
        if session_id is not None:
            new_session_id(session_id, what="session_id")
        _numbers(budgets or {})
        self.budgets(budgets or {})
        job = self.jobs.get(kind)
        if own_config and not trusted:
            raise InvalidInput("a submission from outside cannot set the session's config")
        blobs = _Held(self._made_artifacts, hold=self._unmade())
        try:
            config = session_config(job, dict(input or {}), self._submission(kind, trusted, blobs))
            config.update(own_config or {})
            role = self._role(kind, config)
            spec = (
                model or role.model or self.settings.model or str(config.pop("default_model", ""))
            )
            if not spec:
                raise InvalidInput(
                    "no model given: give `model` as openai:MODEL, "
                    "anthropic:MODEL or scripted:PATH, or set the deployment's default in "
                    "TICKWORK_MODEL"
                )
            try:
                check_spec(spec, self.providers)
            except InvalidModelSpec as exc:
                if model or role.model or spec != self.settings.model:
                    raise
                # the deployment's default: the submitter gave no spec to correct
                raise InvalidModelSpec(f"invalid setting TICKWORK_MODEL: {exc.message}") from None
            limits = self.budgets(job.budgets, role.budgets, budgets or {})
            if price is not None:
                config["price"] = self._price_config(spec, price, trusted=trusted)
            quotas = self.tenants.quotas(tenant)
            quota = None if quotas.max_usd_per_day is None else (tenant, quotas.max_usd_per_day)
            _check_priced(
                spec,
                limits,
                config,
                self.settings.prices,
                self.providers,
                trusted=trusted,
                quota=quota,
            )
            window = (
                pricing.context_window(spec, self.settings.prices, providers=self.providers)
                if context_window is None
                else context_window
            )
            config["context"] = Policy(window=check_window(window)).to_config()
            # every check passed: the embedded database is made by the first submit, and what
            # the kind stored meanwhile (the workspace it packed) is stored in it
            blobs.keep()
        finally:
            blobs.close()  # what it held is stored by now, or the submit was refused
        self._made()
        self._check_unused(session_id)
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
            tenant=tenant,
            priority=priority,
            concurrency_key=key,
            max_per_key=per_key,
        )
        limited = quotas.model_dump(exclude={"weight", "max_in_flight"}, exclude_none=True)
        head = self.store.create(
            Session(head=head),
            now=now,
            quotas=quotas if limited else None,
            limit=self.admission.of(head.tenant),
        )
        if head.status.runnable:
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
            if (why := over_bound(layer)) is not None:
                raise InvalidBudget(f"invalid budget: {why}")
        try:
            return Budgets(**merged)
        except ValueError as exc:
            raise InvalidBudget(f"invalid budget: {_first_error(exc)}") from None

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
        graph = self._graph(head)
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
                edited = tools.get(call.name)
                arguments = edited.validate(
                    dict(arguments),
                    again=f"edit call {call_id} again with corrected arguments (or approve or "
                    "reject it as proposed)",
                )
                try:
                    edited.check_paths(arguments)
                except ToolError as exc:  # a path that leaves the workspace, a bad patch
                    # refused now, while the approver can correct it, not when it runs
                    raise InvalidInput(f"the edit of call {call_id}: {exc.message}") from None
        if kind is DecisionKind.PROVIDE_OUTPUT and graph is not None:
            graph.validate_output(head, call.name, output)  # a node's update (issue 15)
        elif kind is DecisionKind.PROVIDE_OUTPUT:
            if not output.strip():  # `--output "$OUT"` with OUT unset: the model reads nothing
                raise InvalidInput(
                    f"the output given for {call_id} is empty: say what the call did, as its "
                    "output would have (e.g. 'it ran; exit 0'), or approve it to run it again"
                )
            self._check_output(call_id, output)
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
        self, session_id: str, call_id: str, feedback: str = "", *, approver: str, **kw: Any
    ) -> Head:
        """Reject a waiting call: it does not run, and the model is told `feedback` (without
        it: that the call did not run and is not to be made again), as `tickwork reject`."""
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
        if by:  # nobody named: a cancel without a requester, as before names were kept
            by = check_name(by, what="by")
        head = self.store.request_cancel(session_id, now=self.clock(), by=by)
        if head.status.terminal:  # cancelled at once: its slot may let a queued one in
            self.admit(tenants=[head.tenant])
        return head

    def admit(self, *, tenants: list[str] | None = None) -> list[str]:
        """Admit the queued sessions that may start now (of `tenants` only, if given), as
        a relay pass does, and publish their ticks; their ids."""
        admitted = self.store.admit(self.admission, now=self.clock(), tenants=tenants)
        for tick in admitted:
            self.publish(tick.session_id, tick.version)
        return [t.session_id for t in admitted]

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
        new_id: str | None = None,
        again: bool = False,
        state: Mapping[str, Any] | None = None,
        model: str | None = None,
        price: PriceLike | None = None,
        trusted: bool = True,
        context_window: int | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        max_per_key: int | None = None,
    ) -> Head:
        """A new session from `session_id`'s step `from_step` with a declared patch. If the
        session has a dead letter, the fork is recorded on it and resolves it, as `dlq fork`
        does: one forked, resolved or dismissed before is refused unless `again`.
        `model` (a spec, checked as a submit's) is the model the fork runs on from its next
        call; another than the original's runs under that model's window and price, as a
        submit of it would (a price given for the original's model is not kept). `price`
        prices the fork's model (`model`, else the original's) and is checked as a
        submit's: at least the configured price, or for a model without one from a
        trusted caller only (`trusted=False`: the HTTP API). `context_window` (tokens)
        replaces the model's window the original had, as at submit (a `CONTEXT` dead letter
        is forked onto a larger one). The fork is a new
        session of the parent's tenant, held to its quotas (QuotaExceeded, nothing stored)
        and admission (`queued` past its in-flight limit) as a submit is, with the parent's
        `priority`, `concurrency_key` and `max_per_key` unless given (a new key alone: one
        at a time)."""
        if isinstance(from_step, bool) or not isinstance(from_step, int):
            raise InvalidInput(f"from_step must be a whole number (a step), got {from_step!r}")
        if new_id is not None:
            new_session_id(new_id, what="new_id")
        self._check_unused(new_id)
        by = check_name(by, what="by")
        if model is not None:
            self._check_model(model)
        if context_window is not None:
            check_window(context_window)
        check_instruction(append_instruction)
        check_system_prompt(system_prompt)
        for call_id, output in (tool_outputs or {}).items():
            self._check_output(call_id, output)
        parent, archived = self._fork_source(session_id)
        if not again:
            self._refuse_closed(session_id)
        if model == parent.model:
            model = None  # the same model: nothing changes, its stated window is kept
        priced = None
        if price is not None:
            priced = self._price_config(model or parent.model, price, trusted=trusted, doing="fork")
        if budgets:
            _numbers(budgets)
            self.budgets(budgets)  # names and values checked before anything is written
        if budgets or model is not None or priced is not None:
            raised = Budgets(**{**parent.budgets.model_dump(), **(budgets or {})})
            config = dict(parent.config)
            quota = None
            if model is not None:
                config.pop("price", None)  # it priced the original's model (`fsm.forks`)
                day = self.tenants.quotas(parent.tenant).max_usd_per_day
                quota = None if day is None else (parent.tenant, day)
                if context_window is None:  # the new model's, as a submit of it takes
                    context_window = check_window(
                        pricing.context_window(
                            model, self.settings.prices, providers=self.providers
                        )
                    )
            if priced is not None:
                config["price"] = priced
            _check_priced(
                model or parent.model,
                raised,
                config,
                self.settings.prices,
                self.providers,
                trusted=trusted,
                quota=quota,
                forking=True,
            )
        graph_version = None
        origin = parent  # live, or read back from the archive
        if state or kind_of(origin) is SessionKind.GRAPH:
            # a graph session (issue 15): the fork runs on the graph as this process has it
            # (how a session moves to a new version), its state patch checked against it
            graph = self._graph(origin)
            if graph is None:
                raise InvalidInput(
                    f"session {session_id} is not a graph session; only a graph's state is patched"
                )
            state = graph.validate_patch(origin, dict(state or {}), by="the fork's state patch")
            graph_version = graph.graph.version
        patch = ForkPatch(
            system_prompt=system_prompt,
            append_instruction=append_instruction,
            tool_outputs=dict(tool_outputs or {}),
            budgets=dict(budgets or {}),
            state=dict(state or {}),
            graph_version=graph_version,
            model=model,
            price=priced,
            context_window=context_window,
            priority=priority,
            concurrency_key=concurrency_key,
            max_per_key=max_per_key,
        )
        fork_admission(parent, patch)  # refused before an archived parent's files come back
        # the fork's price, as its first THINK finds it: its next prompt must fit its budgets
        priced_config = {k: v for k, v in parent.config.items() if k != "price" or model is None}
        if priced is not None:
            priced_config["price"] = priced
        found = session_price(
            model or parent.model, priced_config, self.settings.prices, providers=self.providers
        )
        price = (
            TokenPrice()
            if found is None
            else TokenPrice(prompt_usd=found.prompt / 1e6, completion_usd=found.completion / 1e6)
        )
        # a fork is a new session of the tenant, held to its quotas and admission as a
        # submit is: else one past its day's dollars or its queue forks from step 0
        quotas = self.tenants.quotas(parent.tenant)
        limited = quotas.model_dump(exclude={"weight", "max_in_flight"}, exclude_none=True)
        forking = functools.partial(
            self.store.fork,
            session_id,
            new_id=new_id or uuid.uuid4().hex,
            from_step=from_step,
            patch=patch,
            by=by,
            now=self.clock(),
            # however the fork is asked for: a dead letter open beside its fork would be
            # listed unresolved while `dlq show` names the fork
            resolve_dead_letter=True,
            again=again,
            quotas=quotas if limited else None,
            limit=self.admission.of(parent.tenant),
            price=price,
            estimate=estimate_prompt,
        )
        if archived is not None:
            bring_back(*archived, artifacts=self.artifacts, files=self.files)
        try:
            head = forking(archived=archived)
        except SessionNotFound:
            if archived is not None:
                raise
            # archived since we looked: fork it from the archive
            archived = self._fork_source(session_id)[1]
            assert archived is not None, "an archived session reads back whole"
            bring_back(*archived, artifacts=self.artifacts, files=self.files)
            head = forking(archived=archived)
        if head.status.runnable:
            self.publish(head.id, head.version)
        return head

    def close_dead_letter(
        self, key: int | str, *, state: dl.Closing | str, by: str, reason: str
    ) -> dl.DeadLetter:
        """Resolve or dismiss a dead letter without forking it (`state`: "resolved" or
        "dismissed")."""
        if state not in (dl.Closing.RESOLVED, dl.Closing.DISMISSED):
            raise InvalidInput(
                f"a dead letter is closed as 'resolved' or 'dismissed', not {str(state)!r} (a "
                "fork closes it as forked: `fork`)"
            )
        return self.store.close_dead_letter(
            key,
            state=dl.Closing(state),
            by=check_name(by, what="by"),
            reason=reason,
            now=self.clock(),
        )

    def resolve_dead_letter(self, key: int | str, reason: str, *, by: str) -> dl.DeadLetter:
        """Mark the dead letter resolved without forking it (`by` fixed its cause another
        way), as the remote client's `resolve_dead_letter` and `tickwork dlq resolve`."""
        return self.close_dead_letter(key, state=dl.Closing.RESOLVED, by=by, reason=reason)

    def dismiss_dead_letter(self, key: int | str, reason: str, *, by: str) -> dl.DeadLetter:
        """Dismiss the dead letter: `by` decided nothing is to be done, as the remote
        client's `dismiss_dead_letter` and `tickwork dlq dismiss`."""
        return self.close_dead_letter(key, state=dl.Closing.DISMISSED, by=by, reason=reason)

    def fork_dead_letter(
        self,
        key: int | str,
        *,
        from_step: int,
        by: str,
        system_prompt: str | None = None,
        append_instruction: str | None = None,
        tool_outputs: Mapping[str, str] | None = None,
        budgets: Mapping[str, Any] | None = None,
        new_id: str | None = None,
        again: bool = False,
        state: Mapping[str, Any] | None = None,
        model: str | None = None,
        price: PriceLike | None = None,
        trusted: bool = True,
        context_window: int | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        max_per_key: int | None = None,
    ) -> Head:
        """Fork the dead letter's session (`fork`, its parameters and refusals): the fork is
        recorded on the letter and resolves it; one forked, resolved or dismissed before is
        refused unless `again`. As the remote client's `fork_dead_letter` and `tickwork dlq
        fork`."""
        letter = self.store.dead_letter(key)
        return self.fork(
            letter.session_id,
            from_step=from_step,
            by=by,
            system_prompt=system_prompt,
            append_instruction=append_instruction,
            tool_outputs=tool_outputs,
            budgets=budgets,
            new_id=new_id,
            again=again,
            state=state,
            model=model,
            price=price,
            trusted=trusted,
            context_window=context_window,
            priority=priority,
            concurrency_key=concurrency_key,
            max_per_key=max_per_key,
        )

    def _submission(self, kind: str, trusted: bool, artifacts: Artifacts) -> Submission:
        """What a kind's `configure` is told about a submission from this client: its roles
        as a spawned child's are resolved (`Jobs.roles`: TICKWORK_ROLES_FILE's over the
        kind's own), and where it stores files (`artifacts`)."""
        return Submission(
            state_dir=self.settings.state_dir,
            trusted=trusted,
            workspace_roots=tuple(self.settings.workspace_roots),
            artifacts=artifacts,
            roles=self.jobs.roles(kind),
        )

    def _unmade(self) -> bool:
        """Whether the embedded database is still to be made (by a submit)."""
        from tickwork.store.urls import sqlite_file

        path = sqlite_file(self.settings.db_url)
        return self._store is None and path is not None and not path.exists()

    def _made(self) -> Store:
        """The store, the embedded database made first if there is none yet: a submit makes
        it, once it has checked what it was given (`Deployment.store` refuses a missing one)."""
        if self._store is None:
            from .embedded import ensure_schema

            ensure_schema(self.settings)
        return self.store

    def _made_artifacts(self) -> Artifacts:
        """The artifact store, on a store `_made` if need be."""
        self._made()
        return self.artifacts

    def _role(self, kind: str, config: Mapping[str, Any]) -> Role:
        """The configured role a root's kind gave it (`config["role"]`), whose model and
        budgets are its defaults as a child's are; a role of no fields if it has none."""
        name = config.get("role")
        found = self.jobs.roles(kind).get(name) if isinstance(name, str) else None
        return found or Role(name="", system_prompt="")

    def _graph(self, head: Head) -> GraphKind | None:
        """The graph kind a graph session runs on (issue 15), else None."""
        return self.jobs.graph(head.kind) if kind_of(head) is SessionKind.GRAPH else None

    def _price_config(
        self, spec: str, price: PriceLike, *, trusted: bool, doing: str = "submit"
    ) -> dict[str, float]:
        """The price a submit (or, `doing`, a fork) gives for model `spec`, checked against
        the configured one (`_given_price`), as the session's config stores it: its rates,
        those not given left out."""
        configured = self.providers.price(spec, self.settings.prices)
        given = _given_price(spec, price, configured, trusted=trusted, doing=doing)
        return {k: v for k, v in given._asdict().items() if v is not None}

    def _refuse_closed(self, session_id: str) -> None:
        """Refuse, before the patch's own checks, a fork of a session whose dead letter was
        already forked, resolved or dismissed: else a user who raised a budget the fork
        needed was told only then to add --again (the store refuses it again, in the
        fork's transaction, against a close meanwhile)."""
        try:
            letter = self.store.dead_letter(session_id)
        except dl.DeadLetterNotFound:
            return
        if letter.resolution:
            raise dl.closed(letter.id, session_id, dict(letter.resolution))

    def _fork_source(self, session_id: str) -> tuple[Head, tuple[Session, list[Saved]] | None]:
        """The head of the session to fork, and the session whole if it is archived."""
        try:
            return self.store.get(session_id), None
        except SessionNotFound:
            found = self.archived(session_id)
            if found is None:
                raise
            return found.session.head, (found.session, saved_of(found.record))

    def _check_model(self, spec: str) -> None:
        """Refuse a fork's model spec as a submit's is refused (InvalidModelSpec), naming
        the field (the command line says its flag): the spec is untrusted input (it goes
        into URLs, logs and the store)."""
        storable(spec, name="the model")
        try:
            check_spec(spec, self.providers)
        except InvalidModelSpec as exc:
            raise InvalidModelSpec(f"`model`: {exc.message}") from None

    def _check_output(self, call_id: str, output: str) -> None:
        """Refuse an output given by hand for a tool call (a fork's, a person's) longer than
        a tool's own output may be: no tool could have made it, and the prompt's bounds
        assume none is."""
        cap = self.settings.max_output_chars
        if len(output) > cap:
            raise InvalidInput(
                f"the output given for {call_id} is {len(output):,} characters; a tool's "
                f"output is at most {cap:,} (TICKWORK_MAX_OUTPUT_CHARS): give a shorter one"
            )

    def _check_unused(self, session_id: str | None) -> None:
        """An id an archived session had is not given to a new one: taken, as a live one's."""
        if session_id is not None and SESSION_ID.fullmatch(session_id):
            taken = self.store.retention.entry(session_id)
            if taken is not None:
                raise SessionExists(
                    f"session id {session_id!r} belonged to a session archived at "
                    f"{taken.archived_at}; choose another id"
                )


class _Held:
    """The artifact store a kind's `configure` stores a submission's files in (the workspace
    it packs). Where the submit is to make the embedded database (`hold`), they are held in
    a temporary folder until its checks have passed (`keep`): a submit refused after the
    kind packed its workspace (a model without a price, say) makes no database. Otherwise
    they go to the store at once, as ever. `close` removes the folder."""

    def __init__(self, opened: Callable[[], Artifacts], *, hold: bool) -> None:
        self._opened = opened
        self._folder = tempfile.TemporaryDirectory(prefix="tickwork-held-") if hold else None
        self._held: DirectoryArtifacts | None = None
        self._keys: dict[str, None] = {}  # in the order put
        if self._folder is not None:
            self._held = DirectoryArtifacts(Path(self._folder.name))

    def put(self, items: Mapping[str, bytes]) -> int:
        if self._held is None:
            return self._opened().put(items)
        written = self._held.put(items)  # checked against their hashes, as every store does
        self._keys.update(dict.fromkeys(items))
        return written

    def get(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """The blobs asked for; while held, only those held (there is no database yet, so
        no blob is anywhere else: BlobMissing for another)."""
        if self._held is None:
            return self._opened().get(hashes)
        return self._held.get(hashes)

    def keep(self) -> None:
        """Store what is held, in batches as a pack stores them; from now on at once."""
        held, self._held = self._held, None
        if held is None:
            return
        batch: dict[str, bytes] = {}
        size = 0
        for key in self._keys:
            (data,) = held.get([key]).values()
            batch[key] = data
            size += len(data)
            if size >= BATCH_BYTES:
                self._opened().put(batch)
                batch, size = {}, 0
        if batch:
            self._opened().put(batch)

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def _numbers(budgets: Mapping[str, Any]) -> None:
    """InvalidBudget unless each budget given is a number as JSON has it: `"3"` or `true`
    (a client's mistake) is not taken for 3 or 1, as no integer of a request body is."""
    for name, value in budgets.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise InvalidBudget(f"invalid budget: `{name}` must be a number, got {value!r}")


def _given_price(
    spec: str, price: PriceLike, configured: Price | None, *, trusted: bool, doing: str = "submit"
) -> Price:
    """The price a submit (or, `doing`, a fork) gives for `spec`, if the operator's pricing
    lets it stand: at least the configured price in every rate, or, for a model without
    one, from a trusted caller (the submitter over the API would choose what its tenant's
    quota counts)."""
    try:
        given = as_price(spec, price)
    except ConfigurationError as exc:
        raise InvalidInput(exc.message.replace("price override", "the price", 1)) from None
    if given.context_window is not None:
        raise InvalidInput(
            f"the price given for model {spec!r} holds a context window: give it as "
            "context_window (--context-window), not in the price"
        )
    if configured is None:
        if not trusted:
            raise InvalidInput(
                f"the price given for model {spec!r} is refused: a {doing} over the API may "
                "not price a model the deployment has no price for (its cost would count "
                f"what the {doing}'s caller says against the budget and the tenant's quota); "
                f"ask an operator to price it in TICKWORK_PRICES, then {doing} without `price`"
            )
        return given
    low = below(discounted(given, configured), configured)
    if low:
        raise InvalidInput(
            f"the price given for model {spec!r} (${given.prompt:g} prompt, "
            f"${given.completion:g} completion"
            + ("" if given.cached is None else f", ${given.cached:g} cached")
            + ("" if given.cache_write is None else f", ${given.cache_write:g} cache write")
            + " per million tokens) is refused: it is below "
            f"the configured price (${configured.prompt:g} prompt, ${configured.completion:g} "
            f"completion, ${configured.cached_rate:g} cached, ${configured.cache_write_rate:g} "
            f"cache write; TICKWORK_PRICES or the built-in table) in {', '.join(low)}; a "
            "given price may raise a model's price, never lower it: leave `price` out to pay "
            "the configured one"
        )
    return given


def _check_priced(
    spec: str,
    budgets: Budgets,
    config: Mapping[str, Any],
    prices: Mapping[str, PriceLike],
    providers: Providers,
    *,
    trusted: bool = True,
    quota: tuple[str, float] | None = None,
    forking: bool = False,
) -> None:
    """Refuse a session whose cost nothing would limit: its model has no price while it has
    a cost budget, or while its tenant has a dollar quota (`quota`: tenant, max_usd_per_day).
    `forking`: a fork's (its way to price the model is the fork's `price`)."""
    if not budgets.limits_cost and quota is None:
        return
    if session_price(spec, config, prices, providers=providers) is not None:
        return
    name = spec.rsplit(":", 1)[-1]
    if forking and trusted:
        how = (
            "give its price in USD per million tokens, prompt and completion, with the "
            f"fork's `price` (e.g. 0.5,1.5), or for every session with "
            f"TICKWORK_PRICES='{{\"{name}\": [0.5, 1.5]}}'"
        )
    elif trusted:
        how = (
            "give its price in USD per million tokens, prompt and completion: with the "
            "submit (--price 0.5,1.5, or price=(0.5, 1.5) in Python), or for every session "
            f"with TICKWORK_PRICES='{{\"{name}\": [0.5, 1.5]}}'"
        )
    else:
        how = f"ask an operator to price it in TICKWORK_PRICES ({name!r})"
    if budgets.limits_cost:
        raise UnpricedModel(
            f"model {spec!r} has no price, so `max_cost_usd` (${plain(budgets.max_cost_usd)}) "
            f"cannot limit its cost; {how}; or turn the cost budget off with `max_cost_usd` 0"
        )
    if quota is not None:
        raise UnpricedModel(
            f"model {spec!r} has no price, so the quota `max_usd_per_day` "
            f"(${plain(quota[1])}) of tenant {quota[0]!r} could not count its cost; {how}"
        )


def _login() -> str:
    """The login name a submit records when given no `submitted_by`, checked as one given."""
    try:
        login = getpass.getuser()
    except (OSError, KeyError):
        return ""
    try:
        return check_name(login, what="the login name ($LOGNAME or $USER)")
    except InvalidInput as exc:
        raise InvalidInput(f"{exc.message}; give `submitted_by`") from None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        # a validator's own message names its field already; pydantic's prefix says nothing
        said = str(first["msg"]).removeprefix("Value error, ")
        return said if said.startswith(f"`{where}` ") else f"`{where}`: {said}"
    return str(exc)
