//! The system benchmark: mailjar against postfix's smtp-sink (the protocol
//! ceiling), driven by postfix's smtp-source, plus wait and list latencies.
//!
//! Run it with `benches/run.sh` (which installs postfix and runs
//! `cargo bench -p mailjar --bench system`). Every figure is printed per round
//! and as a median; ingest rates are ratios to smtp-sink in the same round,
//! latencies are also shown against a `/health` round trip in the same run,
//! because these machines are shared and noisy.
//!
//! Environment: `ROUNDS` (default 3), `MESSAGES` (default 5000),
//! `WAIT_SAMPLES` (default 1000), `MANY_WAITS` (default 10000), `MAILJAR_BIN`
//! (another build to measure); `ONLY` runs one section: `idle`, `many-waits`,
//! `streams-ingest` (`STREAMS`), `event-latency`, `persist`, `inboxes`
//! (`INBOXES`), `webhooks` (`WEBHOOK_DELAY_MS`), `webhooks-memory` (`RATE`,
//! `DOWN_SECS`, `QUEUE`); `ONLY=ingest`
//! stops after the ingest table.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{env_usize, free_port, mailjar, median, read_reply, rss, show, wait_for_port};

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Mailjar {
    proc: Proc,
    smtp: u16,
    http: u16,
}

impl Mailjar {
    fn start(extra: &[&str]) -> Mailjar {
        let (smtp, http) = (free_port(), free_port());
        let child = Command::new(mailjar())
            .args([
                "--smtp-port",
                &smtp.to_string(),
                "--http-port",
                &http.to_string(),
                "--log",
                "warn",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mailjar");
        wait_for_port(smtp);
        wait_for_port(http);
        Mailjar {
            proc: Proc(child),
            smtp,
            http,
        }
    }

    fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    fn health(&self) -> serde_json::Value {
        let (status, body) = http_get(self.http, "/health");
        assert_eq!(status, 200);
        serde_json::from_str(&body).expect("health JSON")
    }
}

/// User plus system CPU time, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat: 12 and 13 after the name.
    let hz = 100; // USER_HZ on Linux
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / hz)
}

fn http_get(port: u16, target: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect HTTP");
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let (status, body) = read_response(&mut BufReader::new(stream));
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A keep-alive HTTP/1.1 client for latency samples.
struct KeepAlive {
    reader: BufReader<TcpStream>,
}

impl KeepAlive {
    fn new(port: u16) -> KeepAlive {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect HTTP");
        stream.set_nodelay(true).ok();
        KeepAlive {
            reader: BufReader::new(stream),
        }
    }

    fn get(&mut self, target: &str) -> (u16, Vec<u8>) {
        write!(
            self.reader.get_mut(),
            "GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        .expect("send");
        read_response(&mut self.reader)
    }
}

fn read_response(reader: &mut BufReader<TcpStream>) -> (u16, Vec<u8>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.trim().eq_ignore_ascii_case("chunked");
            }
        }
    }
    if !chunked {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("body");
        return (status, body);
    }
    // Streamed answers (lists) come chunked.
    let mut body = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("chunk size");
        let size = usize::from_str_radix(line.trim(), 16).expect("chunk size is hex");
        let start = body.len();
        body.resize(start + size + 2, 0);
        reader.read_exact(&mut body[start..]).expect("chunk");
        body.truncate(start + size);
        if size == 0 {
            return (status, body);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// p50 and p99 of sorted latencies beside the p50 of a `/health` round trip
/// measured in the same run, and their ratio.
fn latencies(what: &str, sorted: &[f64], baseline: &[f64], targets: &str) -> String {
    format!(
        "{what} p50 {:.3} ms, p99 {:.3} ms ({targets}); /health p50 {:.3} ms; {what} p50 / health p50 = {:.2}",
        percentile(sorted, 0.5),
        percentile(sorted, 0.99),
        percentile(baseline, 0.5),
        percentile(sorted, 0.5) / percentile(baseline, 0.5)
    )
}

/// Runs smtp-source against a port; returns the elapsed time.
fn smtp_source(port: u16, sessions: usize, messages: usize, reuse: bool) -> Duration {
    let mut cmd = Command::new("smtp-source");
    cmd.args([
        "-s",
        &sessions.to_string(),
        "-m",
        &messages.to_string(),
        "-l",
        "2048",
    ])
    .args(["-f", "sender@app.test", "-t", "user@local.test"]);
    if reuse {
        cmd.arg("-d");
    }
    cmd.arg(format!("127.0.0.1:{port}"));
    let start = Instant::now();
    let status = cmd
        .status()
        .expect("smtp-source (install postfix: benches/run.sh)");
    let elapsed = start.elapsed();
    assert!(status.success(), "smtp-source failed");
    elapsed
}

fn smtp_sink() -> (Proc, u16) {
    let port = free_port();
    let child = Command::new("smtp-sink")
        .args(["-u", "nobody", &format!("127.0.0.1:{port}"), "1024"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("smtp-sink (install postfix: benches/run.sh)");
    wait_for_port(port);
    (Proc(child), port)
}

struct IngestRound {
    ratio: f64,
    mailjar_rate: f64,
    sink_rate: f64,
    cpu_ms_per_1000: f64,
    rss: u64,
    raw_bytes: u64,
}

fn ingest_round(sessions: usize, messages: usize, reuse: bool) -> IngestRound {
    let (sink, sink_port) = smtp_sink();
    let sink_time = smtp_source(sink_port, sessions, messages, reuse);
    drop(sink);

    let mailjar = Mailjar::start(&[]);
    let cpu_before = cpu_time(mailjar.pid());
    let time = smtp_source(mailjar.smtp, sessions, messages, reuse);
    let cpu = cpu_time(mailjar.pid()) - cpu_before;
    let health = mailjar.health();
    let stored = health["messages"].as_u64().unwrap_or(0) as usize;
    assert_eq!(stored, messages, "LOSS: sent {messages}, stored {stored}");
    let (_, body) = http_get(mailjar.http, "/api/emails?limit=1");
    let one: serde_json::Value = serde_json::from_str(&body).expect("list JSON");
    let size = one["emails"][0]["size"].as_u64().unwrap_or(0);
    let rss = rss(mailjar.pid());

    let rate = |t: Duration| messages as f64 / t.as_secs_f64();
    IngestRound {
        ratio: rate(time) / rate(sink_time),
        mailjar_rate: rate(time),
        sink_rate: rate(sink_time),
        cpu_ms_per_1000: cpu.as_secs_f64() * 1000.0 * 1000.0 / messages as f64,
        rss,
        raw_bytes: size * messages as u64,
    }
}

fn smtp_command(reader: &mut BufReader<TcpStream>, command: &[u8]) -> String {
    reader.get_mut().write_all(command).expect("SMTP write");
    read_reply(reader)
}

fn smtp_connect(port: u16) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect SMTP");
    stream.set_nodelay(true).ok();
    let mut reader = BufReader::new(stream);
    read_reply(&mut reader);
    smtp_command(&mut reader, b"EHLO bench\r\n");
    reader
}

/// Sends one message over an open SMTP connection; `before_dot` runs just before the final dot is written.
fn send_message(
    smtp: &mut BufReader<TcpStream>,
    to: &str,
    subject: &str,
    before_dot: impl FnOnce(),
) -> String {
    smtp_command(smtp, b"MAIL FROM:<sender@app.test>\r\n");
    smtp_command(smtp, format!("RCPT TO:<{to}>\r\n").as_bytes());
    smtp_command(smtp, b"DATA\r\n");
    let body = format!(
        "From: App <sender@app.test>\r\nTo: {to}\r\nSubject: {subject}\r\n\r\n{}\r\n",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(30)
    );
    smtp.get_mut().write_all(body.as_bytes()).expect("DATA");
    before_dot();
    smtp_command(smtp, b".\r\n")
}

fn wait_latency(samples: usize) -> (Vec<f64>, Vec<f64>) {
    let mailjar = Mailjar::start(&[]);
    let mut smtp = smtp_connect(mailjar.smtp);
    let mut health = KeepAlive::new(mailjar.http);
    let mut waits = Vec::with_capacity(samples);
    let mut baseline = Vec::with_capacity(samples);
    for i in 0..samples {
        let to = format!("wait{i}@local.test");
        let stream = TcpStream::connect(("127.0.0.1", mailjar.http)).expect("connect");
        stream.set_nodelay(true).ok();
        let mut waiter = BufReader::new(stream);
        write!(
            waiter.get_mut(),
            "GET /api/emails/wait?to={to}&timeoutMs=10000 HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        .expect("send");
        // The wait must be parked before the message goes out.
        loop {
            let start = Instant::now();
            let (_, body) = health.get("/health");
            baseline.push(start.elapsed().as_secs_f64() * 1000.0);
            let h: serde_json::Value = serde_json::from_slice(&body).expect("health");
            if h["waits"].as_u64() == Some(1) {
                break;
            }
        }
        let mut start = Instant::now();
        let reply = send_message(&mut smtp, &to, "wait sample", || start = Instant::now());
        let (status, _) = read_response(&mut waiter);
        let elapsed = start.elapsed().as_secs_f64() * 1000.0;
        assert!(reply.starts_with("250"), "{reply}");
        assert_eq!(status, 200);
        waits.push(elapsed);
    }
    waits.sort_by(|a, b| a.total_cmp(b));
    baseline.sort_by(|a, b| a.total_cmp(b));
    (waits, baseline)
}

fn many_waits(count: usize) -> (u64, u64, f64) {
    // Every wait holds an HTTP connection: the cap (default 1000) must fit them and /health.
    let cap = (count + 100).to_string();
    let mailjar = Mailjar::start(&["--max-http-connections", &cap]);
    let idle = rss(mailjar.pid());
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        let stream =
            TcpStream::connect(("127.0.0.1", mailjar.http)).expect("connect (raise ulimit -n)");
        let mut reader = BufReader::new(stream);
        write!(reader.get_mut(), "GET /api/emails/wait?to=all@local.test&timeoutMs=60000 HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("send");
        clients.push(reader);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while mailjar.health()["waits"].as_u64() != Some(count as u64) {
        assert!(Instant::now() < deadline, "waits never all parked");
        std::thread::sleep(Duration::from_millis(20));
    }
    let parked = rss(mailjar.pid());
    let mut smtp = smtp_connect(mailjar.smtp);
    let mut start = Instant::now();
    send_message(&mut smtp, "all@local.test", "for everyone", || {
        start = Instant::now()
    });
    for client in &mut clients {
        let (status, _) = read_response(client);
        assert_eq!(status, 200);
    }
    let elapsed = start.elapsed().as_secs_f64() * 1000.0;
    (idle, parked, elapsed)
}

fn list_latency(stored: usize, samples: usize) -> (Vec<f64>, Vec<f64>) {
    let mailjar = Mailjar::start(&[]);
    let mut smtp = smtp_connect(mailjar.smtp);
    for i in 0..stored {
        let to = format!("user{}@local.test", i % 50);
        send_message(&mut smtp, &to, &format!("Order #{i} confirmed"), || {});
    }
    assert_eq!(mailjar.health()["messages"].as_u64(), Some(stored as u64));
    let mut client = KeepAlive::new(mailjar.http);
    let (mut list, mut baseline) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let start = Instant::now();
        let (status, body) = client
            .get("/api/emails?subjectPattern=%5EOrder%20%23%5Cd%2B7%20confirmed%24&limit=100");
        list.push(start.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(status, 200);
        assert!(body.len() > 1000);
        let start = Instant::now();
        client.get("/health");
        baseline.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    list.sort_by(|a, b| a.total_cmp(b));
    baseline.sort_by(|a, b| a.total_cmp(b));
    (list, baseline)
}

/// Opens an event stream and reads its response head; the socket stays open.
fn subscribe(port: u16, query: &str) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect (raise ulimit -n)");
    stream.set_nodelay(true).ok();
    let mut reader = BufReader::new(stream);
    write!(
        reader.get_mut(),
        "GET /api/events{query} HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .expect("send");
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        if line == "\r\n" {
            return reader;
        }
    }
}

/// Reads a subscriber's chunked stream until one `stored` event has come whole.
fn read_stored_event(reader: &mut BufReader<TcpStream>) {
    let mut line = String::new();
    let mut stored = false;
    loop {
        line.clear();
        reader.read_line(&mut line).expect("event stream");
        if line.starts_with("event: stored") {
            stored = true;
        }
        if stored && line.starts_with("data: ") {
            return;
        }
    }
}

fn idle_subscribers(count: usize) -> (u64, u64, u64) {
    // Streams may take at most half of the HTTP connections.
    let (connections, cap) = ((2 * count + 100).to_string(), (count + 100).to_string());
    let mailjar = Mailjar::start(&[
        "--max-http-connections",
        &connections,
        "--max-subscribers",
        &cap,
    ]);
    std::thread::sleep(Duration::from_millis(200));
    let idle = rss(mailjar.pid());
    let streams: Vec<_> = (0..count).map(|_| subscribe(mailjar.http, "")).collect();
    assert_eq!(mailjar.health()["subscribers"].as_u64(), Some(count as u64));
    std::thread::sleep(Duration::from_millis(200));
    let open = rss(mailjar.pid());
    // Every one of them gets the next message.
    let mut smtp = smtp_connect(mailjar.smtp);
    send_message(&mut smtp, "all@local.test", "for every subscriber", || {});
    let mut streams = streams;
    for s in &mut streams {
        read_stored_event(s);
    }
    let after = rss(mailjar.pid());
    (idle, open, after)
}

/// Ingest with `subscribers` streams that keep up, against none, in the same
/// run; every subscriber must receive every stored event.
fn ingest_with_subscribers(subscribers: usize, messages: usize, rounds: usize) -> Vec<f64> {
    let mut ratios = Vec::new();
    for _ in 0..rounds {
        let alone = Mailjar::start(&[]);
        let alone_time = smtp_source(alone.smtp, 20, messages, true);
        drop(alone);

        let mailjar = Mailjar::start(&[]);
        let readers: Vec<_> = (0..subscribers)
            .map(|_| {
                let mut reader = subscribe(mailjar.http, "");
                std::thread::spawn(move || {
                    // Counted in large reads, as a client that keeps up would read.
                    const STORED: &[u8] = b"event: stored";
                    const OVERFLOW: &[u8] = b"event: overflow";
                    let mut seen = 0;
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut carry = 0;
                    while seen < messages {
                        let n = match reader.read(&mut buf[carry..]) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let filled = carry + n;
                        let data = &buf[..filled];
                        seen += memchr::memmem::find_iter(data, STORED).count();
                        assert!(
                            memchr::memmem::find(data, OVERFLOW).is_none(),
                            "a subscriber that keeps up overflowed"
                        );
                        // Keep a tail shorter than a marker: a marker split across reads is counted once.
                        carry = (STORED.len() - 1).min(filled);
                        buf.copy_within(filled - carry..filled, 0);
                    }
                    seen
                })
            })
            .collect();
        let time = smtp_source(mailjar.smtp, 20, messages, true);
        for reader in readers {
            let seen = reader.join().expect("reader");
            assert_eq!(
                seen, messages,
                "LOSS: a subscriber got {seen} of {messages} events"
            );
        }
        ratios.push(alone_time.as_secs_f64() / time.as_secs_f64());
    }
    ratios
}

fn event_latency(samples: usize) -> (Vec<f64>, Vec<f64>) {
    let mailjar = Mailjar::start(&[]);
    let mut smtp = smtp_connect(mailjar.smtp);
    let mut health = KeepAlive::new(mailjar.http);
    let mut stream = subscribe(mailjar.http, "?to=latency@local.test");
    let (mut events, mut baseline) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let mut start = Instant::now();
        let reply = send_message(&mut smtp, "latency@local.test", "event sample", || {
            start = Instant::now()
        });
        read_stored_event(&mut stream);
        events.push(start.elapsed().as_secs_f64() * 1000.0);
        assert!(reply.starts_with("250"), "{reply}");
        let start = Instant::now();
        health.get("/health");
        baseline.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    events.sort_by(|a, b| a.total_cmp(b));
    baseline.sort_by(|a, b| a.total_cmp(b));
    (events, baseline)
}

/// `ONLY=persist`: `--data-dir` against memory-only.
#[path = "system/persist.rs"]
mod persist;

/// `ONLY=inboxes`: ingest with 100 inboxes against none, and memory per inbox.
#[path = "system/inboxes.rs"]
mod inboxes;

/// `ONLY=cluster`: two nodes on PostgreSQL against memory-only.
#[path = "system/cluster.rs"]
mod cluster;

/// `ONLY=webhooks` and `ONLY=webhooks-memory`: ingest with webhooks, and their queue's memory.
#[path = "system/webhooks.rs"]
mod webhooks;

/// The PostgreSQL cluster the tests start, for `ONLY=cluster`.
#[path = "../tests/pg/cluster.rs"]
mod pgcluster;

/// The RSS of a mailjar started with default flags, once it has settled.
fn idle_rss() -> u64 {
    let idle = Mailjar::start(&[]);
    std::thread::sleep(Duration::from_millis(200));
    rss(idle.pid())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}

fn main() {
    if let Ok(mode) = std::env::var(webhooks::RECEIVER_VAR) {
        webhooks::receiver_main(&mode);
        return;
    }
    // `cargo bench` passes --bench; filters are not supported.
    let rounds = env_usize("ROUNDS", 3);
    let messages = env_usize("MESSAGES", 5000);
    let wait_samples = env_usize("WAIT_SAMPLES", 1000);
    let many = env_usize("MANY_WAITS", 10_000);
    if std::env::var("ONLY").as_deref() == Ok("streams-ingest") {
        let streams = env_usize("STREAMS", 100);
        let mut ratios = ingest_with_subscribers(streams, messages, rounds);
        println!(
            "ingest with {streams} event streams against none: ratio per round {}; median {:.2}",
            show(&ratios, 2),
            median(&mut ratios)
        );
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("persist") {
        persist::run(rounds, messages);
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("inboxes") {
        inboxes::run(rounds, messages);
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("webhooks") {
        webhooks::run(rounds, messages);
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("webhooks-memory") {
        webhooks::memory(rounds);
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("cluster") {
        cluster::run(rounds, messages);
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("event-latency") {
        let (events, baseline) = event_latency(wait_samples);
        println!(
            "{}",
            latencies("event", &events, &baseline, "target p50 <= 0.5 ms")
        );
        return;
    }

    if std::env::var("ONLY").as_deref() == Ok("idle") {
        // A fresh process per round: the idle figure of each, and their median.
        let mut all: Vec<f64> = (0..rounds).map(|_| mib(idle_rss())).collect();
        println!(
            "idle RSS per round {} MiB; median {:.1} MiB (target <= 6 MiB)",
            show(&all, 1),
            median(&mut all)
        );
        return;
    }
    if std::env::var("ONLY").as_deref() == Ok("many-waits") {
        let (mut idle, mut parked, mut per_wait) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (i, p, _) = many_waits(many);
            idle.push(mib(i));
            parked.push(mib(p));
            per_wait.push(p.saturating_sub(i) as f64 / 1024.0 / many as f64);
        }
        println!(
            "{many} parked waits: RSS per round {} MiB, median {:.1} MiB (target <= 50 MiB); idle {} MiB; KiB per wait {}, median {:.2}",
            show(&parked, 1),
            median(&mut parked),
            show(&idle, 1),
            show(&per_wait, 2),
            median(&mut per_wait)
        );
        return;
    }

    println!("idle RSS: {:.1} MiB (target <= 6 MiB)", mib(idle_rss()));

    println!(
        "\n## ingest, 2 KiB messages, {messages} per round, {rounds} rounds (ratio = mailjar / smtp-sink, same round)"
    );
    println!(
        "| sessions | connections | ratio per round | median ratio | mailjar msg/s | smtp-sink msg/s | CPU ms / 1000 msgs | RSS MiB | raw MiB | RSS / (1.5 raw + 5 MiB) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for sessions in [1, 10, 20] {
        for reuse in [true, false] {
            let count = if sessions == 1 && !reuse {
                messages / 2
            } else {
                messages
            };
            let results: Vec<IngestRound> = (0..rounds)
                .map(|_| ingest_round(sessions, count, reuse))
                .collect();
            let mut ratios: Vec<f64> = results.iter().map(|r| r.ratio).collect();
            let per_round = show(&ratios, 2);
            let mut rates: Vec<f64> = results.iter().map(|r| r.mailjar_rate).collect();
            let mut sink: Vec<f64> = results.iter().map(|r| r.sink_rate).collect();
            let mut cpu: Vec<f64> = results.iter().map(|r| r.cpu_ms_per_1000).collect();
            let mut rss_v: Vec<f64> = results.iter().map(|r| r.rss as f64).collect();
            let raw = results[0].raw_bytes;
            let rss_m = median(&mut rss_v);
            let budget = 1.5 * raw as f64 + 5.0 * 1024.0 * 1024.0;
            println!(
                "| {sessions} | {} | {per_round} | {:.2} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} |",
                if reuse { "reused" } else { "new per message" },
                median(&mut ratios),
                median(&mut rates),
                median(&mut sink),
                median(&mut cpu),
                mib(rss_m as u64),
                mib(raw),
                rss_m / budget,
            );
        }
    }
    if std::env::var("ONLY").as_deref() == Ok("ingest") {
        return;
    }

    println!(
        "\n## wait latency: last byte of DATA to the HTTP 200 of a parked wait, {wait_samples} samples"
    );
    let (waits, baseline) = wait_latency(wait_samples);
    println!(
        "{}",
        latencies("wait", &waits, &baseline, "targets 0.3 / 2 ms")
    );

    println!("\n## {many} concurrent parked waits");
    let (idle, parked, resolve_ms) = many_waits(many);
    println!(
        "RSS idle {:.1} MiB, with {many} waits {:.1} MiB (target <= 50 MiB); one message resolved them all in {resolve_ms:.1} ms",
        mib(idle),
        mib(parked)
    );

    println!("\n## list latency: subjectPattern + limit=100 over 10,000 stored messages");
    let (list, baseline) = list_latency(10_000, 300);
    println!(
        "{}",
        latencies("list", &list, &baseline, "target p50 <= 2 ms")
    );

    let subscribers = env_usize("SUBSCRIBERS", 1000);
    println!("\n## {subscribers} idle event streams");
    let (idle, open, after) = idle_subscribers(subscribers);
    println!(
        "RSS idle {:.1} MiB, with {subscribers} streams {:.1} MiB: {:.2} KiB per stream (target <= 8 KiB); after one event to all {:.1} MiB",
        mib(idle),
        mib(open),
        (open.saturating_sub(idle)) as f64 / 1024.0 / subscribers as f64,
        mib(after)
    );

    println!(
        "\n## ingest with 100 event streams that keep up, against none, 20 sessions, {messages} messages"
    );
    let mut ratios = ingest_with_subscribers(100, messages, rounds);
    println!(
        "ratio per round {}; median {:.2} (target >= 0.9); every stream got every event",
        show(&ratios, 2),
        median(&mut ratios)
    );

    println!(
        "\n## event latency: last byte of DATA to the `stored` event at a subscriber, {wait_samples} samples"
    );
    let (events, baseline) = event_latency(wait_samples);
    println!(
        "{}",
        latencies("event", &events, &baseline, "target p50 <= 0.5 ms")
    );
}
