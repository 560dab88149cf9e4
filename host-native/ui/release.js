// The "Release" tab: send the message, byte for byte, to the server's relay
// (--relay) for recipients that --relay-allow lets through. Shown only when
// GET /api/relay says a relay is configured (the admin's, with access
// control). Text only goes in through textContent.

import { WRITE_HEADERS } from "./access.js";

/** An element with a class and text (never HTML). */
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** The relay the server releases to, or null when it has none (or this reader may not release). */
export async function loadRelay() {
  try {
    const response = await fetch("/api/relay", { headers: { accept: "application/json" } });
    if (!response.ok) return null;
    return (await response.json()).relay ?? null;
  } catch {
    return null;
  }
}

/** The Release tab's content for a message; `path(id, suffix)` names an API path. */
export function releasePanel(email, path, relay) {
  const body = el("div", "release");
  const allow = relay.allow?.length ? relay.allow.join(", ") : "none (start mailjar with --relay-allow)";
  body.append(
    el("p", "", `Send this message unchanged to ${relay.address}.`),
    el("p", "muted", `Allowed recipients: ${allow}`),
  );
  const form = el("form", "release-form");
  const input = el("input");
  input.type = "text";
  input.id = "release-to";
  input.placeholder = "recipients, comma-separated";
  input.setAttribute("aria-label", "Recipients");
  input.value = (email.to ?? []).filter((to) => relay.allow?.some((p) => allowed(p, to))).join(", ");
  const send = el("button", "", "Release");
  send.type = "submit";
  const result = el("p", "release-result");
  result.setAttribute("role", "status");
  form.append(input, send);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const to = input.value.split(",").map((s) => s.trim()).filter(Boolean);
    send.disabled = true;
    result.className = "release-result muted";
    result.textContent = "Releasing…";
    release(path(email.id, "/release"), to)
      .then((reply) => {
        result.className = "release-result";
        result.textContent = `Released to ${to.join(", ")}: ${reply}`;
      })
      .catch((error) => {
        result.className = "release-result check-error";
        result.textContent = error.message;
      })
      .finally(() => {
        send.disabled = false;
      });
  });
  body.append(form, result);
  return [body];
}

/** Whether `address` matches an inbox-style pattern (`a@x`, `*@x`, `qa+*@x`), as the server decides. */
function allowed(pattern, address) {
  const [p, a] = [pattern.toLowerCase(), address.toLowerCase()];
  if (p.startsWith("*@")) return a.endsWith(p.slice(1)) && !a.slice(0, -p.length + 1).includes("@");
  if (p.includes("+*@")) {
    const [tag, domain] = p.split("+*@");
    return a.startsWith(`${tag}+`) && a.endsWith(`@${domain}`);
  }
  return p === a;
}

async function release(target, to) {
  const response = await fetch(target, { method: "POST", headers: WRITE_HEADERS, body: JSON.stringify({ to }) });
  let json = null;
  try {
    json = await response.json();
  } catch {
    // Not JSON: reported below.
  }
  if (!response.ok) {
    const reply = json?.reply ? ` (the relay said: ${json.reply})` : "";
    throw new Error(`${json?.error ?? `HTTP ${response.status}`}${reply}`);
  }
  return json.reply;
}
