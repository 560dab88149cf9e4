// Playwright Test configuration of the example: no browser is needed for it.
import { defineConfig } from "@playwright/test";

export default defineConfig({ testDir: ".", testMatch: "*.spec.mjs", reporter: "list" });
