// The HTML compatibility check in the wasm build: checkHtml(html) on the
// bindings gives the same report shape as GET /api/emails/:id/checks/html,
// warns poorly supported features with the clients that lack them, and
// throws a TypeError for a value that is not a string.
import assert from "node:assert/strict";
import { test } from "node:test";

import { bindings } from "../../host-wasm/js/node.mjs";

const poor = `<!DOCTYPE html><html><head><style>
:root { --brand: #c00; }
.row { display: flex; position: absolute; color: var(--brand); }
</style></head><body><div class="row">Hi</div><video src="v.mp4"></video></body></html>`;
const plain = "<html><body><table><tr><td><p>Hello</p></td></tr></table></body></html>";
const features = ["css-display-flex", "css-position", "html-video", "css-variables"];

test("poorly supported features are warned with the clients that lack them", () => {
  const clients = bindings.htmlCheckClients();
  assert.ok(clients.includes("Outlook Windows") && clients.includes("Gmail webmail"), clients.join());
  const report = bindings.checkHtml(poor);
  assert.equal(report.clients, clients.length);
  const warned = report.warnings.map((w) => w.feature);
  for (const feature of features) assert.ok(warned.includes(feature), `${feature} not in ${warned}`);
  const video = report.warnings.find((w) => w.feature === "html-video");
  assert.deepEqual(Object.keys(video).sort(), ["feature", "partial", "supported", "title", "unsupported"]);
  assert.ok(video.unsupported.length > 0);
  for (const name of [...video.supported, ...video.partial, ...video.unsupported]) assert.ok(clients.includes(name), name);

  const clean = bindings.checkHtml(plain);
  for (const feature of features) assert.ok(!clean.warnings.some((w) => w.feature === feature), feature);
  assert.ok(clean.score > report.score, `${clean.score} vs ${report.score}`);
});

test("a value that is not a string is a TypeError", () => {
  assert.throws(() => bindings.checkHtml(42), TypeError);
  assert.throws(() => bindings.checkHtml(undefined), TypeError);
});
