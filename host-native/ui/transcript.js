// The "Transcript" tab: the SMTP dialogue that delivered the message, loaded
// from /api/emails/:id/transcript when the tab opens. Client lines and
// server replies are told apart by colour and an arrow; message text and
// credentials were elided by the server. Text only goes in through textContent.

/** An element with a class and text (never HTML). */
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** The Transcript tab's content for a message; `path(id, suffix)` names an API path. */
export function transcriptPanel(email, path) {
  const body = el("div", "transcript");
  body.append(el("p", "muted", "Loading the SMTP transcript…"));
  load(path(email.id, "/transcript"))
    .then((lines) => body.replaceChildren(...render(lines)))
    .catch((error) => body.replaceChildren(el("p", "check-error", error.message)));
  return [body];
}

async function load(target) {
  const response = await fetch(target, { headers: { accept: "application/json" } });
  let json = null;
  try {
    json = await response.json();
  } catch {
    // Not JSON: reported below.
  }
  if (!response.ok) throw new Error(json?.error ?? `HTTP ${response.status}`);
  return json.transcript;
}

function render(lines) {
  if (!lines.length) return [el("p", "muted", "No SMTP transcript: this message did not come over SMTP.")];
  const table = el("table", "transcript-table");
  for (const { ms, dir, line } of lines) {
    const row = el("tr", dir === "c" ? "from-client" : "from-server");
    row.append(el("td", "num muted", `${ms} ms`), el("td", "dir", dir === "c" ? "C →" : "S ←"), el("td", "mono", line));
    table.append(row);
  }
  return [el("p", "muted", `${lines.length} lines; times since the connection opened. Message text and credentials are elided.`), table];
}
