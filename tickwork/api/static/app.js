// The tickwork page: approvals, sessions (live), dead letters. Plain DOM, no build step.
// Everything shown comes from the model or from people, so it is set as text, never as HTML.
"use strict";
(() => {
  const API = "/api/v1";
  const TOKEN_KEY = "tickwork.token";
  const REFRESH_MS = 5000;
  const state = { token: sessionStorage.getItem(TOKEN_KEY), me: null, cleanup: [] };
  const main = document.getElementById("main");

  function el(tag, props, ...children) {
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

  const enc = encodeURIComponent;
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));
  const can = (role) => Boolean(state.me && state.me.roles.includes(role));
  // statuses read better with spaces; error codes stay as they are written
  const label = (text) => (text === text.toLowerCase() ? text.replace(/_/g, " ") : text);
  const badge = (text, extra) => el("span", { class: `badge ${extra || text}` }, label(text));

  function ago(iso) {
    if (!iso) return "";
    const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (seconds < 60) return `${Math.round(seconds)}s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h ago`;
    return `${(seconds / 86400).toFixed(1)} days ago`;
  }

  function toast(message, kind) {
    const box = document.getElementById("toast");
    box.replaceChildren(el("p", { class: kind || "info" }, message));
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => box.replaceChildren(), 8000);
  }

  class ApiError extends Error {
    constructor(status, body) {
      super(body.message || `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  async function api(path, options) {
    const { method = "GET", body } = options || {};
    const headers = { Authorization: `Bearer ${state.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(API + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    if (response.status === 401) {
      logout("Your token is no longer accepted; log in again.");
    }
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }

  // --- log in and out -----------------------------------------------------------------

  function logout(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.me = null;
    render(message);
  }

  function loginView(message) {
    const input = el("input", { type: "password", id: "token", name: "token", required: true,
                               autocomplete: "current-password", placeholder: "your API token" });
    const error = el("p", { class: "error", id: "login-error" }, message || "");
    const form = el("form", { id: "login", onsubmit: async (event) => {
      event.preventDefault();
      const token = input.value.trim();
      const response = await fetch(`${API}/me`, { headers: { Authorization: `Bearer ${token}` } });
      const data = await response.json().catch(() => ({}));
      if (!response.ok) {
        error.textContent = data.message || `HTTP ${response.status}`;
        return;
      }
      state.token = token;
      state.me = data;
      sessionStorage.setItem(TOKEN_KEY, token);
      render();
    } },
    el("h2", {}, "Log in"),
    el("label", { for: "token" }, "API token"), input,
    el("button", { type: "submit", class: "primary" }, "Log in"), error);
    main.replaceChildren(form);
    input.focus();
  }

  // --- decisions on one call ----------------------------------------------------------

  function diffView(preview) {
    if (!preview || preview.type !== "diff") return null;
    const lines = preview.diff.replace(/\n$/, "").split("\n").map((line) => {
      let kind = "ctx";
      if (line.startsWith("+++") || line.startsWith("---")) kind = "file";
      else if (line.startsWith("+")) kind = "add";
      else if (line.startsWith("-")) kind = "del";
      else if (line.startsWith("@@")) kind = "hunk";
      return el("span", { class: `line ${kind}` }, `${line}\n`);
    });
    return el("div", { class: "preview" },
      el("p", { class: "meta" }, preview.path ? `${preview.path}: ${preview.note}` : preview.note),
      el("pre", { class: "diff" }, lines));
  }

  function decisionLine(decision) {
    const what = { approve: "approved", edit: "edited", reject: "rejected",
                   provide_output: "output given" }[decision.kind] || decision.kind;
    const why = decision.feedback || decision.comment;
    return el("p", { class: "decided" }, `${what} by ${decision.approver} ${ago(decision.at)}`,
      why ? `: ${why}` : "");
  }

  function callCard(sessionId, call, onDecided) {
    const card = el("article", { class: "call", dataset: { call: call.call_id } });
    const error = el("p", { class: "error" });
    const comment = el("input", { type: "text", class: "comment", placeholder: "comment (optional)" });

    async function decide(kind, extra) {
      error.textContent = "";
      try {
        const head = await api(`/sessions/${enc(sessionId)}/calls/${enc(call.call_id)}/decision`, {
          method: "POST",
          body: { kind, fingerprint: call.fingerprint, comment: comment.value, ...extra },
        });
        const verb = { approve: "Approved", edit: "Edited", reject: "Rejected",
                       provide_output: "Gave the output of" }[kind];
        card.classList.remove("open");
        card.classList.add("done");
        card.replaceChildren(el("p", { class: "decided" },
          `${verb} ${call.call_id} (${call.name}) as ${state.me.name}; the session is ${label(head.status)}. `,
          el("a", { href: `#/sessions/${enc(sessionId)}`, class: "follow" }, "Follow the session")));
        toast(`${verb} ${call.call_id} of ${sessionId}`, "ok");
        if (onDecided) onDecided(head);
      } catch (e) {
        const who = e.body && e.body.decided_by ? ` (${e.body.decision} by ${e.body.decided_by})` : "";
        error.textContent = `${e.message}${who}`;
      }
    }

    function form(name, field, label, submit, onSubmit) {
      const box = el("div", { class: `decide-form ${name}-form`, hidden: true },
        el("label", {}, label), field,
        el("button", { type: "button", class: `confirm-${name}`, onclick: onSubmit }, submit),
        el("button", { type: "button", class: "cancel-form", onclick: () => {
          box.hidden = true;
          card.classList.remove("open");
        } }, "Cancel"));
      return box;
    }

    const editArgs = el("textarea", { class: "edit-args", rows: 8, spellcheck: "false" },
      pretty(call.arguments === null ? {} : call.arguments));
    const editForm = form("edit", editArgs, "New arguments (JSON)", "Run with these arguments", () => {
      let parsed;
      try {
        parsed = JSON.parse(editArgs.value);
      } catch (e) {
        error.textContent = `not JSON: ${e.message}`;
        return;
      }
      decide("edit", { arguments: parsed });
    });
    const feedback = el("textarea", { class: "feedback", rows: 3,
                                      placeholder: "what the model is told instead" });
    const rejectForm = form("reject", feedback, "Feedback for the model", "Reject",
      () => decide("reject", { feedback: feedback.value }));
    const output = el("textarea", { class: "output", rows: 4 });
    const outputForm = form("provide", output, "The call's output, as if it had run",
      "Use this output", () => decide("provide_output", { output: output.value }));

    const open = (box) => () => {
      for (const other of [editForm, rejectForm, outputForm]) other.hidden = other !== box;
      card.classList.add("open");
      const field = box.querySelector("textarea");
      if (field) field.focus();
    };
    const inDoubt = call.state === "in_doubt";
    const actions = can("approver")
      ? el("div", { class: "actions" }, comment,
          el("button", { type: "button", class: "approve primary", onclick: () => decide("approve", {}) },
            inDoubt ? "Run again" : "Approve"),
          el("button", { type: "button", class: "edit", onclick: open(editForm) }, "Edit"),
          el("button", { type: "button", class: "reject danger", onclick: open(rejectForm) }, "Reject"),
          inDoubt ? el("button", { type: "button", class: "provide", onclick: open(outputForm) },
            "Provide output") : null)
      : el("p", { class: "muted" }, "You need the approver role to decide.");

    card.append(...[
      el("h4", {}, el("code", {}, call.name), ` ${call.call_id} `,
        inDoubt ? badge("in doubt", "in_doubt") : null,
        el("span", { class: "fp", title: call.fingerprint }, `fingerprint ${call.fingerprint.slice(0, 12)}`)),
      inDoubt ? el("p", { class: "warn" },
        "A worker died while running this call: it may or may not have run.") : null,
      call.approval_reason ? el("p", { class: "reason warn" },
        `Needs approval: ${call.approval_reason}`) : null,
      el("pre", { class: "args" }, pretty(call.arguments === null ? call.raw_arguments : call.arguments)),
      diffView(call.preview),
      call.decision && !inDoubt ? decisionLine(call.decision) : actions,
      editForm, rejectForm, inDoubt ? outputForm : null, error].filter(Boolean));
    return card;
  }

  // the sandbox gives commands no network unless the job asked for it ("all"; true before
  // the modes): then the allow-listed hosts, through the egress proxy
  function networkNote(head) {
    const network = head.config && head.config.network;
    return network === "all" || network === true
      ? " · commands may reach the allowed hosts" : "";
  }

  function waitingCard(waiting, onDecided) {
    const head = waiting.session;
    return el("section", { class: "waiting", dataset: { session: head.id } },
      el("h3", {}, el("a", { href: `#/sessions/${enc(head.id)}` }, head.id), " ", badge(head.status)),
      el("p", { class: "meta" },
        `${head.kind} · ${head.model} · step ${head.step} · submitted by ${head.submitted_by || "–"}` +
        ` · waiting since ${ago(waiting.waiting_since)}`,
        networkNote(head)),
      waiting.job ? el("dl", { class: "job" }, ["source", "goal", "test_command"]
        .filter((key) => waiting.job[key])
        .flatMap((key) => [el("dt", {}, key.replace("_", " ")), el("dd", { dataset: { key } }, waiting.job[key])])) : null,
      waiting.thought ? el("blockquote", { class: "thought" }, waiting.thought) : null,
      waiting.calls.map((call) => callCard(head.id, call, onDecided)));
  }

  // --- views --------------------------------------------------------------------------

  async function approvalsView() {
    const list = el("div", { id: "approvals" });
    const count = el("span", { class: "count" });
    main.replaceChildren(
      el("div", { class: "bar" }, el("h2", {}, "Waiting for approval ", count),
        el("button", { type: "button", id: "refresh", onclick: () => load() }, "Refresh")),
      list);
    async function load() {
      const waiting = await api("/approvals");
      count.textContent = `(${waiting.length})`;
      list.replaceChildren(...(waiting.length
        ? waiting.map((w) => waitingCard(w))
        : [el("p", { class: "muted", id: "none-waiting" }, "Nothing is waiting for a person.")]));
    }
    await load();
    // refresh unless someone is in the middle of a decision
    every(() => (list.querySelector(".open") ? null : load()));
  }

  function every(run) {
    const timer = setInterval(() => {
      const running = run();
      if (running && running.catch) running.catch(() => {});
    }, REFRESH_MS);
    state.cleanup.push(() => clearInterval(timer));
  }

  async function sessionsView() {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    const chosen = params.get("status") || "";
    const chosenOutcome = params.get("outcome") || "";
    const go = () => {
      const query = new URLSearchParams();
      if (select.value) query.set("status", select.value);
      if (outcomes.value) query.set("outcome", outcomes.value);
      location.hash = query.toString() ? `#/sessions?${query}` : "#/sessions";
    };
    const select = el("select", { id: "status-filter", onchange: go },
      ["", "ready", "executing", "waiting_approval", "completed", "failed", "cancelled"].map(
        (s) => el("option", { value: s, selected: s === chosen }, s ? label(s) : "any status")));
    const outcomes = el("select", { id: "outcome-filter", onchange: go }, ["", ...OUTCOMES].map(
      (o) => el("option", { value: o, selected: o === chosenOutcome }, o ? label(o) : "any outcome")));
    const query = new URLSearchParams({ limit: "100" });
    if (chosen) query.set("status", chosen);
    if (chosenOutcome) query.set("outcome", chosenOutcome);
    const heads = await api(`/sessions?${query}`);
    main.replaceChildren(
      el("div", { class: "bar" }, el("h2", {}, "Sessions"), select, outcomes),
      heads.length ? el("table", { id: "sessions" },
        el("thead", {}, el("tr", {}, ["id", "status", "outcome", "kind", "model", "step", "cost", "updated"].map((h) => el("th", {}, h)))),
        el("tbody", {}, heads.map((h) => el("tr", { dataset: { session: h.id } },
          el("td", {}, el("a", { href: `#/sessions/${enc(h.id)}` }, h.id)),
          el("td", {}, badge(h.status)), el("td", { class: "outcome" }, outcomeBadge(h.outcome)),
          el("td", {}, h.kind), el("td", {}, h.model),
          el("td", {}, h.step), el("td", {}, `$${h.cost_usd.toFixed(4)}`),
          el("td", {}, ago(h.updated_at))))))
        : el("p", { class: "muted" }, "No sessions match."));
  }

  function eventSummary(event) {
    const d = event.data || {};
    const parts = [];
    for (const key of ["step", "through", "call_id", "name", "decision", "approver", "status", "outcome", "error_code", "message", "by", "parent_id"]) {
      if (d[key] !== undefined && d[key] !== null && d[key] !== "") parts.push(`${key}=${d[key]}`);
    }
    if (Array.isArray(d.calls)) parts.push(`calls=${d.calls.join(",")}`);
    return parts.join(" ");
  }

  function timeline(view) {
    if (!view.steps.length) return el("p", { class: "muted" }, "No steps yet.");
    return view.steps.map((step) => el("section", { class: "step", dataset: { step: step.step } },
      el("h4", {}, step.kind === "compaction"
        ? `Step ${step.step} · compaction of steps 1-${step.compacted_through}` : `Step ${step.step}`),
      el("p", { class: "meta" },
        `${step.model} · ${step.tokens} tokens · $${step.cost_usd.toFixed(4)} · ${Math.round(step.latency_ms)} ms`),
      step.thought ? el("blockquote", { class: "thought" }, step.thought) : null,
      step.calls.map((call) => el("div", { class: "tcall", dataset: { call: call.call_id } },
        el("p", {}, el("code", {}, call.name), ` ${call.call_id} `, badge(call.state)),
        call.approval_reason ? el("p", { class: "reason muted" },
          `Needs approval: ${call.approval_reason}`) : null,
        el("pre", { class: "args" }, pretty(call.arguments === null ? call.raw_arguments : call.arguments)),
        call.decision ? decisionLine(call.decision) : null,
        call.observation ? el("pre", { class: call.observation.is_error ? "output error" : "output" },
          call.observation.content) : null))));
  }

  // what a finished repair achieved (fsm/outcomes.py); "–" for none
  const OUTCOMES = ["repaired", "tests_failing", "tests_not_run", "no_changes"];

  function outcomeBadge(outcome) {
    return outcome ? el("span", { class: `badge outcome ${outcome}`, dataset: { outcome } }, label(outcome))
      : el("span", { class: "muted", dataset: { outcome: "" } }, "–");
  }

  function headSummary(head) {
    return el("div", { class: "summary" },
      el("p", { id: "outcome" }, "Outcome: ", outcomeBadge(head.outcome)),
      el("p", { class: "meta" },
        `${head.kind} · ${head.model} · submitted by ${head.submitted_by || "–"} · step ${head.step} · ` +
        `${head.tokens} tokens · $${head.cost_usd.toFixed(4)}`,
        head.parent_id ? ` · forked from ${head.parent_id} at step ${head.fork_step}` : "",
        networkNote(head)),
      head.final_answer ? el("p", { class: "answer" }, `Answer: ${head.final_answer}`) : null,
      head.error_code ? el("p", { class: "error" }, `${head.error_code}: ${head.error_message}`) : null);
  }

  async function sessionView(id) {
    const status = el("span", { id: "status" });
    const summary = el("div");
    const waiting = el("div", { id: "waiting" });
    const events = el("ol", { id: "events", class: "events" });
    const steps = el("div", { id: "timeline" });
    const live = el("span", { id: "live", class: "muted" }, "connecting…");
    const cancel = el("button", { type: "button", id: "cancel", class: "danger", hidden: true,
      onclick: async () => {
        try {
          const head = await api(`/sessions/${enc(id)}/cancel`, { method: "POST" });
          toast(`cancel requested for ${id}: ${head.status}`, "ok");
          refresh();
        } catch (e) { toast(e.message, "error"); }
      } }, "Cancel session");
    main.replaceChildren(
      el("div", { class: "bar" }, el("h2", {}, "Session ", el("code", {}, id), " ", status), cancel),
      summary, waiting, el("h3", {}, "Events ", live), events, el("h3", {}, "Timeline"), steps);
    let shownWaiting = "";

    async function refresh() {
      const view = await api(`/sessions/${enc(id)}`);
      const head = view.head;
      status.replaceChildren(badge(head.status));
      status.dataset.status = head.status;
      summary.replaceChildren(headSummary(head));
      cancel.hidden = head.status === "completed" || head.status === "failed" ||
        head.status === "cancelled" || !(can("approver") || can("operator"));
      const key = head.status === "waiting_approval" ? `${head.version}` : "";
      if (key !== shownWaiting) {
        shownWaiting = key;
        if (key) {
          const w = await api(`/approvals/${enc(id)}`);
          waiting.replaceChildren(el("h3", {}, "Waiting for you"),
            ...w.calls.map((call) => callCard(id, call, () => refresh())));
        } else {
          waiting.replaceChildren();
        }
      }
      steps.replaceChildren(...[timeline(view)].flat());
    }

    let pending = null;
    const soon = () => {
      clearTimeout(pending);
      pending = setTimeout(() => refresh().catch(() => {}), 150);
    };
    await refresh();
    follow(id, (kind, event) => {
      events.append(el("li", { dataset: { kind, id: event.id } },
        el("time", {}, new Date(event.at).toLocaleTimeString()), " ", el("strong", {}, kind), " ",
        eventSummary(event)));
      soon();
    }, (end) => {
      live.textContent = `finished: ${end.status}`;
      soon();
    }, (text) => { live.textContent = text; });
  }

  // Server-Sent Events over fetch, so the token goes in a header rather than in the URL;
  // a dropped stream resumes from the last event id it saw.
  function follow(id, onEvent, onEnd, onState) {
    const control = new AbortController();
    let stopped = false;
    let last = 0;
    state.cleanup.push(() => { stopped = true; control.abort(); });
    (async () => {
      while (!stopped) {
        try {
          const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
          if (last) headers["Last-Event-ID"] = String(last);
          const response = await fetch(`${API}/sessions/${enc(id)}/stream`, { headers, signal: control.signal });
          if (!response.ok) {
            onState(`stream refused: HTTP ${response.status}`);
            if ([401, 403, 404].includes(response.status)) return;
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

  // dead letters per day, one stacked bar a day, a colour per code (the cause)
  function timelineChart(data) {
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
      el("figcaption", {}, `Dead letters per day by cause, last ${days} days (UTC)`),
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

  async function deadLettersView() {
    if (!state.me.roles.length) {
      main.replaceChildren(el("p", { class: "muted" }, "Reading dead letters needs a role."));
      return;
    }
    const [stats, letters, timeline] = await Promise.all([
      api("/dead-letters/stats"), api("/dead-letters?limit=100"), api("/dead-letters/timeline?bucket=day")]);
    main.replaceChildren(
      el("h2", {}, "Dead letters ", el("span", { class: "count", id: "dl-total" }, `(${stats.total})`)),
      el("div", { class: "charts" },
        timelineChart(timeline), signatureChart((stats.by.error_signature || []).slice(0, TOP_SIGNATURES))),
      exportButtons(),
      el("div", { class: "stats-row", id: "dl-stats" },
        ["code", "last_tool", "model", "error_signature"].map((by) => statsTable(by, stats.by[by] || []))),
      letters.length ? el("table", { id: "dead-letters" },
        el("thead", {}, el("tr", {}, ["id", "session", "code", "message", "last tool", "when", "resolved"].map((h) => el("th", {}, h)))),
        el("tbody", {}, letters.map((d) => el("tr", { dataset: { id: d.id } },
          el("td", {}, el("a", { href: `#/dead-letters/${d.id}` }, `#${d.id}`)),
          el("td", {}, el("code", {}, d.session_id)), el("td", {}, badge(d.code, "failed")),
          el("td", {}, d.message), el("td", {}, d.last_tool || "–"), el("td", {}, ago(d.at)),
          el("td", {}, d.resolved_at ? `yes (${d.closed || ""})` : "no")))))
        : el("p", { class: "muted" }, "No dead letters."));
  }

  async function deadLetterView(key) {
    const letter = await api(`/dead-letters/${enc(key)}`);
    const fromStep = el("input", { type: "number", id: "fork-step", min: 0, max: letter.session.head.step,
                                   value: Math.max(0, letter.session.head.step - 1) });
    const instruction = el("textarea", { id: "fork-instruction", rows: 3,
                                         placeholder: "an instruction added after that step (optional)" });
    const forks = letter.forks.map((f) => el("a", { href: `#/sessions/${enc(f.id)}` }, f.id));
    const forkForm = letter.resolved_at ? el("p", { class: "decided" },
      `Closed ${ago(letter.resolved_at)}: ${letter.closed}`, ...(forks.length ? [" · forks: ", ...forks] : []))
      : !can("operator") ? el("p", { class: "muted" }, "Forking needs the operator role.")
      : el("form", { id: "fork", onsubmit: async (event) => {
        event.preventDefault();
        try {
          const head = await api(`/dead-letters/${enc(key)}/fork`, { method: "POST", body: {
            from_step: Number(fromStep.value), append_instruction: instruction.value || null } });
          toast(`forked as ${head.id}`, "ok");
          location.hash = `#/sessions/${enc(head.id)}`;
        } catch (e) { toast(e.message, "error"); }
      } }, el("h3", {}, "Fork and resolve"), el("label", { for: "fork-step" }, "From step"), fromStep,
      el("label", { for: "fork-instruction" }, "Instruction"), instruction,
      el("button", { type: "submit", class: "primary" }, "Fork"));
    main.replaceChildren(
      el("h2", { id: "dead-letter" }, `Dead letter #${letter.id} `, badge(letter.code, "failed")),
      el("p", { class: "error" }, letter.message),
      el("p", { class: "meta" },
        `session ${letter.session_id} · ${letter.kind} · ${letter.model} · last tool ${letter.last_tool || "–"} · ${ago(letter.at)}`),
      headSummary(letter.session.head),
      forkForm,
      el("h3", {}, "Timeline"), el("div", { id: "timeline" }, timeline(letter.session)));
  }

  // --- routing ------------------------------------------------------------------------

  async function render(message) {
    for (const stop of state.cleanup.splice(0)) stop();
    const nav = document.getElementById("nav");
    const who = document.getElementById("who");
    const out = document.getElementById("logout");
    if (!state.token) {
      nav.hidden = true;
      out.hidden = true;
      who.textContent = "";
      loginView(message);
      return;
    }
    try {
      if (!state.me) state.me = await api("/me");
    } catch (e) {
      if (state.token) main.replaceChildren(el("p", { class: "error" }, e.message));
      return;
    }
    nav.hidden = false;
    out.hidden = false;
    who.textContent = `${state.me.name} (${state.me.roles.join(", ") || "no role"})`;
    const [path] = (location.hash.replace(/^#/, "") || "/approvals").split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    for (const link of nav.querySelectorAll("a")) {
      link.classList.toggle("current", link.dataset.nav === parts[0]);
    }
    try {
      if (parts[0] === "sessions" && parts[1]) await sessionView(parts[1]);
      else if (parts[0] === "approvals" && parts[1]) await sessionView(parts[1]);
      else if (parts[0] === "sessions") await sessionsView();
      else if (parts[0] === "dead-letters" && parts[1]) await deadLetterView(parts[1]);
      else if (parts[0] === "dead-letters") await deadLettersView();
      else await approvalsView();
    } catch (e) {
      if (state.token) main.replaceChildren(el("p", { class: "error", id: "view-error" }, e.message));
    }
  }

  document.getElementById("logout").addEventListener("click", () => logout());
  window.addEventListener("hashchange", () => render());
  render();
})();
