//! `GET /api/emails/:id/transcript` on the real binary: the dialogue of
//! smtplib's and swaks's own sessions, with the message text elided and the
//! AUTH credentials never stored; and `/checks/html` answered by the core.

mod common;

use std::process::Command;

use common::{Server, run_ok, run_smtplib};
use serde_json::Value;

const PASSWORD: &str = "s3cret-Pa55word";

/// The transcript's lines as (ms, dir, line).
fn transcript(server: &Server, id: &str) -> Vec<(u64, String, String)> {
    let json = server.get_ok(&format!("/api/emails/{id}/transcript"));
    json["transcript"]
        .as_array()
        .expect("transcript is an array")
        .iter()
        .map(|l| {
            (
                l["ms"].as_u64().expect("ms"),
                l["dir"].as_str().expect("dir").to_owned(),
                l["line"].as_str().expect("line").to_owned(),
            )
        })
        .collect()
}

fn assert_clean(lines: &[(u64, String, String)], secrets: &[&str]) {
    let all = format!("{lines:?}");
    for secret in secrets {
        assert!(!all.contains(secret), "{secret} in the transcript: {all}");
    }
    assert!(
        lines.windows(2).all(|w| w[0].0 <= w[1].0),
        "ms go up: {all}"
    );
    assert!(lines.iter().all(|l| l.1 == "c" || l.1 == "s"), "{all}");
}

#[test]
fn smtplib_session_with_auth_plain_and_pipelined_text() {
    let server = Server::start_with(&["--auth", &format!("tester:{PASSWORD}")]);
    let script = format!(
        r#"
import smtplib
msg = "Subject: hello\r\n\r\nthe body text words\r\n.dotted\r\n"
# smtplib's own choice (CRAM-MD5 here), then AUTH PLAIN with its initial response.
s = smtplib.SMTP(HOST, PORT)
s.login("tester", "{PASSWORD}")
s.sendmail("app@example.com", ["user@example.com"], msg)
s.quit()
s = smtplib.SMTP(HOST, PORT)
s.ehlo()
s.user, s.password = "tester", "{PASSWORD}"
s.auth("PLAIN", s.auth_plain)
s.sendmail("app@example.com", ["user@example.com"], msg)
s.quit()
"#
    );
    run_smtplib(&server, &script, &[], b"");
    let ids: Vec<String> = server
        .emails("")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2);
    let cram = transcript(&server, &ids[0]);
    let texts: Vec<&str> = cram.iter().map(|l| l.2.as_str()).collect();
    assert!(texts.contains(&"AUTH CRAM-MD5"), "{texts:?}");
    assert!(texts.contains(&"<credentials elided>"), "{texts:?}");
    assert_clean(&cram, &[PASSWORD, "the body text", "dotted"]);
    let lines = transcript(&server, &ids[1]);
    let texts: Vec<&str> = lines.iter().map(|l| l.2.as_str()).collect();
    assert!(texts[0].starts_with("220 "), "{texts:?}");
    assert!(texts.iter().any(|t| t.starts_with("ehlo ")), "{texts:?}");
    assert!(
        texts.contains(&"AUTH PLAIN <credentials elided>"),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.starts_with("235 ")), "{texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("mail FROM:<app@example.com>")),
        "{texts:?}"
    );
    assert!(texts.contains(&"data"), "{texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("<message text elided: ") && t.ends_with(" bytes>")),
        "{texts:?}"
    );
    assert!(
        texts
            .last()
            .unwrap()
            .starts_with("250 2.0.0 Message accepted"),
        "{texts:?}"
    );
    // base64 of "\0tester\0PASSWORD" as smtplib sends it.
    let encoded = run_ok(Command::new("python3").args([
        "-c",
        &format!("import base64;print(base64.b64encode(b'\\0tester\\0{PASSWORD}').decode())"),
    ]));
    assert_clean(
        &lines,
        &[PASSWORD, encoded.trim(), "the body text", "dotted"],
    );
}

#[test]
fn swaks_session_with_auth_login() {
    let server = Server::start_with(&["--auth", &format!("tester:{PASSWORD}")]);
    run_ok(
        common::swaks(&server)
            .args(["--from", "app@example.com", "--to", "user@example.com"])
            .args(["--auth", "LOGIN", "--auth-user", "tester"])
            .args(["--auth-password", PASSWORD])
            .args(["--body", "swaks body words"]),
    );
    let id = server.latest()["id"].as_str().unwrap().to_owned();
    let lines = transcript(&server, &id);
    let texts: Vec<&str> = lines.iter().map(|l| l.2.as_str()).collect();
    assert!(texts.contains(&"AUTH LOGIN"), "{texts:?}");
    // The user name and the password answers are both elided.
    let elided = texts
        .iter()
        .filter(|t| **t == "<credentials elided>")
        .count();
    assert_eq!(elided, 2, "{texts:?}");
    assert!(texts.iter().any(|t| t.starts_with("EHLO ")), "{texts:?}");
    assert!(texts.contains(&"DATA"), "{texts:?}");
    assert_clean(
        &lines,
        &[
            PASSWORD,
            "czNjcmV0LVBhNTV3b3Jk",
            "dGVzdGVy",
            "swaks body words",
        ],
    );
}

#[test]
fn unknown_ids_and_other_methods_are_refused_plainly() {
    let server = Server::start();
    let missing = server.get("/api/emails/00000000-0000-0000-0000-000000000000/transcript");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(
        missing.error().contains("no stored message"),
        "{}",
        missing.error()
    );
    let bad = server.get("/api/emails/not-an-id/checks/html");
    assert_eq!(bad.status, 404);
    server.send(
        "a@example.com",
        &["b@example.com"],
        b"Subject: s\r\n\r\nx\r\n",
    );
    let id = server.latest()["id"].as_str().unwrap().to_owned();
    let post = server.request("POST", &format!("/api/emails/{id}/transcript"));
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET"));
    // No HTML body: the HTML check (the core's now) says so.
    let html = server.get(&format!("/api/emails/{id}/checks/html"));
    assert_eq!(html.status, 404);
    assert!(html.error().contains("no HTML"), "{}", html.error());
    let value: Value = server.get_ok(&format!("/api/emails/{id}/transcript"));
    assert!(
        value["transcript"].as_array().is_some_and(|a| a.len() > 4),
        "{value}"
    );
}
