// The "Checks" tab: each check of a message (HTML compatibility, links, spam
// score, authentication) loads on demand from /api/emails/:id/checks/<name>
// when its button is pressed, and shows its error plainly (spamd down, DNS
// timeout, no HTML). Text only ever goes in through textContent.

/** An element with a class and text (never HTML). */
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** GET a check; throws an Error carrying the API's {"error"} text. */
async function load(path) {
  const response = await fetch(path, { headers: { accept: "application/json" } });
  let json = null;
  try {
    json = await response.json();
  } catch {
    // Not JSON: reported below.
  }
  if (!response.ok) throw new Error(json?.error ?? `HTTP ${response.status}`);
  return json;
}

const CHECKS = [
  ["html", "HTML compatibility", "Which mail clients lack the HTML and CSS features this message uses.", htmlResult],
  ["links", "Links", "Fetches every link now (HEAD, then GET); internal addresses are refused.", linksResult],
  ["spam", "Spam score", "Scores the message with SpamAssassin (needs --spamassassin).", spamResult],
  ["auth", "Authentication", "Verifies DKIM signatures, and SPF and DMARC for the sender.", authResult],
];

/** The Checks tab's content for a message; `path(id, suffix)` names an API path. */
export function checksPanel(email, path) {
  return CHECKS.map(([name, title, about, render]) => {
    const section = el("section", "check");
    section.id = `check-${name}`;
    const head = el("div", "check-head");
    const run = el("button", "", "Run");
    run.type = "button";
    run.setAttribute("aria-label", `Run the ${title} check`);
    head.append(el("h3", "", title), run);
    const body = el("div", "check-body");
    body.append(el("p", "muted", about));
    run.addEventListener("click", async () => {
      run.disabled = true;
      body.replaceChildren(el("p", "muted", "Checking…"));
      try {
        body.replaceChildren(...render(await load(path(email.id, `/checks/${name}`))));
      } catch (error) {
        body.replaceChildren(el("p", "check-error", error.message));
      } finally {
        run.disabled = false;
        run.textContent = "Run again";
      }
    });
    section.append(head, body);
    return section;
  });
}

/** A result word in a pill; `kind` (default: the word) picks its colour. */
function badge(word, kind = word) {
  return el("span", `badge badge-${String(kind).replace(/[^a-z]/g, "")}`, word);
}

function htmlResult(report) {
  const summary = el("p", "", `Score ${report.score}/100 across ${report.clients} mail clients. `);
  if (!report.warnings.length) return [summary, el("p", "muted", "Every client supports everything this message uses.")];
  const list = el("ul", "check-list");
  for (const warning of report.warnings) {
    const item = el("li");
    const title = el("strong", "", warning.title);
    item.append(title, el("span", "muted", ` (${warning.feature})`));
    const rows = [["Not supported", warning.unsupported, "no"], ["Partial", warning.partial, "partial"]];
    for (const [label, clients, kind] of rows) {
      if (!clients.length) continue;
      const line = el("div", `clients clients-${kind}`);
      line.append(el("span", "clients-label", `${label}: `), el("span", "", clients.join(", ")));
      item.append(line);
    }
    list.append(item);
  }
  return [summary, list];
}

function linksResult(report) {
  if (!report.links.length) return [el("p", "muted", "No links.")];
  const list = el("ul", "check-list");
  for (const link of report.links) {
    const item = el("li");
    const ok = link.status !== null && link.status < 400;
    item.append(badge(link.status ?? "error", ok ? "pass" : "fail"), el("span", ok ? "" : "check-bad", ` ${link.url}`));
    const notes = [];
    if (link.error) notes.push(link.error);
    if (link.redirects.length) notes.push(`redirected: ${link.redirects.join(" → ")}`);
    notes.push(`${link.ms} ms`);
    item.append(el("div", "muted", notes.join(" · ")));
    list.append(item);
  }
  const out = [list];
  if (report.skipped) out.push(el("p", "muted", `${report.skipped} more links not checked.`));
  return out;
}

function spamResult(report) {
  const verdict = el("p", report.spam ? "check-bad" : "", `Score ${report.score} of ${report.threshold} required: ${report.spam ? "spam" : "not spam"}.`);
  const table = el("table", "check-table");
  for (const rule of report.rules) {
    const row = el("tr");
    row.append(el("td", "num", rule.score), el("td", "mono", rule.name), el("td", "", rule.description));
    table.append(row);
  }
  return [verdict, table];
}

function authResult(report) {
  const table = el("table", "check-table");
  const row = (what, result, detail) => {
    const tr = el("tr");
    const cell = el("td");
    cell.append(badge(result));
    tr.append(el("td", "", what), cell, el("td", "muted", detail ?? ""));
    table.append(tr);
  };
  if (!report.dkim.length) row("DKIM", "none", "no DKIM-Signature");
  for (const dkim of report.dkim) row(`DKIM ${dkim.domain} (${dkim.selector})`, dkim.result, dkim.reason);
  row(`SPF ${report.spf.domain ?? ""}`, report.spf.result, report.spf.reason);
  row(`DMARC ${report.dmarc.domain ?? ""}`, report.dmarc.result, `policy ${report.dmarc.policy}`);
  return [table];
}
