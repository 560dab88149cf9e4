//! `POST /api/send`: a JSON message built into MIME, or a raw
//! `message/rfc822` body, stored as if it had come over SMTP.

mod common;
mod inboxes_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::Server;
use inboxes_common::ADMIN;
use serde_json::{Value, json};

/// An HTTP exchange that keeps the body's bytes as they are.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// `METHOD target` with these headers and body, read to the connection's close.
fn exchange(server: &Server, method: &str, target: &str, headers: &[&str], body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(server.http).expect("connect");
    stream.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
    // HTTP/1.0 for GETs: a streamed download then ends at the close, not in chunks.
    let version = if method == "GET" { "1.0" } else { "1.1" };
    let mut head = format!(
        "{method} {target} HTTP/{version}\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        server.http,
        body.len()
    );
    for line in headers {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write the head");
    // The server may answer (413) before the body is all written.
    let _ = stream.write_all(body);
    let mut wire = Vec::new();
    let _ = stream.read_to_end(&mut wire);
    let split = wire
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&wire)));
    let status = String::from_utf8_lossy(&wire[9..12])
        .parse()
        .expect("status");
    Answer {
        status,
        body: wire[split + 4..].to_vec(),
    }
}

fn send_json(server: &Server, token: Option<&str>, message: &Value) -> Answer {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut headers = vec!["Content-Type: application/json"];
    if let Some(auth) = &auth {
        headers.push(auth);
    }
    exchange(
        server,
        "POST",
        "/api/send",
        &headers,
        message.to_string().as_bytes(),
    )
}

fn send_raw(server: &Server, query: &str, raw: &[u8]) -> Answer {
    let target = format!("/api/send?{query}");
    exchange(
        server,
        "POST",
        &target,
        &["Content-Type: message/rfc822"],
        raw,
    )
}

fn get(server: &Server, target: &str) -> Answer {
    exchange(server, "GET", target, &[], b"")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn every_field_is_built_and_stored_as_if_received() {
    let server = Server::start();
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let text_file = "héllo, wörld\n".repeat(10);
    let message = json!({
        "from": "Ann Sender <ann@sender.test>",
        "to": ["bob@rcpt.test", "Carol <carol@rcpt.test>"],
        "cc": ["dan@rcpt.test"],
        "bcc": ["eve@hidden.test"],
        "subject": "Grüße from the API",
        "text": "plain text ✓",
        "html": "<p>html <b>body</b></p>",
        "headers": {"X-Trace": "trace-123", "Reply-To": "replies@sender.test"},
        "attachments": [
            {"filename": "data.bin", "contentType": "application/octet-stream", "content": b64(&binary)},
            {"filename": "notes.txt", "contentType": "text/plain; charset=utf-8", "content": b64(text_file.as_bytes())}
        ]
    });
    let answer = send_json(&server, None, &message);
    let id = stored_id(&answer);
    let email = server.get_ok(&format!("/api/emails/{id}"))["email"].clone();
    assert_eq!(email["envelope"]["from"], "ann@sender.test");
    assert_eq!(
        email["envelope"]["to"],
        json!([
            "bob@rcpt.test",
            "carol@rcpt.test",
            "dan@rcpt.test",
            "eve@hidden.test"
        ])
    );
    assert!(
        email["from"].as_str().unwrap().contains("ann@sender.test"),
        "{email}"
    );
    assert_eq!(email["subject"], "Grüße from the API");
    assert_eq!(email["text"].as_str().unwrap().trim_end(), "plain text ✓");
    assert!(email["html"].as_str().unwrap().contains("<b>body</b>"));
    assert_eq!(
        email["headers"]["x-trace"], "trace-123",
        "{}",
        email["headers"]
    );
    assert!(
        email["cc"].to_string().contains("dan@rcpt.test"),
        "{}",
        email["cc"]
    );
    assert_eq!(email["smtp"], Value::Null, "no SMTP session delivered it");
    let raw = email["raw"].as_str().unwrap();
    // No Bcc header line (a random boundary or Message-ID may spell "bcc").
    assert!(
        !raw.lines()
            .any(|line| line.to_ascii_lowercase().starts_with("bcc:")),
        "Bcc stays in the envelope"
    );
    assert!(!raw.contains("eve@hidden.test"));
    let attachments = email["attachments"].as_array().expect("attachments");
    assert_eq!(attachments.len(), 2, "{attachments:?}");
    assert_eq!(attachments[0]["filename"], "data.bin");
    assert_eq!(attachments[1]["filename"], "notes.txt");
    let bytes = get(&server, &format!("/api/emails/{id}/attachments/0"));
    assert_eq!(bytes.status, 200);
    assert!(bytes.body == binary, "the binary attachment round-trips");
    let text = get(&server, &format!("/api/emails/{id}/attachments/1"));
    assert_eq!(String::from_utf8(text.body).unwrap(), text_file);
    // Waits and the list see it like any message.
    assert_eq!(server.latest()["id"], id.as_str());
}

#[test]
fn a_raw_message_is_stored_byte_for_byte() {
    let server = Server::start();
    let raw = b"From: a@sender.test\r\nTo: x@rcpt.test\r\nSubject: raw one\r\n\r\n.leading dot\r\nbody\xff\r\n";
    let answer = send_raw(
        &server,
        "from=a%40sender.test&to=x%40rcpt.test&to=y%40rcpt.test",
        raw,
    );
    let id = stored_id(&answer);
    let stored = get(&server, &format!("/api/emails/{id}/raw"));
    assert!(stored.body == raw, "stored exactly as sent");
    let email = server.get_ok(&format!("/api/emails/{id}"))["email"].clone();
    assert_eq!(
        email["envelope"]["to"],
        json!(["x@rcpt.test", "y@rcpt.test"])
    );
    assert_eq!(email["envelope"]["from"], "a@sender.test");
}

#[test]
fn bad_requests_get_clear_errors() {
    let server = Server::start();
    let no_rcpt = send_json(&server, None, &json!({"from": "a@b.test", "subject": "x"}));
    assert_eq!(no_rcpt.status, 400);
    assert!(
        no_rcpt.json()["error"]
            .as_str()
            .unwrap()
            .contains("recipient")
    );
    assert_eq!(
        send_raw(&server, "from=a%40b.test", b"Subject: x\r\n\r\n").status,
        400
    );
    assert_eq!(
        send_raw(&server, "to=x%40b.test", b"Subject: x\r\n\r\n").status,
        400
    );
    let plain = exchange(
        &server,
        "POST",
        "/api/send",
        &["Content-Type: text/plain"],
        b"hi",
    );
    assert_eq!(plain.status, 415);
    let none = exchange(&server, "POST", "/api/send", &[], b"hi");
    assert_eq!(none.status, 415);
    let broken = exchange(
        &server,
        "POST",
        "/api/send",
        &["Content-Type: application/json"],
        b"{",
    );
    assert_eq!(broken.status, 400);
    let injected =
        json!({"from": "a@b.test", "to": ["c@d.test"], "headers": {"X-A": "v\r\nBcc: x@y.test"}});
    assert_eq!(send_json(&server, None, &injected).status, 400);
    let bad_b64 = json!({"from": "a@b.test", "to": ["c@d.test"], "attachments": [{"filename": "f", "content": "!!!"}]});
    assert_eq!(send_json(&server, None, &bad_b64).status, 400);
    let unknown = json!({"from": "a@b.test", "to": ["c@d.test"], "bodyy": "typo"});
    assert_eq!(send_json(&server, None, &unknown).status, 400);
    let bad_rcpt = json!({"from": "a@b.test", "to": ["c d@e.test"]});
    assert_eq!(send_json(&server, None, &bad_rcpt).status, 400);
    assert_eq!(get(&server, "/api/send").status, 405);
    assert_eq!(server.health()["messages"], 0, "nothing was stored");
}

#[test]
fn it_routes_to_inboxes_and_is_the_admins() {
    let server = inboxes_common::start(&[]);
    let team = inboxes_common::inbox(&server, "team-a", &["*@team-a.test"]);
    let message =
        json!({"from": "app@sender.test", "to": ["bob@team-a.test"], "subject": "routed"});
    let refused = send_json(&server, Some(&team.token), &message);
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["error"], "admin token required");
    assert_eq!(send_json(&server, None, &message).status, 401);
    let answer = send_json(&server, Some(ADMIN), &message);
    let id = stored_id(&answer);
    assert_eq!(inboxes_common::ids(&server, &team.token, ""), [id]);
    let elsewhere =
        json!({"from": "app@sender.test", "to": ["x@other.test"], "subject": "unrouted"});
    assert_eq!(send_json(&server, Some(ADMIN), &elsewhere).status, 200);
    assert_eq!(inboxes_common::ids(&server, &team.token, "").len(), 1);
}

#[test]
fn unrouted_recipients_are_refused_with_unrouted_reject() {
    let server = inboxes_common::start(&["--unrouted", "reject"]);
    inboxes_common::inbox(&server, "team-a", &["*@team-a.test"]);
    let message = json!({"from": "a@s.test", "to": ["bob@team-a.test", "x@other.test"]});
    let answer = send_json(&server, Some(ADMIN), &message);
    assert_eq!(answer.status, 400);
    assert!(
        answer.json()["error"]
            .as_str()
            .unwrap()
            .contains("x@other.test")
    );
}

#[test]
fn messages_over_max_message_bytes_are_413() {
    let max = 1024 * 1024;
    let server = Server::start_with(&["--max-message-bytes", &max.to_string()]);
    let header = b"Subject: big\r\n\r\n";
    let mut raw = header.to_vec();
    raw.resize(max + 1, b'a');
    let over = send_raw(&server, "from=a%40b.test&to=c%40d.test", &raw);
    assert_eq!(over.status, 413, "{}", String::from_utf8_lossy(&over.body));
    raw.truncate(max);
    let at = send_raw(&server, "from=a%40b.test&to=c%40d.test", &raw);
    assert_eq!(at.status, 200, "{}", String::from_utf8_lossy(&at.body));
    // JSON: the built message counts, base64 and all.
    let attachment = vec![7u8; max];
    let message = json!({"from": "a@b.test", "to": ["c@d.test"], "attachments": [{"filename": "f", "content": b64(&attachment)}]});
    let built_over = send_json(&server, None, &message);
    assert_eq!(
        built_over.status,
        413,
        "{}",
        String::from_utf8_lossy(&built_over.body)
    );
    let small = vec![7u8; max / 2];
    let message = json!({"from": "a@b.test", "to": ["c@d.test"], "attachments": [{"filename": "f", "content": b64(&small)}]});
    assert_eq!(send_json(&server, None, &message).status, 200);
    assert_eq!(server.health()["messages"], 2);
}

#[test]
fn a_25_mib_message_goes_in_and_one_byte_more_is_413() {
    let server = Server::start();
    let max = 25 * 1024 * 1024;
    let base = common::peak_rss_kib(server.pid()).unwrap_or(0);
    let mut raw = b"Subject: 25 MiB\r\n\r\n".to_vec();
    while raw.len() < max {
        raw.extend_from_slice(
            b"0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\r\n",
        );
    }
    raw.truncate(max);
    let started = Instant::now();
    let answer = send_raw(&server, "from=a%40b.test&to=c%40d.test", &raw);
    let took = started.elapsed();
    stored_id(&answer);
    let peak = common::peak_rss_kib(server.pid()).unwrap_or(0);
    eprintln!(
        "25 MiB send: {took:?}, peak RSS {} -> {} MiB",
        base / 1024,
        peak / 1024
    );
    // Over the limit by one byte: 413 from the head, before the body is read.
    raw.push(b'x');
    let started = Instant::now();
    let over = send_raw(&server, "from=a%40b.test&to=c%40d.test", &raw);
    assert_eq!(over.status, 413);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn sends_are_charged_to_the_inflight_budget() {
    // Each 1.5 MiB send is charged 3 MiB of a 4 MiB budget: a second at once waits its turn.
    let server = Server::start_with(&[
        "--max-inflight-bytes",
        "4MiB",
        "--max-message-bytes",
        "2MiB",
    ]);
    let mut raw = b"Subject: x\r\n\r\n".to_vec();
    raw.resize(1536 * 1024, b'a');
    // A body whose head has come in but whose bytes have not holds its charge.
    let mut slow = TcpStream::connect(server.http).unwrap();
    let head = format!(
        "POST /api/send?from=a%40b.test&to=c%40d.test HTTP/1.1\r\nHost: {}\r\nContent-Type: message/rfc822\r\nContent-Length: {}\r\n\r\n",
        server.http,
        raw.len()
    );
    slow.write_all(head.as_bytes()).unwrap();
    slow.write_all(&raw[..1000]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let refused = send_raw(&server, "from=a%40b.test&to=c%40d.test", &raw);
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    slow.write_all(&raw[1000..]).unwrap();
    let mut wire = Vec::new();
    slow.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
    let mut buf = [0u8; 4096];
    while !wire.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = slow.read(&mut buf).unwrap();
        assert!(n > 0, "closed without an answer");
        wire.extend_from_slice(&buf[..n]);
    }
    assert!(
        wire.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&wire)
    );
    // Once answered, its charge is back (shown in /health's inflightBytes).
    server.poll_health("inflightBytes", 0, Duration::from_secs(5));
    let again = send_raw(&server, "from=a%40b.test&to=c%40d.test", &raw);
    stored_id(&again);
}

#[test]
fn with_a_data_dir_it_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("mailjar-send-{}", common::nonce()));
    let dir_text = dir.to_str().unwrap().to_owned();
    let id = {
        let server = Server::start_with(&["--data-dir", &dir_text]);
        let answer = send_json(
            &server,
            None,
            &json!({"from": "a@b.test", "to": ["c@d.test"], "subject": "kept"}),
        );
        assert_eq!(answer.status, 200);
        answer.json()["id"].as_str().unwrap().to_owned()
    };
    let server = Server::start_with(&["--data-dir", &dir_text]);
    let email = server.get_ok(&format!("/api/emails/{id}"))["email"].clone();
    assert_eq!(email["subject"], "kept");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// The id of the message an answer says was stored; fails with the answer's
/// body otherwise.
fn stored_id(answer: &Answer) -> String {
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    answer.json()["id"].as_str().expect("id").to_owned()
}
