//! Webhooks: a local receiver that answers, fails (500), refuses (404), hangs and
//! recovers; signatures checked with Python's `hmac`; retries and drops
//! counted in `/health`; the 250s timed while the receiver hangs.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

/// What the receiver does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    Ok = 0,
    Refuse = 1,
    Hang = 2,
}

/// One request the receiver read.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// An HTTP receiver on a thread per connection.
struct Receiver {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    /// Requests to fail (500) before the mode applies.
    fail_first: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(mode: Mode) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let receiver = Receiver {
            addr: listener.local_addr().unwrap(),
            mode: Arc::new(AtomicU8::new(mode as u8)),
            fail_first: Arc::new(AtomicUsize::new(0)),
            requests: Arc::new(AtomicUsize::new(0)),
            received: Arc::default(),
        };
        let (mode, fail_first, requests, received) = (
            receiver.mode.clone(),
            receiver.fail_first.clone(),
            receiver.requests.clone(),
            receiver.received.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (mode, fail_first, requests, received) = (
                    mode.clone(),
                    fail_first.clone(),
                    requests.clone(),
                    received.clone(),
                );
                std::thread::spawn(move || {
                    let _ = serve(stream, &mode, &fail_first, &requests, &received);
                });
            }
        });
        receiver
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn wait_for(&self, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received();
            if got.len() >= count {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {count} webhooks after {timeout:?}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(
    stream: TcpStream,
    mode: &AtomicU8,
    fail_first: &AtomicUsize,
    requests: &AtomicUsize,
    received: &Mutex<Vec<Received>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    requests.fetch_add(1, Ordering::SeqCst);
    let failing = fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let status = match mode.load(Ordering::SeqCst) {
        _ if failing => "500 Internal Server Error",
        0 => "200 OK",
        1 => "404 Not Found",
        _ => {
            // Hang: hold the connection, answer nothing, until the client leaves.
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
            return Ok(());
        }
    };
    if status.starts_with("200") {
        received.lock().unwrap().push(Received { headers, body });
    }
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    stream.flush()
}

/// The hex HMAC-SHA256 of `body` with `secret`, computed by Python's `hmac`.
fn python_hmac(secret: &str, body: &[u8]) -> String {
    let output = Command::new("python3")
        .args([
            "-c",
            "import hmac, hashlib, sys; print(hmac.new(sys.argv[1].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())",
            secret,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(body)?;
            child.wait_with_output()
        })
        .expect("python3");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn webhooks(server: &Server) -> Value {
    server.health()["webhooks"].clone()
}

fn poll_webhooks(server: &Server, field: &str, want: u64, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let counts = webhooks(server);
        if counts[field].as_u64() == Some(want) {
            return counts;
        }
        assert!(
            Instant::now() < deadline,
            "webhooks {counts} after {timeout:?}, want {field} = {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn send(server: &Server, subject: &str) {
    let raw = common::message("app@sender.test", "bob@rcpt.test", subject, "hello");
    server.send("app@sender.test", &["bob@rcpt.test"], &raw);
}

#[test]
fn every_stored_message_is_posted_signed() {
    let receiver = Receiver::start(Mode::Ok);
    let secret = "s3cret-webhook-key";
    let server = Server::start_with(&["--webhook", &receiver.url(), "--webhook-secret", secret]);
    for i in 0..3 {
        send(&server, &format!("smtp {i}"));
    }
    let json = r#"{"from":"a@b.test","to":["c@d.test"],"subject":"api 3"}"#;
    let request = format!(
        "POST /api/send HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
        server.http,
        json.len()
    );
    let posted = common::http_exchange(server.http, request.as_bytes());
    assert_eq!(posted.status, 200, "{}", posted.body);
    let got = receiver.wait_for(4, Duration::from_secs(10));
    let ids: Vec<Value> = server.emails("").iter().map(|e| e["id"].clone()).collect();
    let mut posted_ids = Vec::new();
    for request in &got {
        assert_eq!(request.header("content-type"), Some("application/json"));
        let event = request.json();
        assert_eq!(event["event"], "stored");
        assert!(event["email"]["subject"].is_string(), "a summary: {event}");
        posted_ids.push(event["email"]["id"].clone());
        let signature = request.header("x-mailjar-signature").expect("signed");
        assert_eq!(
            signature,
            format!("sha256={}", python_hmac(secret, &request.body))
        );
    }
    posted_ids.sort_by_key(|v| v.to_string());
    let mut sorted = ids.clone();
    sorted.sort_by_key(|v| v.to_string());
    assert_eq!(posted_ids, sorted);
    let counts = poll_webhooks(&server, "delivered", 4, Duration::from_secs(5));
    assert_eq!(counts["failed"], 0);
    assert_eq!(counts["dropped"], 0);
    assert_eq!(counts["queued"], 0);
    assert_eq!(server.health()["limits"]["webhookQueue"], 1000);
}

#[test]
fn failures_are_retried_and_other_4xx_are_not() {
    let receiver = Receiver::start(Mode::Ok);
    receiver.fail_first.store(2, Ordering::SeqCst);
    let server = Server::start_with(&["--webhook", &receiver.url()]);
    send(&server, "retried");
    // Two 500s, then the 1 s and 2 s retries get through on the third try.
    let counts = poll_webhooks(&server, "delivered", 1, Duration::from_secs(10));
    assert_eq!(counts["retried"], 2);
    assert_eq!(receiver.requests.load(Ordering::SeqCst), 3);
    assert_eq!(receiver.received().len(), 1);

    receiver.set(Mode::Refuse);
    send(&server, "refused");
    let counts = poll_webhooks(&server, "failed", 1, Duration::from_secs(5));
    assert_eq!(counts["retried"], 2, "a 404 is not retried");
    assert_eq!(receiver.requests.load(Ordering::SeqCst), 4);
    assert!(
        receiver.received()[0]
            .header("x-mailjar-signature")
            .is_none(),
        "no secret, no signature"
    );
}

#[test]
fn an_unreachable_receiver_is_retried() {
    // A port nothing listens on: connection refused.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let server = Server::start_with(&["--webhook", &url]);
    send(&server, "nobody home");
    let counts = poll_webhooks(&server, "retried", 2, Duration::from_secs(5));
    assert_eq!(counts["queued"], 1, "still being retried: {counts}");
    assert_eq!(counts["delivered"], 0);
}

/// Sends `count` messages on one connection: the worst time from the end of data to its 250.
fn worst_250(server: &Server, count: u64) -> Duration {
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let body = common::message(
        "app@sender.test",
        "bob@rcpt.test",
        "timed",
        &"x".repeat(2000),
    );
    let mut data = common::dot_stuff(&body);
    data.extend_from_slice(b".\r\n");
    let mut worst = Duration::ZERO;
    for _ in 0..count {
        smtp.expect("MAIL FROM:<app@sender.test>", 250);
        smtp.expect("RCPT TO:<bob@rcpt.test>", 250);
        smtp.expect("DATA", 354);
        let started = Instant::now();
        smtp.write(&data);
        let reply = smtp.reply();
        worst = worst.max(started.elapsed());
        assert_eq!(reply.code, 250, "{}", reply.wire);
    }
    worst
}

#[test]
fn a_hanging_receiver_never_delays_a_250_and_a_full_queue_drops() {
    let receiver = Receiver::start(Mode::Hang);
    let queue = 10;
    let server = Server::start_with(&[
        "--webhook",
        &receiver.url(),
        "--webhook-queue",
        &queue.to_string(),
        "--webhook-timeout",
        "2s",
    ]);
    let base_rss = common::rss_kib(server.pid()).unwrap_or(0);
    let prober = common::HealthProber::start(server.http, Duration::from_millis(20));
    let sent = 300u64;
    let worst = worst_250(&server, sent);
    let probes = prober.stop();
    let counts = webhooks(&server);
    let peak_rss = common::peak_rss_kib(server.pid()).unwrap_or(0);
    let without = worst_250(&Server::start(), sent);
    eprintln!(
        "hanging receiver: {sent} messages, worst end-of-data to 250 {worst:?} (without webhooks {without:?}), worst /health {:?}, webhooks {counts}, RSS {} KiB -> peak {} KiB",
        probes.worst(),
        base_rss,
        peak_rss
    );
    assert!(worst < Duration::from_millis(100), "a 250 took {worst:?}");
    assert!(
        probes.worst() < Duration::from_millis(100),
        "/health took {:?}",
        probes.worst()
    );
    let number = |field: &str| {
        counts[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} in {counts}"))
    };
    // Held at most: the queue, the deliveries in flight, and one waiting for a slot.
    let held = queue + 16 + 1;
    assert!(number("queued") <= held, "{counts}");
    assert_eq!(
        number("dropped") + number("queued") + number("delivered") + number("failed"),
        sent
    );
    assert!(number("dropped") >= sent - held, "{counts}");
    assert_eq!(number("delivered"), 0);
    // The receiver comes back: what is still queued gets through.
    receiver.set(Mode::Ok);
    let queued = number("queued");
    poll_webhooks(&server, "delivered", queued, Duration::from_secs(20));
}

/// A receiver that keeps connections open: (connections accepted, requests answered).
fn keep_alive_receiver() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, r) = (connections.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            c.fetch_add(1, Ordering::SeqCst);
            let r = r.clone();
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0;
                    let mut first = true;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line)? == 0 {
                            return Ok(());
                        }
                        let line = line.trim_end();
                        if line.is_empty() && !first {
                            break;
                        }
                        first = false;
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body)?;
                    r.fetch_add(1, Ordering::SeqCst);
                    writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")?;
                }
            });
        }
    });
    (addr, connections, requests)
}

#[test]
fn connections_to_a_receiver_are_kept_for_the_next_messages() {
    let (addr, connections, requests) = keep_alive_receiver();
    let server = Server::start_with(&["--webhook", &format!("http://{addr}/hook")]);
    let sent = 40;
    for i in 0..sent {
        send(&server, &format!("kept {i}"));
    }
    poll_webhooks(&server, "delivered", sent, Duration::from_secs(10));
    assert_eq!(requests.load(Ordering::SeqCst) as u64, sent);
    let opened = connections.load(Ordering::SeqCst);
    assert!(opened <= 16, "{opened} connections for {sent} messages");
}
