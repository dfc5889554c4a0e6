// What every view of the page uses: building elements, calling the API with the token,
// and the small pieces of text and badges shown everywhere. Plain DOM, no build step.
// Everything shown comes from the model or from people, so it is set as text, never as HTML.

export const API = "/api/v1";
export const TOKEN_KEY = "tickwork.token";
export const REFRESH_MS = 5000;
// who is logged in; `cleanup` stops a view's timers and streams when another is shown (visit)
export const state = { token: sessionStorage.getItem(TOKEN_KEY), me: null, cleanup: [] };
// set by app.js: what a refused token does (log out, with why)
export const hooks = { unauthorized: () => {} };
export const main = document.getElementById("main");

export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// what makes an element the same one in the next drawing: its data-key, data-step,
// data-call, data-session or id ("" for none: then its place among its siblings)
const keyOf = (node) => (node.nodeType === Node.ELEMENT_NODE ? node.dataset.key ?? node.dataset.step
  ?? node.dataset.call ?? node.dataset.session ?? node.id ?? "" : "");
const sameKind = (a, b) => a.nodeType === b.nodeType && a.nodeName === b.nodeName && keyOf(a) === keyOf(b);

function copyAttributes(from, into) {
  for (const { name } of [...into.attributes]) if (!from.hasAttribute(name)) into.removeAttribute(name);
  for (const { name, value } of from.attributes) {
    if (into.getAttribute(name) === value) continue;
    // the page's CSP refuses style attributes; the CSSOM sets the same
    if (name === "style") into.style.cssText = from.style.cssText;
    else into.setAttribute(name, value);
  }
}

// `into`'s children made like `fresh` (nodes), keeping each node that is still there: one
// unchanged stays as it was, one changed is changed in place. A redraw every few seconds
// that replaced them would take a click whose press and release straddle it (the button
// under the pointer is another by the release). A kept element keeps its listeners, not the
// fresh one's: a listener must depend on nothing but its element's key. One marked
// data-whole (a card whose listeners share what they typed and said) is kept only if
// nothing in it changed, else drawn anew whole. A fresh node that is a child of `into`
// already (a form kept open among redrawn steps) stays itself.
export function redraw(into, fresh) {
  const olds = [...into.childNodes].filter((node) => !fresh.includes(node));
  const keyed = new Map(olds.filter((node) => keyOf(node)).map((node) => [keyOf(node), node]));
  const unkeyed = olds.filter((node) => !keyOf(node));
  const placed = fresh.map((node) => {
    if (node.parentNode === into) return node;
    const i = keyOf(node) ? -1 : unkeyed.findIndex((old) => sameKind(old, node));
    const old = keyOf(node) ? keyed.get(keyOf(node)) : unkeyed.splice(i, i < 0 ? 0 : 1)[0];
    if (!old || !sameKind(old, node)) return node;
    keyed.delete(keyOf(node));
    if (old.isEqualNode(node)) return old;
    if (node.nodeType === Node.ELEMENT_NODE && "whole" in node.dataset) return node;
    if (node.nodeType !== Node.ELEMENT_NODE) {
      old.nodeValue = node.nodeValue;
      return old;
    }
    copyAttributes(node, old);
    redraw(old, [...node.childNodes]);
    return old;
  });
  placed.forEach((node, i) => {
    if (into.childNodes[i] !== node) into.insertBefore(node, into.childNodes[i] || null);
  });
  while (into.childNodes.length > placed.length) into.lastChild.remove();
}

export const enc = encodeURIComponent;
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));
// an admin passes every role's check, as in the API (tickwork/api/auth.py)
export const can = (role) => Boolean(state.me && ["admin", role].some((r) => state.me.roles.includes(r)));
// statuses read better with spaces; error codes stay as they are written
export const label = (text) => (text === text.toLowerCase() ? text.replace(/_/g, " ") : text);
export const badge = (text, extra) => el("span", { class: `badge ${extra || text}` }, label(text));

// a session id in a list's narrow column: on one line, its start shown (what the CLI takes
// as well, 6 characters or more), the whole id on hovering and in the text (a selection, a
// double click copy it whole); a link to its page if `href`
export const sessionRef = (id, href) => el(href ? "a" : "code", { class: "id", title: id, href }, id);

// how a dead letter's link names it: by its session's id, as a letter's number is not kept
// once retention archives its session with it (the address by the session's id then says
// where it went); but digits name a letter by its number first, so a session id of digits
// alone would open another session's letter: such a one's letter is named by its own number
// a dead letter's key in a link: its session's id, but for an id of digits, which the API
// reads as a number too: then `#N`, its number only
export const letterKey = (d) => (/^\d+$/.test(d.session_id) ? `#${d.id}` : d.session_id);

export function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h ago`;
  return `${(seconds / 86400).toFixed(1)} days ago`;
}

// a duration in milliseconds as people read it: 340 ms, 1.2 s, 3 min 5 s
export function ms(value) {
  const n = Number(value) || 0;
  // rounded once, then split: 119,600 ms read "1 min 60 s", 59,960 ms "60.0 s"
  if (Math.round(n) < 1000) return `${Math.round(n)} ms`;
  const tenths = Math.round(n / 100);
  if (tenths < 600) return `${(tenths / 10).toFixed(1)} s`;
  const seconds = Math.round(n / 1000);
  return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

export const count = (n) => Number(n || 0).toLocaleString("en-US");
// a cost as `tickwork ls` and `show` print it (fsm/wording.py `usd`): $ and 4 decimals, and a
// cost above nothing but below a hundredth of a cent "<$0.0001", never "$0.0000"
export function usd(n) {
  const value = Number(n || 0);
  return value > 0 && value < 0.0001 ? "<$0.0001" : `$${value.toFixed(4)}`;
}

export function toast(message, kind) {
  const box = document.getElementById("toast");
  box.replaceChildren(el("p", { class: kind || "info" }, message));
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => box.replaceChildren(), 8000);
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function call(path, options, read) {
  const { method = "GET", body } = options || {};
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(API + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) hooks.unauthorized("Your token is no longer accepted; log in again.");
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => ({})));
  return read(response);
}

// the API's JSON; an error answer raises ApiError with the API's code and message
export const api = (path, options) => call(path, options, (r) => r.json().catch(() => ({})));
// the API's text (a patch)
export const apiText = (path) => call(path, {}, (r) => r.text());

let visits = 0;

// One showing of a view. A view still loading when the next one starts (a slow answer, a
// quick click) neither draws over the newer view nor leaves its timers and streams running.
export function visit() {
  visits += 1;
  for (const stop of state.cleanup.splice(0)) stop();
  const mine = visits;
  const current = () => mine === visits;
  return {
    current,
    draw: (...nodes) => { if (current()) main.replaceChildren(...nodes); },
    onLeave: (stop) => { if (current()) state.cleanup.push(stop); else stop(); },
  };
}

export function every(view, run) {
  const timer = setInterval(() => {
    const running = run();
    if (running && running.catch) running.catch(() => {});
  }, REFRESH_MS);
  view.onLeave(() => clearInterval(timer));
}

// a list's page from its address: `limit` (default 100, at most `most`, the API's) and `offset`
export function paged(params, most) {
  const limit = Math.min(most, Math.max(1, Math.trunc(Number(params.get("limit"))) || 100));
  return { limit, offset: Math.max(0, Math.trunc(Number(params.get("offset"))) || 0) };
}

// the links to a list's pages before and after this one, at `base` with `params` (its
// filters) and another offset; none for a first page that is the last (shorter than `limit`)
export function pager(base, params, { limit, offset, shown }) {
  const to = (at) => {
    const query = new URLSearchParams(params);
    if (at) query.set("offset", String(at));
    else query.delete("offset");
    return query.toString() ? `${base}?${query}` : base;
  };
  if (!offset && shown < limit) return null;
  return el("p", { class: "actions", id: "pager" },
    offset ? el("a", { class: "button", id: "newer", href: to(Math.max(0, offset - limit)) }, "Newer") : null,
    shown ? el("span", { class: "meta" }, shown === 1 ? count(offset + 1)
      : `${count(offset + 1)}–${count(offset + shown)}`) : null,
    shown === limit ? el("a", { class: "button", id: "older", href: to(offset + limit) }, "Older") : null);
}

// a table whose cells carry their column's name, so a narrow screen can show each row as
// a small card (app.css) instead of a table wider than the screen
export function dataTable(props, headers, rows, foot) {
  const labelled = (row) => {
    [...row.children].forEach((cell, i) => { cell.dataset.label = headers[i]; });
    return row;
  };
  return el("table", { ...props, class: `data ${props.class || ""}`.trim() },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map(labelled)),
    foot ? el("tfoot", {}, labelled(foot)) : null);
}

// what a finished repair achieved (fsm/outcomes.py); "–" for none
export const OUTCOMES = ["repaired", "tests_failing", "tests_not_run", "no_changes"];

export function outcomeBadge(outcome) {
  return outcome ? el("span", { class: `badge outcome ${outcome}`, dataset: { outcome } }, label(outcome))
    : el("span", { class: "muted", dataset: { outcome: "" } }, "–");
}

// the sandbox gives commands no network unless the job asked for it ("all"; true before
// the modes): then the allow-listed hosts, through the egress proxy
export function networkNote(head) {
  const network = head.config && head.config.network;
  return network === "all" || network === true
    ? " · commands may reach the allowed hosts" : "";
}

export function headSummary(head) {
  return el("div", { class: "summary" },
    el("p", { id: "outcome" }, "Outcome: ", outcomeBadge(head.outcome)),
    el("p", { class: "meta" },
      `${head.kind} · ${head.model} · submitted by ${head.submitted_by || "–"} · step ${head.step} · ` +
      `${head.tokens} tokens · ${usd(head.cost_usd)}`,
      head.parent_id ? [" · forked from ",
        el("a", { href: `#/sessions/${enc(head.parent_id)}`, class: "parent" }, head.parent_id),
        ` at step ${head.fork_step}`] : "",
      networkNote(head)),
    head.final_answer ? el("p", { class: "answer" }, `Answer: ${head.final_answer}`) : null,
    head.error_code ? el("p", { class: "error" }, `${head.error_code}: ${head.error_message}`) : null,
    finalTests(head.result && head.result.tests));
}

// a repair's final test run, as `tickwork show` says it (render._tests): its command, how it
// ended, why it said nothing of a change to compiled code (`stale_build`), and the plugin
// whose fixtures its tests lacked whatever the patch (`lacking_plugins`)
function finalTests(tests) {
  if (!tests || typeof tests !== "object") return null;
  let ended = ` exit ${tests.exit_code}, ${tests.passed === true ? "passed" : "failed"}`;
  if (tests.not_run) ended = ` did not run: ${tests.not_run}`;
  else if (tests.timed_out) ended = " timed out";
  else if (tests.failed) ended = ` failed: ${tests.failed}`;
  else if (tests.cut_short) ended = ` exit ${tests.exit_code}, failed: ${tests.cut_short}`;
  return el("div", { id: "final-tests" },
    el("p", { class: "meta" }, "Final tests: ",
      el("code", {}, tests.command || ""), ended),
    typeof tests.stale_build === "string" && tests.stale_build
      ? el("p", { class: "warn", id: "stale-build" }, tests.stale_build) : null,
    typeof tests.lacking_plugins === "string" && tests.lacking_plugins
      ? el("p", { class: "warn", id: "lacking-plugins" }, tests.lacking_plugins) : null);
}

// a unified diff, a line each, coloured by what the line does
export function diffLines(text) {
  return text.replace(/\n$/, "").split("\n").map((line) => {
    let kind = "ctx";
    if (line.startsWith("+++") || line.startsWith("---")) kind = "file";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    else if (line.startsWith("@@")) kind = "hunk";
    return el("span", { class: `line ${kind}` }, `${line}\n`);
  });
}

// `earlier`: a decision that no longer stands (its call went in doubt and waits for another),
// shown as history, as `tickwork show` does
export function decisionLine(decision, { earlier = false } = {}) {
  const what = { approve: "approved", edit: "edited", reject: "rejected",
                 provide_output: "output given" }[decision.kind] || decision.kind;
  // a rejection's feedback (what the model reads) and the approver's comment (for people)
  // are both shown: the one did not stand for the other
  const said = [decision.feedback, decision.comment && `(${decision.comment})`].filter(Boolean);
  return el("p", { class: earlier ? "decided earlier" : "decided" },
    `${earlier ? "Earlier: " : ""}${what} by ${decision.approver} ${ago(decision.at)}`,
    said.length ? `: ${said.join(" ")}` : "");
}
