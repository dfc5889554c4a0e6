// Dead letters: charts by cause and signature, the list, exports, and one dead letter with
// its session, forked, resolved or dismissed from here.
import {
  API, ApiError, ago, api, badge, can, dataTable, el, enc, headSummary, label, letterKey, paged,
  pager, sessionRef, state, toast,
} from "./core.js";
import { forkForm } from "./fork.js";
import { forkHere, timeline } from "./sessions.js";

function statsTable(title, rows) {
  return el("table", { class: "stats", dataset: { by: title } },
    el("caption", {}, `by ${label(title)}`),
    el("tbody", {}, rows.map((r) => el("tr", {}, el("td", {}, r.value === null ? "–" : r.value),
      el("td", { class: "num" }, r.count)))));
}

// an export as a file: fetched with the token (a plain link could not send it), then saved
async function download(format) {
  const response = await fetch(`${API}/dead-letters/export?format=${enc(format)}`, {
    headers: { Authorization: `Bearer ${state.token}` },
  });
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new ApiError(response.status, data);
  }
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: `dead-letters.${format}`, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

function exportButtons() {
  return el("p", { class: "actions", id: "dl-export" }, "Export every dead letter:",
    ["jsonl", "csv", "parquet"].map((format) => el("button", {
      type: "button", dataset: { format },
      onclick: () => download(format).catch((e) => toast(e.message, "error")),
    }, { jsonl: "JSON Lines", csv: "CSV", parquet: "Parquet" }[format])));
}

// --- charts: SVG built here from the API's numbers, no library -----------------------

const SVG = "http://www.w3.org/2000/svg";
const TOP_SIGNATURES = 10;
const PALETTE = ["#2457c5", "#b42318", "#9a6700", "#1f7a3d", "#8250df", "#0e7490", "#c2410c", "#66707a"];

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// dead letters per day, one stacked bar a day, a colour per code (the cause); every one
// that arrived, `open` or not (the timeline counts arrivals, not what is still open)
function timelineChart(data, open) {
  const width = 640, height = 180, left = 28, bottom = 22, top = 8;
  const days = data.buckets.length;
  const totals = data.buckets.map((_, i) => data.codes.reduce((sum, c) => sum + c.counts[i], 0));
  const most = Math.max(1, ...totals);
  const slot = (width - left) / Math.max(1, days);
  const y = (n) => top + (height - top - bottom) * (1 - n / most);
  const colour = (i) => PALETTE[i % PALETTE.length];
  const bars = [];
  data.buckets.forEach((bucket, i) => {
    let below = 0;
    data.codes.forEach((c, k) => {
      const n = c.counts[i];
      if (!n) return;
      bars.push(svg("rect", {
        x: (left + i * slot + slot * 0.1).toFixed(1), y: y(below + n).toFixed(1),
        width: Math.max(1, slot * 0.8).toFixed(1), height: (y(below) - y(below + n)).toFixed(1),
        fill: colour(k), "data-code": c.code, "data-bucket": bucket.slice(0, 10), "data-count": n,
      }, svg("title", {}, `${bucket.slice(0, 10)}: ${n} ${c.code}`)));
      below += n;
    });
  });
  const day = (i) => data.buckets[i].slice(5, 10);
  const axis = [
    svg("line", { x1: left, x2: width, y1: height - bottom, y2: height - bottom, class: "axis" }),
    svg("text", { x: left - 4, y: y(most) + 4, "text-anchor": "end" }, most),
    svg("text", { x: left - 4, y: height - bottom, "text-anchor": "end" }, 0),
    days ? svg("text", { x: left, y: height - 6 }, day(0)) : null,
    days > 1 ? svg("text", { x: width, y: height - 6, "text-anchor": "end" }, day(days - 1)) : null,
  ];
  return el("figure", { class: "chart", id: "dl-timeline", dataset: { total: data.total } },
    el("figcaption", {}, `Dead letters per day by cause, last ${days} days (UTC)${open ? ", open or not" : ""}`),
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `dead letters per day by cause: ${data.total} in ${days} days` }, axis, bars),
    el("ul", { class: "legend" }, data.codes.map((c, k) => el("li", { dataset: { code: c.code } },
      svg("svg", { class: "swatch", viewBox: "0 0 10 10" }, svg("rect", { width: 10, height: 10, fill: colour(k) })),
      `${c.code} (${c.total})`))));
}

// the error signatures with the most dead letters, as horizontal bars
function signatureChart(rows) {
  const width = 640, bar = 18, gap = 6;
  const most = Math.max(1, ...rows.map((r) => r.count));
  const height = Math.max(1, rows.length) * (bar + gap);
  const items = rows.map((r, i) => {
    const w = Math.max(2, (width - 60) * r.count / most);
    const yTop = i * (bar + gap);
    return svg("g", { "data-signature": r.value, "data-count": r.count },
      svg("rect", { x: 0, y: yTop, width: w.toFixed(1), height: bar, fill: "#c9d6f2" }),
      svg("text", { x: 4, y: yTop + bar - 5, class: "sig" }, r.value.length > 80 ? `${r.value.slice(0, 79)}…` : r.value),
      svg("text", { x: width - 4, y: yTop + bar - 5, "text-anchor": "end" }, r.count),
      svg("title", {}, `${r.count}: ${r.value}`));
  });
  return el("figure", { class: "chart", id: "dl-signatures" },
    el("figcaption", {}, `Top ${rows.length} error signatures`),
    rows.length ? svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "dead letters by error signature" }, items)
      : el("p", { class: "muted" }, "No dead letters."));
}

export async function deadLettersView(view) {
  if (!state.me.roles.length) {
    view.draw(el("p", { class: "muted" }, "Reading dead letters needs a role."));
    return;
  }
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const open = params.get("unresolved") === "1";
  const { limit, offset } = paged(params, 1000);
  // the totals, the tables and the signatures follow the checkbox, as the list does
  const only = open ? "unresolved=true" : "";
  const [stats, letters, timeline] = await Promise.all([
    api(`/dead-letters/stats?${only}`), api(`/dead-letters?limit=${limit}&offset=${offset}&${only}`),
    api("/dead-letters/timeline?bucket=day")]);
  const onlyOpen = el("label", { class: "check" }, el("input", { type: "checkbox", id: "dl-unresolved",
    checked: open, onchange: (event) => {
      location.hash = event.target.checked ? "#/dead-letters?unresolved=1" : "#/dead-letters";
    } }), " only those not yet forked, resolved or dismissed");
  view.draw(
    el("h2", {}, "Dead letters ", el("span", { class: "count", id: "dl-total" },
      `(${stats.total}${open ? " open" : ""})`)),
    el("div", { class: "charts" },
      timelineChart(timeline, open), signatureChart((stats.by.error_signature || []).slice(0, TOP_SIGNATURES))),
    exportButtons(),
    el("div", { class: "stats-row", id: "dl-stats" },
      ["code", "last_tool", "model", "error_signature"].map((by) => statsTable(by, stats.by[by] || []))),
    el("p", {}, onlyOpen),
    letters.length ? dataTable({ id: "dead-letters" },
      ["id", "session", "code", "message", "last tool", "when", "closed"],
      letters.map((d) => el("tr", { dataset: { id: d.id } },
        el("td", { class: "key" }, el("a", { href: `#/dead-letters/${enc(letterKey(d))}` }, `#${d.id}`)),
        el("td", {}, sessionRef(d.session_id)), el("td", {}, badge(d.code, "failed")),
        el("td", {}, d.message), el("td", {}, d.last_tool || "–"), el("td", { class: "when" }, ago(d.at)),
        el("td", { class: "closed" }, d.resolved_at ? closedState(d) : "no"))))
      : el("p", { class: "muted" }, "No dead letters."),
    pager("#/dead-letters", params, { limit, offset, shown: letters.length }));
}

// forked, resolved or dismissed (the store's words for how it was closed)
function closedState(letter) {
  const word = (letter.closed || "").split(" ")[0] || "closed";
  return badge(word, word === "dismissed" ? "cancelled" : "completed");
}

// resolve (it was dealt with elsewhere) or dismiss (nothing is to be done), saying why
function closeForm(key, onClosed) {
  const reason = el("textarea", { id: "close-reason", rows: 3, required: true, maxlength: 2000,
                                  placeholder: "why: kept with the dead letter" });
  const error = el("p", { class: "error", id: "close-error", role: "alert" });
  const close = (action) => async () => {
    error.textContent = "";
    if (!reason.value.trim()) {
      error.textContent = `Say why you ${action} it: the reason is kept with the dead letter.`;
      reason.focus();
      return;
    }
    try {
      const letter = await api(`/dead-letters/${enc(key)}/${action}`, { method: "POST",
        body: { reason: reason.value.trim() } });
      toast(`dead letter #${letter.id} ${action === "resolve" ? "resolved" : "dismissed"}`, "ok");
      onClosed();
    } catch (e) { error.textContent = e.message; }
  };
  return el("form", { id: "close", onsubmit: (event) => event.preventDefault() },
    el("h3", {}, "Resolve or dismiss"),
    el("p", { class: "meta" }, "Resolve: it was dealt with another way. Dismiss: nothing is to be done."),
    el("label", { for: "close-reason" }, "Reason"), reason,
    el("p", { class: "actions" },
      el("button", { type: "button", id: "resolve", class: "primary", onclick: close("resolve") }, "Resolve"),
      el("button", { type: "button", id: "dismiss", class: "danger", onclick: close("dismiss") }, "Dismiss")),
    error);
}

export async function deadLetterView(view, key) {
  let letter;
  try {
    letter = await api(`/dead-letters/${enc(key)}`);
  } catch (e) {
    if (e.status === 404 && await archivedSession(key)) return archivedLetter(view, key);
    if (e.status === 404 && /^#?\d+$/.test(key)) return goneLetter(view, key.replace(/^#/, ""), e.message);
    throw e;
  }
  const forks = letter.forks.map((f) => el("a", { href: `#/sessions/${enc(f.id)}` }, f.id));
  const actions = letter.resolved_at ? el("p", { class: "decided", id: "closed" },
    `Closed ${ago(letter.resolved_at)}: ${letter.closed}`, ...(forks.length ? [" · forks: ", ...forks] : []))
    : !can("operator") ? el("p", { class: "muted" }, "Forking, resolving and dismissing need the operator role.")
    : el("div", { class: "closing" }, forkForm({ head: letter.session.head, steps: letter.session.steps,
      step: Math.max(0, letter.session.head.step - 1), path: `/dead-letters/${enc(key)}/fork`,
      title: "Fork and resolve", proposed: letter.fork_budgets }), closeForm(key, () => deadLetterView(view, key)));
  // each step of the timeline picks the step the form forks from
  const pick = letter.resolved_at || !can("operator") ? null : (step) => forkHere(step.step, () => {
    const input = document.getElementById("fork-step");
    input.value = String(step.step);
    input.dispatchEvent(new Event("input"));
    input.closest("form").scrollIntoView({ behavior: "smooth" });
  });
  view.draw(
    el("h2", { id: "dead-letter" }, `Dead letter #${letter.id} `, badge(letter.code, "failed")),
    el("p", { class: "error" }, letter.message),
    el("p", { class: "meta" }, "session ",
      el("a", { href: `#/sessions/${enc(letter.session_id)}`, id: "letter-session" }, letter.session_id),
      ` · ${letter.kind} · ${letter.model} · last tool ${letter.last_tool || "–"} · ${ago(letter.at)}`),
    headSummary(letter.session.head),
    actions,
    el("h3", {}, "Timeline"), el("div", { id: "timeline" }, timeline(letter.session, pick)));
}

// whether `key` is the id of an archived session the token sees (its 404 says so)
async function archivedSession(key) {
  if (/^#?\d+$/.test(key)) return false; // a dead letter's number: the archive does not keep it
  try {
    await api(`/sessions/${enc(key)}`);
    return false;
  } catch (e) {
    return Boolean(e.body && e.body.archived);
  }
}

// an archived session's: a dead letter it had (closed: an open one is never archived) went
// to the archive with it
function archivedLetter(view, id) {
  view.draw(el("h2", { id: "dead-letter" }, "Dead letter of ", el("code", {}, id)),
    el("p", { class: "summary", id: "letter-archived" },
      `Session ${id} is archived: retention moved it out of the live tables with its dead ` +
      "letter, if it had one (a failed session is archived only once its dead letter was " +
      "forked, resolved or dismissed), and the dead letters listed here are the live ones. ",
      el("a", { href: `#/sessions/${enc(id)}` }, "Its page"),
      " serves its patch and its forks, and forks it again."));
}

// a number no live dead letter has: none had it, or retention archived its session with it
// (the archive keeps a dead letter by its session's id, not by its number)
function goneLetter(view, key, message) {
  view.draw(el("h2", { id: "dead-letter" }, `Dead letter #${key}`),
    el("p", { class: "error" }, message),
    el("p", { class: "summary", id: "letter-gone" },
      `If dead letter #${key} was there before, retention archived its session with it once ` +
      "it was forked, resolved or dismissed; the archive keeps it by the session's id, not " +
      "by its number: open #/dead-letters/SESSION_ID or the session's page, #/sessions/SESSION_ID. ",
      el("a", { href: "#/dead-letters" }, "The dead letters")));
}
