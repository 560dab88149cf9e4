// A real PostgreSQL for the JS tests of several nodes (as the Rust tests'
// host-native/tests/pg/cluster.rs does): Debian's server programs, a fresh
// cluster in a temporary directory owned by `nobody` (run through `runuser`
// as root, since initdb refuses root), on a free loopback port.
import { execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";

function bin(name) {
  for (const version of ["17", "16", "15", "14", "13"]) {
    const found = `/usr/lib/postgresql/${version}/bin/${name}`;
    if (existsSync(found)) return found;
  }
  return name;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Starts a cluster; resolves with `{ url, stop() }`. */
export async function startPostgres() {
  const dir = mkdtempSync(path.join(tmpdir(), "mailjar-pg-js-"));
  const root = process.getuid?.() === 0;
  // nobody:nogroup on Debian (65534).
  if (root) chownSync(dir, 65534, 65534);
  const asOwner = (program, args) => {
    const [command, all] = root ? ["runuser", ["-u", "nobody", "--", bin(program), ...args]] : [bin(program), args];
    execFileSync(command, all, { cwd: dir, stdio: "pipe" });
  };
  const port = await freePort();
  const data = path.join(dir, "data");
  asOwner("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--no-instructions"]);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
  asOwner("pg_ctl", ["-D", data, "-o", options, "-l", path.join(dir, "log"), "-w", "-t", "30", "start"]);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop() {
      try {
        asOwner("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
