// What a submit and a fork may ask of admission (a priority, a concurrency key and how many
// of its key at once) and, a fork, of its context window: the fields with the API's bounds,
// and what the page says when the API refuses one: the form's words, not the body's names
// the API's message gives.
import { count, el } from "./core.js";

// the API's bounds, served in the page by the server (tickwork.api.bodies.page_bounds),
// never copied here: priority, max_per_key, context_window, price (a rate) and price_rates
export const BOUNDS = JSON.parse(document.querySelector('meta[name="tickwork-bounds"]').content);

const range = (name) => `from ${count(BOUNDS[name][0])} to ${count(BOUNDS[name][1])}`;
const WORDS = {
  priority: () => `Priority must be a whole number ${range("priority")} (higher is admitted first).`,
  concurrency_key: () => "A concurrency key is up to 200 letters, digits and _ - . : / @ + =, " +
    "starting with a letter or digit (e.g. github.com/org/repo).",
  max_per_key: () => `Max per key must be a whole number ${range("max_per_key")}: how many ` +
    "sessions with the concurrency key may run at once.",
  context_window: () => `The context window must be a whole number of tokens ${range("context_window")}.`,
};
// a rate of a price as JSON writes a number; anything else is sent as typed, for the API to
// refuse in its own words
const RATE = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;
// a price as typed ("3, 15" or "3 15 0.3"), as the `price` of a submit's or a fork's body
export const priceRates = (text) => text.split(/[\s,]+/).filter(Boolean)
  .map((rate) => (RATE.test(rate) ? Number(rate) : rate));
const NEEDS_KEY = "Max per key needs a concurrency key: fill in Concurrency key, or empty Max per key.";

// one labelled field of a form: its input (id `${form}-${name}`), a hint, and where an error
// about it is said
export function formField(form, name, label, input, hint) {
  input.id = `${form}-${name.replace(/_/g, "-")}`;
  input.name = name;
  const said = el("p", { class: "field-error error", id: `${input.id}-error`, role: "alert" });
  return { input, said, row: el("div", { class: "field", dataset: { field: name } },
    el("label", { for: input.id }, label), input, hint ? el("p", { class: "hint meta" }, hint) : null, said) };
}

const whole = (name, attrs) => el("input", { type: "number", step: 1, inputmode: "numeric",
  min: BOUNDS[name][0], max: BOUNDS[name][1], ...attrs });

// the admission fields; a fork's (`kept`: the original's head) show what an empty one keeps
export function admissionFields(form, kept) {
  return {
    priority: formField(form, "priority", "Priority",
      whole("priority", { placeholder: kept ? kept.priority : "0" }),
      "Higher is admitted first within the tenant."),
    concurrency_key: formField(form, "concurrency_key", "Concurrency key",
      el("input", { type: "text", spellcheck: "false",
        placeholder: kept ? kept.concurrency_key || "none" : "github.com/org/repo" }),
      "Sessions with the same key wait their turn as queued."),
    max_per_key: formField(form, "max_per_key", "Max per key",
      whole("max_per_key", { placeholder: (kept && kept.max_per_key) || "1" }),
      "How many with the key may run at once."),
  };
}

// the context window a session runs under, in tokens: the one its model stated when it
// refused a prompt as too long, else its policy's; null for a session sent whole
export function windowOf(head) {
  const policy = (head.config || {}).context;
  const stated = (head.result || {}).context_window;
  return Number.isInteger(stated) ? stated : policy ? policy.window : null;
}

// a submit's context window: empty, the model table's
export function contextField(form) {
  return formField(form, "context_window", "Context window (tokens)",
    whole("context_window", { placeholder: "the model's" }),
    "Old observations are masked, then the transcript compacted, to keep each prompt under it.");
}

// a fork's context window: prefilled with the session's, sent only when changed
export function windowField(form, head) {
  const current = windowOf(head);
  const input = whole("context_window", { placeholder: "the original's" });
  if (current !== null) input.value = String(current);
  const x = formField(form, "context_window", "Context window (tokens)", input,
    "Raise it to fork a session whose prompts outgrew its model's window.");
  x.changed = () => input.value.trim() !== "" && input.value.trim() !== String(current ?? "");
  return x;
}

// the body's part for the fields given (numbers as numbers), or null after `mark`ing a field
// whose text is not a number at all (the API would never see it)
export function admissionBody(fields, mark) {
  const sent = {};
  let ok = true;
  for (const [name, x] of Object.entries(fields)) {
    if (x.input.validity && x.input.validity.badInput) {
      mark(name, WORDS[name]());
      ok = false;
      continue;
    }
    const text = x.input.value.trim();
    if (!text || (x.changed && !x.changed())) continue;
    sent[name] = x.input.type === "number" ? Number(text) : text;
  }
  return ok ? sent : null;
}

// the fields among `names` an API error refuses, each with what the page says of it
export function refusedFields(error, names) {
  const body = error.body || {};
  const message = body.message || "";
  const said = new Map();
  for (const e of body.errors || []) {
    const name = (e.loc || []).map(String).find((part) => names.includes(part));
    if (name) said.set(name, WORDS[name]());
  }
  if (body.code !== "invalid_input") return said;
  const about = (name, words) => { if (names.includes(name) && !said.has(name)) said.set(name, words); };
  if (/`?max_per_key`? needs a concurrency key/.test(message)) about("max_per_key", NEEDS_KEY);
  else if (/concurrency key/.test(message)) about("concurrency_key", WORDS.concurrency_key());
  if (/\bmax_per_key \d/.test(message)) about("max_per_key", WORDS.max_per_key());
  if (/\bpriority\b/.test(message)) about("priority", WORDS.priority());
  if (/\bcontext_window\b/.test(message)) about("context_window", WORDS.context_window());
  return said;
}
