//! A real PostgreSQL for the `--database` tests and benchmarks: Debian's `postgresql`
//! binaries, a fresh cluster in a temporary directory (owned by `nobody`
//! and run through `runuser` when the tests run as root, since `initdb`
//! refuses root), on a free loopback port, stopped and removed on drop.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where Debian puts the server's programs; `initdb` on the PATH is used otherwise.
fn bin(name: &str) -> PathBuf {
    for version in ["17", "16", "15", "14", "13"] {
        let path = PathBuf::from(format!("/usr/lib/postgresql/{version}/bin/{name}"));
        if path.exists() {
            return path;
        }
    }
    PathBuf::from(name)
}

/// A number no other cluster of this process took.
fn next() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A running PostgreSQL cluster of its own.
pub struct Postgres {
    dir: PathBuf,
    /// The loopback port it listens on.
    pub port: u16,
    root: bool,
}

impl Postgres {
    /// Makes and starts a fresh cluster.
    pub fn start() -> Postgres {
        let dir =
            std::env::temp_dir().join(format!("mailjar-pg-{}-{}", std::process::id(), next()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the cluster's directory");
        let root = is_root();
        if root {
            run(Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(&dir));
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let pg = Postgres { dir, port, root };
        pg.as_owner(
            &bin("initdb"),
            &[
                "-D",
                pg.data().to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "--no-instructions",
            ],
        );
        pg.start_again();
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs a PostgreSQL program as the cluster's owner.
    fn as_owner(&self, program: &Path, args: &[&str]) {
        let mut command = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        command.args(args).current_dir(&self.dir);
        run(&mut command);
    }

    /// Starts the (stopped) cluster and waits until it takes connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log");
        self.as_owner(
            &bin("pg_ctl"),
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "30",
                "start",
            ],
        );
    }

    /// Stops the cluster at once (`-m immediate`: connections are cut, as in a crash of the database).
    pub fn stop(&self) {
        self.as_owner(
            &bin("pg_ctl"),
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server and every one of its
    /// processes: `STOP` makes a database that holds its connections open
    /// and never answers, as a partitioned or hung host does.
    pub fn signal(&self, signal: &str) {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("postmaster.pid")
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let mut pids = vec![pid.clone()];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent's pid is the second field after the command's closing parenthesis.
            let parent = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1));
            if parent == Some(pid.as_str()) {
                pids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        run(Command::new("kill").arg(format!("-{signal}")).args(&pids));
    }

    /// The URL of database `postgres` (with a password mailjar must not show).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:secret@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// Runs SQL through `psql`; its output (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let output = Command::new(bin("psql"))
            .args(["-X", "-A", "-t", "-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(self.port.to_string())
            .args(["-d", "postgres", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            output.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let mut command = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(bin("pg_ctl"));
            c
        } else {
            Command::new(bin("pg_ctl"))
        };
        let _ = command
            .args(["-D"])
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e} (is Debian's postgresql installed?)"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Polls `check` every 5 ms until it is true or `timeout` passes; whether it became true.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
