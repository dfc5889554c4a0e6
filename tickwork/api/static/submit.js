// Submit a repair job: its source, setup, test command, goal, model, budgets and admission,
// posted as POST /sessions takes it. What is typed is kept (also across a reload or a new log-in)
// until the job is submitted, and an error from the API is shown beside the field it names.
import {
  BOUNDS, admissionBody, admissionFields, contextField, formField, priceRates, refusedFields,
} from "./admission.js";
import { api, can, el, enc, state, toast } from "./core.js";

export const DRAFT_KEY = "tickwork.submit-draft";
// a duration as the CLI takes it: seconds, or a number with one of its units (the server's,
// served with the page), in either case
const UNITS = BOUNDS.deadline_units;
const names = Object.keys(UNITS);
const DURATION = new RegExp(`^\\s*(\\d+(?:\\.\\d+)?)\\s*([${names.join("")}]?)\\s*$`, "i");
// what a refused deadline is told
export const NOT_A_DURATION = "is not a duration: give seconds, or a number with " +
  `${names.slice(0, -1).join(", ")} or ${names.at(-1)} (90s, 30m, 2h, 1d).`;

// each field: what the API's errors call it, so an error lands beside it
const FIELDS = {
  repo: ["repo"], ref: ["ref"], workspace: ["workspace"], setup: ["setup"],
  test_command: ["test_command", "test_cmd"], goal: ["goal"], model: ["model"], price: ["price"],
  max_steps: ["max_steps"], max_tokens: ["max_tokens"], max_cost_usd: ["max_cost_usd"],
  deadline: ["deadline_s"], id: ["id"], tenant: ["tenant"],
};

export function seconds(text) {
  const found = DURATION.exec(text);
  return found ? Number(found[1]) * UNITS[(found[2] || "s").toLowerCase()] : null;
}

const field = (name, label, input, hint) => formField("submit", name, label, input, hint);

// the names an error speaks of: the fields of a 422's `errors`, the `name`s its message quotes
function named(error) {
  const body = error.body || {};
  const names = new Set();
  for (const e of body.errors || []) for (const part of e.loc || []) names.add(String(part));
  for (const found of (body.message || "").matchAll(/`([a-z_]+)`/g)) names.add(found[1]);
  for (const key of ["max_steps", "max_tokens", "max_cost_usd", "deadline_s"]) {
    if ((body.message || "").includes(key)) names.add(key);
  }
  if (["model_not_allowed", "invalid_script", "unpriced_model"].includes(body.code)) names.add("model");
  if (body.code === "session_exists") names.add("id");
  if (/\bthe price given\b/.test(body.message || "")) names.add("price");
  if (/^tenant '/.test(body.message || "")) names.add("tenant"); // not a tenant name
  return names;
}

export function submitView(view) {
  if (!can("submitter")) {
    view.draw(el("h2", {}, "Submit a repair job"),
      el("p", { class: "muted", id: "submit-refused" }, "Submitting needs the submitter role."));
    return;
  }
  const draft = JSON.parse(sessionStorage.getItem(DRAFT_KEY) || "{}");
  const text = (attrs) => el("input", { type: "text", spellcheck: "false", ...attrs });
  const number = (attrs) => el("input", { type: "number", min: 0, inputmode: "numeric", ...attrs });
  const sourceKind = el("select", { id: "submit-source-kind", name: "source_kind" },
    el("option", { value: "repo" }, "a git repository at a ref"),
    el("option", { value: "workspace" }, "a directory on the server"));
  const setupMode = el("select", { id: "submit-setup-mode", name: "setup_mode" },
    el("option", { value: "auto" }, "auto: from the project's files"),
    el("option", { value: "none" }, "none"),
    el("option", { value: "commands" }, "these commands"));
  const f = {
    repo: field("repo", "Repository", text({ placeholder: "https://… or a path the server can read" })),
    ref: field("ref", "Ref", text({ placeholder: "a branch, tag or commit" })),
    workspace: field("workspace", "Directory", text({ placeholder: "/srv/projects/app" }),
      "Packed at submit; it must be under the server's TICKWORK_WORKSPACE_ROOTS."),
    setup: field("setup", "Setup commands", el("textarea", { rows: 3, spellcheck: "false",
      placeholder: "one shell command a line" })),
    test_command: field("test_command", "Test command", text({ required: true,
      placeholder: "python -m pytest -q" })),
    goal: field("goal", "Goal", el("textarea", { rows: 3, placeholder: "make the failing tests pass" })),
    model: field("model", "Model", text({ placeholder: "the server's default (TICKWORK_MODEL)" })),
    price: field("price", "Price (USD per million tokens)", text({ inputmode: "decimal",
      placeholder: "prompt, completion[, cached[, cache write]]" }),
      `${BOUNDS.price_rates[0]} to ${BOUNDS.price_rates[1]} numbers, e.g. 3, 15 or 3, 15, 0.3, 3.75: ` +
      "at least the server's price for the " +
      "model, never below. Empty: the server's."),
    max_steps: field("max_steps", "Steps", number({ placeholder: "50" })),
    max_tokens: field("max_tokens", "Tokens", number({ placeholder: "2000000" })),
    max_cost_usd: field("max_cost_usd", "Cost (USD)", number({ step: "0.01", placeholder: "10" })),
    deadline: field("deadline", "Deadline", text({ placeholder: "6h" }), "Seconds, or 30m, 2h, 1d."),
    id: field("id", "Session id", text({ placeholder: "a random one" })),
    tenant: field("tenant", "Tenant", text({ placeholder: state.me.tenant }),
      `Empty: the token's, ${state.me.tenant}; an admin's token may name another.`),
  };
  // what a submit asks of admission, and the window its model runs under (the same checks)
  const admission = { ...admissionFields("submit"), context_window: contextField("submit") };
  Object.assign(f, admission);
  // naming a tenant takes the admin role (the API refuses it otherwise): offered to an admin
  const admin = can("admin");
  const error = el("p", { class: "error", id: "submit-error", role: "alert" });
  const button = el("button", { type: "submit", class: "primary", id: "submit-button" }, "Submit");

  const values = () => Object.fromEntries([
    ["source_kind", sourceKind.value], ["setup_mode", setupMode.value],
    ...Object.entries(f).map(([name, x]) => [name, x.input.value])]);
  const save = () => sessionStorage.setItem(DRAFT_KEY, JSON.stringify(values()));
  sourceKind.value = draft.source_kind || "repo";
  setupMode.value = draft.setup_mode || "auto";
  for (const [name, x] of Object.entries(f)) x.input.value = draft[name] || "";
  const shown = () => {
    const repo = sourceKind.value === "repo";
    f.repo.row.hidden = !repo;
    f.ref.row.hidden = !repo;
    f.workspace.row.hidden = repo;
    f.setup.row.hidden = setupMode.value !== "commands";
    f.tenant.row.hidden = !admin;
  };
  shown();

  const clear = () => {
    error.textContent = "";
    for (const x of Object.values(f)) {
      x.said.textContent = "";
      x.input.removeAttribute("aria-invalid");
    }
  };
  const mark = (name, message) => {
    const x = f[name];
    x.said.textContent = message;
    x.input.setAttribute("aria-invalid", "true");
  };

  // the body POST /sessions takes, or null after marking what cannot be sent as typed
  function body() {
    const given = (x) => x.input.value.trim();
    const input = { test_command: given(f.test_command) };
    if (sourceKind.value === "repo") {
      input.repo = given(f.repo);
      if (given(f.ref)) input.ref = given(f.ref);
    } else {
      input.workspace = given(f.workspace);
    }
    if (given(f.goal)) input.goal = given(f.goal);
    if (setupMode.value === "none") input.setup = "none";
    if (setupMode.value === "commands") {
      input.setup = f.setup.input.value.split("\n").map((c) => c.trim()).filter(Boolean);
    }
    const budgets = {};
    let ok = true;
    for (const name of ["max_steps", "max_tokens", "max_cost_usd"]) {
      if (given(f[name])) budgets[name] = Number(given(f[name]));
    }
    if (given(f.deadline)) {
      const s = seconds(given(f.deadline));
      if (s === null || s <= 0) {
        mark("deadline", `"${given(f.deadline)}" ${NOT_A_DURATION}`);
        ok = false;
      } else {
        budgets.deadline_s = s;
      }
    }
    const admitted = admissionBody(admission, mark);
    const sent = { kind: "repair", input, budgets, ...admitted };
    if (given(f.model)) sent.model = given(f.model);
    if (given(f.price)) {
      sent.price = priceRates(given(f.price));
    }
    if (given(f.id)) sent.id = given(f.id);
    if (admin && given(f.tenant)) sent.tenant = given(f.tenant);
    return ok && admitted ? sent : null;
  }

  async function submit(event) {
    event.preventDefault();
    clear();
    const sent = body();
    if (!sent) {
      error.textContent = "Nothing was sent: put right what is marked.";
      return;
    }
    button.disabled = true;
    try {
      const head = await api("/sessions", { method: "POST", body: sent });
      sessionStorage.removeItem(DRAFT_KEY);
      toast(`submitted ${head.id}`, "ok");
      location.hash = `#/sessions/${enc(head.id)}`;
    } catch (e) {
      const names = named(e);
      const marked = Object.entries(FIELDS).filter(
        ([name, keys]) => keys.some((k) => names.has(k)) && !f[name].row.hidden);
      for (const [name] of marked) mark(name, e.message);
      // the admission fields in the form's words (the API's may name a CLI flag)
      for (const [name, words] of refusedFields(e, Object.keys(admission))) {
        mark(name, words);
        marked.push([name]);
      }
      // said once, beside its field; here only when no field is named
      error.textContent = marked.length
        ? `Not submitted (${e.body.code || `HTTP ${e.status}`}): see the marked field${marked.length > 1 ? "s" : ""}.`
        : e.message;
    } finally {
      button.disabled = false;
    }
  }

  const group = (title, ...rows) => el("fieldset", {}, el("legend", {}, title), rows);
  const form = el("form", { id: "submit", novalidate: true, oninput: save, onchange: () => { shown(); save(); }, onsubmit: submit },
    group("Source", el("div", { class: "field" }, el("label", { for: sourceKind.id }, "From"), sourceKind),
      f.repo.row, f.ref.row, f.workspace.row),
    group("Job",
      el("div", { class: "field" }, el("label", { for: setupMode.id }, "Setup"), setupMode), f.setup.row,
      f.test_command.row, f.goal.row, f.model.row, f.price.row, admission.context_window.row),
    group("Budgets (empty: the server's defaults)",
      el("div", { class: "budgets" }, f.max_steps.row, f.max_tokens.row, f.max_cost_usd.row, f.deadline.row)),
    group("Admission (empty: the server's defaults)",
      el("div", { class: "budgets" }, f.priority.row, f.concurrency_key.row, f.max_per_key.row)),
    group("Session", f.id.row, f.tenant.row),
    el("div", { class: "actions" }, button,
      el("button", { type: "button", id: "submit-reset", onclick: () => {
        sessionStorage.removeItem(DRAFT_KEY);
        submitView(view);
      } }, "Start over")),
    error);
  view.draw(el("h2", {}, "Submit a repair job"), form);
}
