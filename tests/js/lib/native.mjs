// Starting the native binary from a Node test: on free ports, with the
// ports learned from `--ready-json`.
import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";

import nodemailer from "nodemailer";

/** The repository root. */
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

/** The debug binary the cargo tests built (built here when missing), or MAILJAR_BIN. */
export function binary() {
  if (process.env.MAILJAR_BIN) return process.env.MAILJAR_BIN;
  const target = process.env.CARGO_TARGET_DIR ?? path.join(root, "target");
  const bin = path.join(target, "debug", "mailjar");
  if (!existsSync(bin)) execFileSync("cargo", ["build", "-p", "mailjar"], { cwd: root, stdio: "inherit" });
  return bin;
}

/** Starts the server on free ports; resolves with `{child, smtpPort, http, smtpsPort}` once `--ready-json` has printed them (`smtpsPort` with `--smtps-port`). */
export function startServer(flags = []) {
  const child = spawn(binary(), ["--smtp-port", "0", "--http-port", "0", "--ready-json", ...flags], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let out = "";
    let err = "";
    const timer = setTimeout(() => reject(new Error(`mailjar did not start:\n${err}`)), 15_000);
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => (err += chunk));
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (out.includes("\n")) {
        clearTimeout(timer);
        const ready = JSON.parse(out.split("\n")[0]);
        const smtpsPort = ready.smtps === undefined ? undefined : Number(ready.smtps.split(":").at(-1));
        resolve({ child, smtpPort: Number(ready.smtp.split(":").at(-1)), http: ready.http, smtpsPort });
      }
    });
    child.on("exit", (code) => reject(new Error(`mailjar exited with ${code}:\n${err}`)));
  });
}

/**
 * Inside a `describe`: starts the server (with `flags`) and a plain nodemailer
 * transport to its SMTP port before the tests, and closes both after them.
 * Returns `{server, mailer}`, filled in once `before` has run.
 */
export function withServerAndMailer(flags = []) {
  const ctx = { server: undefined, mailer: undefined };
  before(async () => {
    ctx.server = await startServer(flags);
    ctx.mailer = nodemailer.createTransport({ host: "127.0.0.1", port: ctx.server.smtpPort, secure: false, ignoreTLS: true });
  });
  after(() => {
    ctx.mailer?.close();
    ctx.server?.child.kill();
  });
  return ctx;
}
