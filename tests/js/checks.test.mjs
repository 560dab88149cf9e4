// The HTML compatibility check in the wasm build: the bindings' Api answers
// GET /api/emails/:id/checks/html with the same report as the native server,
// warns poorly supported features with the clients that lack them, and
// answers 404 for a message without HTML and 405 for another method.
import assert from "node:assert/strict";
import { test } from "node:test";

import { bindings } from "../../host-wasm/js/node.mjs";

const poor = `<!DOCTYPE html><html><head><style>
:root { --brand: #c00; }
.row { display: flex; position: absolute; color: var(--brand); }
</style></head><body><div class="row">Hi</div><video src="v.mp4"></video></body></html>`;
const plain = "<html><body><table><tr><td><p>Hello</p></td></tr></table></body></html>";
const features = ["css-display-flex", "css-position", "html-video", "css-variables"];
const NOW = 1_763_779_327_000;

/** Stores `body` as a message of `type` and asks its HTML check. */
function check(api, body, type = "text/html") {
  const raw = `From: a@example.com\r\nTo: b@example.com\r\nSubject: s\r\nContent-Type: ${type}; charset=utf-8\r\n\r\n${body}\r\n`;
  const { id } = api.deliver({ envelope: { from: "a@example.com", to: ["b@example.com"] }, raw }, NOW);
  const answer = api.handle({ method: "GET", path: `/api/emails/${id}/checks/html` }, NOW);
  return { id, status: answer.status, json: JSON.parse(answer.body) };
}

test("poorly supported features are warned with the clients that lack them", () => {
  const api = new bindings.Api();
  const { status, json: report } = check(api, poor);
  assert.equal(status, 200);
  assert.ok(report.clients >= 10);
  const warned = report.warnings.map((w) => w.feature);
  for (const feature of features) assert.ok(warned.includes(feature), `${feature} not in ${warned}`);
  const video = report.warnings.find((w) => w.feature === "html-video");
  assert.deepEqual(Object.keys(video).sort(), ["feature", "partial", "supported", "title", "unsupported"]);
  assert.ok(video.unsupported.includes("Outlook Windows"), video.unsupported.join());

  const clean = check(api, plain).json;
  for (const feature of features) assert.ok(!clean.warnings.some((w) => w.feature === feature), feature);
  assert.ok(clean.score > report.score, `${clean.score} vs ${report.score}`);
  api.free();
});

test("no HTML is a 404, another method a 405", () => {
  const api = new bindings.Api();
  const { id, status, json } = check(api, "just text", "text/plain");
  assert.equal(status, 404);
  assert.match(json.error, /no HTML/);
  const post = api.handle({ method: "POST", path: `/api/emails/${id}/checks/html` }, NOW);
  assert.equal(post.status, 405);
  api.free();
});
