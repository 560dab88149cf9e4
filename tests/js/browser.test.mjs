// The --target web build in headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core): browser/scenario.mjs delivers mail, resolves a
// wait, filters with a regex and times a wait out. Fails when Chromium is
// missing: scripts/test-wasm.sh installs it.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { extname, join, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";

const CHROMIUM = process.env.MAILJAR_CHROMIUM ?? "/usr/bin/chromium";
const root = fileURLToPath(new URL("../../", import.meta.url));
/** Only these folders are served. */
const served = ["host-wasm/pkg-web/", "host-wasm/js/", "tests/js/browser/"];
const types = { ".html": "text/html", ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".ts": "text/plain" };

let http;
let base;

before(async () => {
  http = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^[/\\]+/, "");
    const file = join(root, path);
    const allowed = served.some((dir) => path.startsWith(dir)) && file.startsWith(root) && !path.split(sep).includes("..");
    if (!allowed || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" });
    res.end(readFileSync(file));
  });
  await new Promise((resolve) => http.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${http.address().port}`;
});

after(() => http?.close());

test("the web build runs a scenario in headless Chromium", { timeout: 120_000 }, async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (scripts/test-wasm.sh does)`);
  assert.ok(existsSync(join(root, "host-wasm/pkg-web/mailjar_wasm_bg.wasm")), "build the web package first (scripts/test-wasm.sh)");
  const profile = mkdtempSync(join(tmpdir(), "mailjar-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await context.newPage();
    const problems = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
    page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()}`));
    await page.goto(`${base}/tests/js/browser/index.html`);
    await page.waitForFunction(() => window.__mailjar !== undefined, null, { timeout: 60_000 });
    const result = await page.evaluate(() => window.__mailjar);
    assert.equal(result.error, undefined, `${result.error}\n${problems.join("\n")}`);
    assert.equal(result.ok, true);
    assert.equal(result.checks.length, 9);
    assert.match(result.userAgent, /Chrome\//);
    assert.deepEqual(problems, []);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
