//! Sequence numbers past the end of the mailbox, answered as Dovecot answers
//! them (checked against Debian's dovecot-imapd 2.3): a FETCH or STORE whose
//! sequence set names a message that does not exist is a tagged
//! `BAD Error in IMAP command FETCH: Invalid messageset` (RFC 3501 6.4.5
//! leaves it to the server; `*` in an empty mailbox counts), while a UID
//! FETCH of absent UIDs answers OK with nothing (RFC 3501 6.4.8).

mod common;

use std::process::Command;

use common::{Server, message, run_ok};
use serde_json::Value;

/// Sends each command on one raw connection; the tagged reply line of each.
const RAW: &str = r#"
import json, socket, sys
host, port = sys.argv[1].rsplit(':', 1)
s = socket.create_connection((host, int(port)), timeout=10)
f = s.makefile("rb")
f.readline()
replies = {}
for i, cmd in enumerate(sys.argv[2:]):
    tag = "t%d" % i
    s.sendall(("%s %s\r\n" % (tag, cmd)).encode())
    untagged = []
    while True:
        line = f.readline().decode().rstrip("\r\n")
        if line.startswith(tag + " "):
            replies[cmd] = {"reply": line[len(tag) + 1:], "untagged": untagged}
            break
        untagged.append(line)
print(json.dumps(replies))
"#;

fn exchange(server: &Server, commands: &[&str]) -> Value {
    let health = server.health();
    let at = &health["imap"];
    let addr = format!("{}:{}", at["host"].as_str().unwrap(), at["port"]);
    let out = run_ok(
        Command::new("python3")
            .args(["-c", RAW, &addr])
            .args(commands),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

const INVALID: &str = "BAD Error in IMAP command FETCH: Invalid messageset";

#[test]
fn sequence_numbers_past_the_end_are_bad_and_absent_uids_are_nothing() {
    let server = Server::start_with(&["--imap-port", "0"]);
    let empty = exchange(
        &server,
        &[
            "LOGIN u p",
            "SELECT INBOX",
            "FETCH 1:* FLAGS",
            "UID FETCH 1:* FLAGS",
        ],
    );
    assert_eq!(empty["FETCH 1:* FLAGS"]["reply"], INVALID, "{empty}");
    assert!(
        empty["UID FETCH 1:* FLAGS"]["reply"]
            .as_str()
            .unwrap()
            .starts_with("OK")
    );

    for subject in ["one", "two"] {
        let reply = server.send(
            "a@x.test",
            &["u@x.test"],
            &message("a@x.test", "u@x.test", subject, "x"),
        );
        assert_eq!(reply.code, 250, "{reply:?}");
    }
    let commands = [
        "LOGIN u p",
        "SELECT INBOX",
        "FETCH 3 FLAGS",
        "FETCH 1:3 FLAGS",
        "FETCH 3:* FLAGS",
        "STORE 3 +FLAGS (\\Flagged)",
        "FETCH 1:* FLAGS",
        "FETCH 2 FLAGS",
        "UID FETCH 9 FLAGS",
        "UID FETCH 1:9 FLAGS",
    ];
    let replies = exchange(&server, &commands);
    for bad in &commands[2..5] {
        assert_eq!(replies[*bad]["reply"], INVALID, "{bad}: {replies}");
        assert_eq!(replies[*bad]["untagged"], serde_json::json!([]), "{bad}");
    }
    assert_eq!(
        replies["STORE 3 +FLAGS (\\Flagged)"]["reply"],
        "BAD Error in IMAP command STORE: Invalid messageset"
    );
    for ok in ["FETCH 1:* FLAGS", "FETCH 2 FLAGS", "UID FETCH 1:9 FLAGS"] {
        assert!(
            replies[ok]["reply"].as_str().unwrap().starts_with("OK"),
            "{ok}: {replies}"
        );
    }
    assert_eq!(
        replies["FETCH 1:* FLAGS"]["untagged"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(
        replies["UID FETCH 9 FLAGS"]["reply"]
            .as_str()
            .unwrap()
            .starts_with("OK")
    );
    assert_eq!(
        replies["UID FETCH 9 FLAGS"]["untagged"],
        serde_json::json!([])
    );
}
