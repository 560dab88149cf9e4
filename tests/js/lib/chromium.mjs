// Driving the web UI in headless Chromium (Debian's /usr/bin/chromium, or
// MAILJAR_CHROMIUM, through playwright-core) from the UI's browser tests.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { chromium } from "playwright-core";

import { root } from "./native.mjs";

/** The Chromium binary the tests drive. */
export const CHROMIUM = process.env.MAILJAR_CHROMIUM ?? "/usr/bin/chromium";

/** Where the UI tests save their screenshots. */
export const SHOTS = path.join(process.env.CARGO_TARGET_DIR ?? path.join(root, "target"), "ui-screenshots");

/**
 * A persistent Chromium context on a fresh profile, 1280x800, with playwright's
 * context `options` on top; `close()` removes the profile. Creates [SHOTS].
 */
export async function launch(options = {}) {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (scripts/test-wasm.sh does)`);
  mkdirSync(SHOTS, { recursive: true });
  const profile = mkdtempSync(path.join(tmpdir(), "mailjar-ui-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    acceptDownloads: true,
    viewport: { width: 1280, height: 800 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    ...options,
  });
  return { context, close: async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); } };
}

/** A page that records every dialog, console line, page error, main-frame navigation and foreign request. */
export async function watchedPage(context, origin) {
  const page = await context.newPage();
  const seen = { dialogs: [], console: [], errors: [], navigations: [], foreign: [] };
  page.on("dialog", (d) => {
    seen.dialogs.push(d.message());
    d.dismiss().catch(() => {});
  });
  page.on("console", (m) => seen.console.push(m.text()));
  page.on("pageerror", (e) => seen.errors.push(e.message));
  page.on("framenavigated", (f) => f === page.mainFrame() && seen.navigations.push(f.url()));
  page.on("request", (r) => !r.url().startsWith(origin) && !r.url().startsWith("data:") && seen.foreign.push(r.url()));
  return { page, seen };
}
