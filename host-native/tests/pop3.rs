//! POP3 (`--pop3-port`, STLS, `--pop3s-port`) with Python's `poplib` against
//! the real binary: the maildrop is the store, UIDL is the message id, RETR
//! gives the stored bytes exactly (dot-stuffing undone by the client), TOP
//! the header and the first lines, DELE deletes from the store at QUIT; with
//! `--admin-token` an inbox's SMTP credentials open only its mail, the admin
//! token as password opens all, and a wrong password is refused.

mod common;

use std::process::Command;

use common::{Server, http_exchange, message, run_ok};
use serde_json::Value;

/// The `/health` address of a listener, as `host:port`.
fn listener(server: &Server, key: &str) -> String {
    let health = server.health();
    let at = &health[key];
    assert!(at.is_object(), "/health has no {key}: {health}");
    format!("{}:{}", at["host"].as_str().unwrap(), at["port"])
}

/// Runs a poplib script with `ADDR` (host:port) and `ARGS` in `sys.argv[1:]`; its stdout as JSON.
fn poplib(script: &str, args: &[&str]) -> Value {
    let prelude = "import json, poplib, ssl, sys\nhost, port = sys.argv[1].rsplit(':', 1)\nport = int(port)\n";
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(format!("{prelude}{script}"))
            .args(args),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

const READ_ALL: &str = r#"
p = poplib.POP3(host, port, timeout=10)
p.user(sys.argv[2]); p.pass_(sys.argv[3])
count, size = p.stat()
uidl = [line.decode().split()[1] for line in p.uidl()[1]]
sizes = [int(line.split()[1]) for line in p.list()[1]]
bodies = [b"\r\n".join(p.retr(n)[1]).decode() for n in range(1, count + 1)]
top = [line.decode() for line in p.top(1, 1)[1]] if count else []
if len(sys.argv) > 4:
    p.dele(int(sys.argv[4]))
p.quit()
print(json.dumps({"count": count, "size": size, "uidl": uidl, "sizes": sizes, "bodies": bodies, "top": top}))
"#;

#[test]
fn poplib_reads_the_store_exactly_and_deletes_at_quit() {
    let server = Server::start_with(&["--pop3-port", "0"]);
    let raws = [
        message("a@x.test", "u@x.test", "first", "one line"),
        message(
            "a@x.test",
            "u@x.test",
            "second",
            ".a line with a dot\r\nand\r\n.\r\nmore",
        ),
        message("a@x.test", "u@x.test", "third", "three"),
    ];
    for raw in &raws {
        assert_eq!(server.send("a@x.test", &["u@x.test"], raw).code, 250);
    }
    let ids: Vec<String> = server
        .emails("")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let addr = listener(&server, "pop3");
    let read = poplib(READ_ALL, &[&addr, "anyone", "anything", "2"]);
    assert_eq!(read["count"], 3);
    assert_eq!(read["uidl"], serde_json::json!(ids));
    let total: usize = raws.iter().map(Vec::len).sum();
    assert_eq!(read["size"], total);
    for (i, raw) in raws.iter().enumerate() {
        assert_eq!(read["sizes"][i], raw.len());
        // poplib splits at line ends and undoes the stuffing: joined with CRLF, the stored bytes.
        let text = String::from_utf8(raw.clone()).unwrap();
        assert_eq!(
            read["bodies"][i],
            text.trim_end_matches("\r\n"),
            "message {i}"
        );
    }
    let top: Vec<&str> = read["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        top.contains(&"Subject: first") && top.last() == Some(&"one line"),
        "{top:?}"
    );
    // DELE 2 at QUIT: gone from the store, and from the next login's maildrop.
    let left: Vec<String> = server
        .emails("")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left.len(), 2);
    assert!(!left.contains(&ids[1]));
    let again = poplib(READ_ALL, &[&addr, "x", "y"]);
    assert_eq!(again["count"], 2);
}

#[test]
fn stls_and_implicit_tls() {
    let server =
        Server::start_with(&["--pop3-port", "0", "--pop3s-port", "0", "--tls-self-signed"]);
    server.send(
        "a@x.test",
        &["u@x.test"],
        &message("a@x.test", "u@x.test", "tls", "secret words"),
    );
    let script = r#"
context = ssl._create_unverified_context()
plain = poplib.POP3(host, port, timeout=10)
caps = plain.capa()
plain.stls(context=context)
plain.user("u"); plain.pass_("p")
over_stls = plain.stat()[0]
plain.quit()
sh, sp = sys.argv[2].rsplit(":", 1)
implicit = poplib.POP3_SSL(sh, int(sp), context=context, timeout=10)
implicit.user("u"); implicit.pass_("p")
body = b"\r\n".join(implicit.retr(1)[1]).decode()
implicit.quit()
print(json.dumps({"stls": "STLS" in caps, "count": over_stls, "body": body}))
"#;
    let out = poplib(
        script,
        &[&listener(&server, "pop3"), &listener(&server, "pop3s")],
    );
    assert_eq!(out["stls"], true);
    assert_eq!(out["count"], 1);
    assert!(out["body"].as_str().unwrap().contains("secret words"));
}

/// `METHOD target` with a bearer token and a JSON body.
fn admin(server: &Server, token: &str, method: &str, target: &str, body: &str) -> Value {
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.http,
        body.len()
    );
    let response = http_exchange(server.http, request.as_bytes());
    assert_eq!(response.status, 200, "{method} {target}: {}", response.body);
    response.json()
}

#[test]
fn with_inboxes_a_login_opens_only_its_inbox() {
    let token = "pop3-admin-token-0123456789";
    let server = Server::start_with(&["--pop3-port", "0", "--admin-token", token]);
    let created = admin(
        &server,
        token,
        "POST",
        "/api/inboxes",
        r#"{"name": "team-a", "addresses": ["*@team-a.test"]}"#,
    );
    let user = created["inbox"]["smtp"]["username"]
        .as_str()
        .unwrap()
        .to_owned();
    let password = created["inbox"]["smtp"]["password"]
        .as_str()
        .unwrap()
        .to_owned();
    for (to, subject) in [("x@team-a.test", "for a"), ("y@other.test", "for nobody")] {
        let raw = message("s@x.test", to, subject, "hello");
        assert_eq!(server.send("s@x.test", &[to], &raw).code, 250);
    }
    let addr = listener(&server, "pop3");
    let inbox = poplib(READ_ALL, &[&addr, &user, &password]);
    assert_eq!(inbox["count"], 1);
    assert!(
        inbox["bodies"][0]
            .as_str()
            .unwrap()
            .contains("Subject: for a")
    );
    let everything = poplib(READ_ALL, &[&addr, "admin", token]);
    assert_eq!(everything["count"], 2);
    let refused = poplib(
        r#"
p = poplib.POP3(host, port, timeout=10)
p.user(sys.argv[2])
try:
    p.pass_("wrong")
    print(json.dumps({"refused": False}))
except poplib.error_proto as e:
    print(json.dumps({"refused": True, "reply": e.args[0].decode()}))
"#,
        &[&addr, &user],
    );
    assert_eq!(refused["refused"], true, "{refused}");
    assert!(
        refused["reply"]
            .as_str()
            .unwrap()
            .starts_with("-ERR [AUTH]")
    );
    // A DELE through the inbox removes the message from the inbox (and, as
    // only it held it, from the store); the unrouted one stays.
    let _ = poplib(READ_ALL, &[&addr, &user, &password, "1"]);
    assert_eq!(poplib(READ_ALL, &[&addr, &user, &password])["count"], 0);
    let listed = admin(&server, token, "GET", "/api/emails", "");
    assert_eq!(
        listed["emails"].as_array().map_or(0, Vec::len),
        1,
        "{listed}"
    );
}
