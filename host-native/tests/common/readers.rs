//! What the tests of the mail readers (IMAP, POP3, the seen flag) share:
//! where a listener is, Python's imaplib and poplib scripts run against it,
//! messages sent and listed, and the MIME corpus when the machine has it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{Http, Server, http_exchange, message, run_ok};

/// The `/health` address of a listener (`imap`, `pop3s`, ...), as `host:port`.
pub fn listener(server: &Server, key: &str) -> String {
    let health = server.health();
    let at = &health[key];
    assert!(at.is_object(), "/health has no {key}: {health}");
    format!("{}:{}", at["host"].as_str().unwrap(), at["port"])
}

/// The start of an imaplib script (see [`python_json`]): user `u` logged
/// in, INBOX selected and IDLE begun, its continuation line in `started`.
pub const IMAP_IDLE: &str = r#"
m = imaplib.IMAP4(host, port, timeout=10)
m.login("u", "p")
m.select("INBOX")
tag = m._new_tag().decode()
m.send(f"{tag} IDLE\r\n".encode())
started = m.readline().decode()
"#;

/// Runs a Python script after `import IMPORTS` and with `host` and `port`
/// (an int) from `ADDR` (host:port), the first of `args` (`sys.argv[1:]`);
/// its stdout as JSON.
pub fn python_json(imports: &str, script: &str, args: &[&str]) -> Value {
    let prelude =
        format!("import {imports}\nhost, port = sys.argv[1].rsplit(':', 1)\nport = int(port)\n");
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(format!("{prelude}{script}"))
            .args(args),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A server with a plain and an implicit-TLS listener of one protocol
/// (`--imap-port` and `--imaps-port`, say) on a self-signed certificate, and
/// one message stored, its body `secret words`.
pub fn tls_server(plain_flag: &str, tls_flag: &str) -> Server {
    let server = Server::start_with(&[plain_flag, "0", tls_flag, "0", "--tls-self-signed"]);
    let raw = message("a@x.test", "u@x.test", "tls", "secret words");
    server.send("a@x.test", &["u@x.test"], &raw);
    server
}

/// A server with one listener (`--imap-port`, say) and `--admin-token`, an
/// inbox `team-a` for `*@team-a.test`, and two messages: `for a` to it and
/// `for nobody` to no inbox's address. The server, and the inbox's SMTP user
/// name and password.
pub fn team_inbox(listener_flag: &str, token: &str) -> (Server, String, String) {
    let server = Server::start_with(&[listener_flag, "0", "--admin-token", token]);
    let created = admin(
        &server,
        token,
        "POST",
        "/api/inboxes",
        r#"{"name": "team-a", "addresses": ["*@team-a.test"]}"#,
    );
    let smtp = &created["inbox"]["smtp"];
    let user = smtp["username"].as_str().unwrap().to_owned();
    let password = smtp["password"].as_str().unwrap().to_owned();
    for (to, subject) in [("x@team-a.test", "for a"), ("y@other.test", "for nobody")] {
        let raw = message("s@x.test", to, subject, "hello");
        assert_eq!(server.send("s@x.test", &[to], &raw).code, 250);
    }
    (server, user, password)
}

/// The ids of the stored messages, oldest first (as a mailbox has them).
pub fn ids(server: &Server) -> Vec<String> {
    server
        .emails("")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Sends one message with this subject from `app@app.test` to
/// `user@local.test`; its id, once it is the newest stored.
pub fn send_one(server: &Server, subject: &str) -> String {
    let raw = message("app@app.test", "user@local.test", subject, "body");
    assert_eq!(
        server.send("app@app.test", &["user@local.test"], &raw).code,
        250
    );
    let latest = server.latest();
    assert_eq!(latest["subject"], subject);
    latest["id"].as_str().expect("an id").to_owned()
}

/// The corpus of MIME samples, when the machine has it.
pub const MIME_CORPUS: &str = "/work/shared/corpus/mime";

/// Every file below [`MIME_CORPUS`], sorted; none when it is missing.
pub fn mime_corpus() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(MIME_CORPUS).to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Runs a command to completion: its stdout, or a panic with its stderr unless it succeeds.
pub fn stdout_ok(command: &mut Command) -> Vec<u8> {
    match command.output() {
        Ok(out) if out.status.success() => out.stdout,
        Ok(out) => panic!("{command:?}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{command:?}: {e}"),
    }
}

/// `METHOD target` with a bearer token and a JSON body.
pub fn authed(server: &Server, token: &str, method: &str, target: &str, body: &str) -> Http {
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.http,
        body.len()
    );
    http_exchange(server.http, request.as_bytes())
}

/// [`authed`], which must answer 200: its JSON.
pub fn admin(server: &Server, token: &str, method: &str, target: &str, body: &str) -> Value {
    let response = authed(server, token, method, target, body);
    assert_eq!(response.status, 200, "{method} {target}: {}", response.body);
    response.json()
}
