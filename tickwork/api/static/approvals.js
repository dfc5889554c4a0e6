// The approvals queue, and the card of one waiting call (approve, edit, reject, give the
// output of an in-doubt call), which the session view shows too.
import {
  api, badge, can, decisionLine, diffLines, el, enc, every, label, networkNote, ago,
  pretty, redraw, state, toast,
} from "./core.js";

function diffView(preview) {
  if (!preview || preview.type !== "diff") return null;
  return el("div", { class: "preview" },
    el("p", { class: "meta" }, preview.path ? `${preview.path}: ${preview.note}` : preview.note),
    el("pre", { class: "diff" }, diffLines(preview.diff)));
}

// The arguments a call ran (or runs) with and who gave them (the view's `as_edited`, as
// `tickwork show` and the webhook card say it): a person's edit, or an in-doubt call's
// approval that runs it again with the edit it ran with; null where it runs as the model
// proposed it
export function ranAsEdited(call) {
  return call.as_edited && call.decision
    ? { arguments: call.decision.arguments, by: call.as_edited } : null;
}

export function callCard(sessionId, call, onDecided) {
  // one piece: a reload keeps it as it is, or draws it anew (core.js redraw)
  const card = el("article", { class: "call", dataset: { call: call.call_id, whole: "" } });
  const error = el("p", { class: "error" });
  const comment = el("input", { type: "text", class: "comment", placeholder: "comment (optional)" });

  async function decide(kind, extra) {
    error.textContent = "";
    try {
      const head = await api(`/sessions/${enc(sessionId)}/calls/${enc(call.call_id)}/decision`, {
        method: "POST",
        body: { kind, fingerprint: call.fingerprint, comment: comment.value, ...extra },
      });
      decisions += 1;
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
      // the server's message names who decided first; the call takes no other decision
      error.textContent = e.message;
      if (e.body && e.body.decided_by) {
        card.classList.remove("open");
        card.classList.add("done");
        for (const box of [actions, editForm, rejectForm, outputForm]) box.remove();
        error.before(decisionLine({ kind: e.body.decision, approver: e.body.decided_by,
                                    at: e.body.decided_at }));
      }
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

  const edited = ranAsEdited(call);
  const editArgs = el("textarea", { class: "edit-args", rows: 8, spellcheck: "false" },
    pretty(edited ? edited.arguments : call.arguments === null ? {} : call.arguments));
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
    edited ? el("p", { class: "as-edited meta" }, `Arguments it ran with, ${edited.by}:`) : null,
    el("pre", { class: "args" }, pretty(edited ? edited.arguments
      : call.arguments === null ? call.raw_arguments : call.arguments)),
    diffView(call.preview),
    inDoubt && call.decision ? decisionLine(call.decision, { earlier: true }) : null,
    call.decision && !inDoubt ? decisionLine(call.decision) : actions,
    editForm, rejectForm, inDoubt ? outputForm : null, error].filter(Boolean));
  return card;
}

export function waitingCard(waiting, onDecided) {
  const head = waiting.session;
  return el("section", { class: "waiting", dataset: { session: head.id } },
    el("h3", {}, el("a", { href: `#/sessions/${enc(head.id)}` }, head.id), " ", badge(head.status)),
    el("p", { class: "meta" },
      `${head.kind} · ${head.model} · step ${head.step} · submitted by ${head.submitted_by || "–"}` +
      ` · waiting since ${ago(waiting.waiting_since)}` +
      (waiting.root ? ` · in the tree of ${waiting.root}` : ""),
      networkNote(head)),
    waiting.job ? el("dl", { class: "job" }, ["source", "goal", "test_command"]
      .filter((key) => waiting.job[key])
      .flatMap((key) => [el("dt", {}, key.replace("_", " ")), el("dd", { dataset: { key } }, waiting.job[key])])) : null,
    waiting.thought ? el("blockquote", { class: "thought" }, waiting.thought) : null,
    waiting.calls.map((call) => callCard(head.id, call, onDecided)));
}

// `fresh` with the cards decided here, where they were, once their calls wait no more: a
// reload that no longer lists their session, or lists it for its next call, would take the
// decision's outcome away before it is read (they go when the view is left). A session
// listed again has them moved into its fresh section, before what its next call is about:
// a card moved keeps being the element it was (core.js redraw)
// decisions made on this page: a reload read before one lists its call as waiting still,
// and would draw it undecided over the card that says its outcome
let decisions = 0;

function keepDecided(into, fresh) {
  const listed = new Map(fresh.filter((node) => node.dataset && node.dataset.session)
    .map((node) => [node.dataset.session, node]));
  const kept = [];
  [...into.children].forEach((node, i) => {
    const done = [...node.querySelectorAll("article.call.done")];
    if (!done.length) return;
    const again = listed.get(node.dataset.session);
    if (!again) {
      kept.push([node, i]);
      return;
    }
    // a call listed again (its session waits for another of its step) shows its decision itself
    const shown = new Set([...again.querySelectorAll("article.call")].map((card) => card.dataset.call));
    const next = again.querySelector(":scope > blockquote.thought, :scope > article.call");
    for (const card of done) if (!shown.has(card.dataset.call)) again.insertBefore(card, next);
  });
  const placed = [...fresh];
  for (const [node, i] of kept) placed.splice(Math.min(i, placed.length), 0, node);
  return placed;
}

export async function approvalsView(view) {
  const list = el("div", { id: "approvals" });
  const count = el("span", { class: "count" });
  view.draw(
    el("div", { class: "bar" }, el("h2", {}, "Waiting for approval ", count),
      el("button", { type: "button", id: "refresh", onclick: () => load() }, "Refresh")),
    list);
  async function load({ unlessDeciding = false } = {}) {
    const before = decisions;
    const waiting = await api("/approvals");
    if (unlessDeciding && deciding()) return; // typed while the reload was on its way
    if (before !== decisions) return; // read before a decision: the next reload draws it
    count.textContent = `(${waiting.length})`;
    // a card that did not change stays the element it was: a click on it lands (core.js)
    redraw(list, keepDecided(list, waiting.length
      ? waiting.map((w) => waitingCard(w))
      : [el("p", { class: "muted", id: "none-waiting" }, "Nothing is waiting for a person.")]));
  }
  await load();
  // refresh unless someone is in the middle of a decision: a form open or a comment typed
  // (a reload draws a card that changed anew, and would drop what is typed in it)
  const deciding = () => list.querySelector(".open")
    || [...list.querySelectorAll("input.comment")].some((comment) => comment.value);
  every(view, () => (deciding() ? null : load({ unlessDeciding: true })));
}
