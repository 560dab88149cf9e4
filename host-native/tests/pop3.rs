//! POP3 (`--pop3-port`, STLS, `--pop3s-port`) with Python's `poplib` against
//! the real binary: the maildrop is the store, UIDL is the message id, RETR
//! gives the stored bytes exactly (dot-stuffing undone by the client), TOP
//! the header and the first lines, DELE deletes from the store at QUIT; with
//! `--admin-token` an inbox's SMTP credentials open only its mail, the admin
//! token as password opens all, and a wrong password is refused.

mod common;

use common::readers::{admin, listener, python_json, team_inbox, tls_server};
use common::{Server, message};
use serde_json::Value;

/// Runs a poplib script with `ADDR` (host:port) and `ARGS` in `sys.argv[1:]`; its stdout as JSON.
fn poplib(script: &str, args: &[&str]) -> Value {
    python_json("json, poplib, ssl, sys", script, args)
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
    let server = tls_server("--pop3-port", "--pop3s-port");
    let script = r#"
plain = poplib.POP3(host, port, timeout=10)
context = ssl._create_unverified_context()
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

#[test]
fn with_inboxes_a_login_opens_only_its_inbox() {
    let token = "pop3-admin-token-0123456789";
    let (server, user, password) = team_inbox("--pop3-port", token);
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
