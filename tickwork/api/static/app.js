// The tickwork page: approvals, sessions (live), submitting a repair job, dead letters.
// Plain DOM in ES modules, no build step; this one logs in and out and routes.
import { approvalsView } from "./approvals.js";
import { API, TOKEN_KEY, api, can, el, hooks, main, state, visit } from "./core.js";
import { deadLetterView, deadLettersView } from "./dead_letters.js";
import { compareView, sessionView, sessionsView } from "./sessions.js";
import { DRAFT_KEY, submitView } from "./submit.js";

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

// --- routing ------------------------------------------------------------------------

async function render(message) {
  const view = visit();
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
    if (state.token) view.draw(el("p", { class: "error" }, e.message));
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
  nav.querySelector('[data-nav="submit"]').hidden = !can("submitter");
  try {
    if (parts[0] === "sessions" && parts[1] && parts[2] === "compare") await compareView(view, parts[1]);
    else if (parts[0] === "sessions" && parts[1]) await sessionView(view, parts[1]);
    else if (parts[0] === "approvals" && parts[1]) await sessionView(view, parts[1]);
    else if (parts[0] === "sessions") await sessionsView(view);
    else if (parts[0] === "dead-letters" && parts[1]) await deadLetterView(view, parts[1]);
    else if (parts[0] === "dead-letters") await deadLettersView(view);
    else if (parts[0] === "submit") submitView(view);
    else await approvalsView(view);
  } catch (e) {
    if (state.token) view.draw(el("p", { class: "error", id: "view-error" }, e.message));
  }
}

hooks.unauthorized = logout;
// logging out on purpose ends the draft too; a refused token keeps it for the next log-in
document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(DRAFT_KEY);
  logout();
});
window.addEventListener("hashchange", () => render());
render();
