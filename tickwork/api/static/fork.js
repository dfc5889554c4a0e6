// Forking a session from a step with a declared patch, from a session's view (POST
// /sessions/{id}/fork) or a dead letter's (POST /dead-letters/{id}/fork): an instruction, a
// new system prompt, hand-fixed outputs of the step's tool calls, the budgets (steps 1..K
// count against them), and the model, context window and admission to run under. Only what was changed is sent; a refusal is said beside the
// field it is about (the API's words; admission's in the form's), and nothing typed is lost.
import {
  BOUNDS, admissionBody, admissionFields, formField, priceRates, refusedFields, windowField,
} from "./admission.js";
import { api, el, enc, toast } from "./core.js";
import { NOT_A_DURATION, seconds } from "./submit.js";

// the prompt the session runs under, where its config holds it (a repair's, a role's)
const promptOf = (head) => {
  const prompt = (head.config || {}).system_prompt;
  return typeof prompt === "string" ? prompt : null;
};

// a text as a regular expression matching it, character for character
const literally = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

// an archived session's head, which the API does not serve (its fork it does): each field
// left empty keeps the original's, whatever it was, and the API refuses a step past its last
const ORIGINAL = "the original's";
const ARCHIVED = { step: null, model: ORIGINAL, priority: ORIGINAL, concurrency_key: ORIGINAL,
                  max_per_key: ORIGINAL, config: {}, budgets: {} };

// the budgets a fork may be given, by the name the API's `budgets` takes: its label, and
// the original's value as its placeholder (what an empty field keeps)
const BUDGETS = [
  ["max_steps", "Steps", (b) => b.max_steps],
  ["max_tokens", "Tokens", (b) => b.max_tokens],
  ["max_cost_usd", "Cost (USD)", (b) => b.max_cost_usd],
  ["deadline_s", "Deadline", (b) => (b.deadline_s === undefined ? undefined : `${b.deadline_s}s`)],
];

// `head` and `steps`: the session's (its view; `steps` may be a function giving the latest;
// `head` null for an archived session); `step`: the step to fork from; `path`: where to post;
// `title`: the form's heading; `extra`: more to show beside its button; `proposed`: budgets
// filled in, by name (a dead letter's that ran out, raised: else its fork stops the same way)
export function forkForm({ head: known, steps, step, path, title, extra, proposed = {} }) {
  const head = known || ARCHIVED;
  const fromStep = el("input", { type: "number", id: "fork-step", min: 0, max: head.step, step: 1,
                                 inputmode: "numeric", value: step });
  const instruction = el("textarea", { id: "fork-instruction", rows: 3,
                                       placeholder: "an instruction added after that step (optional)" });
  const prompt = promptOf(head);
  const system = formField("fork", "system_prompt", "System prompt",
    el("textarea", { rows: 4, spellcheck: "false",
                     placeholder: prompt !== null ? "" : known ? `${ORIGINAL} (its kind's)` : ORIGINAL }),
    "Replaces the prompt the model is given; left as it is, the original's.");
  if (prompt !== null) system.input.value = prompt;
  system.changed = () => system.input.value !== (prompt ?? "");
  const model = formField("fork", "model", "Model",
    el("input", { type: "text", spellcheck: "false", placeholder: head.model }),
    "The model the fork runs on, with its own window and price. Empty: the original's.");
  const price = formField("fork", "price", "Price (USD per million tokens)",
    el("input", { type: "text", inputmode: "decimal", spellcheck: "false",
                  placeholder: "prompt, completion[, cached[, cache write]]" }),
    `The fork's model's price, ${BOUNDS.price_rates[0]} to ${BOUNDS.price_rates[1]} numbers: at ` +
    "least the server's for the model. Empty: the original's for its model, the server's for another.");
  const fields = { ...admissionFields("fork", head), context_window: windowField("fork", head) };
  // a BUDGET_* or DEADLINE dead letter is forked with that budget raised: the kept steps
  // count against steps, tokens and cost (the API refuses one they used up, naming it)
  const budgets = Object.fromEntries(BUDGETS.map(([name, label, of]) => [name, formField("fork", name,
    label, el("input", name === "deadline_s"
      ? { type: "text", spellcheck: "false", placeholder: of(head.budgets || {}) ?? ORIGINAL }
      : { type: "number", min: 0, inputmode: "numeric", step: name === "max_cost_usd" ? "0.01" : 1,
          placeholder: of(head.budgets || {}) ?? ORIGINAL }),
    [name === "deadline_s" ? "Seconds, or 30m, 2h, 1d, from the fork." : null,
     name in (proposed || {}) ? "Proposed: room for the fork to run as long again as the session did." : null]
      .filter(Boolean).join(" ") || null)]));
  for (const [name, value] of Object.entries(proposed || {})) {
    if (budgets[name]) budgets[name].input.value = name === "deadline_s" ? `${value}s` : String(value);
  }
  const outputs = new Map(); // call id -> its field, kept while other steps are chosen
  const outputBox = el("div", { class: "outputs", id: "fork-outputs" });
  const again = el("input", { type: "checkbox", id: "fork-again" });
  const againRow = el("p", { class: "check", hidden: true },
    el("label", { class: "check" }, again, " fork it once more on purpose (its dead letter was closed)"));
  const error = el("p", { class: "error", id: "fork-error", role: "alert" });
  const button = el("button", { type: "submit", class: "primary", id: "fork-button" }, "Fork");

  // the kept step's tool calls, each output as recorded, to be fixed by hand
  const outputField = (call) => {
    const had = call.observation ? call.observation.content : "";
    const x = formField("fork", `output_${call.call_id}`, `Output of ${call.call_id} (${call.name})`,
      el("textarea", { rows: 4, spellcheck: "false", dataset: { call: call.call_id },
        placeholder: call.observation ? "" : "none recorded: it runs again in the fork, unless given here" }),
      call.observation ? "As recorded; what you write here is what the model reads instead." : null);
    x.input.value = had;
    x.had = had;
    x.changed = () => x.input.value !== had;
    return x;
  };
  const showOutputs = () => {
    const n = Number(fromStep.value);
    const found = (typeof steps === "function" ? steps() : steps)[n - 1];
    const shown = Number.isInteger(n) && n >= 1 && found ? found.calls : [];
    for (const call of shown) {
      const kept = outputs.get(call.call_id);
      // one untouched is drawn again as recorded now (a live session's call may have run since)
      const had = call.observation ? call.observation.content : "";
      if (!kept || (!kept.changed() && kept.had !== had)) outputs.set(call.call_id, outputField(call));
    }
    outputBox.replaceChildren(...(shown.length
      ? [el("p", { class: "meta" }, `The tool outputs of step ${n}:`), ...shown.map((c) => outputs.get(c.call_id).row)]
      : []));
  };
  fromStep.addEventListener("input", showOutputs);
  showOutputs();

  const all = () => ({ system_prompt: system, model, price, ...fields, ...budgets,
    ...Object.fromEntries([...outputs].map(([id, x]) => [`output_${id}`, x])) });
  const mark = (name, message) => {
    const x = all()[name];
    x.said.textContent = message;
    x.input.setAttribute("aria-invalid", "true");
  };
  // the fields an API refusal speaks of, each with what is said beside it
  const refused = (e) => {
    const said = refusedFields(e, Object.keys(fields)); // admission: in the form's words
    const message = e.message;
    const loc = new Set((e.body.errors || []).flatMap((x) => (x.loc || []).map(String)));
    const about = (name, yes) => { if (yes && !said.has(name)) said.set(name, message); };
    about("system_prompt", loc.has("system_prompt") || /\bsystem_prompt\b/.test(message));
    about("model", loc.has("model") || /`model`/.test(message)
      || ["invalid_model_spec", "model_not_allowed", "invalid_script", "unpriced_model"]
        .includes(e.body.code));
    about("price", loc.has("price") || /`price`|\bthe price given\b/.test(message));
    for (const name of Object.keys(budgets)) {
      about(name, loc.has(name) || new RegExp(`\\b${name}\\b`).test(message));
    }
    for (const id of outputs.keys()) {
      const shown = outputs.get(id).row.isConnected;
      const named = new RegExp(`\\b${literally(id)}\\b`);
      about(`output_${id}`, shown && (loc.has(id) || named.test(message)));
    }
    return said;
  };
  const clear = () => {
    error.textContent = "";
    fromStep.removeAttribute("aria-invalid");
    for (const x of Object.values(all())) {
      x.said.textContent = "";
      x.input.removeAttribute("aria-invalid");
    }
  };

  async function submit(event) {
    event.preventDefault();
    clear();
    const given = admissionBody(fields, mark);
    if (!given) {
      error.textContent = "Nothing was sent: put right what is marked.";
      return;
    }
    const budget = {};
    for (const [name, x] of Object.entries(budgets)) {
      const typed = x.input.value.trim();
      if (!typed) continue;
      const value = name === "deadline_s" ? seconds(typed) : Number(typed);
      if (value === null || !(value > 0 || (name === "max_cost_usd" && value === 0))) {
        mark(name, name === "deadline_s"
          ? `"${typed}" ${NOT_A_DURATION}`
          : `"${typed}" is not a budget: give a number above 0${name === "max_cost_usd" ? " (0: no cost budget)" : ""}.`);
        error.textContent = "Nothing was sent: put right what is marked.";
        return;
      }
      budget[name] = value;
    }
    const body = { from_step: Number(fromStep.value), append_instruction: instruction.value || null, ...given };
    if (Object.keys(budget).length) body.budgets = budget;
    if (system.changed()) body.system_prompt = system.input.value;
    if (model.input.value.trim()) body.model = model.input.value.trim();
    if (price.input.value.trim()) body.price = priceRates(price.input.value.trim());
    const fixed = [...outputs].filter(([, x]) => x.row.isConnected && x.changed());
    if (fixed.length) body.tool_outputs = Object.fromEntries(fixed.map(([id, x]) => [id, x.input.value]));
    if (again.checked) body.again = true;
    button.disabled = true;
    try {
      const forked = await api(path, { method: "POST", body });
      toast(`forked as ${forked.id}`, "ok");
      location.hash = `#/sessions/${enc(forked.id)}`;
    } catch (e) {
      if (!e.body) {
        error.textContent = e.message; // no answer at all: the network's words
        return;
      }
      const said = refused(e);
      for (const [name, words] of said) mark(name, words);
      const step = (e.body.errors || []).some((x) => (x.loc || []).includes("from_step"))
        || /\bfrom_step\b/.test(e.message);
      if (step) fromStep.setAttribute("aria-invalid", "true");
      // a dead letter closed already: the API says how, and forking it again is a choice
      if (e.body.code === "dead_letter_closed") againRow.hidden = false;
      error.textContent = said.size
        ? `Not forked (${e.body.code || `HTTP ${e.status}`}): see the marked field${said.size > 1 ? "s" : ""}.`
        : e.message;
    } finally {
      button.disabled = false;
    }
  }

  return el("form", { id: "fork", class: "fork", novalidate: true, onsubmit: submit },
    el("h3", {}, title),
    el("label", { for: "fork-step" }, "From step (keep steps 1 to it; 0: start over)"), fromStep,
    el("label", { for: "fork-instruction" }, "Instruction"), instruction,
    system.row, outputBox,
    el("fieldset", { class: "admission" }, el("legend", {}, "Run it under (empty: the original's)"),
      model.row, price.row, el("div", { class: "budgets" }, Object.values(fields).map((x) => x.row))),
    el("fieldset", { class: "admission", id: "fork-budgets" },
      el("legend", {}, "Budgets (empty: the original's; steps 1 to K count against them)"),
      el("div", { class: "budgets" }, Object.values(budgets).map((x) => x.row))),
    againRow, el("p", { class: "actions" }, button, extra), error);
}
