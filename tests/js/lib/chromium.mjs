// Headless Chromium (Debian's /usr/bin/chromium, or MAILJAR_CHROMIUM) through
// playwright-core, the way every browser test in this directory starts it.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { chromium } from "playwright-core";

import { root } from "./native.mjs";

/** The Chromium binary the tests drive. */
export const CHROMIUM = process.env.MAILJAR_CHROMIUM ?? "/usr/bin/chromium";

/** Where the UI tests put their screenshots (created on first use). */
export const SHOTS = path.join(process.env.CARGO_TARGET_DIR ?? path.join(root, "target"), "ui-screenshots");

/**
 * Starts Chromium with a fresh profile; `options` go to playwright's
 * `launchPersistentContext` (a viewport, `acceptDownloads`).
 * Returns `{ context, close }`; `close` also removes the profile.
 */
export async function launchChromium(options = {}) {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (scripts/test-wasm.sh does)`);
  mkdirSync(SHOTS, { recursive: true });
  const profile = mkdtempSync(path.join(tmpdir(), "mailjar-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    ...options,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, close };
}
