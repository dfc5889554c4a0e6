// Sessions: the list and its filters, one session live (its events, its steps with what
// each cost and took) or archived (its patch, its forks, a fork of it), and a fork beside
// its parent.
import { windowOf } from "./admission.js";
import { callCard, ranAsEdited } from "./approvals.js";
import { forkForm } from "./fork.js";
import {
  API, OUTCOMES, ago, api, apiText, badge, can, count, dataTable, decisionLine, diffLines, el,
  enc, headSummary, hooks, label, letterKey, ms, outcomeBadge, paged, pager, pretty, redraw,
  sessionRef, sleep, state, toast, usd,
} from "./core.js";

const STATUSES = ["queued", "ready", "executing", "waiting_approval", "waiting_children", "completed", "failed", "cancelled"];
// the list's filters: each a query parameter of GET /sessions, kept in the page's address
const FILTERS = ["status", "outcome", "submitted_by", "kind", "parent_id"];
// those the archive's index answers (GET /sessions?archived=true refuses the others)
const ARCHIVED_FILTERS = ["status", "submitted_by", "kind"];
const FINISHED = ["completed", "failed", "cancelled"];

export async function sessionsView(view) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const chosen = Object.fromEntries(FILTERS.map((key) => [key, params.get(key) || ""]));
  const archived = params.get("archived") === "1";
  // one page of the list, newest first: `limit` and `offset` are kept in the address too
  const { limit, offset } = paged(params, 500);
  const go = () => {
    const query = new URLSearchParams();
    if (params.get("limit")) query.set("limit", String(limit));
    const asked = fields.archived.checked;
    for (const [key, field] of Object.entries(fields)) {
      if (key === "archived" || (asked && !ARCHIVED_FILTERS.includes(key))) continue;
      if (field.value.trim()) query.set(key, field.value.trim());
    }
    if (asked) query.set("archived", "1");
    location.hash = query.toString() ? `#/sessions?${query}` : "#/sessions";
  };
  const fields = {
    status: el("select", { id: "status-filter", name: "status", "aria-label": "status", onchange: go },
      ["", ...STATUSES].map((s) => el("option", { value: s, selected: s === chosen.status },
        s ? label(s) : "any status"))),
    outcome: el("select", { id: "outcome-filter", name: "outcome", "aria-label": "outcome", onchange: go },
      ["", ...OUTCOMES].map((o) => el("option", { value: o, selected: o === chosen.outcome },
        o ? label(o) : "any outcome"))),
    submitted_by: el("input", { type: "search", id: "submitter-filter", name: "submitted_by",
      value: chosen.submitted_by, placeholder: "submitted by", "aria-label": "submitted by" }),
    kind: el("input", { type: "search", id: "kind-filter", name: "kind", value: chosen.kind,
      placeholder: "kind (repair, …)", "aria-label": "kind" }),
    parent_id: el("input", { type: "search", id: "parent-filter", name: "parent_id",
      value: chosen.parent_id, placeholder: "forks of (a session id)", "aria-label": "forks of" }),
    archived: el("input", { type: "checkbox", id: "archived-filter", name: "archived",
      checked: archived, onchange: go }),
  };
  // the archive's index keeps no outcome and no lookup of forks: those filters are not offered
  for (const key of FILTERS) fields[key].hidden = archived && !ARCHIVED_FILTERS.includes(key);
  const error = el("p", { class: "error", id: "filter-error", role: "alert" });
  const filters = el("form", { id: "session-filters", class: "filters", onsubmit: (event) => {
    event.preventDefault();
    go();
  } }, Object.entries(fields).filter(([key]) => key !== "archived").map(([, field]) => field),
  el("label", { class: "check" }, fields.archived, " archived"),
  el("button", { type: "submit", class: "primary" }, "Filter"),
  el("button", { type: "button", id: "mine", onclick: () => {
    fields.submitted_by.value = state.me.name;
    go();
  } }, "Mine"),
  el("button", { type: "button", id: "clear-filters", onclick: () => { location.hash = "#/sessions"; } }, "Clear"));
  const list = el("div", { id: "session-list" });
  const note = el("p", { class: "meta", id: "archived-note" }, archived
    ? "Sessions retention archived (moved out of the live tables), the latest archived first, " +
      "from the archive's index, as tickwork ls --archived lists them: each opens on its page, " +
      "which serves its patch, its forks and a fork of it."
    : "Archived sessions (retention moved them out of the live tables) are listed with " +
      "archived ticked.");
  view.draw(el("h2", {}, archived ? "Archived sessions" : "Sessions"), filters, error, list, note);

  const query = new URLSearchParams({ limit: String(limit), offset: String(offset) });
  for (const key of archived ? ARCHIVED_FILTERS : FILTERS) if (chosen[key]) query.set(key, chosen[key]);
  if (archived) query.set("archived", "true");
  let heads;
  try {
    heads = await api(`/sessions?${query}`);
  } catch (e) {
    error.textContent = e.message;  // the filters stay as given, to be put right
    return;
  }
  if (archived) {
    list.replaceChildren(heads.length ? archivedTable(heads)
      : el("p", { class: "muted", id: "no-sessions" }, "No archived sessions match."),
    pager("#/sessions", params, { limit, offset, shown: heads.length }));
    return;
  }
  list.replaceChildren(heads.length ? dataTable({ id: "sessions" },
    ["id", "status", "outcome", "kind", "submitted by", "model", "step", "cost", "updated"],
    heads.map((h) => el("tr", { dataset: { session: h.id } },
      el("td", {}, sessionRef(h.id, `#/sessions/${enc(h.id)}`)),
      el("td", {}, badge(h.status)), el("td", { class: "outcome" }, outcomeBadge(h.outcome)),
      el("td", {}, h.kind), el("td", { class: "submitter" }, h.submitted_by || "–"),
      el("td", { class: "model" }, h.model),
      el("td", {}, h.step), el("td", { class: "cost" }, usd(h.cost_usd)), el("td", { class: "when" }, ago(h.updated_at)))))
    : el("p", { class: "muted", id: "no-sessions" }, "No sessions match."),
  pager("#/sessions", params, { limit, offset, shown: heads.length }));
}

// the archive index's rows (GET /sessions?archived=true): each opens on its page
function archivedTable(rows) {
  const ref = (id) => (id ? sessionRef(id, `#/sessions/${enc(id)}`) : "–");
  return dataTable({ id: "archived-sessions" },
    ["id", "status", "kind", "submitted by", "forked from", "finished", "archived"],
    rows.map((a) => el("tr", { dataset: { session: a.id } },
      el("td", {}, ref(a.id)), el("td", {}, badge(a.status)), el("td", {}, a.kind),
      el("td", { class: "submitter" }, a.submitted_by || "–"),
      el("td", {}, ref(a.parent_id)), el("td", { class: "when" }, ago(a.finished_at)),
      el("td", { class: "when" }, ago(a.archived_at)))));
}

function eventSummary(event) {
  const d = event.data || {};
  const parts = [];
  // `from`: a taken_over's or lease_expired's lease; `worker`, `version`, `reason`: a tick_refused's
  for (const key of ["step", "through", "call_id", "name", "decision", "approver", "feedback", "comment", "status", "outcome", "error_code", "message", "by", "parent_id", "from", "worker", "version", "reason"]) {
    if (d[key] !== undefined && d[key] !== null && d[key] !== "") parts.push(`${key}=${d[key]}`);
  }
  if (Array.isArray(d.calls)) parts.push(`calls=${d.calls.join(",")}`);
  return parts.join(" ");
}

// a date as `tickwork show` prints it (render.when), in UTC to the second, with the API's Z
// to say so: the page's every time is in UTC, whatever the browser's zone
const when = (iso) => (iso ? `${new Date(iso).toISOString().slice(0, 19).replace("T", " ")}Z` : "");
// an event's time of day, in UTC as `when` (its date, the whole time, on hover)
const timeOf = (iso) => el("time", { datetime: iso, title: when(iso) },
  `${new Date(iso).toISOString().slice(11, 19)}Z`);
const counted = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;

// what `tickwork show` says of a session the relay took over from a worker that was gone
// (render.taken_over: the last time, and how many before) and of one whose tick the workers
// that took it refused (render.refused, from the view's `refused`)
function relayNotes(view) {
  const taken = view.events.filter((e) => e.kind === "taken_over");
  const last = taken[taken.length - 1];
  const refused = view.refused || [];
  return [
    last ? el("p", { class: "meta", id: "taken-over" },
      `Taken over: ${when(last.at)} from ${(last.data || {}).from}, whose worker was gone` +
      (taken.length > 1 ? ` (and ${counted(taken.length - 1, "time")} before)` : "")) : null,
    refused.length ? el("p", { class: "warn", id: "refused" },
      `Not run: its tick was refused by ${counted(refused.length, "worker")} ` +
      `(${refused.map((r) => `${r.worker} at ${when(r.at)}`).join(", ")}): ` +
      `${refused[refused.length - 1].reason}. It moves only on a worker that can run it; the ` +
      "relay offers it again when the lease runs out (", el("code", {}, "tickwork runbook stuck"),
      ")") : null,
  ].filter(Boolean);
}

// how long a step's tool calls ran, from their observations
const toolMs = (step) => step.calls.reduce(
  (sum, call) => sum + (call.observation ? call.observation.duration_ms || 0 : 0), 0);

function tokensLine(step) {
  const cached = step.cached_prompt_tokens ? ` (${count(step.cached_prompt_tokens)} cached)` : "";
  return `${count(step.prompt_tokens)} prompt${cached} + ${count(step.completion_tokens)} completion tokens`;
}

// a step's button that picks it as the step to fork from
export function forkHere(step, onclick) {
  return el("button", { type: "button", class: "fork-here", dataset: { step }, onclick }, "Fork from here");
}

// why a compaction was made at once: the model refused the step's prompt as too long
// (`refused_prompt`), as `tickwork show` says it
function refusedNote(prompt) {
  if (!prompt) return "";
  const about = Number.isInteger(prompt.prompt_tokens_estimate)
    ? ` of about ${count(prompt.prompt_tokens_estimate)} tokens` : "";
  const within = Number.isInteger(prompt.window) ? ` in a window of ${count(prompt.window)}` : "";
  return ` (the model refused the prompt${about}${within} as too long)`;
}

// which observations the model read as stubs at a reply (`masked_through`), where that
// passed the one of the step `before` it, as `tickwork show` says it; a compaction names its cut
function maskedNote(step, before) {
  const through = step.masked_through || 0;
  return step.kind === "compaction" || through <= ((before && before.masked_through) || 0)
    ? "" : ` · observations of steps ≤${through} shown as stubs`;
}

// a call's arguments as it ran (or runs) with them: a person's edit says whose, as its
// approval card does, above what the model proposed
function callArguments(call) {
  const proposed = pretty(call.arguments === null ? call.raw_arguments : call.arguments);
  const edited = ranAsEdited(call);
  if (!edited) return [el("pre", { class: "args" }, proposed)];
  return [el("p", { class: "as-edited meta" }, `Arguments it ran with, ${edited.by}:`),
    el("pre", { class: "args" }, pretty(edited.arguments)),
    el("p", { class: "meta" }, "The model proposed:"),
    el("pre", { class: "proposed" }, proposed)];
}

// `actions(step)`: what to offer beside the step's heading (a fork from it), or none;
// `before`: the step before it, if any
function stepSection(step, actions, before) {
  return el("section", { class: "step", dataset: { step: step.step } },
    el("div", { class: "step-head" }, el("h4", {}, step.kind === "compaction"
      ? `Step ${step.step} · compaction of steps 1-${step.compacted_through}` +
        refusedNote(step.refused_prompt) +
        (step.ignored_calls ? ` (the model also called ${step.ignored_calls.join(", ")}: not run, a compaction runs none)` : "")
      : `Step ${step.step}`), actions ? actions(step) : null),
    el("p", { class: "meta usage" },
      `${step.model} · ${tokensLine(step)} · ${usd(step.cost_usd)} · model ${ms(step.latency_ms)}` +
      (step.calls.length ? ` · tools ${ms(toolMs(step))}` : "") + maskedNote(step, before)),
    step.thought ? el("blockquote", { class: "thought" }, step.thought) : null,
    step.calls.map((call) => el("div", { class: "tcall", dataset: { call: call.call_id } },
      el("p", {}, el("code", {}, call.name), ` ${call.call_id} `, badge(call.blocked ? "blocked" : call.state),
        call.observation ? el("span", { class: "took muted" }, ` took ${ms(call.observation.duration_ms)}`) : null),
      call.approval_reason ? el("p", { class: "reason muted" },
        `Needs approval: ${call.approval_reason}`) : null,
      ...callArguments(call),
      call.state === "in_doubt" ? el("p", { class: "doubt warn" },
        "In doubt: its worker was lost while it ran, so it may have run; it waits for a " +
        "decision again: run it again (approve), provide its output or reject it.") : null,
      call.decision ? decisionLine(call.decision, { earlier: call.state === "in_doubt" }) : null,
      call.observation ? el("pre", { class: call.observation.is_error ? "output error" : "output" },
        call.observation.content) : null)));
}

export function timeline(view, actions) {
  if (!view.steps.length) return el("p", { class: "muted" }, "No steps yet.");
  return view.steps.map((step, i) => stepSection(step, actions, view.steps[i - 1]));
}

// each step's tokens, cost and time in one table, with a bar of its model and tool time
function stepsTable(view) {
  if (!view.steps.length) return el("p", { class: "muted" }, "No steps yet.");
  const longest = Math.max(1, ...view.steps.map((s) => s.latency_ms + toolMs(s)));
  // widths through the CSSOM: the page's CSP refuses style attributes
  const part = (kind, value) => {
    const span = el("span", { class: kind, dataset: { ms: Math.round(value) } });
    span.style.width = `${(100 * value / longest).toFixed(1)}%`;
    return span;
  };
  const bar = (model, tools) => el("div", { class: "spark", title: `model ${ms(model)}, tools ${ms(tools)}` },
    part("model", model), part("tools", tools));
  const num = (text) => el("td", { class: "num" }, text);
  const t = view.totals;
  const tools = view.steps.reduce((sum, s) => sum + toolMs(s), 0);
  return dataTable({ id: "steps-table", class: "steps" },
    ["step", "prompt", "cached", "completion", "cost", "model", "tools", "time"],
    view.steps.map((s) => el("tr", { dataset: { step: s.step } },
      el("td", {}, el("a", { href: `#step-${s.step}`, onclick: (event) => {
        event.preventDefault();
        const shown = document.querySelector(`#timeline section.step[data-step="${s.step}"]`);
        if (shown) shown.scrollIntoView({ behavior: "smooth" });
      } }, s.kind === "compaction" ? `${s.step} (compaction)` : `${s.step}`)),
      num(count(s.prompt_tokens)), num(count(s.cached_prompt_tokens)), num(count(s.completion_tokens)),
      num(usd(s.cost_usd)), num(ms(s.latency_ms)), num(ms(toolMs(s))),
      el("td", { class: "bar-cell" }, bar(s.latency_ms, toolMs(s))))),
    el("tr", { class: "totals" }, el("th", {}, "total"), num(count(t.prompt_tokens)),
      num(count(t.cached_prompt_tokens)), num(count(t.completion_tokens)), num(usd(t.cost_usd)),
      num(ms(t.latency_ms)), num(ms(tools)), el("td", {})));
}

export async function sessionView(view, id) {
  const status = el("span", { id: "status" });
  const summary = el("div");
  const waiting = el("div", { id: "waiting" });
  const events = el("ol", { id: "events", class: "events" });
  const perStep = el("div", { id: "steps" });
  const steps = el("div", { id: "timeline" });
  const live = el("span", { id: "live", class: "muted" }, "connecting…");
  const compare = el("a", { id: "compare-link", class: "button", hidden: true,
                            href: `#/sessions/${enc(id)}/compare` }, "Beside its parent");
  // a failed session's dead letter: fork, resolve, dismiss. Found by the session's id (an
  // address of digits names a letter by its number first, another session's), once; linked
  // as the list links it; none listed: no link
  const letter = el("a", { id: "dead-letter-link", class: "button", hidden: true }, "Its dead letter");
  let findingLetter = null;
  const findLetter = () => api(`/dead-letters?session_id=${enc(id)}&limit=1`).then(([found]) => {
    if (!found) return;
    letter.href = `#/dead-letters/${enc(letterKey(found))}`;
    letter.hidden = false;
  }).catch(() => { findingLetter = null; }); // asked again at the next refresh
  const cancel = el("button", { type: "button", id: "cancel", class: "danger", hidden: true,
    onclick: async () => {
      try {
        const head = await api(`/sessions/${enc(id)}/cancel`, { method: "POST" });
        toast(`cancel requested for ${id}: ${head.status}`, "ok");
        refresh();
      } catch (e) { toast(e.message, "error"); }
    } }, "Cancel session");
  const forks = el("p", { id: "forks", class: "meta", hidden: true });
  const tree = el("div", { id: "tree", hidden: true });
  // the fork form, opened after the step it forks from (or above the timeline): one at a
  // time, never moved while the timeline redraws around it (what is typed, and where, stay)
  const forking = { form: null, at: null, last: null };
  const forkStart = el("div", { id: "fork-start" });
  const placeFork = () => {
    if (!forking.form) return;
    const section = forking.at === null ? null
      : steps.querySelector(`section.step[data-step="${forking.at}"]`);
    if (section) section.after(forking.form);
    else forkStart.append(forking.form);
  };
  // only what changed is drawn again: a step's button under the pointer stays (core.js redraw)
  const drawSteps = (fresh) => {
    const form = forking.form && forking.form.parentNode === steps ? forking.form : null;
    const before = (node) => Number(node.dataset.step) <= forking.at;
    redraw(steps, form ? [...fresh.filter(before), form, ...fresh.filter((node) => !before(node))] : fresh);
  };
  const openFork = (step) => {
    if (!forking.last) return; // the session is not read yet
    if (!forking.form) {
      const close = el("button", { type: "button", id: "fork-close", onclick: () => {
        forking.form.remove();
        forking.form = null;
      } }, "Close");
      forking.form = forkForm({ head: forking.last.head, steps: () => forking.last.steps, step,
        path: `/sessions/${enc(id)}/fork`, title: "Fork this session", extra: close });
    } else {
      const input = forking.form.querySelector("#fork-step");
      input.value = String(step);
      input.dispatchEvent(new Event("input"));
    }
    forking.at = step > 0 ? step : null;
    placeFork();
    forking.form.scrollIntoView({ behavior: "smooth", block: "nearest" });
    forking.form.querySelector("#fork-instruction").focus({ preventScroll: true });
  };
  const forkable = can("operator");
  const forkButton = el("button", { type: "button", id: "fork-open", hidden: !forkable,
    onclick: () => openFork(forking.last ? forking.last.head.step : 0) }, "Fork…");
  view.draw(
    el("div", { class: "bar" }, el("h2", {}, "Session ", el("code", {}, id), " ", status),
      el("span", { class: "actions" }, compare, letter, forkButton, cancel)),
    summary, forks, tree, waiting, el("h3", {}, "Per step"), perStep,
    el("h3", {}, "Events ", live), events, el("h3", {}, "Timeline"), forkStart, steps);
  let shownWaiting = "";
  let asked = 0; // refreshes begun: one answered after a later one began draws nothing

  async function refresh() {
    const mine = ++asked;
    const view = await api(`/sessions/${enc(id)}`);
    if (mine !== asked) return;
    const head = view.head;
    status.replaceChildren(badge(head.status));
    status.dataset.status = head.status;
    const shown = headSummary(head);
    shown.append(...relayNotes(view));
    redraw(summary, [shown]);
    compare.hidden = !head.parent_id || Boolean(head.spawn_call);
    if (head.status === "failed" && !findingLetter) findingLetter = findLetter();
    tree.hidden = !view.tree;
    if (view.tree) redraw(tree, [el("h3", {}, "Tree"), treeList(view.tree, id)]);
    cancel.hidden = FINISHED.includes(head.status) || !(can("approver") || can("operator"));
    const key = head.status === "waiting_approval" ? `${head.version}` : "";
    if (key !== shownWaiting) {
      // a call decided here stays shown, as decided, as in the approvals queue: above the
      // next call it waits for, if it waits again (one listed again shows its decision itself)
      let fresh = [];
      if (key) {
        const w = await api(`/approvals/${enc(id)}`);
        // a newer refresh draws them: it found `shownWaiting` not yet moved to this version
        if (mine !== asked) return;
        fresh = w.calls.map((call) => callCard(id, call, () => refresh()));
      }
      shownWaiting = key;
      const listed = new Set(fresh.map((card) => card.dataset.call));
      const decided = [...waiting.querySelectorAll("article.call.done")]
        .filter((card) => !listed.has(card.dataset.call));
      waiting.replaceChildren(...(decided.length ? [el("h3", {}, "Decided here"), ...decided] : []),
        ...(fresh.length ? [el("h3", {}, "Waiting for you"), ...fresh] : []));
    }
    redraw(perStep, [stepsTable(view)].flat());
    forking.last = view;
    const here = forkable ? (step) => forkHere(step.step, () => openFork(step.step)) : null;
    drawSteps([timeline(view, here)].flat());
  }

  let pending = null;
  const soon = () => {
    clearTimeout(pending);
    pending = setTimeout(() => refresh().catch(() => {}), 150);
  };
  try {
    await refresh();
  } catch (e) {
    // retention moved it out of the live tables: what the API still serves of it instead
    if (e.status === 404 && e.body && e.body.archived) return archivedView(view, id);
    throw e;
  }
  showForks(id, forks).catch(() => {});
  follow(view, id, (kind, event) => {
    events.append(el("li", { dataset: { kind, id: event.id } },
      timeOf(event.at), " ", el("strong", {}, kind), " ",
      eventSummary(event)));
    soon();
  }, async (end) => {
    // the last refresh, drawn before the view says so: once it reads "finished", what it
    // shows is final and nothing redraws it (no refresh is left pending)
    clearTimeout(pending);
    await refresh().catch(() => {});
    live.textContent = `finished: ${end.status}`;
  }, (text) => { live.textContent = text; });
}

// an archived session: the API serves its patch and its forks, not its steps nor events
async function archivedView(view, id) {
  const forks = el("p", { id: "forks", class: "meta", hidden: true });
  const patch = el("div", { id: "patch" }, el("p", { class: "muted" }, "Reading its patch…"));
  const forking = can("operator")
    ? forkForm({ head: null, steps: [], step: 0, path: `/sessions/${enc(id)}/fork`,
      title: "Fork this archived session" })
    : el("p", { class: "muted", id: "fork-refused" }, "Forking it needs the operator role.");
  view.draw(
    el("div", { class: "bar" }, el("h2", {}, "Session ", el("code", {}, id), " ",
      el("span", { id: "status", dataset: { status: "archived" } }, badge("archived")))),
    el("div", { class: "summary", id: "archived" }, el("p", {},
      `Session ${id} is archived: retention moved it out of the live tables once it finished. ` +
      "The server serves its patch and its forks; its steps and events are read back on the " +
      "server with ", el("code", {}, `tickwork show ${id}`), ".")),
    forks, el("h3", {}, "Patch"), patch, forking);
  showForks(id, forks).catch(() => {});
  patch.replaceChildren(patchBody(await apiText(`/sessions/${enc(id)}/patch`).catch((e) => e)));
}

// the tree of child sessions a session belongs to (docs/DESIGN.md section 16), from its root
function treeList(node, current) {
  const name = node.id === current ? el("strong", {}, node.id)
    : el("a", { href: `#/sessions/${enc(node.id)}` }, node.id);
  const item = el("li", { dataset: { session: node.id } }, name,
    node.role ? ` ${node.role} ` : " ", badge(node.status),
    node.outcome ? " " : "", node.outcome ? outcomeBadge(node.outcome) : null,
    node.error_code ? ` ${node.error_code}` : "", ` · step ${node.step} · ${usd(node.cost_usd)}`);
  if (node.children.length) item.append(el("ul", {}, node.children.map((c) => treeList(c, current))));
  return el("ul", { class: "tree" }, item);
}

// --- a fork beside its parent -------------------------------------------------------

// the session's forks, live or archived (a live session's or an archived one's), each a link
// to it beside this one; an archived one's to its page, which serves what is left of it
async function showForks(id, into) {
  const found = await api(`/sessions/${enc(id)}/forks`);
  into.hidden = !found.length;
  into.replaceChildren(`Forks (${found.length}): `, ...found.flatMap((f, i) => [i ? " · " : "",
    el("a", { href: f.archived ? `#/sessions/${enc(f.id)}` : `#/sessions/${enc(f.id)}/compare`,
              dataset: { fork: f.id, archived: f.archived ? "true" : "false" } }, f.id),
    ` from step ${f.fork_step}, ${label(f.status)}${f.archived ? ", archived" : ""}`]));
}

function sideHead(role, view) {
  const head = view.head;
  return el("div", { class: `side ${role}`, dataset: { session: head.id } },
    el("h3", {}, `${role === "parent" ? "Parent" : "Fork"} `,
      el("a", { href: `#/sessions/${enc(head.id)}` }, el("code", {}, head.id)), " ", badge(head.status)),
    el("p", { class: "meta" }, `${head.step} ${head.step === 1 ? "step" : "steps"} · ${count(head.tokens)} tokens · ${usd(head.cost_usd)}`,
      head.outcome ? " · " : "", head.outcome ? outcomeBadge(head.outcome) : null),
    head.final_answer ? el("p", { class: "answer" }, `Answer: ${head.final_answer}`) : null,
    head.error_code ? el("p", { class: "error" }, `${head.error_code}: ${head.error_message}`) : null);
}

// the `n`th of a side's `steps`
function sideStep(role, steps, n) {
  const step = steps[n - 1];
  return el("div", { class: `side ${role}` }, el("span", { class: "side-label" }, role),
    step ? stepSection(step, null, steps[n - 2]) : el("p", { class: "muted none" }, `no step here in the ${role}`));
}

function stepPairs(parent, fork, from, to) {
  const rows = [];
  for (let n = from; n <= to; n += 1) {
    rows.push(el("div", { class: "pair", dataset: { step: n } },
      sideStep("parent", parent.steps, n), sideStep("fork", fork.steps, n)));
  }
  return rows;
}

// what the fork changed; `parent` (when it could be read) gives what it had instead
function forkPatch(fork, parent) {
  const forked = fork.events.find((e) => e.kind === "forked");
  const data = forked ? forked.data : {};
  const patch = data.patch || {};
  const k = fork.head.fork_step;
  const items = [];
  if (patch.append_instruction) items.push(["instruction after step " + k, patch.append_instruction]);
  if (patch.system_prompt) items.push(["system prompt", patch.system_prompt]);
  for (const [callId, output] of Object.entries(patch.tool_outputs || {})) items.push([`output of ${callId}`, output]);
  if (patch.budgets && Object.keys(patch.budgets).length) items.push(["budgets", pretty(patch.budgets)]);
  if (patch.state && Object.keys(patch.state).length) items.push(["state", pretty(patch.state)]);
  if (patch.graph_version) items.push(["graph version", patch.graph_version]);
  // the model it runs on instead, and the price it was given (by rate, per million tokens)
  if (patch.model) {
    items.push(["model", patch.model + (parent ? ` (the parent's: ${parent.head.model})` : "")]);
  }
  if (patch.price && Object.keys(patch.price).length) {
    items.push(["price", Object.entries(patch.price).map(([rate, usd]) => `${label(rate)} $${usd}`)
      .join(", ") + " per million tokens"]);
  }
  // admission the fork was given instead of its parent's (docs/DESIGN.md section 15)
  const admission = [
    patch.priority != null ? `priority ${patch.priority}` : null,
    patch.concurrency_key ? `concurrency key ${patch.concurrency_key}` : null,
    patch.max_per_key ? `at most ${patch.max_per_key} of its key at once` : null,
  ].filter(Boolean);
  if (admission.length) items.push(["admission", admission.join(", ")]);
  if (patch.context_window) {
    const had = parent ? windowOf(parent.head) : null;
    items.push(["context window", `${count(patch.context_window)} tokens` +
      (had ? ` (the parent's: ${count(had)})` : "")]);
  }
  return el("section", { class: "summary", id: "fork-patch" },
    el("h3", {}, "What the fork changed"),
    el("p", { class: "meta" }, `from step ${k} of ${fork.head.parent_id}`,
      data.by ? ` · by ${data.by}` : "", forked ? ` · ${ago(forked.at)}` : ""),
    items.length ? el("dl", { class: "patch" }, items.flatMap(([what, text]) =>
      [el("dt", {}, what), el("dd", {}, el("pre", {}, text))]))
      : el("p", { class: "muted" }, "Nothing: the same steps, run again."),
    earlierPatches(fork.earlier_patches || []));
}

// a fork of a fork runs under the patches of the forks before it too (`tickwork show`'s
// "earlier patches"): each links to what that fork changed
function earlierPatches(earlier) {
  if (!earlier.length) return null;
  const links = earlier.flatMap((e, i) => [i ? "; " : "",
    // an archived fork has no compare view: its session's page says it is archived
    el("a", { href: e.unread ? `#/sessions/${enc(e.fork)}` : `#/sessions/${enc(e.fork)}/compare` },
      e.fork),
    e.unread ? " (not read: archived, or too far back)" : ` from step ${e.step} of ${e.session_id}`]);
  return el("p", { class: "meta", id: "earlier-patches" },
    "It runs under the patches of the forks before it too, oldest first: ", ...links);
}

// a patch as the API gave it, or why there is none (its refusal)
function patchBody(found) {
  return typeof found === "string" && found ? el("pre", { class: "diff" }, diffLines(found))
    : el("p", { class: "muted no-patch" }, found && found.message ? found.message : "No patch.");
}

function patchSide(role, sessionId, found) {
  return el("div", { class: `side ${role}`, dataset: { session: sessionId } },
    el("h4", {}, `${role === "parent" ? "Parent" : "Fork"}: `, el("code", {}, sessionId)),
    patchBody(found));
}

function patchPair(parentId, parentPatch, id, forkPatchText) {
  return [el("h3", {}, "Patches"),
    el("div", { class: "compare", id: "compare-patches" },
      el("div", { class: "pair" }, patchSide("parent", parentId, parentPatch), patchSide("fork", id, forkPatchText)))];
}

export async function compareView(view, id) {
  let fork;
  try {
    fork = await api(`/sessions/${enc(id)}`);
  } catch (e) {
    // an archived fork: its steps are not served, to be put beside anything
    if (e.status === 404 && e.body && e.body.archived) return archivedView(view, id);
    throw e;
  }
  const head = fork.head;
  const back = el("a", { href: `#/sessions/${enc(id)}` }, "back to the session");
  if (!head.parent_id) {
    view.draw(el("h2", {}, "Session ", el("code", {}, id)),
      el("p", { class: "muted", id: "not-a-fork" }, `Session ${id} is not a fork: it has no parent to put beside it. `, back));
    return;
  }
  const parentId = head.parent_id;
  const [parent, parentPatch, forkPatchText] = await Promise.all([
    api(`/sessions/${enc(parentId)}`).catch((e) => e),
    apiText(`/sessions/${enc(parentId)}/patch`).catch((e) => e),
    apiText(`/sessions/${enc(id)}/patch`).catch((e) => e),
  ]);
  const title = el("h2", { id: "compare-title" }, "Fork ", el("code", {}, id), " beside its parent ",
    el("code", {}, parentId));
  if (parent instanceof Error && parent.body && parent.body.archived) {
    view.draw(title, forkPatch(fork),
      el("p", { class: "meta", id: "parent-archived" }, `The parent ${parentId} is archived: `,
        "its steps are not served, its patch is, beside the fork's (",
        el("a", { href: `#/sessions/${enc(parentId)}` }, "its page, to fork it again"), "). ", back),
      ...patchPair(parentId, parentPatch, id, forkPatchText));
    return;
  }
  if (parent instanceof Error) {
    view.draw(title, forkPatch(fork),
      el("p", { class: "error", id: "parent-error" }, `The parent cannot be read: ${parent.message}`), back);
    return;
  }
  const k = head.fork_step;
  const last = Math.max(parent.steps.length, fork.steps.length);
  const kept = k > 0 ? el("details", { class: "kept", id: "kept-steps" },
    el("summary", {}, `Steps 1–${k}: the parent's, kept by the fork`),
    stepPairs(parent, fork, 1, k)) : null;
  const after = last > k ? stepPairs(parent, fork, k + 1, last)
    : [el("p", { class: "muted" }, `Neither has a step after step ${k} yet.`)];
  view.draw(title, forkPatch(fork, parent),
    el("div", { class: "compare", id: "compare" },
      el("div", { class: "pair heads" }, sideHead("parent", parent), sideHead("fork", fork)),
      kept,
      el("h3", { class: "after" }, k > 0 ? `After step ${k}` : "Steps"),
      after),
    ...patchPair(parentId, parentPatch, id, forkPatchText));
}

// Server-Sent Events over fetch, so the token goes in a header rather than in the URL;
// a dropped stream resumes from the last event id it saw.
function follow(view, id, onEvent, onEnd, onState) {
  const control = new AbortController();
  let stopped = false;
  let last = 0;
  view.onLeave(() => { stopped = true; control.abort(); });
  (async () => {
    while (!stopped) {
      try {
        const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
        if (last) headers["Last-Event-ID"] = String(last);
        const response = await fetch(`${API}/sessions/${enc(id)}/stream`, { headers, signal: control.signal });
        if (response.status === 401) {
          hooks.unauthorized("Your token is no longer accepted; log in again.");
          return;
        }
        if (!response.ok) {
          onState(`stream refused: HTTP ${response.status}`);
          if ([403, 404].includes(response.status)) return;
        } else {
          onState("live");
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          let buffer = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buffer += value.replace(/\r\n/g, "\n");
            let cut;
            while ((cut = buffer.indexOf("\n\n")) >= 0) {
              const frame = parseFrame(buffer.slice(0, cut));
              buffer = buffer.slice(cut + 2);
              if (!frame) continue;
              if (frame.id) last = Number(frame.id);
              if (frame.event === "end") {
                onEnd(JSON.parse(frame.data));
                return;
              }
              // the token no longer reads the session (revoked, moved): a reconnect is refused;
              // a revoked one reads nothing else either: back to the token prompt, saying why
              if (frame.event === "error") {
                const refused = JSON.parse(frame.data);
                if (refused.status === 401) hooks.unauthorized(refused.message);
                else onState(`stream ended: ${refused.message}`);
                return;
              }
              if (frame.data) onEvent(frame.event || "message", JSON.parse(frame.data));
            }
          }
        }
      } catch (e) {
        if (stopped) return;
      }
      onState("reconnecting…");
      await sleep(2000);
    }
  })();
}

function parseFrame(text) {
  const frame = { id: null, event: null, data: "" };
  let any = false;
  for (const line of text.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") frame.id = value;
    else if (field === "event") frame.event = value;
    else if (field === "data") frame.data += (frame.data ? "\n" : "") + value;
    else continue;
    any = true;
  }
  return any ? frame : null;
}

