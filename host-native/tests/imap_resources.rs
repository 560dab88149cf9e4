//! What IMAP connections cost the server: an IDLE connection a few KiB, and
//! a FETCH of the whole mailbox by a client that reads nothing holds about
//! one message, not the mailbox (the rest is rendered as the client reads).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, rss_kib};

fn imap_addr(server: &Server) -> String {
    let health = server.health();
    format!(
        "{}:{}",
        health["imap"]["host"].as_str().unwrap(),
        health["imap"]["port"]
    )
}

/// Sends `command` and reads lines until one starts with `until`.
fn exchange(reader: &mut BufReader<TcpStream>, command: &[u8], until: &str) -> String {
    reader.get_mut().write_all(command).unwrap();
    let mut all = String::new();
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "closed: {all}");
        all.push_str(&line);
        if line.starts_with(until) {
            return all;
        }
    }
}

fn idling(addr: &str) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut greeting = String::new();
    reader.read_line(&mut greeting).unwrap();
    exchange(&mut reader, b"a LOGIN u p\r\nb SELECT INBOX\r\n", "b OK");
    exchange(&mut reader, b"c IDLE\r\n", "+ idling");
    reader
}

#[test]
fn an_idle_connection_costs_a_few_kib() {
    let server = Server::start_with(&["--imap-port", "0"]);
    for i in 0..20 {
        let raw = common::message("a@x.test", "u@x.test", &format!("m{i}"), "body");
        server.send("a@x.test", &["u@x.test"], &raw);
    }
    let addr = imap_addr(&server);
    // Warm up: the runtime's threads and the allocator's first arenas.
    let warm: Vec<_> = (0..20).map(|_| idling(&addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_kib(server.pid()).unwrap();
    const N: u64 = 300;
    let idle: Vec<_> = (0..N).map(|_| idling(&addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_kib(server.pid()).unwrap();
    let per = (after.saturating_sub(before)) as f64 / N as f64;
    println!(
        "{N} IDLE connections: {} KiB more RSS, {per:.1} KiB each",
        after - before
    );
    assert!(per < 16.0, "{per} KiB per IDLE connection");
    // Still awake: a delivery reaches every one.
    let raw = common::message("a@x.test", "u@x.test", "wake", "up");
    server.send("a@x.test", &["u@x.test"], &raw);
    for mut reader in idle.into_iter().chain(warm) {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, "* 21 EXISTS\r\n");
    }
}

#[test]
fn a_fetch_of_everything_by_a_client_that_does_not_read_holds_one_message() {
    let server = Server::start_with(&["--imap-port", "0", "--max-store-bytes", "512MiB"]);
    // 64 messages of 2 MiB: 128 MiB in the store.
    let body = "x".repeat(1000);
    let mut text = String::new();
    while text.len() < 2 * 1024 * 1024 {
        text.push_str(&body);
        text.push_str("\r\n");
    }
    let raw = common::message("a@x.test", "u@x.test", "big", &text);
    let mut smtp = server.smtp();
    for _ in 0..64 {
        assert_eq!(smtp.transaction("a@x.test", &["u@x.test"], &raw).code, 250);
    }
    let addr = imap_addr(&server);
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut greeting = String::new();
    reader.read_line(&mut greeting).unwrap();
    exchange(&mut reader, b"a LOGIN u p\r\nb SELECT INBOX\r\n", "b OK");
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(server.pid()).unwrap();
    reader
        .get_mut()
        .write_all(b"c FETCH 1:* BODY.PEEK[]\r\n")
        .unwrap();
    // The client reads nothing for a while: the server stops at what the socket takes.
    std::thread::sleep(Duration::from_secs(2));
    let stalled = rss_kib(server.pid()).unwrap();
    let held = stalled.saturating_sub(before);
    println!(
        "stalled FETCH of 128 MiB: {held} KiB more RSS (a message is {} KiB)",
        raw.len() / 1024
    );
    assert!(held < 3 * raw.len() as u64 / 1024 + 4096, "{held} KiB held");
    // Then it reads everything, and /health answers fast meanwhile.
    let started = Instant::now();
    let mut sink = vec![0u8; 1 << 20];
    let mut total = 0usize;
    let mut tail = Vec::new();
    loop {
        let n = reader.read(&mut sink).unwrap();
        assert!(n > 0);
        total += n;
        tail.extend_from_slice(&sink[..n]);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
        if tail.ends_with(b"c OK FETCH completed\r\n") {
            break;
        }
    }
    assert!(total > 64 * raw.len());
    println!("read {} MiB in {:?}", total >> 20, started.elapsed());
}

/// The figure of the issue: `UID FETCH 1:* (UID RFC822.SIZE ENVELOPE)` over
/// 100,000 messages, its time and the server's peak RSS. Minutes of filling
/// in a debug build: run with `--ignored` (MAILJAR_BENCH_MESSAGES for another count).
#[test]
#[ignore]
fn bench_uid_fetch_of_100k_envelopes() {
    let count: usize = std::env::var("MAILJAR_BENCH_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let server = Server::start_with(&["--imap-port", "0", "--max-messages", "200000"]);
    let fill = format!(
        "import smtplib, sys\nh, p = sys.argv[1].rsplit(':', 1)\ns = smtplib.SMTP(h, int(p))\nfor i in range({count}):\n    s.sendmail('a@x.test', ['u@x.test'], f'From: A <a@x.test>\\r\\nTo: u@x.test\\r\\nSubject: message {{i}}\\r\\nMessage-ID: <{{i}}@x.test>\\r\\n\\r\\nbody {{i}}\\r\\n'.encode())\ns.quit()\n"
    );
    let filled = Instant::now();
    common::run_ok(
        std::process::Command::new("python3")
            .arg("-c")
            .arg(fill)
            .arg(server.smtp.to_string()),
    );
    println!("filled {count} messages in {:?}", filled.elapsed());
    let addr = imap_addr(&server);
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut greeting = String::new();
    reader.read_line(&mut greeting).unwrap();
    exchange(&mut reader, b"a LOGIN u p\r\nb SELECT INBOX\r\n", "b OK");
    let before = common::peak_rss_kib(server.pid()).unwrap();
    let started = Instant::now();
    let answer = exchange(
        &mut reader,
        b"c UID FETCH 1:* (UID RFC822.SIZE ENVELOPE)\r\n",
        "c OK",
    );
    let took = started.elapsed();
    let peak = common::peak_rss_kib(server.pid()).unwrap();
    assert_eq!(answer.matches(" FETCH (UID ").count(), count);
    println!(
        "UID FETCH 1:* (UID RFC822.SIZE ENVELOPE) over {count}: {took:?}, {} MiB answered, peak RSS {} MiB (before it {} MiB)",
        answer.len() >> 20,
        peak >> 10,
        before >> 10
    );
}
