//! A delay fault rule does not keep the slot of a client that has left (issue 29, finding 9): the
//! socket is watched while the delay runs, and a client that closes ends its connection at once
//! (`/health` `smtpConnections` drops back while the delay would still run). A client that stays
//! gets its normal reply after the delay, and what it sent meanwhile is answered in order.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, Smtp, http_exchange};
use serde_json::Value;

/// The delay of the rules: long enough that the connections' ends are seen well before it.
const DELAY: Duration = Duration::from_secs(4);
/// How soon a connection whose client left must be gone.
const FREED: Duration = Duration::from_millis(1500);

fn add_rule(server: &Server, rule: &Value) {
    let body = rule.to_string();
    let request = format!(
        "POST /api/faults HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.http,
        body.len()
    );
    let response = http_exchange(server.http, request.as_bytes());
    assert_eq!(response.status, 200, "{}", response.body);
}

fn smtp_connections(server: &Server) -> u64 {
    server.health()["smtpConnections"]
        .as_u64()
        .expect("smtpConnections")
}

/// Waits until `/health` counts `want` SMTP connections; how long that took.
fn until_connections(server: &Server, want: u64, within: Duration) -> Duration {
    let started = Instant::now();
    while smtp_connections(server) != want {
        assert!(
            started.elapsed() < within,
            "smtpConnections is {} after {within:?}, want {want}",
            smtp_connections(server)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    started.elapsed()
}

#[test]
fn clients_that_leave_during_a_connect_delay_free_their_slots() {
    let server = Server::start();
    let ms = DELAY.as_millis() as u64;
    add_rule(
        &server,
        &serde_json::json!({"stage": "connect", "times": null, "action": {"delayMs": ms}}),
    );
    let started = Instant::now();
    let leaving: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(server.smtp).expect("connect"))
        .collect();
    until_connections(&server, 20, FREED);
    drop(leaving);
    let freed = until_connections(&server, 0, FREED);
    eprintln!(
        "20 clients that left during a {ms} ms connect delay freed their slots in {} ms",
        freed.as_millis()
    );
    assert!(
        started.elapsed() < DELAY,
        "the slots were freed by the delay's end, not the closes"
    );

    // A client that stays gets the greeting after the delay; what it sent meanwhile is answered.
    let started = Instant::now();
    let mut early = TcpStream::connect(server.smtp).expect("connect");
    early.write_all(b"EHLO early.test\r\n").expect("write");
    let mut smtp = Smtp::from_stream(early);
    let greeting = smtp.reply();
    assert_eq!(greeting.code, 220, "{}", greeting.wire);
    assert!(started.elapsed() >= DELAY - Duration::from_millis(50));
    assert_eq!(smtp.reply().code, 250, "the EHLO sent during the delay");
    let reply = smtp.transaction(
        "a@example.test",
        &["b@example.test"],
        b"Subject: x\r\n\r\nhi\r\n",
    );
    assert_eq!(reply.code, 250, "{}", reply.wire);
    smtp.expect("QUIT", 221);
}

#[test]
fn a_client_that_leaves_during_a_delay_at_a_later_stage_frees_its_slot() {
    let server = Server::start();
    let ms = DELAY.as_millis() as u64;
    add_rule(
        &server,
        &serde_json::json!({"stage": "mail", "times": null, "action": {"delayMs": ms}}),
    );
    let started = Instant::now();
    let mut smtp = server.smtp();
    smtp.expect("EHLO leaving.test", 250);
    smtp.write(b"MAIL FROM:<a@example.test>\r\n");
    until_connections(&server, 1, FREED);
    std::thread::sleep(Duration::from_millis(100));
    drop(smtp);
    until_connections(&server, 0, FREED);
    assert!(started.elapsed() < DELAY);
}

#[test]
fn a_message_whose_client_leaves_during_its_delay_is_stored_at_once() {
    let server = Server::start();
    let ms = DELAY.as_millis() as u64;
    add_rule(
        &server,
        &serde_json::json!({"stage": "message", "times": null, "action": {"delayMs": ms}}),
    );
    let started = Instant::now();
    let mut smtp = server.smtp();
    smtp.expect("EHLO leaving.test", 250);
    smtp.expect("MAIL FROM:<a@example.test>", 250);
    smtp.expect("RCPT TO:<b@example.test>", 250);
    smtp.expect("DATA", 354);
    smtp.write(b"Subject: left early\r\n\r\nhi\r\n.\r\n");
    std::thread::sleep(Duration::from_millis(100));
    drop(smtp);
    until_connections(&server, 0, FREED);
    // As after the delay: the stage goes on, the message is stored.
    assert_eq!(server.latest()["subject"], "left early");
    assert!(started.elapsed() < DELAY);
}
