// Who is reading (access control, README "Inboxes and access control"):
// the token prompt shown when the API answers 401, signing out, and the
// admin's inbox switcher. The token goes only into the body of
// POST /api/session; the server answers with an HttpOnly session cookie,
// which fetch, the EventSource and the HTML iframe then send by themselves.
// Nothing is kept in the page's storage. Text only goes in through
// textContent.

const $ = (id) => document.getElementById(id);
const view = {
  form: $("sign-in"),
  token: $("token"),
  submit: $("sign-in-submit"),
  error: $("sign-in-error"),
  signOut: $("sign-out"),
  who: $("who"),
  inbox: $("inbox"),
};

/** The headers of every write: JSON, which the server's cross-site check on cookie-authenticated writes asks for. */
export const WRITE_HEADERS = Object.freeze({ accept: "application/json", "content-type": "application/json" });

/**
 * Who reads: `role` is "open" (no access control), "admin", "inbox", or
 * null while signed out; `name` the inbox of an inbox token when known (from
 * signing in); `inboxes` what GET /api/inboxes listed (the admin's);
 * `chosen` the inbox the admin narrows to ("" for all mail).
 */
export const access = { role: null, name: null, inboxes: [], chosen: "" };

let hooks = { signedIn: async () => {}, signedOut: () => {}, chose: () => {} };

/** GET, or a write with a JSON body; `{status, json}`, whatever the status. */
async function call(method, path, body) {
  const init = method === "GET" ? { headers: { accept: "application/json" } } : { method, headers: WRITE_HEADERS };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  let json = null;
  try {
    json = await response.json();
  } catch {
    // Not JSON: the status says enough.
  }
  return { status: response.status, json };
}

function formError(text) {
  view.error.textContent = text;
  view.error.hidden = !text;
}

/** Shows who reads, and the controls that go with it. */
function setRole(role, name = null) {
  access.role = role;
  access.name = name;
  const signedIn = role === "admin" || role === "inbox";
  view.signOut.hidden = !signedIn;
  view.who.hidden = !signedIn;
  view.who.textContent = role === "admin" ? "admin" : role === "inbox" ? `inbox ${name ?? ""}`.trim() : "";
  view.inbox.hidden = role !== "admin";
  if (role !== "admin") {
    access.inboxes = [];
    access.chosen = "";
  }
}

/** Shows the token prompt (the API answered 401); the page's data goes. */
export function askForToken() {
  if (!view.form.hidden) return;
  const ended = access.role === "admin" || access.role === "inbox";
  setRole(null);
  hooks.signedOut();
  formError(ended ? "Your session ended (its token was rotated, or its inbox deleted): sign in again." : "");
  view.form.hidden = false;
  view.token.value = "";
  view.token.focus();
}

async function signIn(event) {
  event.preventDefault();
  const token = view.token.value.trim();
  if (!token) {
    formError("Enter a token.");
    return;
  }
  view.submit.disabled = true;
  try {
    const { status, json } = await call("POST", "/api/session", { token });
    if (status !== 200) {
      formError(status === 401 ? "Wrong token: it is neither the admin token nor an inbox's." : `Signing in: ${json?.error ?? `HTTP ${status}`}`);
      view.token.select();
      return;
    }
    view.token.value = "";
    formError("");
    view.form.hidden = true;
    setRole(json?.admin ? "admin" : "inbox", json?.inbox ?? null);
    if (access.role === "admin") await refreshInboxes();
    await hooks.signedIn();
  } catch (error) {
    formError(`Signing in: ${error.message}`);
  } finally {
    view.submit.disabled = false;
  }
}

async function signOut() {
  try {
    await call("DELETE", "/api/session");
  } finally {
    setRole(null);
    askForToken();
  }
}

/**
 * Finds who reads at load: /health names `inboxes` only with access
 * control; then GET /api/inboxes answers the admin 200, an inbox token 403
 * and nobody 401 (the prompt). True when the page may load its data.
 */
export async function identify() {
  const health = await call("GET", "/health");
  if (health.status === 200 && health.json?.inboxes === undefined) {
    setRole("open");
    return true;
  }
  const { status, json } = await call("GET", "/api/inboxes");
  if (status === 401) {
    askForToken();
    return false;
  }
  if (status === 200) {
    setRole("admin");
    showInboxes(json?.inboxes ?? []);
  } else {
    setRole(status === 403 ? "inbox" : "open");
  }
  return true;
}

/** Lists the admin's inboxes again (their counts change with every event). */
export async function refreshInboxes() {
  if (access.role !== "admin") return;
  const { status, json } = await call("GET", "/api/inboxes");
  if (status === 401) askForToken();
  else if (status === 200) showInboxes(json?.inboxes ?? []);
}

/** The switcher: "All mail" and each inbox with its count; an inbox that went is dropped. */
function showInboxes(inboxes) {
  access.inboxes = inboxes;
  const options = [["", "All mail"], ...inboxes.map((inbox) => [inbox.name, `${inbox.name} (${inbox.messages})`])];
  const same = view.inbox.options.length === options.length && options.every(([value], i) => view.inbox.options[i].value === value);
  if (same) {
    options.forEach(([, label], i) => (view.inbox.options[i].textContent = label));
  } else {
    view.inbox.replaceChildren(
      ...options.map(([value, label]) => {
        const option = document.createElement("option");
        option.value = value;
        option.textContent = label;
        return option;
      }),
    );
  }
  if (access.chosen && !inboxes.some((inbox) => inbox.name === access.chosen)) choose("");
  view.inbox.value = access.chosen;
}

/** Narrows the page to one inbox ("" for all mail); the app reloads its list and stream. */
export function choose(name, quiet = false) {
  if (access.role !== "admin") name = "";
  if (name === access.chosen) return;
  access.chosen = name;
  view.inbox.value = name;
  if (!quiet) hooks.chose(name);
}

/** The message count of the inbox shown, when there is one. */
export function shownInboxCount() {
  return access.inboxes.find((inbox) => inbox.name === access.chosen)?.messages ?? null;
}

/** Wires the prompt and the controls; `signedIn` (async) loads the page's data, `signedOut` drops it, `chose` follows the switcher. */
export function setupAccess(given) {
  hooks = { ...hooks, ...given };
  view.form.addEventListener("submit", signIn);
  view.signOut.addEventListener("click", signOut);
  view.inbox.addEventListener("change", () => choose(view.inbox.value));
}
