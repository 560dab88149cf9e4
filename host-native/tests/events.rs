//! `GET /api/events` over real sockets against the real binary: curl follows mail live and
//! resumes with `Last-Event-ID`; a subscriber that stops reading gets `overflow` while SMTP
//! ingest goes on; clients that vanish are unsubscribed; the subscriber cap; the keep-alive
//! comment; HEAD; and `--ready-json` with logs on stderr.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::curl::curl_lines;
use common::{IO_TIMEOUT, Server, binary};

/// One server-sent event as a client parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sse {
    event: String,
    id: Option<String>,
    data: String,
}

/// Parses `text/event-stream` text: events, and how many comments came.
fn parse_sse(text: &str) -> (Vec<Sse>, usize) {
    let mut events = Vec::new();
    let mut comments = 0;
    for block in text.split("\n\n") {
        let mut event = Sse {
            event: "message".to_owned(),
            id: None,
            data: String::new(),
        };
        let mut has_data = false;
        for line in block.lines() {
            if line.starts_with(':') {
                comments += 1;
            } else if let Some(v) = line.strip_prefix("event: ") {
                event.event = v.to_owned();
            } else if let Some(v) = line.strip_prefix("id: ") {
                event.id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                event.data.push_str(v);
                has_data = true;
            }
        }
        if has_data {
            events.push(event);
        }
    }
    (events, comments)
}

/// Undoes chunked transfer coding of a complete body (what follows the head).
fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap_or("x"), 16)
            .expect("a hex chunk size");
        if size == 0 {
            return (body, true);
        }
        if rest.len() < end + 2 + size + 2 {
            return (body, false);
        }
        body.extend_from_slice(&rest[end + 2..end + 2 + size]);
        rest = &rest[end + 4 + size..];
    }
}

/// A raw subscriber: the request is sent, nothing is read until asked.
fn subscribe_raw(server: &Server, target: &str, extra: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.http).expect("connect HTTP");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n"
    )
    .unwrap();
    stream
}

/// Reads from a subscriber until `done(text so far)` or the deadline; returns the head and the
/// de-chunked body.
fn read_stream_until(
    stream: &mut TcpStream,
    deadline: Duration,
    done: impl Fn(&str) -> bool,
) -> (String, String, bool) {
    let start = Instant::now();
    let mut wire = Vec::new();
    let mut buf = [0u8; 65536];
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => wire.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
        let (head, body, ended) = split(&wire);
        if ended || done(&body) || start.elapsed() > deadline {
            return (head, body, ended);
        }
    }
    let (head, body, ended) = split(&wire);
    (head, body, ended)
}

fn split(wire: &[u8]) -> (String, String, bool) {
    let Some(at) = wire.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (
            String::from_utf8_lossy(wire).into_owned(),
            String::new(),
            false,
        );
    };
    let (body, ended) = dechunk(&wire[at + 4..]);
    (
        String::from_utf8_lossy(&wire[..at]).into_owned(),
        String::from_utf8(body).expect("UTF-8 events"),
        ended,
    )
}

fn stored_ids(events: &[Sse]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.event == "stored")
        .filter_map(|e| e.id.clone())
        .collect()
}

/// Collects curl's lines until `n` stored ids have been seen.
fn curl_ids(rx: &mpsc::Receiver<String>, n: usize) -> Vec<String> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut ids = Vec::new();
    while ids.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("only {} of {n} events from curl: {ids:?}", ids.len()));
        if let Some(id) = line.strip_prefix("id: ") {
            ids.push(id.to_owned());
        }
    }
    ids
}

fn swaks(server: &Server, to: &str, subject: &str) {
    common::run_ok(
        common::swaks(server)
            .args(["--to", to, "--from", "app@app.test"])
            .args(["--header", &format!("Subject: {subject}")])
            .args(["--body", "sent by swaks"]),
    );
}

#[test]
fn curl_follows_mail_live_and_resumes_with_last_event_id() {
    let server = Server::start();
    let url = format!("http://{}/api/events?to=live@local.test", server.http);
    let (mut curl, rx) = curl_lines(&[&url]);
    server.poll_health("subscribers", 1, IO_TIMEOUT);
    swaks(&server, "other@local.test", "not for this stream");
    swaks(&server, "live@local.test", "first");
    swaks(&server, "live@local.test", "second");
    let ids = curl_ids(&rx, 2);
    let _ = curl.kill();
    let _ = curl.wait();
    let listed: Vec<String> = server
        .emails("to=live@local.test")
        .iter()
        .map(|m| m["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ids, listed);
    server.poll_health("subscribers", 0, IO_TIMEOUT);

    // Mail that arrives while nobody listens comes first when curl resumes after the first id.
    swaks(&server, "live@local.test", "third");
    let header = format!("Last-Event-ID: {}", ids[0]);
    let (mut curl, rx) = curl_lines(&["-H", &header, &url]);
    let replayed = curl_ids(&rx, 2);
    swaks(&server, "live@local.test", "fourth");
    let live = curl_ids(&rx, 1);
    let _ = curl.kill();
    let _ = curl.wait();
    let all: Vec<String> = server
        .emails("to=live@local.test")
        .iter()
        .map(|m| m["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!([replayed, live].concat(), all[1..]);
}

#[test]
fn a_subscriber_that_stops_reading_gets_overflow_and_ingest_never_waits() {
    let server = Server::start_with(&["--event-buffer", "1000"]);
    let mut slow = subscribe_raw(&server, "/api/events", "");
    server.poll_health("subscribers", 1, IO_TIMEOUT);
    // Large summaries (a long subject, many Cc addresses), so that the events pile up far past
    // what the kernel's socket buffers hold while the subscriber reads nothing.
    let cc: Vec<String> = (0..60).map(|i| format!("cc{i}@copies.test")).collect();
    let subject = "s".repeat(800);
    let raw = format!(
        "From: app@app.test\r\nCc: {}\r\nSubject: {subject}\r\n\r\nbody\r\n",
        cc.join(", ")
    );
    let total = 5000;
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    for _ in 0..total {
        let reply = smtp.transaction("app@app.test", &["flood@local.test"], raw.as_bytes());
        assert_eq!(reply.code, 250, "{}", reply.wire);
    }
    smtp.expect("QUIT", 221);
    assert_eq!(server.health()["messages"], total);

    let (head, body, ended) = read_stream_until(&mut slow, IO_TIMEOUT, |_| false);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(ended, "the stream ends after overflow");
    let (events, _) = parse_sse(&body);
    let last = events.last().expect("events");
    assert_eq!(last.event, "overflow", "{:?}", &events[events.len() - 2..]);
    assert!(last.data.contains("Last-Event-ID"), "{}", last.data);
    // What came before the overflow is the start of the store, without a gap.
    let sent = stored_ids(&events);
    assert!(
        !sent.is_empty() && sent.len() < total,
        "{} events",
        sent.len()
    );
    let listed: Vec<String> = server
        .emails("")
        .iter()
        .map(|m| m["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(sent, listed[..sent.len()]);
    server.poll_health("subscribers", 0, IO_TIMEOUT);
}

#[test]
fn clients_that_vanish_are_unsubscribed_and_the_cap_is_a_503() {
    let server = Server::start_with(&["--max-subscribers", "20"]);
    let subscribers: Vec<TcpStream> = (0..20)
        .map(|_| subscribe_raw(&server, "/api/events?subject=x", ""))
        .collect();
    server.poll_health("subscribers", 20, IO_TIMEOUT);
    let refused = server.get("/api/events");
    assert_eq!(refused.status, 503);
    assert_eq!(refused.error(), "too many subscribers");
    assert_eq!(server.health()["limits"]["maxSubscribers"], 20);
    drop(subscribers);
    server.poll_health("subscribers", 0, Duration::from_secs(5));
    // HEAD answers with the stream's head and leaves no subscriber behind.
    let mut stream = TcpStream::connect(server.http).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream
        .write_all(b"HEAD /api/events HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = String::new();
    stream
        .read_to_string(&mut head)
        .expect("HEAD answered and closed");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: text/event-stream; charset=utf-8\r\n"),
        "{head}"
    );
    assert!(head.ends_with("\r\n\r\n"), "no body: {head:?}");
    server.poll_health("subscribers", 0, Duration::from_secs(5));
    let bad = server.get("/api/events?limit=1");
    assert_eq!(bad.status, 400);
}

#[test]
fn an_idle_stream_gets_a_keep_alive_comment_every_15_seconds() {
    let server = Server::start();
    let mut idle = subscribe_raw(&server, "/api/events", "");
    let (head, body, ended) =
        read_stream_until(&mut idle, Duration::from_secs(25), |b| b.contains(": "));
    assert!(!ended);
    assert!(
        head.to_ascii_lowercase()
            .contains("cache-control: no-store"),
        "{head}"
    );
    let (events, comments) = parse_sse(&body);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(comments, 1, "{body:?}");
}

#[test]
fn ready_json_is_the_only_line_on_stdout_and_logs_go_to_stderr() {
    let mut child = Command::new(binary())
        .args(["--smtp-port", "0", "--http-port", "0", "--ready-json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mailjar");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the ready line");
    let ready: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    let http = ready["http"].as_str().expect("http").to_owned();
    let smtp = ready["smtp"].as_str().expect("smtp").to_owned();
    let port = http.rsplit(':').next().unwrap_or_default();
    let health = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{port}/health")])
        .output()
        .expect("curl");
    let health: serde_json::Value = serde_json::from_slice(&health.stdout).expect("health");
    assert_eq!(
        health["smtp"]["port"].to_string(),
        smtp.rsplit(':').next().unwrap_or_default()
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("stdout");
    assert_eq!(rest, "", "nothing else on stdout");
    let mut logs = String::new();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut logs)
        .expect("stderr");
    assert!(logs.contains("SMTP on"), "{logs}");
}
