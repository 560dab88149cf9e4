//! A seen flag changed elsewhere reaches open IMAP sessions: the UI's
//! `PATCH /api/emails/:id`, a POP3 RETR and another IMAP connection's STORE
//! each show up in a session that has the message selected as an untagged
//! `* N FETCH (FLAGS (...))`, at once while it IDLEs, otherwise with the
//! answer to its next command (RFC 3501 7.4.2), with Python's `imaplib`,
//! `poplib` and `curl` against the real binary.

mod common;

use common::readers::{IMAP_IDLE, ids, listener, python_json};
use common::{Server, message};
use serde_json::Value;

/// Runs a Python script with `ADDR` (host:port) and `ARGS` in `sys.argv[1:]`; its stdout as JSON.
fn python(script: &str, args: &[&str]) -> Value {
    python_json("imaplib, json, poplib, subprocess, sys, time", script, args)
}

/// Two messages delivered; their ids, oldest first.
fn two_messages(server: &Server) -> Vec<String> {
    for subject in ["one", "two"] {
        let raw = message("a@x.test", "u@x.test", subject, "x");
        assert_eq!(server.send("a@x.test", &["u@x.test"], &raw).code, 250);
    }
    ids(server)
}

#[test]
fn idle_hears_a_patch_from_the_ui_at_once() {
    let server = Server::start_with(&["--imap-port", "0"]);
    let ids = two_messages(&server);
    let script = [
        IMAP_IDLE,
        r#"def patch(seen):
    subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", "-X", "PATCH",
        "-H", "Content-Type: application/json", "-d", json.dumps({"seen": seen}),
        f"http://{sys.argv[2]}/api/emails/{sys.argv[3]}"], check=True)
    return time.monotonic()
sent = patch(True)
seen = m.readline().decode()
latency_ms = (time.monotonic() - sent) * 1000
patch(False)
unseen = m.readline().decode()
m.send(b"DONE\r\n")
done = m.readline().decode()
m.logout()
print(json.dumps({"started": started, "seen": seen, "unseen": unseen, "done": done,
    "latency_ms": latency_ms}))
"#,
    ]
    .concat();
    let http = server.http.to_string();
    let out = python(&script, &[&listener(&server, "imap"), &http, &ids[1]]);
    assert_eq!(out["started"], "+ idling\r\n", "{out}");
    assert_eq!(out["seen"], "* 2 FETCH (FLAGS (\\Seen))\r\n", "{out}");
    assert_eq!(out["unseen"], "* 2 FETCH (FLAGS ())\r\n", "{out}");
    assert!(out["done"].as_str().unwrap().contains("OK"), "{out}");
    let latency = out["latency_ms"].as_f64().unwrap();
    println!("IDLE told of a PATCH {latency:.1} ms after curl returned");
    assert!(latency < 1000.0, "{latency}");
}

#[test]
fn noop_hears_a_pop3_retr_and_another_imap_store() {
    let server = Server::start_with(&["--imap-port", "0", "--pop3-port", "0"]);
    two_messages(&server);
    let script = r#"
def command(m, text):
    tag = m._new_tag().decode()
    m.send(f"{tag} {text}\r\n".encode())
    lines = []
    while True:
        line = m.readline().decode()
        if line.startswith(tag + " "):
            return lines, line
        lines.append(line)
a = imaplib.IMAP4(host, port, timeout=10)
a.login("u", "p")
a.select("INBOX")
quiet, _ = command(a, "NOOP")
ph, pp = sys.argv[2].rsplit(":", 1)
p = poplib.POP3(ph, int(pp), timeout=10)
p.user("u")
p.pass_("p")
p.retr(2)
p.quit()
b = imaplib.IMAP4(host, port, timeout=10)
b.login("u", "p")
b.select("INBOX")
b.store("1", "+FLAGS", "(\\Seen)")
told_b, _ = command(b, "NOOP")
b.logout()
told, ok = command(a, "NOOP")
again, _ = command(a, "NOOP")
a.logout()
print(json.dumps({"quiet": quiet, "told": told, "ok": ok, "again": again, "told_b": told_b}))
"#;
    let out = python(
        script,
        &[&listener(&server, "imap"), &listener(&server, "pop3")],
    );
    assert_eq!(out["quiet"], serde_json::json!([]), "{out}");
    assert_eq!(
        out["told"],
        serde_json::json!([
            "* 1 FETCH (FLAGS (\\Seen))\r\n",
            "* 2 FETCH (FLAGS (\\Seen))\r\n"
        ]),
        "{out}"
    );
    // Each change is told once; the connection that made it is not told again.
    assert_eq!(out["again"], serde_json::json!([]), "{out}");
    assert_eq!(out["told_b"], serde_json::json!([]), "{out}");
}

/// A session busy writing a FETCH to a client that does not read misses more
/// changes than the shared ring holds: it still tells each one afterwards.
#[test]
fn a_session_that_falls_behind_the_ring_rescans_its_flags() {
    let server = Server::start_with(&["--imap-port", "0", "--max-store-bytes", "512MiB"]);
    let script = r#"
import smtplib, socket
sh, sp = sys.argv[2].rsplit(":", 1)
big, small = 8, int(sys.argv[3])
s = smtplib.SMTP(sh, int(sp), timeout=30)
for i in range(big):
    s.sendmail("a@x.test", ["u@x.test"], b"Subject: big\r\n\r\n" + (b"x" * 998 + b"\r\n") * 1024)
for i in range(small):
    s.sendmail("a@x.test", ["u@x.test"], f"Subject: {i}\r\n\r\nx\r\n".encode())
s.quit()
a = socket.socket()
a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
a.settimeout(30)
a.connect((host, port))
a.sendall(b"a LOGIN u p\r\nb SELECT INBOX\r\nc FETCH 1:8 BODY.PEEK[]\r\n")
time.sleep(0.5)
b = imaplib.IMAP4(host, port, timeout=30)
b.login("u", "p")
b.select("INBOX")
b.store(f"{big + 1}:*", "+FLAGS.SILENT", "(\\Seen)")
b.logout()
f = a.makefile("rb")
while not f.readline().startswith(b"c OK"):
    pass
a.sendall(b"d NOOP\r\n")
told = []
while True:
    line = f.readline().decode()
    if line.startswith("d "):
        break
    told.append(line)
print(json.dumps({"told": told}))
"#;
    let small = mailjar::state::SEEN_CHANGES + 76;
    let smtp = server.smtp.to_string();
    let out = python(
        script,
        &[&listener(&server, "imap"), &smtp, &small.to_string()],
    );
    let told: Vec<String> = out["told"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (9..9 + small)
        .map(|n| format!("* {n} FETCH (FLAGS (\\Seen))\r\n"))
        .collect();
    assert_eq!(
        told.len(),
        expected.len(),
        "{:?}",
        &told[..told.len().min(5)]
    );
    assert_eq!(told, expected);
}
