//! The webhooks' queue under a receiver that is down: first one that refuses
//! connections, then one that accepts and never answers. Mail with the
//! largest summaries comes in far faster than it can be delivered; the
//! process's peak RSS (VmHWM) must stay within README's bound for
//! `--webhook-queue` and `dropped` must count exactly what did not fit.

mod common;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use common::Server;
use serde_json::Value;

/// `--webhook-queue`: small, so that the test overflows it quickly.
const QUEUE: u64 = 50;
/// The workers of `src/webhooks.rs` (README: at most 16 deliveries running).
const IN_FLIGHT: u64 = 16;
/// Messages kept in the store (`--max-messages`): the queue outlives the store's copies.
const STORED: u64 = 20;
/// Messages sent: with an unbounded queue their summaries alone would be about 12 MiB.
const SENT: u64 = 3000;
/// SMTP connections sending at once.
const SENDERS: u64 = 4;
/// README: a delivery running holds about 20 KiB of connection besides its request.
const CONNECTION_BYTES: u64 = 20 * 1024;
/// Per SMTP or HTTP connection of the test (README: a few tens of KiB; generous).
const PER_CLIENT_BYTES: u64 = 256 * 1024;
/// What allocators and a debug build add beyond the formula: parsing 3000 messages on the
/// runtime's threads grows their malloc arenas by about 5 MiB (measured +5.1 to +6.0 MiB with
/// the queue of 50; +24.8 MiB with a queue of 100,000, the test failing as it should).
const SLACK_BYTES: u64 = 8 * 1024 * 1024;

/// A message whose summary is as large as a summary gets in ASCII: 1000
/// characters of From, of Subject and of Cc, and a 200-character preview.
fn large_summary_message(n: u64) -> Vec<u8> {
    let name = "N".repeat(990);
    let cc: Vec<String> = (0..60).map(|i| format!("copy{i:03}@cc.test")).collect();
    let raw = format!(
        "From: \"{name}\" <app@sender.test>\r\nTo: bob@rcpt.test\r\nCc: {}\r\nSubject: {n} {}\r\n\r\n{}\r\n",
        cc.join(", "),
        "S".repeat(1000),
        "body text ".repeat(40)
    );
    raw.into_bytes()
}

/// Sends [`SENT`] messages over [`SENDERS`] connections; each must get its 250.
fn flood(server: &Server) {
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let addr = server.smtp;
            std::thread::spawn(move || {
                let (mut smtp, greeting) = common::Smtp::connect(addr);
                assert_eq!(greeting.code, 220);
                smtp.expect("EHLO e2e.test", 250);
                for n in (s..SENT).step_by(SENDERS as usize) {
                    let raw = large_summary_message(n);
                    let reply = smtp.transaction("app@sender.test", &["bob@rcpt.test"], &raw);
                    assert_eq!(reply.code, 250, "{}", reply.wire);
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().expect("a sender");
    }
}

/// `/health`'s webhooks once every message has been offered to the queue
/// (its 250 comes first, so the last ones may still be on their way).
fn announced(server: &Server) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts = server.health()["webhooks"].clone();
        let offered = ["queued", "dropped", "delivered", "failed"]
            .iter()
            .map(|f| counts[*f].as_u64().unwrap_or(0))
            .sum::<u64>();
        if offered == SENT || std::time::Instant::now() > deadline {
            return counts;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// README's bound for this run, in KiB: the start, the store, the test's
/// connections, and (--webhook-queue + 16) summaries plus 16 requests.
fn bound_kib(baseline_kib: u64, summary: u64, raw: u64) -> (u64, String) {
    let webhooks = (QUEUE + IN_FLIGHT) * summary + IN_FLIGHT * (summary + 32 + CONNECTION_BYTES);
    let store = STORED * (raw + summary) * 2;
    let clients = (SENDERS + 2) * PER_CLIENT_BYTES;
    let bytes = webhooks + store + clients + SLACK_BYTES;
    let why = format!(
        "{baseline_kib} KiB at start + webhooks {} KiB ({QUEUE} + {IN_FLIGHT} summaries of {summary} bytes, \
         {IN_FLIGHT} requests and connections) + store {} KiB + clients {} KiB + slack {} KiB",
        webhooks / 1024,
        store / 1024,
        clients / 1024,
        SLACK_BYTES / 1024
    );
    (baseline_kib + bytes / 1024, why)
}

/// Floods a server posting to `url`, then checks its peak RSS and its counts.
fn overflow_within_bound(what: &str, url: &str) {
    let server = Server::start_with(&[
        "--webhook",
        url,
        "--webhook-queue",
        &QUEUE.to_string(),
        "--webhook-timeout",
        "2s",
        "--max-messages",
        &STORED.to_string(),
    ]);
    let baseline_kib = common::peak_rss_kib(server.pid()).expect("VmHWM");
    flood(&server);
    let peak_kib = common::peak_rss_kib(server.pid()).expect("VmHWM");
    let counts = announced(&server);
    let summaries = server.get_ok("/api/emails?view=summary&limit=1");
    let summary = serde_json::to_vec(&summaries["emails"][0]).unwrap().len() as u64;
    let raw = large_summary_message(SENT).len() as u64;
    let (bound, why) = bound_kib(baseline_kib, summary, raw);
    eprintln!(
        "{what}: {SENT} messages with {summary}-byte summaries, --webhook-queue {QUEUE}: \
         webhooks {counts}; peak RSS {peak_kib} KiB (+{} KiB), bound {bound} KiB = {why}",
        peak_kib - baseline_kib
    );
    let number = |field: &str| {
        counts[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: {counts}"))
    };
    assert_eq!(number("delivered"), 0, "{counts}");
    assert_eq!(
        number("failed"),
        0,
        "nothing given up within seconds: {counts}"
    );
    assert!(number("queued") <= QUEUE + IN_FLIGHT, "{counts}");
    assert_eq!(
        number("dropped"),
        SENT - number("queued"),
        "every message not queued was dropped and counted: {counts}"
    );
    assert!(
        peak_kib <= bound,
        "peak RSS {peak_kib} KiB over {bound} KiB ({why})"
    );
}

#[test]
fn a_receiver_that_refuses_connections_holds_the_queue_and_no_more() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    overflow_within_bound("refused", &url);
}

/// A receiver that accepts connections, reads what comes, and never answers.
fn hanging_receiver() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut sink = [0; 4096];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

#[test]
fn a_receiver_that_hangs_holds_the_queue_and_no_more() {
    let addr = hanging_receiver();
    overflow_within_bound("hanging", &format!("http://{addr}/hook"));
}

#[test]
fn the_summaries_are_as_large_as_readme_says_a_summary_gets() {
    // The flood's messages give summaries of a few KiB: under README's "about 24 KiB".
    let server = Server::start();
    let raw = large_summary_message(0);
    server.send("app@sender.test", &["bob@rcpt.test"], &raw);
    let list: Value = server.get_ok("/api/emails?view=summary&limit=1");
    let summary = serde_json::to_vec(&list["emails"][0]).unwrap();
    assert!(summary.len() > 3000, "{} bytes", summary.len());
    assert!(summary.len() < 24 * 1024, "{} bytes", summary.len());
}
