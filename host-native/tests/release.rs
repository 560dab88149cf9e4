//! Release: a second mailjar is the relay (STARTTLS required, AUTH
//! required); the message must arrive byte for byte, only to allowed
//! recipients, with the stored envelope sender.

mod common;
mod inboxes_common;

use common::{Http, Server, http_exchange};
use serde_json::{Value, json};

/// The relay target: a mailjar that insists on STARTTLS and AUTH, and its certificate file.
struct Target {
    server: Server,
    cert: std::path::PathBuf,
}

impl Target {
    fn start() -> Target {
        let cert = std::env::temp_dir().join(format!("mailjar-relay-{}.pem", common::nonce()));
        let server = Server::start_with(&[
            "--tls-self-signed",
            "--tls-cert-out",
            cert.to_str().unwrap(),
            "--auth",
            "relayuser:relay-pass",
            "--require-auth",
            "--require-tls",
        ]);
        Target { server, cert }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cert);
    }
}

/// A mailjar that releases to `target` with these extra flags.
fn releasing(target: &Target, extra: &[&str]) -> Server {
    let relay = target.server.smtp.to_string();
    let mut flags = vec![
        "--relay",
        &relay,
        "--relay-tls",
        "required",
        "--relay-auth",
        "relayuser:relay-pass",
        "--relay-ca",
        target.cert.to_str().unwrap(),
        "--relay-allow",
        "*@dest.test",
        "--relay-allow",
        "qa+*@other.test",
    ];
    flags.extend_from_slice(extra);
    Server::start_with(&flags)
}

fn release(server: &Server, id: &str, to: &[&str], token: Option<&str>) -> Http {
    let body = json!({ "to": to }).to_string();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "POST /api/emails/{id}/release HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.http,
        body.len()
    );
    http_exchange(server.http, request.as_bytes())
}

/// The stored bytes of message `id` (`/raw` over HTTP/1.0: the body ends at the close).
fn raw_bytes(server: &Server, id: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.http).unwrap();
    let request = format!(
        "GET /api/emails/{id}/raw HTTP/1.0\r\nHost: {}\r\n\r\n",
        server.http
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut wire = Vec::new();
    stream.read_to_end(&mut wire).unwrap();
    assert!(wire.starts_with(b"HTTP/1.1 200") || wire.starts_with(b"HTTP/1.0 200"));
    let split = wire
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    wire[split + 4..].to_vec()
}

/// A message with bytes a careless relay would change: a dot line, 8-bit, long lines.
fn awkward_message() -> Vec<u8> {
    let mut raw = b"From: App <app@sender.test>\r\nTo: someone@dest.test\r\nSubject: release me\r\nX-Odd:  two  spaces \r\n\r\n".to_vec();
    raw.extend_from_slice(
        b".a line that starts with a dot\r\n..two dots\r\n.\xe9\xff 8-bit bytes\r\n",
    );
    raw.extend_from_slice(&[b'x'; 1500]);
    raw.extend_from_slice(b"\r\nend\r\n");
    raw
}

#[test]
fn a_released_message_arrives_byte_for_byte_over_starttls_and_auth() {
    let target = Target::start();
    let server = releasing(&target, &[]);
    let raw = awkward_message();
    server.send("bounce@sender.test", &["someone@dest.test"], &raw);
    let id = server.latest()["id"].as_str().unwrap().to_owned();

    let answer = release(&server, &id, &["bob@dest.test", "qa+1@other.test"], None);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = answer.json();
    assert_eq!(answer["released"], true);
    assert!(
        answer["reply"].as_str().unwrap().starts_with("250"),
        "{answer}"
    );

    let arrived = target.server.latest();
    assert_eq!(arrived["envelope"]["from"], "bounce@sender.test");
    assert_eq!(
        arrived["envelope"]["to"],
        json!(["bob@dest.test", "qa+1@other.test"])
    );
    let id = arrived["id"].as_str().unwrap();
    let bytes = raw_bytes(&target.server, id);
    assert!(
        bytes == raw,
        "changed on the way:\n{:?}\n{:?}",
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(&raw)
    );
    assert_eq!(arrived["size"], raw.len());
    assert!(
        arrived["smtp"]["tls"].is_object(),
        "STARTTLS: {}",
        arrived["smtp"]
    );
    assert_eq!(arrived["smtp"]["auth"]["username"], "relayuser");
}

#[test]
fn recipients_outside_relay_allow_send_nothing() {
    let target = Target::start();
    let server = releasing(&target, &[]);
    let id = sent(&server, "a@sender.test", "x@dest.test");
    for to in [
        vec!["ok@dest.test", "victim@elsewhere.test"],
        vec!["a@sub.dest.test"],
        vec!["qa@other.test"],
    ] {
        let answer = release(&server, &id, &to, None);
        assert_eq!(answer.status, 403, "{to:?}: {}", answer.body);
    }
    assert_eq!(release(&server, &id, &[], None).status, 400);
    assert_eq!(
        release(
            &server,
            "00000000-0000-0000-0000-000000000000",
            &["a@dest.test"],
            None
        )
        .status,
        404
    );
    assert_eq!(
        target.server.health()["messages"],
        0,
        "nothing reached the relay"
    );
}

#[test]
fn a_refusing_relay_is_502_with_its_reply() {
    let target = Target::start();
    // The relay rejects this recipient at RCPT.
    let rule = json!({"stage": "rcpt", "times": null, "match": {"to": "gone@dest.test"},
        "action": {"reply": {"code": 550, "text": "5.1.1 no such user"}}});
    let made = target.server.post_json("/api/faults", &rule.to_string());
    assert_eq!(made.status, 200, "{}", made.body);
    let server = releasing(&target, &[]);
    let id = sent(&server, "a@sender.test", "x@dest.test");
    let answer = release(&server, &id, &["gone@dest.test"], None);
    assert_eq!(answer.status, 502, "{}", answer.body);
    let body: Value = answer.json();
    assert!(body["reply"].as_str().unwrap().contains("550"), "{body}");
    assert!(body["error"].is_string());
}

#[test]
fn without_a_relay_it_is_404_and_it_is_the_admins() {
    let plain = Server::start();
    let id = sent(&plain, "a@s.test", "b@d.test");
    assert_eq!(release(&plain, &id, &["b@d.test"], None).status, 404);
    assert_eq!(plain.get("/api/relay").status, 404);

    let target = Target::start();
    let server = releasing(&target, &["--admin-token", inboxes_common::ADMIN]);
    let inbox = inboxes_common::inbox(&server, "team-a", &["*@dest.test"]);
    server.send(
        "a@s.test",
        &["b@dest.test"],
        &common::message("a@s.test", "b@dest.test", "s", "b"),
    );
    let id = inboxes_common::ids(&server, &inbox.token, "")[0].clone();
    let refused = release(&server, &id, &["b@dest.test"], Some(&inbox.token));
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["error"], "admin token required");
    assert_eq!(release(&server, &id, &["b@dest.test"], None).status, 401);
    let answer = release(&server, &id, &["b@dest.test"], Some(inboxes_common::ADMIN));
    assert_eq!(answer.status, 200, "{}", answer.body);

    // What the UI's Release tab shows: where mail goes and who may get it; the admin's.
    let relay = |token| inboxes_common::call(&server, "GET", "/api/relay", token, None);
    assert_eq!(relay(Some(&inbox.token)).status, 403);
    assert_eq!(relay(None).status, 401);
    let described = relay(Some(inboxes_common::ADMIN)).json();
    assert_eq!(
        described["relay"]["address"],
        target.server.smtp.to_string()
    );
    assert_eq!(
        described["relay"]["allow"],
        serde_json::json!(["*@dest.test", "qa+*@other.test"])
    );
    let post = inboxes_common::call(
        &server,
        "POST",
        "/api/relay",
        Some(inboxes_common::ADMIN),
        None,
    );
    assert_eq!(post.status, 405);
}

#[test]
fn a_relay_without_starttls_is_refused_when_tls_is_required() {
    let plain_target = Server::start();
    let relay = plain_target.smtp.to_string();
    let server = Server::start_with(&[
        "--relay",
        &relay,
        "--relay-tls",
        "required",
        "--relay-allow",
        "*@dest.test",
    ]);
    let id = sent(&server, "a@s.test", "b@dest.test");
    assert_eq!(release(&server, &id, &["b@dest.test"], None).status, 502);
    assert_eq!(plain_target.health()["messages"], 0);
    // Opportunistic (the default) goes on in plain text.
    let server = Server::start_with(&["--relay", &relay, "--relay-allow", "*@dest.test"]);
    let id = sent(&server, "a@s.test", "b@dest.test");
    assert_eq!(release(&server, &id, &["b@dest.test"], None).status, 200);
    assert_eq!(plain_target.health()["messages"], 1);
}

fn poll_relay(server: &Server, field: &str, want: u64) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let relay = server.health()["relay"].clone();
        if relay[field].as_u64() == Some(want) {
            return relay;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "relay {relay}, want {field} = {want}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn relay_auto_releases_matching_recipients_and_retries_a_451() {
    let target = Target::start();
    // The relay greylists the first attempt.
    let rule = json!({"stage": "rcpt", "times": 1, "match": {"to": "a@auto.test"},
        "action": {"reply": {"code": 451, "text": "4.7.1 try again later"}}});
    assert_eq!(
        target
            .server
            .post_json("/api/faults", &rule.to_string())
            .status,
        200
    );
    let server = releasing(&target, &["--relay-auto", "*@auto.test"]);
    assert_eq!(server.health()["limits"]["relayQueue"], 1000);
    let raw = awkward_message();
    server.send("app@sender.test", &["a@auto.test", "b@other.test"], &raw);
    let relay = poll_relay(&server, "released", 1);
    assert_eq!(relay["failed"], 0, "{relay}");
    assert_eq!(relay["queued"], 0, "{relay}");
    let arrived = target.server.latest();
    assert_eq!(arrived["envelope"]["to"], json!(["a@auto.test"]));
    assert_eq!(arrived["envelope"]["from"], "app@sender.test");
    assert!(raw_bytes(&target.server, arrived["id"].as_str().unwrap()) == raw);
    // Mail for no auto pattern stays put.
    server.send("app@sender.test", &["c@other.test"], &raw);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(target.server.health()["messages"], 1);
}

#[test]
fn a_silent_relay_never_delays_a_250_and_a_full_queue_drops() {
    // Accepts and never greets.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = silent.local_addr().unwrap().to_string();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in silent.incoming().take(64) {
            open.push(stream);
        }
        open
    });
    let server = Server::start_with(&[
        "--relay",
        &relay,
        "--relay-auto",
        "*@auto.test",
        "--relay-queue",
        "5",
        "--relay-timeout",
        "2s",
    ]);
    let sent = 60u64;
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let raw = common::message("app@sender.test", "a@auto.test", "auto", "body");
    let mut worst = std::time::Duration::ZERO;
    for _ in 0..sent {
        let started = std::time::Instant::now();
        let reply = smtp.transaction("app@sender.test", &["a@auto.test"], &raw);
        worst = worst.max(started.elapsed());
        assert_eq!(reply.code, 250);
    }
    let relay = server.health()["relay"].clone();
    eprintln!("silent relay: {sent} messages, worst MAIL-to-250 {worst:?}, relay {relay}");
    assert!(worst < std::time::Duration::from_millis(100), "{worst:?}");
    let n = |f: &str| relay[f].as_u64().unwrap();
    // The queue, the releases in flight (4) and one waiting for a slot.
    assert!(n("queued") <= 5 + 4 + 1, "{relay}");
    assert!(n("dropped") >= sent - 10, "{relay}");
    assert_eq!(
        n("queued") + n("dropped") + n("released") + n("failed"),
        sent
    );
    drop(held);
}

/// Sends one short message from `from` to `to` and gives its id.
fn sent(server: &Server, from: &str, to: &str) -> String {
    server.send(from, &[to], &common::message(from, to, "s", "b"));
    server.latest()["id"].as_str().expect("id").to_owned()
}
