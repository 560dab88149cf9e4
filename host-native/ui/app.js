// mailjar's web UI: a list of captured mail kept live by GET /api/events, a
// message view, one search box. Message text is only ever set with
// textContent or as attribute values of elements built with createElement;
// HTML mail is shown only in a sandboxed iframe on /api/emails/:id/html.
// With access control, access.js asks for a token and narrows to an inbox.

import { access, askForToken, choose, identify, refreshInboxes, setupAccess, shownInboxCount, WRITE_HEADERS } from "./access.js";
import { checksPanel } from "./checks.js";
import { loadRelay, releasePanel } from "./release.js";
import { transcriptPanel } from "./transcript.js";

const PAGE = 50;
/**
 * Rows kept at most. The list is a window on the store: scrolling past its
 * end loads an older page with `beforeId` and drops the newest rows; scrolling
 * back up fetches them again with `afterId` and `beforeId`. The page's memory
 * stays bounded however much is stored.
 */
const WINDOW = 300;
const ZERO_ID = "00000000-0000-0000-0000-000000000000";

const $ = (id) => document.getElementById(id);
const ui = {
  search: $("search"),
  count: $("count"),
  live: $("live"),
  deleteAll: $("delete-all"),
  error: $("error"),
  main: $("main"),
  listPane: $("list-pane"),
  list: $("list"),
  newer: $("newer"),
  empty: $("empty"),
  older: $("older"),
  message: $("message"),
  back: $("back"),
  deleteOne: $("delete-one"),
  seenToggle: $("seen-toggle"),
  subject: $("m-subject"),
  meta: $("m-meta"),
  codes: $("m-codes"),
  tabs: $("tabs"),
  panel: $("panel"),
};

const state = {
  /** The relay messages can be released to (`GET /api/relay`), or null. */
  relay: null,
  /** Summaries shown, newest first. */
  emails: [],
  /** Index of the row under the cursor. */
  cursor: 0,
  /** Whether older pages may exist below the window. */
  more: false,
  /** Exclusive upper `beforeId` bounds of newer pages dropped above the window, nearest last. */
  above: [],
  /** Live arrivals held while the newest mail is not in the window, newest first. */
  pending: [],
  /** Set when more arrived than `pending` holds: paging back up reloads instead. */
  pendingLost: false,
  /** A page load is running. */
  loading: false,
  /** Ids deleted while a page load runs (`all` when everything went): its answer must not bring them back. */
  goneWhileLoading: null,
  /** The open message (full JSON), if any. */
  open: null,
  tab: "html",
  remoteImages: false,
  /** The HTML preview's width: "phone" (375 px), "tablet" (768 px) or "desktop" (the pane's). */
  previewWidth: "desktop",
  /** The parsed search: URLSearchParams of API filters. */
  filters: new URLSearchParams(),
  source: null,
  /** Bumped on every reload, so late answers of an old search are dropped. */
  generation: 0,
};

// ---- small helpers -------------------------------------------------------

/** An element with a class and text (never HTML). */
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function showError(text) {
  ui.error.textContent = text;
  ui.error.hidden = !text;
}

/** Shows what went wrong, unless it is a 401: the token prompt says that. */
function showFailure(prefix, error) {
  if (error.status !== 401) showError(`${prefix}: ${error.message}`);
}

/**
 * GET, DELETE or PATCH (with `body` as JSON) a JSON endpoint; throws an Error
 * carrying the API's {"error"} text. A 401 also brings up the token prompt.
 */
async function api(path, method = "GET", payload = undefined) {
  const headers = method === "GET" ? { accept: "application/json" } : WRITE_HEADERS;
  const init = { method, headers };
  if (payload !== undefined) init.body = JSON.stringify(payload);
  const response = await fetch(path, init);
  const body = await response.text();
  let json = null;
  try {
    json = JSON.parse(body);
  } catch {
    // Not JSON: reported below.
  }
  if (!response.ok) {
    const error = new Error(json?.error ?? `HTTP ${response.status}`);
    error.status = response.status;
    if (response.status === 401) askForToken();
    throw error;
  }
  return json;
}

function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function formatTime(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const today = new Date();
  const sameDay = date.toDateString() === today.toDateString();
  return sameDay
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
    : date.toLocaleString([], { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    flash(button, "Copied");
  } catch {
    // No clipboard permission (plain http on another host): select the text instead.
    const field = el("input", "copy-fallback");
    field.value = text;
    field.readOnly = true;
    field.setAttribute("aria-label", "Text to copy");
    button.after(field);
    field.select();
    flash(button, "Press Ctrl+C");
  }
}

function flash(button, text) {
  const before = button.dataset.label ?? button.textContent;
  button.dataset.label = before;
  button.textContent = text;
  setTimeout(() => (button.textContent = before), 1200);
}

function emailPath(id, tail = "") {
  return `/api/emails/${encodeURIComponent(id)}${tail}`;
}

/** Only same-origin API paths are used as URLs from message JSON. */
function apiUrl(url) {
  return typeof url === "string" && url.startsWith("/api/emails/") ? url : null;
}

/** Only http(s) URLs become links. */
function webUrl(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

// ---- search ----------------------------------------------------------------

/**
 * The API filters of a search text: `to:addr` is the recipient, a
 * `/pattern/flags` token is a regex on the subject, the rest (trimmed) one
 * subject substring.
 */
export function parseSearch(text) {
  const filters = new URLSearchParams();
  let rest = ` ${text} `;
  // Greedy: the pattern runs to the last "/" that is followed by flags and a space.
  const regex = /\s\/(.+)\/([a-z]*)(?=\s)/;
  const patternMatch = rest.match(regex);
  if (patternMatch) {
    filters.set("subjectPattern", patternMatch[1]);
    if (patternMatch[2]) filters.set("subjectFlags", patternMatch[2]);
    rest = rest.replace(patternMatch[0], " \0");
  }
  rest = rest.replace(/\sto:(\S+)(?=\s)/gi, (_, address) => {
    filters.append("to", address);
    return " \0";
  });
  // Where a token was taken out, the words either side join with one space.
  const subject = rest.replace(/\s*(?:\0\s*)+/g, " ").trim();
  if (subject) filters.set("subject", subject);
  return filters;
}

function readHash() {
  return new URLSearchParams(location.hash.slice(1));
}

function writeHash() {
  const params = new URLSearchParams();
  if (access.chosen) params.set("inbox", access.chosen);
  if (ui.search.value) params.set("q", ui.search.value);
  if (state.open) params.set("id", state.open.id);
  const hash = params.toString();
  const url = `${location.pathname}${location.search}${hash ? `#${hash}` : ""}`;
  if (url !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(null, "", url);
}

// ---- the list ----------------------------------------------------------------

function row(email, index) {
  const item = el("li", email.seen ? "row" : "row unseen");
  item.id = `row-${email.id}`;
  item.setAttribute("role", "option");
  item.dataset.id = email.id;
  item.dataset.index = String(index);
  const top = el("div", "row-top");
  top.append(el("span", "from", email.from || email.envelope?.from || "(no sender)"));
  if (email.attachmentCount > 0) {
    const clip = el("span", "clip");
    clip.title = `${email.attachmentCount} attachment${email.attachmentCount === 1 ? "" : "s"}`;
    clip.setAttribute("aria-label", clip.title);
    top.append(clip);
  }
  const time = el("time", "time", formatTime(email.receivedAt));
  time.dateTime = email.receivedAt;
  top.append(time);
  const subject = el("div", "row-subject", email.subject || "(no subject)");
  const bottom = el("div", "row-bottom");
  bottom.append(el("span", "to", `to ${(email.to ?? []).join(", ")}`), el("span", "size", formatSize(email.size)));
  item.append(top, subject, bottom);
  if (email.preview) item.append(el("div", "preview", email.preview));
  item.setAttribute("aria-label", `${email.subject || "(no subject)"}, from ${email.from}${email.seen ? "" : ", unseen"}`);
  return item;
}

/**
 * Marks a message seen or unseen for every reader (`PATCH /api/emails/:id`),
 * then shows it so: its row (bold while unseen), its summary in the list,
 * and the open message's button. A flag change is no event: this page
 * refreshes its own row.
 */
async function setSeen(id, seen) {
  try {
    await api(emailPath(id), "PATCH", { seen });
  } catch (error) {
    if (error.status !== 404) showFailure(seen ? "Marking as seen" : "Marking as unseen", error);
    return;
  }
  const index = state.emails.findIndex((e) => e.id === id);
  if (index >= 0) {
    state.emails[index] = { ...state.emails[index], seen };
    document.getElementById(`row-${id}`)?.replaceWith(row(state.emails[index], index));
    markCursor(false);
  }
  if (state.open?.id === id) {
    state.open.seen = seen;
    showSeenToggle();
  }
}

function showSeenToggle() {
  ui.seenToggle.textContent = state.open?.seen ? "Mark as unseen" : "Mark as seen";
}

/**
 * Runs `change` (which adds or removes rows) without moving what the reader
 * sees: the first row in view stays where it was. At the very top of the
 * list, new mail should come into view instead, unless `always`.
 */
function keepPosition(change, always = false) {
  const pane = ui.listPane;
  if (pane.scrollTop <= 0 && !always) {
    change();
    return;
  }
  const top = pane.getBoundingClientRect().top;
  const anchor = [...ui.list.children].find((node) => node.getBoundingClientRect().bottom > top);
  const id = anchor?.dataset.id;
  const offset = anchor ? anchor.getBoundingClientRect().top - top : 0;
  change();
  const again = id && document.getElementById(`row-${id}`);
  if (again) pane.scrollTop += again.getBoundingClientRect().top - top - offset;
}

function renderList(anchored = false) {
  keepPosition(() => ui.list.replaceChildren(...state.emails.map(row)), anchored);
  ui.empty.hidden = state.emails.length > 0 || !atTop();
  ui.empty.textContent = state.filters.toString() ? "No mail matches this search." : "No mail yet.";
  renderPagers();
  state.cursor = Math.min(Math.max(0, state.cursor), Math.max(0, state.emails.length - 1));
  markCursor(false);
}

function renderPagers() {
  ui.older.hidden = !state.more;
  ui.newer.hidden = atTop();
  const waiting = state.pendingLost ? "new mail" : state.pending.length ? `${state.pending.length} new` : "";
  ui.newer.textContent = waiting ? `Newer messages · ${waiting}` : "Newer messages";
}

function markCursor(scroll) {
  for (const node of ui.list.querySelectorAll('[aria-selected="true"]')) node.setAttribute("aria-selected", "false");
  const node = ui.list.children[state.cursor];
  if (!node) return;
  node.setAttribute("aria-selected", "true");
  ui.list.setAttribute("aria-activedescendant", node.id);
  if (scroll) node.scrollIntoView({ block: "nearest" });
  for (const open of ui.list.querySelectorAll(".open")) open.classList.remove("open");
  if (state.open) document.getElementById(`row-${state.open.id}`)?.classList.add("open");
}

function listQuery(extra = {}) {
  const params = new URLSearchParams(state.filters);
  if (access.chosen) params.set("inbox", access.chosen);
  params.set("view", "summary");
  params.set("limit", String(PAGE));
  for (const [k, v] of Object.entries(extra)) params.set(k, v);
  return `/api/emails?${params}`;
}

/** Whether the window shows the newest mail (no newer page was dropped). */
function atTop() {
  return state.above.length === 0;
}

/**
 * The UUID one above `id`: `beforeId` of it is "up to and including `id`".
 * Null for the greatest UUID, which has no successor.
 */
export function successor(id) {
  const next = (BigInt(`0x${id.replaceAll("-", "")}`) + 1n).toString(16).padStart(32, "0");
  if (next.length > 32) return null;
  return `${next.slice(0, 8)}-${next.slice(8, 12)}-${next.slice(12, 16)}-${next.slice(16, 20)}-${next.slice(20)}`;
}

/** Drops the newest `count` rows, remembering each page of them so that it can be fetched back. */
function dropNewest(count) {
  const dropped = state.emails.splice(0, count);
  // Newest page first, so the page next to the window is the last pushed.
  for (let at = 0; at < dropped.length; at += PAGE) state.above.push(successor(dropped[at].id));
  state.cursor -= dropped.length;
}

/** Drops rows beyond the window's size from the oldest end. */
function dropOldest() {
  if (state.emails.length <= WINDOW) return;
  state.emails.length = WINDOW;
  state.more = true;
}

/** Loads the newest page for the current search, then follows the event stream from there. */
async function reload() {
  const generation = ++state.generation;
  state.source?.close();
  state.source = null;
  state.above = [];
  state.pending = [];
  state.pendingLost = false;
  state.loading = false;
  setLive(false);
  try {
    const { emails } = await api(listQuery());
    if (generation !== state.generation) return;
    showError("");
    state.emails = emails.reverse();
    state.more = emails.length === PAGE;
    state.cursor = 0;
    ui.listPane.scrollTop = 0;
    renderList();
    follow(state.emails[0]?.id ?? ZERO_ID, generation);
  } catch (error) {
    if (generation !== state.generation) return;
    state.emails = [];
    state.more = false;
    renderList();
    ui.empty.textContent = "";
    showFailure("Search", error);
  }
  refreshCount();
}

/** Runs one page load at a time, and drops its answer if the search changed meanwhile. */
async function loadPage(fetchPage) {
  if (state.loading) return false;
  state.loading = true;
  state.goneWhileLoading = new Set();
  const generation = state.generation;
  try {
    const answer = await fetchPage();
    if (generation !== state.generation) return false;
    // Everything was deleted meanwhile: the list is already empty, the page is stale.
    if (state.goneWhileLoading.has("all")) return false;
    answer();
    return true;
  } catch (error) {
    if (generation === state.generation) showFailure("Loading mail", error);
    return false;
  } finally {
    if (generation === state.generation) {
      state.loading = false;
      state.goneWhileLoading = null;
    }
  }
}

/** The next older page below the window; the newest rows go when the window is full. */
function loadOlder() {
  const oldest = state.emails.at(-1);
  if (!oldest || !state.more) return Promise.resolve(false);
  return loadPage(async () => {
    const { emails } = await api(listQuery({ beforeId: oldest.id }));
    return () => {
      const known = new Set(state.emails.map((e) => e.id));
      const gone = state.goneWhileLoading;
      state.emails.push(...emails.reverse().filter((e) => !known.has(e.id) && !gone?.has(e.id)));
      state.more = emails.length === PAGE;
      if (state.emails.length > WINDOW) dropNewest(state.emails.length - WINDOW);
      renderList();
    };
  });
}

/** Fetches back the newest page that was dropped; at the top, adds the mail that arrived meanwhile. */
function loadNewer() {
  if (atTop()) return Promise.resolve(false);
  const bound = state.above.at(-1);
  const params = { afterId: state.emails[0]?.id ?? ZERO_ID };
  if (bound) params.beforeId = bound;
  return loadPage(async () => {
    const { emails } = await api(listQuery(params));
    return () => {
      state.above.pop();
      const known = new Set(state.emails.map((e) => e.id));
      const gone = state.goneWhileLoading;
      const newer = emails.reverse().filter((e) => !known.has(e.id) && !gone?.has(e.id));
      if (atTop()) {
        if (state.pendingLost) {
          reload();
          return;
        }
        newer.unshift(...state.pending.filter((e) => !known.has(e.id)));
        state.pending = [];
      }
      state.emails.unshift(...newer);
      state.cursor += newer.length;
      dropOldest();
      // The rows that were in view stay there: the page fetched back sits above them.
      renderList(true);
    };
  });
}

/** Loads pages while a pager button is in (or near) view, as the reader scrolls. */
async function fillView() {
  const pane = ui.listPane.getBoundingClientRect();
  const near = (button) => {
    if (button.hidden) return false;
    const box = button.getBoundingClientRect();
    return box.bottom > pane.top - 200 && box.top < pane.bottom + 200;
  };
  if (near(ui.older) ? await loadOlder() : near(ui.newer) ? await loadNewer() : false) requestAnimationFrame(fillView);
}

function setLive(on) {
  ui.live.textContent = on ? "live" : "offline";
  ui.live.classList.toggle("on", on);
}

/** Follows GET /api/events for the current search, after the newest message shown. */
function follow(afterId, generation) {
  const params = new URLSearchParams(state.filters);
  if (access.chosen) params.set("inbox", access.chosen);
  params.set("afterId", afterId);
  const source = new EventSource(`/api/events?${params}`);
  state.source = source;
  let opened = false;
  source.addEventListener("open", () => {
    opened = true;
    setLive(true);
  });
  source.addEventListener("stored", (event) => {
    if (generation !== state.generation) return;
    const email = parseEvent(event);
    if (email) onStored(email);
  });
  source.addEventListener("deleted", (event) => {
    const data = parseEvent(event);
    if (data) onDeleted(data);
  });
  for (const type of ["overflow", "error"]) {
    source.addEventListener(type, (event) => {
      if (!event.data) {
        setLive(false);
        // Closed for good after it was open (the session ended with its token, say): a reload finds out why.
        if (source.readyState === EventSource.CLOSED && opened && generation === state.generation) recover();
        return;
      }
      try {
        showError(`Live updates: ${JSON.parse(event.data).error}`);
      } catch {
        showError("Live updates stopped");
      }
      if (type === "error") {
        source.close();
        setLive(false);
      }
    });
  }
}

/** An event's JSON, or null when it is not JSON. */
function parseEvent(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return null;
  }
}

/** A message arrived: on top of the list, or held while the newest are out of view. */
function onStored(email) {
  refreshCount();
  if (!atTop()) {
    // The newest are not shown: hold the arrival until the reader pages back up.
    if (state.pending.length >= WINDOW) {
      state.pending = [];
      state.pendingLost = true;
    } else if (!state.pendingLost) state.pending.unshift(email);
    renderPagers();
    return;
  }
  if (state.emails.some((e) => e.id === email.id)) return;
  keepPosition(() => {
    state.emails.unshift(email);
    ui.list.prepend(row(email, 0));
    if (state.emails.length > WINDOW) {
      dropOldest();
      ui.list.lastElementChild?.remove();
    }
  });
  renumber();
  renderPagers();
  // The cursor stays on its message, except at the top of the list with nothing open: it follows the newest.
  if (state.emails.length > 1 && (state.cursor > 0 || state.open)) state.cursor += 1;
  ui.empty.hidden = true;
  markCursor(false);
}

/** Messages were deleted or evicted (`all`: everything shown went). */
function onDeleted(data) {
  if (data.all) {
    state.goneWhileLoading?.add("all");
    state.emails = [];
    state.more = false;
    state.above = [];
    state.pending = [];
    state.pendingLost = false;
    renderList();
    if (state.open) closeMessage(`This message was deleted.`);
  } else {
    const gone = new Set(data.ids ?? []);
    for (const id of gone) state.goneWhileLoading?.add(id);
    const cursorId = state.emails[state.cursor]?.id;
    state.pending = state.pending.filter((e) => !gone.has(e.id));
    keepPosition(() => {
      state.emails = state.emails.filter((e) => !gone.has(e.id));
      for (const id of gone) document.getElementById(`row-${id}`)?.remove();
    });
    renumber();
    renderPagers();
    const at = state.emails.findIndex((e) => e.id === cursorId);
    state.cursor = at >= 0 ? at : Math.min(state.cursor, Math.max(0, state.emails.length - 1));
    ui.empty.hidden = state.emails.length > 0 || !atTop();
    markCursor(false);
    if (state.open && gone.has(state.open.id)) {
      const reason = data.reason === "evicted" ? "evicted by the store's limits" : "deleted";
      ui.subject.textContent = `${state.open.subject || "(no subject)"} (${reason})`;
    }
    requestAnimationFrame(fillView);
  }
  refreshCount();
}

let recovered = 0;
/** Reloads once the stream closed for good, at most every 5 s: a 401 brings the token prompt. */
function recover() {
  if (Date.now() - recovered < 5000) return;
  recovered = Date.now();
  reload();
}

function renumber() {
  [...ui.list.children].forEach((node, i) => (node.dataset.index = String(i)));
}

let countTimer = null;
/** Bumped by every count: an answer that comes after a newer one is dropped. */
let countSeq = 0;
function refreshCount() {
  if (countTimer) return;
  countTimer = setTimeout(async () => {
    countTimer = null;
    const seq = ++countSeq;
    try {
      const render = access.role === "inbox" ? await countInbox() : await countStore();
      if (seq !== countSeq) return;
      render();
      const recipient = state.filters.getAll("to");
      ui.deleteAll.textContent = recipient.length === 1 ? `Delete all to ${recipient[0]}` : "Delete all";
    } catch {
      if (seq === countSeq) ui.count.textContent = "";
    }
  }, 150);
}

/**
 * The store's count against its limits (from /health); for the admin, the
 * inboxes' counts too. Asks first, then returns what writes the line.
 */
async function countStore() {
  const health = await api("/health");
  if (access.role === "admin") await refreshInboxes();
  const inbox = access.chosen ? shownInboxCount() : null;
  return () => {
    const limits = health.limits ?? {};
    const shown = state.filters.toString() ? `${state.emails.length}${state.more ? "+" : ""} shown · ` : "";
    const narrowed = inbox === null ? "" : `${access.chosen}: ${inbox} · `;
    ui.count.textContent = `${narrowed}${shown}${health.messages} stored`;
    const limit = el("span", "limits", ` · limit ${Number(limits.maxMessages).toLocaleString()} messages, ${formatSize(limits.maxStoreBytes)}`);
    ui.count.append(limit);
    ui.count.title = `${health.messages} of at most ${limits.maxMessages} messages, ${formatSize(health.storeBytes)} of ${formatSize(limits.maxStoreBytes)}; ${health.evicted} evicted`;
  };
}

/** An inbox token's own count: its inbox's, when the page knows its name (it signed in here). */
async function countInbox() {
  const inbox = access.name ? (await api(`/api/inboxes/${encodeURIComponent(access.name)}`)).inbox : null;
  return () => {
    const shown = `${state.emails.length}${state.more ? "+" : ""} shown`;
    if (!inbox) ui.count.textContent = shown;
    else ui.count.textContent = `${state.filters.toString() ? `${shown} · ` : ""}${inbox.messages} in ${inbox.name}`;
    ui.count.title = "";
  };
}

// ---- the message -------------------------------------------------------------------

async function openMessage(id) {
  try {
    const { email } = await api(emailPath(id));
    state.open = email;
    state.remoteImages = false;
    state.tab = email.html ? "html" : "text";
    renderMessage();
    writeHash();
    markCursor(false);
    // Opening a message is reading it.
    if (!email.seen) await setSeen(id, true);
  } catch (error) {
    if (error.status === 404) showError("That message is gone (deleted or evicted).");
    else showFailure("Opening", error);
  }
}

function closeMessage(note) {
  state.open = null;
  ui.message.hidden = true;
  ui.main.classList.remove("reading");
  ui.panel.replaceChildren();
  writeHash();
  markCursor(false);
  if (note) showError(note);
  ui.list.focus();
}

function renderMessage() {
  const email = state.open;
  ui.message.hidden = false;
  ui.main.classList.add("reading");
  ui.subject.textContent = email.subject || "(no subject)";
  showSeenToggle();
  const meta = [
    ["From", email.from],
    ["To", (email.to ?? []).join(", ")],
    ["Cc", (email.cc ?? []).join(", ")],
    ["Received", new Date(email.receivedAt).toLocaleString()],
    ["Size", formatSize(email.size)],
  ];
  ui.meta.replaceChildren(
    ...meta.filter(([, v]) => v).flatMap(([k, v]) => [el("dt", "", k), el("dd", "", v)]),
  );
  ui.codes.replaceChildren(
    ...(email.codes ?? []).map((code) => {
      const button = el("button", "code", code);
      button.type = "button";
      button.title = "Copy this code";
      button.setAttribute("aria-label", `Copy code ${code}`);
      button.addEventListener("click", () => copy(code, button));
      return button;
    }),
  );
  const tabs = [
    ["html", "HTML", Boolean(email.html)],
    ["text", "Text", true],
    ["headers", "Headers", true],
    ["raw", "Raw", true],
    ["links", `Links (${email.links?.length ?? 0})`, true],
    ["attachments", `Attachments (${email.attachments?.length ?? 0})`, true],
    ["checks", "Checks", true],
    ["transcript", "Transcript", true],
    ["release", "Release", Boolean(state.relay)],
  ];
  ui.tabs.replaceChildren(
    ...tabs
      .filter(([, , shown]) => shown)
      .map(([key, label]) => {
        const tab = el("button", "tab", label);
        tab.type = "button";
        tab.id = `tab-${key}`;
        tab.setAttribute("role", "tab");
        tab.setAttribute("aria-selected", String(key === state.tab));
        tab.addEventListener("click", () => {
          state.tab = key;
          renderMessage();
        });
        return tab;
      }),
  );
  ui.panel.setAttribute("aria-labelledby", `tab-${state.tab}`);
  const panels = { html: htmlPanel, text: textPanel, headers: headersPanel, raw: rawPanel, links: linksPanel, attachments: attachmentsPanel, checks: (e) => checksPanel(e, emailPath), transcript: (e) => transcriptPanel(e, emailPath), release: (e) => releasePanel(e, emailPath, state.relay) };
  ui.panel.replaceChildren(...panels[state.tab](email));
}

function htmlPanel(email) {
  const bar = el("div", "panel-bar");
  const images = el("button", "", state.remoteImages ? "Remote images shown" : "Show remote images");
  images.type = "button";
  images.disabled = state.remoteImages;
  images.addEventListener("click", () => {
    state.remoteImages = true;
    renderMessage();
  });
  bar.append(images);
  const widths = el("div", "widths");
  widths.setAttribute("role", "group");
  widths.setAttribute("aria-label", "Preview width");
  for (const [key, label] of [["phone", "Phone 375"], ["tablet", "Tablet 768"], ["desktop", "Desktop"]]) {
    const button = el("button", "width", label);
    button.type = "button";
    button.id = `width-${key}`;
    button.setAttribute("aria-pressed", String(state.previewWidth === key));
    button.addEventListener("click", () => {
      state.previewWidth = key;
      renderMessage();
    });
    widths.append(button);
  }
  bar.append(widths);
  const frame = document.createElement("iframe");
  frame.className = `html-frame width-${state.previewWidth}`;
  // No allow-scripts, no allow-same-origin: the mail's HTML runs nothing and reads nothing.
  frame.setAttribute("sandbox", "");
  frame.setAttribute("referrerpolicy", "no-referrer");
  frame.title = "HTML body of the message";
  frame.src = emailPath(email.id, state.remoteImages ? "/html?remoteImages=true" : "/html");
  return [bar, frame];
}

function textPanel(email) {
  return [el("pre", "text", email.text || "(no text body)")];
}

function headersPanel(email) {
  const list = el("dl", "headers");
  const rows = [["envelope from", email.envelope?.from ?? ""], ["envelope to", (email.envelope?.to ?? []).join(", ")]];
  if (email.smtp) {
    const smtp = email.smtp;
    rows.push(["smtp helo", smtp.helo ?? ""], ["smtp remote address", smtp.remoteAddr ?? ""]);
    rows.push(["smtp tls", smtp.tls ? `${smtp.tls.version} ${smtp.tls.cipher}` : "none"]);
    rows.push(["smtp auth", smtp.auth ? `${smtp.auth.mechanism} ${smtp.auth.username}` : "none"]);
  }
  for (const [name, value] of Object.entries(email.headers ?? {})) rows.push([name, String(value)]);
  for (const [name, value] of rows) list.append(el("dt", "", name), el("dd", "", value));
  return [list];
}

function rawPanel(email) {
  const bar = el("div", "panel-bar");
  const download = el("a", "button", "Download .eml");
  download.href = emailPath(email.id, "/raw");
  download.setAttribute("download", `${email.id}.eml`);
  bar.append(download);
  const pre = el("pre", "raw", "Loading…");
  fetch(emailPath(email.id, "/raw"))
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((text) => (pre.textContent = text))
    .catch((error) => (pre.textContent = `Could not load the raw message: ${error.message}`));
  return [bar, pre];
}

function linksPanel(email) {
  const links = email.links ?? [];
  if (!links.length) return [el("p", "empty", "No links.")];
  const list = el("ul", "links");
  for (const link of links) {
    const item = el("li");
    const href = webUrl(link);
    const text = href ? el("a", "link", link) : el("span", "link", link);
    if (href) {
      text.href = href;
      text.target = "_blank";
      text.rel = "noopener noreferrer";
    }
    const button = el("button", "copy", "Copy");
    button.type = "button";
    button.setAttribute("aria-label", `Copy link ${link}`);
    button.addEventListener("click", () => copy(link, button));
    item.append(button, text);
    list.append(item);
  }
  return [list];
}

function attachmentsPanel(email) {
  const attachments = email.attachments ?? [];
  if (!attachments.length) return [el("p", "empty", "No attachments.")];
  const list = el("ul", "attachments");
  for (const attachment of attachments) {
    const item = el("li");
    const url = apiUrl(attachment.url);
    const name = attachment.filename || "(unnamed)";
    const link = el("a", "attachment", name);
    if (url) {
      link.href = url;
      link.setAttribute("download", name);
    }
    item.append(link, el("span", "attachment-meta", ` ${attachment.contentType}, ${formatSize(attachment.size)}`));
    if (url && /^image\/(png|jpeg|gif|webp|bmp|avif)$/i.test(attachment.contentType)) {
      const image = el("img", "thumb");
      image.src = url;
      image.alt = name;
      image.loading = "lazy";
      item.append(image);
    }
    list.append(item);
  }
  return [list];
}

// ---- actions ------------------------------------------------------------------------

async function deleteMessage(id) {
  try {
    await api(emailPath(id), "DELETE");
    if (state.open?.id === id) closeMessage();
  } catch (error) {
    showFailure("Deleting", error);
  }
}

async function deleteAll() {
  const recipient = state.filters.getAll("to");
  const scoped = recipient.length === 1;
  const question = scoped ? `Delete every message to ${recipient[0]}?` : "Delete every stored message?";
  if (!confirm(question)) return;
  try {
    await api(scoped ? `/api/emails?${new URLSearchParams({ to: recipient[0] })}` : "/api/emails", "DELETE");
    if (scoped) reload();
  } catch (error) {
    showFailure("Deleting", error);
  }
}

async function move(step) {
  if (!state.emails.length) return;
  const target = state.cursor + step;
  // Past either end of the window, the next page comes in first (the cursor index shifts with it).
  if (target >= state.emails.length && state.more) await loadOlder();
  else if (target < 0 && !atTop()) await loadNewer();
  state.cursor = Math.max(0, Math.min(state.emails.length - 1, state.cursor + step));
  markCursor(true);
}

// ---- wiring --------------------------------------------------------------------------

function applySearch(text, fromHash = false) {
  if (!fromHash) writeHash();
  state.filters = parseSearch(text);
  reload();
}

let searchTimer = null;
ui.search.addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => applySearch(ui.search.value), 250);
});
ui.search.addEventListener("keydown", (event) => {
  if (event.key === "Enter") {
    clearTimeout(searchTimer);
    applySearch(ui.search.value);
  } else if (event.key === "Escape" || event.key === "ArrowDown") {
    event.preventDefault();
    ui.list.focus();
  }
});

ui.list.addEventListener("click", (event) => {
  const item = event.target.closest("li.row");
  if (!item) return;
  state.cursor = Number(item.dataset.index);
  markCursor(false);
  openMessage(item.dataset.id);
});
ui.older.addEventListener("click", loadOlder);
ui.newer.addEventListener("click", loadNewer);
let fillPending = false;
ui.listPane.addEventListener("scroll", () => {
  if (fillPending) return;
  fillPending = true;
  requestAnimationFrame(() => {
    fillPending = false;
    fillView();
  });
});
ui.back.addEventListener("click", () => closeMessage());
ui.deleteOne.addEventListener("click", () => state.open && deleteMessage(state.open.id));
ui.seenToggle.addEventListener("click", () => state.open && setSeen(state.open.id, !state.open.seen));
ui.deleteAll.addEventListener("click", deleteAll);

document.addEventListener("keydown", (event) => {
  const typing = event.target instanceof HTMLInputElement || event.target instanceof HTMLTextAreaElement;
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  switch (event.key) {
    case "/":
      event.preventDefault();
      ui.search.focus();
      ui.search.select();
      break;
    case "j":
    case "ArrowDown":
      if (event.target.closest?.(".panel")) return;
      event.preventDefault();
      move(1);
      break;
    case "k":
    case "ArrowUp":
      if (event.target.closest?.(".panel")) return;
      event.preventDefault();
      move(-1);
      break;
    case "Enter": {
      if (event.target instanceof HTMLButtonElement || event.target instanceof HTMLAnchorElement) return;
      const email = state.emails[state.cursor];
      if (email) {
        event.preventDefault();
        openMessage(email.id);
      }
      break;
    }
    case "Delete": {
      const id = state.open?.id ?? state.emails[state.cursor]?.id;
      if (id) {
        event.preventDefault();
        deleteMessage(id);
      }
      break;
    }
    case "Escape":
      if (state.open) closeMessage();
      break;
    default:
  }
});

function fromHash() {
  const hash = readHash();
  const q = hash.get("q") ?? "";
  const inbox = access.chosen;
  choose(hash.get("inbox") ?? "", true);
  ui.deleteAll.hidden = Boolean(access.chosen);
  if (q !== ui.search.value || inbox !== access.chosen || !state.source) {
    ui.search.value = q;
    applySearch(q, true);
  }
  const id = hash.get("id");
  if (id && state.open?.id !== id) openMessage(id);
  else if (!id && state.open) closeMessage();
}

/** Drops what the page shows (signed out): no list, no stream, no message. */
function dropData() {
  state.generation += 1;
  state.source?.close();
  state.source = null;
  setLive(false);
  Object.assign(state, { emails: [], more: false, above: [], pending: [], pendingLost: false, cursor: 0 });
  if (state.open) closeMessage();
  renderList();
  showError("");
  ui.count.textContent = "";
  document.body.classList.add("signed-out");
}

/** Loads the page for whoever reads (after identifying them, or signing in). */
async function start() {
  document.body.classList.remove("signed-out");
  loadRelay().then((relay) => {
    state.relay = relay;
  });
  fromHash();
  ui.list.focus();
}

setupAccess({
  signedIn: start,
  signedOut: dropData,
  chose: () => {
    ui.deleteAll.hidden = Boolean(access.chosen);
    if (state.open) closeMessage();
    writeHash();
    reload();
  },
});
window.addEventListener("hashchange", () => {
  if (!document.body.classList.contains("signed-out")) fromHash();
});
identify()
  .catch(() => true)
  .then((ready) => ready && start());
