"""Rich rendering of the views in `tickwork.views`: tables, timelines and event lines.

Everything a session holds is text a model or a person wrote, so it goes in as `Text`,
never as markup, and comes out without the control characters a terminal would obey
(`Terminal`). Long values are cut here; `--json` prints them whole. What a call would
write to files is never cut: a person approves it from this view.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.rule import Rule
from rich.segment import Segment
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tickwork.fsm.failures import failed_before_line, passed_before, passed_before_line
from tickwork.fsm.kinds import GraphRef, graph_of
from tickwork.fsm.values import PRICE_RATES, RUNNABLE, step_of_call, utc_date
from tickwork.fsm.wording import counted, plain, usd

from . import views
from .flags import by_settings, in_flags
from .remedies import remedies

STATUS_STYLE = {
    "queued": "magenta",
    "ready": "cyan",
    "executing": "cyan",
    "waiting_approval": "bold yellow",
    "waiting_children": "yellow",
    "completed": "green",
    "failed": "bold red",
    "cancelled": "dim",
}
THOUGHT_CHARS, ARGUMENT_CHARS, OUTPUT_CHARS = 600, 160, 300
#: why a `queued` session waits (fsm/admission.py)
QUEUED = "waits for room under its tenant's max_in_flight or its concurrency key's limit"


#: how wide output to a pipe or file is, unless $COLUMNS says otherwise; rows stay whole
PIPE_WIDTH = 200


#: the controls a terminal would obey in a session's text (`views.CONTROL_RANGES`), which
#: printed text drops: an escape sequence there could erase or rewrite the lines a person
#: approves
CONTROLS = dict.fromkeys(c for a, b in views.CONTROL_RANGES for c in range(a, b + 1))


class Terminal(Console):
    """A console that prints what it is given and obeys no control character in it: they
    are dropped (an escape sequence's printable rest stays visible), so the text a session
    holds cannot move the cursor, erase lines, retitle the window or set the clipboard.
    The styles rich adds itself are not text, and stay."""

    def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and not segment.text.isprintable():
                cleaned = segment.text.translate(CONTROLS)
                if cleaned != segment.text:
                    segment = Segment(cleaned, segment.style)
            yield segment


@functools.cache
def console() -> Console:
    width = None
    if not sys.stdout.isatty() and not os.environ.get("COLUMNS"):
        width = PIPE_WIDTH
    return Terminal(highlight=False, soft_wrap=False, width=width)


def show(*renderables: RenderableType) -> None:
    """Print each renderable on lines of its own.

    A table narrower than its `min_width` would cut its ids (see `whole`), so in a narrow
    terminal it is printed wider instead, and the terminal wraps its lines."""
    out = console()
    for renderable in renderables:
        needed = renderable.min_width if isinstance(renderable, Table) else None
        if needed and needed > out.width:
            wider(out, needed).print(renderable, crop=False)
        else:
            out.print(renderable)


def diff(text: str) -> Syntax:
    """A patch or diff, coloured, printed as it is: on the terminal's own background, so
    no line is padded with spaces to the console's width (a patch copied from the output
    still applies), and without the blank line a final newline would add."""
    return Syntax(text.removesuffix("\n"), "diff", word_wrap=True, background_color="default")


def note(text: str) -> None:
    """A line beside the output, not of it (standard error: a pipe gets the rows only),
    without the control characters `Terminal` drops (it may name others' files)."""
    sys.stderr.write(f"note: {text.translate(CONTROLS)}\n")
    sys.stderr.flush()


def wider(out: Console, width: int) -> Console:
    """A console like `out`, writing where it writes, `width` columns wide."""
    return Terminal(
        file=out.file,
        width=width,
        highlight=False,
        soft_wrap=False,
        force_terminal=out.is_terminal,
        color_system=out.color_system,  # type: ignore[arg-type]
        no_color=out.no_color,
    )


#: the least a folding column gets when a table is too wide for the terminal
FOLDED_WIDTH = 12


def whole(table: Table) -> Table:
    """`table` with its no-wrap columns (ids, times) never cut: its `min_width` holds them
    whole and gives each folding column a little room."""
    widths = []
    for column in table.columns:
        texts = [str(column.header), *(str(cell) for cell in column.cells)]
        widest = max(cell_len(line) for text in texts for line in text.splitlines() or [""])
        widths.append(widest if column.no_wrap else min(widest, FOLDED_WIDTH))
        if column.no_wrap:
            column.min_width = widest
    padding = table.padding[1] + table.padding[3]
    edges = 2 if table.show_edge and table.box else 0
    table.min_width = (
        sum(widths)
        + padding * len(widths)
        + edges
        + max(len(widths) - 1, 0) * (1 if table.box else 0)
    )
    return table


def clip(text: str | None, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    text = text or ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more chars; --json shows all)"


#: where a stored reason says what to do next, after what went wrong (an ENV_SETUP
#: failure's, `tickwork.worker.files.environments`)
NEXT = ". Next: "


def gist(reason: str, limit: int) -> str:
    """A stored reason as a listing shows it: cut to `limit` characters, except its next
    step ("Next: ...", to its line's end), kept whole after what went wrong is cut: a user
    of the list sees what to do. The lines after it (a setup's log) are left out."""
    # its first line's only: one in a log or a traceback below is no next step of ours
    went_wrong, said, step = reason.split("\n", 1)[0].partition(NEXT)
    if not said or len(reason) <= limit:
        return clip(reason, limit)
    left = len(reason) - min(len(went_wrong), limit) - len(NEXT) - len(step)
    cut = went_wrong[:limit] + ("…" if len(went_wrong) > limit else "")
    shown = f"{cut}{NEXT}{step}"
    return f"{shown} ({left} more chars; --json shows all)" if left else shown


def tail(text: str, limit: int) -> str:
    """The end of `text` (a log: where it says what went wrong), saying how much came before."""
    if len(text) <= limit:
        return text
    return f"({len(text) - limit} chars before; --json shows all) …{text[-limit:]}"


def reason_said(message: object) -> str:
    """A stored reason (why a session failed, a dead letter's message) as the command line
    prints it: each field it names in backticks that a flag gives is the flag
    (`tickwork.flags.in_flags`), except in a reason the settings made (`by_settings`)."""
    said = str(message)
    return said if by_settings(said) else in_flags(said)


def signature_said(signature: object) -> str:
    """A dead letter's error signature (`CODE: message` with its particulars taken out) as
    the command line prints it: its message through `reason_said`, as the message itself."""
    code, colon, rest = str(signature).partition(": ")
    return f"{code}{colon}{reason_said(rest)}" if colon else reason_said(code)


def when(iso: str | None) -> str:
    """A date to the second in UTC with its `Z`, as the page says it (`2026-12-07
    11:14:12Z`): the views' dates, whatever zone a stored one was written in."""
    if not iso:
        return ""
    return utc_date(datetime.fromisoformat(iso).replace(microsecond=0)).replace("T", " ")


def status(value: str) -> Text:
    return Text(value, style=STATUS_STYLE.get(value, ""))


def cancelling(h: Mapping[str, Any]) -> bool:
    """Whether a cancel of this runnable session is requested: it stops at its next tick
    (a suspended or queued one's cancel ends it at once)."""
    # a StrEnum status equals its value; a status this version does not know is not runnable
    return bool(h.get("cancel_requested")) and h["status"] in RUNNABLE


def head_status(h: Mapping[str, Any]) -> Text:
    """A session's status, with `(cancelling)` after it while a requested cancel waits
    for its next tick."""
    shown = status(h["status"])
    if cancelling(h):
        shown.append(" (cancelling)", style="magenta")
    return shown


#: how each outcome of a finished repair shows (fsm/outcomes.py)
OUTCOME_STYLE = {
    "repaired": "green",
    "tests_failing": "red",
    "tests_not_run": "red",
    "no_changes": "yellow",
}


def outcome_text(value: str | None) -> Text:
    """A session's outcome, or `-` for none (another kind, still running, or stored before)."""
    return Text(value, style=OUTCOME_STYLE.get(value, "")) if value else Text("-", style="dim")


def compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def listing(
    rows: list[dict[str, Any]],
    table: Callable[[list[dict[str, Any]]], RenderableType],
    *,
    json_output: bool,
    none: str,
) -> None:
    """A listing command's rows: one JSON document, else a table, else `none` (a line
    saying nothing matched)."""
    if json_output:
        views.emit(rows)
    elif rows:
        show(table(rows))
    else:
        show(none)


def listing_table(title: str) -> Table:
    """The look the listings (sessions, archived sessions, dead letters) share: a titled
    table, a rule under its heading, one space between columns."""
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
    )


def sessions_table(heads: Iterable[Mapping[str, Any]]) -> Table:
    heads = list(heads)
    table = listing_table("sessions, newest first")
    # a listing of several tenants (--tenant '*') says whose each session is
    tenants = len({h.get("tenant") for h in heads}) > 1
    columns: tuple[str, ...] = (
        "ID",
        "STATUS",
        "OUTCOME",
        "STEP",
        "TOKENS",
        "COST",
        "CREATED",
        "KIND",
        "NOTE",
    )
    if tenants:
        columns = (*columns[:-1], "TENANT", "NOTE")
    # ids stay whole so they can be copied; kind and note fold to fit
    for name in columns:
        table.add_column(
            name,
            no_wrap=name not in ("KIND", "NOTE"),
            overflow="fold",
            justify="right" if name in ("STEP", "TOKENS", "COST") else "left",
        )
    for h in heads:
        note = (
            f"{h['error_code']}: {reason_said(h['error_message'])}"
            if h["error_code"]
            else f"waiting on {', '.join(h['awaiting'])}"
            if h["awaiting"]
            else QUEUED
            if h["status"] == "queued"
            else _not_run(h)
            or _stale_build(h)
            or _lacking_plugins(h)
            or _repaired_nothing(h)
            or _still_failing(h)
            or _failing_after(h)
        )
        created = datetime.fromisoformat(h["created_at"]).strftime("%m-%d %H:%M")
        cells: list[RenderableType] = [
            Text(h["id"]),
            head_status(h),
            outcome_text(h.get("outcome")),
            str(h["step"]),
            f"{h['tokens']:,}",
            usd(h["cost_usd"]),
            created,
            Text(_kind(h)),
        ]
        if tenants:
            cells.append(Text(str(h.get("tenant") or "")))
        table.add_row(*cells, Text(gist(note, 80)))
    return whole(table)


def _kind(h: Mapping[str, Any]) -> str:
    """A session's kind, with its graph's version for a graph session: during an upgrade the
    sessions of the old version are the ones a drain waits for (`tickwork runbook graph
    version`), and `ls --json`'s `version` is the row's, not the graph's."""
    graph = _graph(h)
    return f"{h['kind']} v{graph.version}" if graph is not None else str(h["kind"])


def _not_run(h: Mapping[str, Any]) -> str:
    """Why a finished repair's final tests did not run (its `tests_not_run`), else ''."""
    tests = (h.get("result") or {}).get("tests")
    why = tests.get("not_run") if isinstance(tests, Mapping) else None
    return f"tests did not run: {why}" if why and isinstance(why, str) else ""


def _stale_build(h: Mapping[str, Any]) -> str:
    """Why a finished repair's final tests said nothing of its change to compiled code (the
    extension modules were not rebuilt: `stale_build`), else ''."""
    tests = (h.get("result") or {}).get("tests")
    why = tests.get("stale_build") if isinstance(tests, Mapping) else None
    return reason_said(why) if why and isinstance(why, str) else ""


def _lacking_plugins(h: Mapping[str, Any]) -> str:
    """Why a finished repair's final tests failed whatever its patch (pytest found no fixture
    of a plugin the environment lacks: `lacking_plugins`), else ''."""
    tests = (h.get("result") or {}).get("tests")
    why = tests.get("lacking_plugins") if isinstance(tests, Mapping) else None
    return reason_said(why) if why and isinstance(why, str) else ""


#: `ls`'s note of a `repaired` session whose tests passed before any change too
PASSED_BEFORE = "tests passed before any change too: the patch repaired no failing test"


def _repaired_nothing(h: Mapping[str, Any]) -> str:
    """PASSED_BEFORE of a `repaired` session whose tests passed before any change too (the
    outcome stays `repaired`: clients filter on it), else ''."""
    result = h.get("result")
    if h.get("outcome") != "repaired" or not isinstance(result, Mapping):
        return ""
    return PASSED_BEFORE if passed_before(result.get("tests_before"), result.get("tests")) else ""


def _still_failing(h: Mapping[str, Any]) -> str:
    """A `no_changes` repair whose final tests failed (its one patch rejected, or failed
    to apply): the outcome says nothing was changed, the note that the tests still fail."""
    result = h.get("result")
    tests = result.get("tests") if isinstance(result, Mapping) else None
    if h.get("outcome") != "no_changes" or not isinstance(tests, Mapping):
        return ""
    if tests.get("passed") is not False:
        return ""
    failing = tests.get("failing")
    count = f" ({len(failing)} failing)" if isinstance(failing, list) and failing else ""
    return f"tests still fail{count}: the session changed nothing"


def _failing_after(h: Mapping[str, Any]) -> str:
    """A `tests_failing` repair's note: how many tests fail, and whether they failed before
    any change too (a failure the patch did not cause) or not (one it may have), as the
    result's `failed_before` counts them; '' without a count."""
    result = h.get("result")
    if h.get("outcome") != "tests_failing" or not isinstance(result, Mapping):
        return ""
    found = result.get("failed_before")
    if not isinstance(found, Mapping):
        return ""
    count, of = found.get("count"), found.get("of")
    if not isinstance(count, int) or not isinstance(of, int) or of < 1:
        return ""
    failing = f"{of} failing" if of > 1 else "1 failing"
    if count == 0:
        return f"tests still fail ({failing}), none of which failed before any change"
    if count == of:
        which = "it" if of == 1 else "each"
        return f"tests still fail ({failing}), {which} failed before any change too"
    return f"tests still fail ({failing}), {count} of which failed before any change too"


def archived_table(entries: Iterable[Mapping[str, Any]]) -> Table:
    """Archived sessions as `tickwork ls --archived` shows them."""
    entries = list(entries)
    table = listing_table("archived sessions, the latest archived first")
    # a listing of several tenants (--tenant '*') says whose each session is, as `ls` does
    tenants = len({e.get("tenant") for e in entries}) > 1
    columns: tuple[str, ...] = (
        "ID",
        "STATUS",
        "CREATED",
        "FINISHED",
        "ARCHIVED",
        "KIND",
        "FORK OF",
    )
    if tenants:
        columns = (*columns[:-1], "TENANT", "FORK OF")
    for name in columns:
        table.add_column(name, no_wrap=name not in ("KIND", "FORK OF"), overflow="fold")

    def at(value: str | None) -> str:
        return datetime.fromisoformat(value).strftime("%m-%d %H:%M") if value else ""

    for e in entries:
        parent = f"{e['parent_id']} @{e['fork_step']}" if e["parent_id"] else ""
        cells: list[RenderableType] = [
            Text(e["id"]),
            status(e["status"]),
            at(e["created_at"]),
            at(e["finished_at"]),
            at(e["archived_at"]),
            Text(e["kind"]),
        ]
        if tenants:
            cells.append(Text(str(e.get("tenant") or "")))
        table.add_row(*cells, Text(parent))
    return whole(table)


def timeline(
    view: Mapping[str, Any], previews: Mapping[str, Mapping[str, Any] | None] | None = None
) -> Group:
    """A session view as a timeline: header, steps with their calls, totals, outcome.

    A call that writes files shows what it writes in full: `previews` (call id -> a diff
    against the workspace's current file, or the child's patch an adoption would take,
    from `tickwork.api.previews`) for calls that have not run, else its content or patch
    as proposed."""
    h, totals = view["head"], view["totals"]
    parts: list[RenderableType] = [
        _header(
            h,
            view.get("lease"),
            view.get("forks") or (),
            view.get("forked_from"),
            events=view.get("events") or (),
            earlier=view.get("earlier_patches") or (),
        )
    ]
    if view.get("tree"):
        parts.append(tree(view["tree"], mark=h["id"]))
    masked = 0
    for step in view["steps"]:
        parts.append(
            Rule(
                Text(
                    f"step {step['step']}{_compaction(step)} · {when(step['at'])} · "
                    f"{step['model']} · "
                    f"{step['prompt_tokens']:,}+{step['completion_tokens']:,} tokens"
                    f"{_cached(step)} · {usd(step['cost_usd'])} · {_took(step, h)}"
                    f"{_masked(step, masked)}"
                ),
                align="left",
            )
        )
        if step["thought"]:
            parts.append(Text(clip(step["thought"], THOUGHT_CHARS)))
        if step["calls"]:
            parts.append(_calls_table(step["calls"], graph=_graph(h) is not None))
            parts.extend(_reasons(step["calls"], h["awaiting"]))
            parts.extend(_file_changes(step["calls"], previews or {}))
        masked = step.get("masked_through") or 0
    parts.append(Rule(align="left"))
    parts.append(
        Text(
            f"total: {counted(totals['steps'], 'step')} · {counted(totals['calls'], 'call')} · "
            f"{totals['tokens']:,} tokens ({totals['prompt_tokens']:,} prompt"
            f"{_cached(totals, ', ')}, {totals['completion_tokens']:,} completion) · "
            f"{usd(totals['cost_usd'])}"
        )
    )
    if (retry := retrying(h, view.get("events") or ())) is not None:
        parts.append(retry)
    if (refusals := refused(view.get("refused") or ())) is not None:
        parts.append(refusals)
    if (cancel := cancelled_by(h, view.get("events") or ())) is not None:
        parts.append(cancel)
    parts.extend(outcome(h, view["steps"]))
    return Group(*parts)


def cancelled_by(h: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Text | None:
    """Who cancelled a cancelled session, and when they asked (the first request's: a later
    one is the runtime finishing it, "cancel during a tick"); None for a session not
    cancelled, or one whose request is not among `events`."""
    if h["status"] != "cancelled":
        return None
    asked = next((e for e in events if e.get("kind") == "cancel_requested"), None)
    if asked is None:
        return None
    by = (asked.get("data") or {}).get("by") or "someone unnamed"
    return Text(f"cancelled by {by} at {when(asked['at'])}", style="bold")


def refused(refusals: Sequence[Mapping[str, Any]]) -> Text | None:
    """What to tell a person whose session waits while the workers that took its tick
    refused it (`views.refused_ticks`); None if none did."""
    if not refusals:
        return None
    workers = ", ".join(f"{r['worker']} at {when(r['at'])}" for r in refusals)
    return Text(
        f"not run: its tick was refused by {counted(len(refusals), 'worker')} ({workers}): "
        f"{refusals[-1]['reason']}. It moves only on a worker that can run it; the relay "
        "offers it again when the lease runs out (`tickwork runbook stuck`)",
        style="yellow",
    )


#: how much of a failed model call's error the retry line shows
RETRY_ERROR_CHARS = 200


def retrying(h: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Text | None:
    """The model call a session waits to make again after it failed transiently (its last
    `model_retry` event, which `watch` prints): which attempt of how many, and when; None
    while no retry is pending."""
    attempts = h.get("model_attempts") or 0
    if h.get("status") != "ready" or not attempts:
        return None
    last = next((e for e in reversed(events) if e.get("kind") == "model_retry"), None)
    d = (last or {}).get("data") or {}
    delay = d.get("delay_s")
    if last is None or d.get("attempt") != attempts or not isinstance(delay, int | float):
        return None
    due = datetime.fromisoformat(last["at"]) + timedelta(seconds=delay)
    # `max_model_retries` retries after the first call
    most = h["budgets"]["max_model_retries"] + 1
    return Text(
        f"retrying the model: attempt {attempts + 1} of {most}, next at {when(due.isoformat())} "
        f"(attempt {attempts} failed: {clip(str(d.get('error') or ''), RETRY_ERROR_CHARS)})",
        style="yellow",
    )


def _cached(usage: Mapping[str, Any], lead: str = " · ") -> str:
    """The prompt tokens read from and written to the provider's cache, if any were."""
    read, written = usage.get("cached_prompt_tokens", 0), usage.get("cache_creation_tokens", 0)
    parts = [f"{read:,} cached"] if read else []
    parts += [f"{written:,} written to the cache"] if written else []
    return lead + ", ".join(parts) if parts else ""


def _took(step: Mapping[str, Any], h: Mapping[str, Any]) -> str:
    """How long a step took: the model's reply, or in a graph (no model reply) its node's run."""
    if _graph(h) is None:
        return f"{step['latency_ms']:.0f} ms"
    ran = sum((c.get("observation") or {}).get("duration_ms", 0.0) for c in step["calls"])
    return f"{ran:.0f} ms node run"


def _compaction(step: Mapping[str, Any]) -> str:
    if step.get("kind") != "compaction":
        return ""
    return (
        f" · compaction of steps 1-{step.get('compacted_through')}"
        + _refused(step.get("refused_prompt"))
        + _ignored(step.get("ignored_calls"))
    )


def _masked(step: Mapping[str, Any], before: int) -> str:
    """Which observations the model read as stubs at a reply (`masked_through`), where that
    passed the step before's (`before`); a compaction's line names its own cut."""
    through = step.get("masked_through") or 0
    if step.get("kind") == "compaction" or through <= before:
        return ""
    return f" · observations of steps ≤{through} shown as stubs"


def _refused(prompt: Any) -> str:
    """Why a compaction was made at once: the model refused the step's prompt as too long."""
    if not isinstance(prompt, Mapping):
        return ""
    tokens, window = prompt.get("prompt_tokens_estimate"), prompt.get("window")
    about = f" of about {tokens:,} tokens" if isinstance(tokens, int) else ""
    within = f" in a window of {window:,}" if isinstance(window, int) else ""
    return f" (the model refused the prompt{about}{within} as too long)"


def _ignored(names: Any) -> str:
    """The tools a compaction's model called beside its summary: none of them ran."""
    if not names:
        return ""
    return f" (the model also called {', '.join(map(str, names))}: not run, a compaction runs none)"


def _admission(h: Mapping[str, Any]) -> str:
    """The tenant, and what orders and bounds its admission: priority, concurrency key."""
    line = str(h.get("tenant") or "default")
    if h.get("priority"):
        line += f" · priority {h['priority']}"
    if h.get("concurrency_key"):
        line += f" · concurrency key {h['concurrency_key']} (at most {h.get('max_per_key') or 1})"
    if h.get("status") == "queued":
        line += f" · queued: {QUEUED}"
    return line


def price_line(price: Mapping[str, Any]) -> str:
    """The price a session was given at submit (its config's `price`), as `show` prints it."""
    rates = " · ".join(
        f"${price[rate]:g} {rate.replace('_', ' ')}"
        for rate in PRICE_RATES
        if isinstance(price.get(rate), int | float)
    )
    return f"{rates} per million tokens (given at submit; it may only raise the configured one)"


def _header(
    h: Mapping[str, Any],
    lease: Mapping[str, Any] | None,
    forks: Sequence[Mapping[str, Any]],
    origin: Mapping[str, Any] | None = None,
    *,
    events: Sequence[Mapping[str, Any]] = (),
    earlier: Sequence[Mapping[str, Any]] = (),
) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    b = h["budgets"]
    cost_limit = f"${plain(b['max_cost_usd'])}" if b["max_cost_usd"] else "no cost budget"
    rows: list[tuple[str, RenderableType]] = [
        ("session", Text(h["id"])),
        ("status", head_status(h)),
        ("outcome", outcome_text(h.get("outcome"))),
        ("kind", Text(h["kind"])),
        ("model", Text(h["model"])),
        ("submitted by", Text(h.get("submitted_by") or "(not recorded)")),
        ("tenant", Text(_admission(h))),
        ("created", when(h["created_at"])),
        ("updated", f"{when(h['updated_at'])}  (version {h['version']})"),
        (
            "budgets",
            f"steps {h['step']}/{b['max_steps']} · tokens {h['tokens']:,}/"
            f"{b['max_tokens']:,} · cost {usd(h['cost_usd'])}/{cost_limit} · "
            f"deadline {plain(b['deadline_s'])}s",
        ),
    ]
    if cancelling(h):
        rows.append(("cancel", Text("requested: it stops at its next tick, which a worker runs")))
    given = (h.get("config") or {}).get("price")
    if isinstance(given, Mapping):
        rows.append(("price", Text(price_line(given))))
    if h.get("spawn_call"):
        spawned = f"{h['parent_id']} ({h['spawn_call']}) as {h.get('role') or 'a child'}"
        rows.append(("spawned by", Text(f"{spawned}; root {h.get('root_id')}")))
    elif h["parent_id"]:
        made = f" by {origin['by']}" if origin and origin.get("by") else ""
        rows.append(("forked from", Text(f"{h['parent_id']} at step {h['fork_step']}{made}")))
        if origin is not None:
            rows.append(("patch", Text("\n".join(patch_lines(origin.get("patch") or {})))))
        # a fork of a fork runs under the patches of its chain too (`dlq show` lists them)
        lines = chain_lines(earlier, h["fork_step"])
        rows.extend(("earlier patches" if i == 0 else "", Text(t)) for i, t in enumerate(lines))
    if (graph := _graph(h)) is not None:
        rows.append(("graph", Text(f"{graph.name} version {graph.version}")))
    config = h.get("config") or {}
    if isinstance(config.get("source"), dict):
        from tickwork.worker.files.sources import describe

        rows.append(("source", Text(describe(config["source"]))))
        if config.get("goal"):
            rows.append(("goal", Text(str(config["goal"]))))
        elif h.get("kind") == "repair" and not h.get("spawn_call"):
            from tickwork.worker.jobs.repair.job import DEFAULT_GOAL

            rows.append(("goal", Text(f"{DEFAULT_GOAL} (none given: the default)", "dim")))
        rows.append(("test command", Text(str(config.get("test_command") or ""))))
    from tickwork.worker.sandbox.egress import network_mode

    network = network_mode(config)
    if network == "all" and isinstance(config.get("source"), dict):
        allowed = ", ".join(config.get("egress_allow") or ()) or "the operator's allow-list"
        shown = f"all: its commands may reach {allowed} through the egress proxy"
        rows.append(("network", Text(shown, "yellow")))
    elif network == "none":
        rows.append(("network", Text("none: not even its setup")))
    env = (h.get("result") or {}).get("environment")
    if isinstance(env, Mapping):
        rows.append(("environment", environment_line(env)))
    elif isinstance(config.get("environment"), Mapping) and h.get("status") in ("queued", "ready"):
        # built (or found) by the session's first tick, before its first model call
        setup = config["environment"].get("setup")
        shown = setup if isinstance(setup, str) else f"{len(setup or ())} commands"
        doing = (
            "its tick builds or finds it now (`tickwork env ls`)"
            if lease is not None
            else "the next tick builds or finds it, before the first model call"
        )
        rows.append(("environment", Text(f"not ready yet (setup {shown}): {doing}", "dim")))
    if lease is not None:
        expiry = "expired" if lease["expired"] else "expires"
        rows.append(("lease", Text(f"{lease['owner']} ({expiry} {when(lease['expires_at'])})")))
    if (taken := taken_over(events)) is not None:
        rows.append(("taken over", taken))
    if (expired := taken_over(events, "lease_expired")) is not None:
        rows.append(("lease ran out", expired))
    rows.extend(("forks" if i == 0 else "", Text(fork_line(f))) for i, f in enumerate(forks))
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def taken_over(events: Sequence[Mapping[str, Any]], kind: str = "taken_over") -> Text | None:
    """The last time the relay took the session over from a worker that was gone (`kind`
    `lease_expired`: offered its tick again once a lease ran out), and how many times
    before; None if it never did."""
    taken = [e for e in events if e.get("kind") == kind]
    if not taken:
        return None
    last = taken[-1]
    text = Text(f"{when(last['at'])} {summary(kind, last['data'])}")
    if len(taken) > 1:
        text.append(f" (and {counted(len(taken) - 1, 'time')} before)")
    return text


#: how much of a patched prompt, instruction or tool output the header shows
PATCH_CHARS = 120


def patch_lines(patch: Mapping[str, Any]) -> list[str]:
    """A fork's patch (`ForkPatch`), one line a change, long texts clipped; "none" if it
    changed nothing but the step it starts from."""

    def quoted(text: str) -> str:
        left = len(text) - PATCH_CHARS
        return repr(text[:PATCH_CHARS]) + (
            f"… ({left} more chars; --json shows all)" if left > 0 else ""
        )

    lines = []
    if patch.get("system_prompt") is not None:
        lines.append(f"system prompt: {quoted(patch['system_prompt'])}")
    if patch.get("append_instruction"):
        lines.append(f"appended instruction: {quoted(patch['append_instruction'])}")
    for call_id, output in (patch.get("tool_outputs") or {}).items():
        lines.append(f"tool output of {call_id}: {quoted(output)}")
    if patch.get("budgets"):
        lines.append(
            "budgets: " + ", ".join(f"{k} {compact(v)}" for k, v in patch["budgets"].items())
        )
    if patch.get("model"):
        lines.append(f"model: {patch['model']}")
    if patch.get("context_window"):
        lines.append(f"context window: {patch['context_window']:,} tokens")
    if patch.get("state"):
        lines.append(f"state: {clip(compact(patch['state']), PATCH_CHARS)}")
    if patch.get("graph_version"):
        lines.append(f"graph version: {patch['graph_version']}")
    if patch.get("priority") is not None:
        lines.append(f"priority: {patch['priority']}")
    if patch.get("concurrency_key") is not None or patch.get("max_per_key") is not None:
        key = patch.get("concurrency_key") or "the original's"
        limit = f" (at most {patch['max_per_key']} at once)" if patch.get("max_per_key") else ""
        lines.append(f"concurrency key: {key}{limit}")
    return lines or ["none (the same session from that step)"]


def tree(node: Mapping[str, Any], *, mark: str | None = None) -> Tree:
    """A session tree (`views.tree`): each session with its role, status, outcome and cost;
    `mark` is the session being shown."""

    def label(n: Mapping[str, Any]) -> Text:
        text = Text(n["id"], style="bold" if n["id"] == mark else "")
        if n.get("role"):
            text.append(f" {n['role']}", style="cyan")
        text.append(" ")
        text.append_text(status(n["status"]))
        if n.get("outcome"):
            text.append(f" {n['outcome']}")
        if n.get("error_code"):
            text.append(f" {n['error_code']}", style="red")
        text.append(f" · step {n['step']} · {usd(n['cost_usd'])}", style="dim")
        return text

    def grow(branch: Tree, n: Mapping[str, Any]) -> None:
        for child in n.get("children") or ():
            grow(branch.add(label(child)), child)

    top = Tree(label(node))
    grow(top, node)
    return top


def environment_line(env: Mapping[str, Any]) -> Text:
    """A session's environment in one line: key, status, built or reused, what is missing
    (`tickwork env show KEY` has its build log)."""
    key = str(env.get("key") or "")[:12] or "-"
    status = str(env.get("status") or "")
    parts = [f"{key} {status}"]
    if status == "ready":
        parts.append("built by this session" if env.get("built") else "reused")
    if env.get("missing"):
        parts.append("not installed: " + ", ".join(map(str, env["missing"])))
    if said := version_said(env):
        parts.append(said)
    if env.get("note"):
        parts.append(str(env["note"]))
    style = "red" if status == "failed" else ("yellow" if env.get("missing") else "")
    return Text(" · ".join(parts), style)


def version_said(env: Mapping[str, Any]) -> str:
    """What an environment's record says of the version its VCS version plugin was given
    (`worker/files/versions.py`), "" if none."""
    version = env.get("version")
    if not isinstance(version, Mapping) or not version.get("value"):
        return ""
    return (
        f"version {version['value']} ({version.get('from') or '?'}; given to the build as "
        f"{version.get('via')})"
    )


def _graph(h: Mapping[str, Any]) -> GraphRef | None:
    """A graph session's graph (name, version), else None (issue 15)."""
    return graph_of(h.get("config") or {})


def _calls_table(calls: list[Mapping[str, Any]], *, graph: bool = False) -> Table:
    table = Table(show_edge=False, pad_edge=False, expand=False)
    # a graph's step is one node run: its input state (shown when a person decides on it)
    # and the update it made
    names = (
        ("CALL", "NODE", "STATE IN", "STATUS", "UPDATE", "DECISION")
        if graph
        else ("CALL", "TOOL", "ARGUMENTS", "STATE", "OUTPUT", "DECISION")
    )
    for name in names:
        table.add_column(name, overflow="fold")
    for c in calls:
        arguments = c["arguments"] if c["arguments"] is not None else c["raw_arguments"]
        if file_change(arguments) is not None:
            # shown whole below the table; here only what names the file
            kept = {k: v for k, v in arguments.items() if k not in ("content", "patch")}
            arguments = {**kept, "…": "shown below"}
        shown = clip(compact(arguments), ARGUMENT_CHARS)
        if graph and not arguments:
            # a node no person decides on records no state in its call: `{}` read as empty
            shown = "(not recorded)"
        seen = c["observation"]
        output = Text("")
        if seen is not None:
            output = Text(
                clip(seen["content"], OUTPUT_CHARS), style="red" if seen["is_error"] else ""
            )
        # a call loop detection closed has its observation (done) but never ran
        state = "blocked" if c.get("blocked") else c["state"]
        table.add_row(
            Text(c["call_id"]),
            Text(c["name"]),
            Text(shown, style="dim" if graph and not arguments else ""),
            Text(
                state,
                style="yellow" if state in ("awaiting_approval", "in_doubt", "blocked") else "",
            ),
            output,
            Text(_current_decision(c)),
        )
    return table


def _current_decision(c: Mapping[str, Any]) -> str:
    """A call's decision as it stands: an in-doubt call waits for one again (its worker died
    while it ran), whatever a person decided before it ran, kept as what came earlier."""
    if c["state"] != "in_doubt":
        return decision_text(c["decision"])
    earlier = f"; earlier: {decision_text(c['decision'])}" if c["decision"] else ""
    return f"in doubt: run it again (approve), provide-output or reject{earlier}"


#: how a reason line says what a person decided on a call that asked for one
DECIDED = {
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
    "provide_output": "output provided",
}


def _reasons(calls: list[Mapping[str, Any]], awaiting: Iterable[str]) -> list[RenderableType]:
    """Why each call that asked for a person did: one the session waits on needs approval;
    one decided says who decided what, and why it asked, as past (dim)."""
    waiting = set(awaiting)
    lines: list[RenderableType] = []
    for c in calls:
        reason = c.get("approval_reason")
        if not reason:
            continue
        named = f"{c['call_id']} {c['name']}"
        d = c["decision"]
        if c["call_id"] in waiting and d is None:
            lines.append(Text(f"{named} needs approval: {reason}", style="yellow"))
        elif d is not None:
            decided = f"{DECIDED.get(d['kind'], d['kind'])} by {d['approver']}"
            lines.append(Text(f"{named} {decided}; asked: {reason}", style="dim"))
        else:
            lines.append(Text(f"{named} not decided; asked: {reason}", style="dim"))
    return lines


def file_change(arguments: Any) -> tuple[str, str] | None:
    """(what, text) of a call that writes files (write_file's content, apply_patch's
    patch), or None: these are shown whole, never cut."""
    if not isinstance(arguments, Mapping):
        return None
    if isinstance(arguments.get("content"), str):
        return f"content of {arguments.get('path')}", arguments["content"]
    if isinstance(arguments.get("patch"), str):
        return "patch", arguments["patch"]
    return None


def _file_changes(
    calls: list[Mapping[str, Any]], previews: Mapping[str, Mapping[str, Any] | None]
) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for c in calls:
        preview = previews.get(c["call_id"])
        by = c.get("as_edited")  # the decision's arguments are those it ran with
        change = file_change(c["decision"]["arguments"] if by else c["arguments"])
        if preview is not None:
            path = preview.get("path")
            where = f" {path}" if path else ""
            parts.append(
                Text(f"{c['call_id']} {c['name']}{where}: {preview['note']}", style="bold")
            )
            parts.append(diff(preview["diff"]))
        elif change is not None:
            what, text = change
            said = f" {by}" if by else ""
            parts.append(Text(f"{c['call_id']} {c['name']}: the {what}{said}, whole", style="bold"))
            parts.append(diff(text) if what == "patch" else Text(text))
    return parts


def decision_text(d: Mapping[str, Any] | None) -> str:
    if d is None:
        return ""
    text = f"{d['kind']} by {d['approver']} at {when(d['at'])}"
    if d["kind"] == "edit":
        text += f": {clip(compact(d['arguments']), ARGUMENT_CHARS)}"
    elif d["kind"] == "approve" and d.get("arguments") is not None:  # an edited call, again
        text += f", as edited: {clip(compact(d['arguments']), ARGUMENT_CHARS)}"
    elif d["kind"] == "reject" and d["feedback"]:
        text += f": {clip(d['feedback'], ARGUMENT_CHARS)}"
    elif d["kind"] == "provide_output":
        text += f": {clip(d['output'], ARGUMENT_CHARS)}"
    if d["comment"]:
        text += f" ({clip(d['comment'], ARGUMENT_CHARS)})"
    return text


def outcome(h: Mapping[str, Any], steps: list[Mapping[str, Any]]) -> list[RenderableType]:
    """What the session waits for, how it failed, or what it produced."""
    parts: list[RenderableType] = []
    if h["awaiting"]:
        calls = {c["call_id"]: c for s in steps for c in s["calls"]}
        for call_id in h["awaiting"]:
            c = calls.get(call_id, {"name": "?", "fingerprint": ""})
            if c.get("state") == "in_doubt":
                # it may have run: a person says whether to run it again or what it did
                edited = bool(c.get("as_edited"))
                parts.append(
                    Text(
                        f"waiting for a decision on {call_id} ({c['name']}, fingerprint "
                        f"{c['fingerprint']}): in doubt, its worker was lost while it ran, "
                        f"so it may have run. Run it again{' as edited' if edited else ''}: "
                        "tickwork approve "
                        f"{h['id']} {call_id}; say what it did instead: tickwork "
                        f"provide-output {h['id']} {call_id} --output TEXT; or tickwork "
                        f"reject {h['id']} {call_id}",
                        style="yellow",
                    )
                )
                continue
            why = f", because {c['approval_reason']}" if c.get("approval_reason") else ""
            parts.append(
                Text(
                    f"waiting for a decision on {call_id} ({c['name']}, fingerprint "
                    f"{c['fingerprint']}{why}): "
                    f"tickwork approve|edit|reject {h['id']} {call_id}",
                    style="yellow",
                )
            )
    if h["error_code"]:
        message = reason_said(h["error_message"])
        env = (h["result"] or {}).get("environment")
        if h["error_code"] == "ENV_SETUP" and isinstance(env, Mapping) and _log_end(env.get("log")):
            message = message.split("\n", 1)[0]  # its log's end is shown under `environment:`
        parts.append(Text(f"error: {h['error_code']}: {message}", style="bold red"))
    if _graph(h) is not None:  # the final answer of a graph is its state
        state = (h["result"] or {}).get("state")
        parts.append(Text("final state:" if h["final_answer"] else "state:", style="bold"))
        parts.append(Text(clip(json.dumps(state, indent=2, ensure_ascii=False), 4000)))
        return parts
    if h["final_answer"] is not None:
        parts.append(Text("final answer:", style="bold"))
        parts.append(Text(clip(h["final_answer"], 4000)))
    result = dict(h["result"] or {})
    patch = result.pop("patch", None)
    if isinstance(patch, str) and patch:
        parts.append(Text("patch:", style="bold"))
        parts.append(diff(patch))
    touched = result.get("tests_changed")
    if isinstance(touched, list) and touched:
        shown = ", ".join(str(t) for t in touched[:5]) + (", ..." if len(touched) > 5 else "")
        parts.append(
            Text(
                f"the patch changes tests ({shown}): check that it repaired the code, not "
                "the tests",
                style="yellow",
            )
        )
    parts.extend(_environment(result.pop("environment", None)))
    final = result.pop("tests", None)
    parts.extend(_tests(final))
    # its failing tests: `failed_before` says what matters, and whether they passed
    if said := passed_before_line(result.pop("tests_before", None), final):
        parts.append(Text(said, style="yellow"))
    if said := failed_before_line(result.pop("failed_before", None)):
        parts.append(Text(said, style="yellow"))
    if result:
        parts.append(Text("result:", style="bold"))
        parts.append(Text(json.dumps(result, indent=2, ensure_ascii=False)))
    return parts


def _environment(env: Any) -> list[RenderableType]:
    """A repair's environment (`worker/files/environments.py`'s record) in a few lines, its
    setup log as text: `tickwork env show KEY` has the rest."""
    if not isinstance(env, Mapping):
        return []
    line = Text("environment: ", style="bold")
    line.append(str(env.get("status", "?")), style="red" if env.get("status") == "failed" else "")
    key = env.get("key")
    if isinstance(key, str) and key:
        line.append(f", key {key[:12]} (`tickwork env show {key[:12]}`)")
    missing = env.get("missing")
    if isinstance(missing, list) and missing:
        line.append(f"; not installed: {', '.join(str(m) for m in missing)}", style="yellow")
    if said := version_said(env):
        line.append(f"; {said}")
    for name in ("note", "error"):
        if env.get(name):
            line.append(f"; {env[name]}")
    if env.get("status") != "failed":
        return [line]  # a built one's log says nothing the line does not: `env show` has it
    return [line, *_setup_log_end(env.get("log"), str(key or "")[:12])]


#: the lines of a failed setup's log `show` prints (where pip says what went wrong)
SETUP_LOG_LINES = 20
#: a longer line of it is clipped (a progress bar, a minified file)
SETUP_LOG_LINE_CHARS = 300


def _setup_log_end(log: Any, key: str) -> list[RenderableType]:
    """A failed setup's log's last lines, whole lines under a heading that says where the
    rest is, or nothing for no log."""
    if not isinstance(log, str) or not log.strip():
        return []
    lines = log.strip().splitlines()
    shown = lines[-SETUP_LOG_LINES:]
    where = f"`tickwork env show {key}`" if key else "`--json`"
    said = f"its setup log (also in {where}):"
    if len(lines) > len(shown):
        said = f"its setup log's last {len(shown)} lines ({where} has it whole):"
    heading = Text(said, style="bold")
    body = "\n".join(clip(ln, SETUP_LOG_LINE_CHARS) for ln in shown)
    return [heading, Text(body, style="dim")]


def _tests(tests: Any) -> list[RenderableType]:
    """A repair's final test run: its command and exit, why it did not run, its output."""
    if not isinstance(tests, Mapping):
        return []
    line = Text("final tests: ", style="bold")
    line.append(f"`{tests.get('command') or ''}`")
    if tests.get("not_run"):
        line.append(f" did not run: {tests['not_run']}", style="red")
    elif tests.get("timed_out"):
        line.append(" timed out", style="red")
    elif tests.get("failed"):
        line.append(f" failed: {tests['failed']}", style="red")
    elif tests.get("cut_short"):
        line.append(f" exit {tests.get('exit_code')}, failed: {tests['cut_short']}", style="red")
    else:
        passed = tests.get("passed") is True
        line.append(
            f" exit {tests.get('exit_code')}, {'passed' if passed else 'failed'}",
            style="green" if passed else "red",
        )
    parts: list[RenderableType] = [line, *_log_end(tests.get("output"))]
    if isinstance(stale := tests.get("stale_build"), str) and stale:
        parts.append(Text(reason_said(stale), style="yellow"))
    if isinstance(lacking := tests.get("lacking_plugins"), str) and lacking:
        parts.append(Text(reason_said(lacking), style="yellow"))
    return parts


#: what `watch` says of a session it leaves waiting for its children (neither ended nor
#: waiting for a person: it moves on when they end, and any of them may wait for one)
WAITING_CHILDREN = (
    "it waits for its child sessions and moves on when they have ended (a child waiting "
    "for a person holds it): `tickwork watch CHILD` follows one, `tickwork watch` this one "
    "again once they have ended"
)


def waiting_children(drawn: Mapping[str, Any], session_id: str) -> list[RenderableType]:
    """What `watch` prints of a session it leaves at `waiting_children`: its tree (`drawn`,
    `views.tree`), the session marked, and which sessions to follow."""
    return [tree(drawn, mark=session_id), Text(WAITING_CHILDREN)]


def _log_end(log: Any) -> list[RenderableType]:
    """The end of a log (a setup's, a test run's output) as dim text, if there is one."""
    if not isinstance(log, str) or not log.strip():
        return []
    return [Text(tail(log.strip(), 4000), style="dim")]


def event_line(e: Mapping[str, Any]) -> Text:
    """One event as a line: time, kind, and what it says."""
    line = Text(f"{when(e['at'])}  ")
    line.append(f"{e['kind']:<18}", style=_event_style(e["kind"]))
    line.append(" " + summary(e["kind"], e["data"]))
    return line


def _event_style(kind: str) -> str:
    return {
        "failed": "bold red",
        "dead_lettered": "red",
        "completed": "green",
        "approval_requested": "yellow",
        "loop_intervention": "yellow",
        "cancelled": "dim",
    }.get(kind, "cyan")


def _node(d: Mapping[str, Any]) -> str:
    """The graph node an event of a model call names (`node ask · `), or nothing."""
    node = d.get("node")
    return f"node {node} · " if isinstance(node, str) and node else ""


def summary(kind: str, d: Mapping[str, Any]) -> str:
    if kind == "model_called":
        return (
            f"step {d.get('step')} · {_node(d)}{d.get('model')} · "
            f"{d.get('prompt_tokens', 0) + d.get('completion_tokens', 0):,} tokens · "
            f"{usd(d.get('cost_usd', 0))} · {d.get('latency_ms', 0):.0f} ms"
            + (
                f" · cap lowered to {d['cap_lowered_to']:,} (the server's window)"
                if isinstance(d.get("cap_lowered_to"), int)
                else ""
            )
        )
    if kind == "compacted":
        return (
            f"step {d.get('step')}: steps 1-{d.get('through')} summarised · "
            f"{d.get('prompt_tokens', 0) + d.get('completion_tokens', 0):,} tokens · "
            f"{usd(d.get('cost_usd', 0))}" + _ignored(d.get("ignored_calls"))
        )
    if kind == "context_overflow":
        window, stated = d.get("window"), d.get("stated_window")
        return (
            f"step {d.get('step')}: {_node(d)}the model refused a prompt of about "
            f"{d.get('prompt_tokens_estimate', 0):,} tokens as too long · window "
            + (f"{window:,}" if isinstance(window, int) else "none")
            + (f", the model states {stated:,}" if isinstance(stated, int) else "")
        )
    if kind == "step_recorded":
        return f"step {d.get('step')}: calls {', '.join(d.get('calls', [])) or 'none'}"
    if kind == "approval_requested":
        doubt = " (in doubt: it was running when its worker died)" if d.get("in_doubt") else ""
        calls = d.get("calls", [])
        verb = "needs" if len(calls) == 1 else "need"
        return f"step {d.get('step')}: {', '.join(calls)} {verb} a decision{doubt}"
    if kind == "approval_decided":
        # a rejection's feedback as `decision_text` has it (events before it have none)
        text = f"{d.get('call_id')}: {d.get('decision')} by {d.get('approver')}"
        text += f": {clip(d['feedback'], ARGUMENT_CHARS)}" if d.get("feedback") else ""
        return text + (f" ({d['comment']})" if d.get("comment") else "")
    if kind in ("tool_started", "tool_finished"):
        text = f"{d.get('call_id')} {d.get('name')}"
        if kind == "tool_finished":
            text += f" · {d.get('duration_ms', 0):.0f} ms · {d.get('output_chars', 0)} chars"
            text += " · error" if d.get("is_error") else ""
        return text + (" (rerun)" if d.get("rerun") else "")
    if kind in ("failed", "dead_lettered"):
        return f"{d.get('error_code')}: {_first_line(reason_said(d.get('message')))}"
    if kind == "model_retry" and isinstance(d.get("delay_s"), int | float):
        text = f"attempt {d.get('attempt')} failed, retry in {d['delay_s']:.1f} s"
        text += f": {d.get('error')}"
        if isinstance(d.get("tokens"), int):  # a billed reply the session could not use
            text += f" · {d['tokens']:,} tokens · {usd(d.get('cost_usd', 0))}"
        return text
    if kind == "forked":
        return f"from {d.get('parent_id')} at step {d.get('from_step')} by {d.get('by')}"
    if kind == "taken_over":
        return f"from {d.get('from')}, whose worker was gone"
    if kind == "lease_expired":
        return f"the lease of {d.get('from')} ran out with no tick saved: offered again"
    if kind == "tick_refused":
        return f"by {d.get('worker')} at version {d.get('version')}: {d.get('reason')}"
    return " ".join(f"{k}={compact(v)}" for k, v in d.items())


def _first_line(message: str) -> str:
    """A failure's message as an event's line gives it: its first line, which says what
    failed and what to do, and how many lines follow (an ENV_SETUP's setup log: `watch`
    printed it with each of `failed` and `dead_lettered`, then again under the outcome)."""
    first, _, rest = message.partition("\n")
    more = len(rest.splitlines())
    return f"{first} (+{more} more lines: `tickwork show`)" if more else first


def dead_letters_table(letters: Iterable[Mapping[str, Any]]) -> Table:
    from tickwork.store.dead_letters import status_of

    table = listing_table("dead letters, newest first")
    # ids stay whole so they can be copied: the dead letter's, its session's, and the fork
    # that resolved it (under the session); the rest folds to fit
    table.add_column("ID", no_wrap=True, justify="right")
    table.add_column("SESSION", no_wrap=True)
    table.add_column("CODE", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("AT", no_wrap=True)
    for name in ("KIND", "LAST TOOL", "MESSAGE"):
        table.add_column(name, overflow="fold")
    for d in letters:
        session = Text(d["session_id"])
        for line in _fork_lines(d["id"], d.get("resolution") or {}):
            session.append(f"\n{line}", style="dim")
        status = d.get("status") or status_of(d.get("resolution"))
        table.add_row(
            str(d["id"]),
            session,
            Text(d["code"], style="red"),
            Text(status, style="bold" if status == "open" else "dim"),
            datetime.fromisoformat(d["at"]).strftime("%m-%d %H:%M"),
            Text(d["kind"]),
            Text(d["last_tool"] or ""),
            Text(gist(reason_said(d["message"]), 100)),
        )
    return whole(table)


#: the most forks of one dead letter `dlq ls` names; `dlq show` names every one
LISTED_FORKS = 3


def _fork_lines(letter_id: int, resolution: Mapping[str, Any]) -> list[str]:
    """The forks made of a dead letter, one line each: which of them resolved it (where
    more than one was made), and how many more there are past LISTED_FORKS."""
    from tickwork.store.dead_letters import forks_of, status_of

    forks = [f["fork"] for f in forks_of(resolution)]
    resolver = resolution.get("fork") if status_of(dict(resolution)) == "forked" else None
    marked = " (resolved it)" if len(forks) > 1 else ""
    lines = [f"→ fork {f}{marked if f == resolver else ''}" for f in forks[:LISTED_FORKS]]
    if len(forks) > LISTED_FORKS:
        more = counted(len(forks) - LISTED_FORKS, "more fork")
        lines.append(f"→ and {more}: `tickwork dlq show {letter_id}`")
    return lines


def dead_letter_header(d: Mapping[str, Any]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("dead letter", f"{d['id']} ({when(d['at'])})")
    grid.add_row("code", Text(f"{d['code']}: {reason_said(d['message'])}", style="red"))
    grid.add_row("signature", Text(signature_said(d["error_signature"])))
    if d["resolved_at"]:
        grid.add_row("resolved", Text(f"{when(d['resolved_at'])} {d['closed']}"))
    for i, fork in enumerate(d.get("forks") or ()):
        grid.add_row("forks" if i == 0 else "", Text(fork_line(fork)))
    if earlier := d.get("earlier_patches"):
        lines = chain_lines(earlier, d["session"]["head"]["fork_step"])
        for i, line in enumerate(lines):
            grid.add_row("earlier patches" if i == 0 else "", Text(line))
    for i, line in enumerate(remedies(d)):
        grid.add_row("next" if i == 0 else "", Text(line))
    return grid


def earlier_patch_line(earlier: Mapping[str, Any]) -> str:
    """A fork the session descends from, with its patch on one line (`Reads.earlier_patches`)."""
    fork = earlier["fork"]
    if earlier.get("unread"):
        return f"{fork}: not read here (archived?); `tickwork show {fork}` shows its patch"
    made = f"{fork} from {earlier['session_id']} at step {earlier['step']}"
    return f"{made}: {'; '.join(patch_lines(earlier.get('patch') or {}))}"


def chain_lines(earlier: Sequence[Mapping[str, Any]], fork_step: int) -> list[str]:
    """The forks a fork of a fork descends from, oldest first, one line each
    (`earlier_patch_line`), saying of each whose appended instruction or tool outputs a
    later fork left behind (it started from a step before them: `fsm.forks.fork` keeps an
    instruction after a kept step only, an output of a kept call only)."""
    later = [*(e.get("step") for e in earlier), fork_step][1:]
    lines = []
    for i, found in enumerate(earlier):
        line = earlier_patch_line(found)
        patch, step = found.get("patch") or {}, found.get("step")
        starts = [s for s in later[i:] if isinstance(s, int)]
        if isinstance(step, int) and starts and min(starts) < step:
            start = min(starts)
            lost = [
                what
                for what, given in (
                    ("its appended instruction", patch.get("append_instruction")),
                    (_outputs_after(patch.get("tool_outputs") or {}, start), True),
                )
                if given and what
            ]
            if lost:
                shown = " and ".join(lost)
                line += f" (a later fork started from step {start}: {shown} not kept)"
        lines.append(line)
    return lines


def _outputs_after(outputs: Mapping[str, Any], start: int) -> str:
    """What a fork from step `start` leaves of `outputs` written by hand (by call id): those
    of calls after that step (a call id's step is in its name, `fsm.values.call_id_for`),
    "" if none."""
    after = sorted(c for c in outputs if (n := step_of_call(c)) is None or n > start)
    if not after:
        return ""
    if len(after) == 1:
        return f"its output of {after[0]} (a call after step {start})"
    return f"its outputs of {', '.join(after)} (calls after step {start})"


def fork_line(fork: Mapping[str, Any]) -> str:
    made = when(fork["created_at"])
    return f"{fork['id']} from step {fork['fork_step']} · {fork['status']} · {made}"


def stats_tables(by: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Table]:
    tables = []
    for grouping, rows in by.items():
        table = Table(title=f"dead letters by {grouping}", title_justify="left")
        table.add_column(grouping.upper(), overflow="fold")
        table.add_column("COUNT", justify="right")
        table.add_column("LATEST")
        for row in rows:
            value = row["value"]
            if value is not None and grouping == "error_signature":
                value = signature_said(value)
            table.add_row(
                Text("(none)" if value is None else str(value)),
                str(row["count"]),
                when(row["latest"]),
            )
        tables.append(table)
    return tables


def settings_table(settings: Mapping[str, Any]) -> Table:
    table = Table(
        title="settings in force (TICKWORK_* variables; secrets masked)", title_justify="left"
    )
    table.add_column("SETTING")
    table.add_column("VARIABLE")
    table.add_column("VALUE", overflow="fold")
    for name, value in settings.items():
        table.add_row(name, f"TICKWORK_{name.upper()}", Text(compact(value)))
    return table
