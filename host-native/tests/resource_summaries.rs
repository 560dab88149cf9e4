//! Summaries (`view=summary`, and the data of `stored` events) against the real binary: what a
//! summary keeps is counted in `storeBytes`, building one never stalls the async workers, and a
//! summary list that a client does not read holds one chunk.
//!
//! Memory is the process's peak RSS (`VmHWM`) against the README's bound for the flags used:
//!
//! ```text
//! RSS at start + --max-store-bytes + --max-inflight-bytes
//!   + connections x PER_CONNECTION (256 KiB) + SLACK (64 MiB)
//! ```
//!
//! where `connections` counts every connection the test holds open at once (probers included)
//! and `SLACK` covers the runtime's threads, allocator arenas and the copies of one message
//! being parsed. Freezes are the worst `/health` latency (one prober on a kept-alive connection,
//! one on new connections) and the worst SMTP greeting latency (a new connection each time)
//! while the attack runs.
//!
//! The attacks run one at a time, whatever `--test-threads` says: each measures latency on the
//! 2 shared cores, which an attack running beside it would load.
//!
//! Run: `cargo test -p mailjar --test resource_summaries -- --nocapture` prints
//! the figures of each test, also when it fails. An [`RssGuard`] kills a server that passes
//! 3 GiB, so that a run against a server without the fixes cannot take the machine down; with
//! `MAILJAR_E2E_BIN=/path/to/mailjar` the tests measure another build (the figures before the
//! fixes were measured so, with a build of `19cb866`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{GreetingProber, HealthProber, RssGuard, Server, read_body_with, read_head};
use serde_json::Value;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// `--max-inflight-bytes` of every test.
const INFLIGHT_BYTES: u64 = 8 * MIB;
/// `--max-message-bytes` of every test.
const MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// What one open connection may cost, at most: its buffers, its task and one chunk.
const PER_CONNECTION: u64 = 256 * KIB;
/// The runtime, allocator arenas and the transient copies of one message being parsed.
const SLACK: u64 = 64 * MIB;
/// The worst `/health` or greeting latency allowed while an attack runs.
const FAST: Duration = Duration::from_millis(100);
/// The probers' pause between two probes.
const PROBE_EVERY: Duration = Duration::from_millis(5);
/// How long a test waits for one answer before it fails (long, so that a server without the
/// fixes is measured rather than timed out).
const LONG_IO: Duration = Duration::from_secs(60);

/// Held by the attack that runs: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One attack: the server, its memory guard, the probers and the bound; prints its figures when
/// it ends, passed or not.
struct Attack {
    name: &'static str,
    store_bytes: u64,
    baseline_kib: u64,
    connections: u64,
    notes: Vec<String>,
    /// The worst latencies of the phases ended so far, and their names.
    phases: Vec<(&'static str, Duration, Duration, u64)>,
    // Dropped in this order: the probers, the guard, then the server (reaped last).
    health: Option<HealthProber>,
    greetings: Option<GreetingProber>,
    guard: RssGuard,
    server: Server,
    /// Released last, once the server is gone.
    _one: MutexGuard<'static, ()>,
}

impl Attack {
    /// A server with `--max-store-bytes store_bytes` and the flags of every test; `connections`
    /// is the most connections the test holds open at once (the probers are added here).
    fn start(name: &'static str, store_bytes: u64, connections: u64) -> Attack {
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let store = format!("{}MiB", store_bytes / MIB);
        let message = MESSAGE_BYTES.to_string();
        let inflight = format!("{}MiB", INFLIGHT_BYTES / MIB);
        let server = Server::start_with(&[
            "--max-store-bytes",
            &store,
            "--max-message-bytes",
            &message,
            "--max-inflight-bytes",
            &inflight,
        ]);
        let baseline_kib = common::peak_rss_kib(server.pid()).expect("read /proc/PID/status");
        let guard = RssGuard::start(server.pid(), RssGuard::CEILING_KIB);
        Attack {
            name,
            store_bytes,
            baseline_kib,
            connections: connections + 3,
            notes: Vec::new(),
            phases: Vec::new(),
            health: None,
            greetings: None,
            guard,
            server,
            _one: one,
        }
    }

    /// Starts the `/health` and greeting probers: the attack begins.
    fn probe(&mut self) {
        self.health = Some(HealthProber::start(self.server.http, PROBE_EVERY));
        self.greetings = Some(GreetingProber::start(self.server.smtp, PROBE_EVERY));
    }

    /// Stops the probers and keeps their figures as those of the phase `name`.
    fn end_phase(&mut self, name: &'static str) {
        let (health, greeting, failures) = self.latencies();
        self.note(format!(
            "{name}: worst /health {} ms, worst SMTP greeting {} ms, peak RSS so far {} MiB",
            health.as_millis(),
            greeting.as_millis(),
            self.guard.peak_kib() / 1024
        ));
        self.phases.push((name, health, greeting, failures));
        self.health = None;
        self.greetings = None;
    }

    /// The worst `/health` and greeting latencies, and how many probes failed.
    fn latencies(&self) -> (Duration, Duration, u64) {
        let health = self.health.as_ref().map(HealthProber::report);
        let greetings = self.greetings.as_ref();
        (
            health.map_or(Duration::ZERO, |r| r.worst()),
            greetings.map_or(Duration::ZERO, GreetingProber::worst),
            health.map_or(0, |r| r.failures) + greetings.map_or(0, GreetingProber::failures),
        )
    }

    /// The memory bound in KiB.
    fn bound_kib(&self) -> u64 {
        let bytes = self.store_bytes + INFLIGHT_BYTES + self.connections * PER_CONNECTION + SLACK;
        self.baseline_kib + bytes / KIB
    }

    fn note(&mut self, figure: String) {
        eprintln!("[{}] {figure}", self.name);
        self.notes.push(figure);
    }

    /// Delivers `raw` and checks its 250.
    fn send(&self, raw: &[u8]) {
        self.server.send("attacker@x.test", &["victim@x.test"], raw);
    }

    /// Checks the memory bound, and the latencies when the probers ran.
    fn check(&self) {
        assert_eq!(self.guard.killed(), None, "{}: killed at 3 GiB", self.name);
        let peak = self.guard.peak_kib();
        assert!(
            peak <= self.bound_kib(),
            "{}: peak RSS {} MiB is over the bound {} MiB",
            self.name,
            peak / 1024,
            self.bound_kib() / 1024,
        );
        let running = self.health.is_some().then(|| {
            let (health, greeting, failures) = self.latencies();
            ("the attack", health, greeting, failures)
        });
        for (phase, health, greeting, failures) in self.phases.iter().copied().chain(running) {
            assert_eq!(failures, 0, "{}: probes failed during {phase}", self.name);
            assert!(
                health < FAST && greeting < FAST,
                "{}: /health took {health:?} and the SMTP greeting {greeting:?} during {phase}",
                self.name
            );
        }
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        let (health, greeting, failures) = self.latencies();
        eprintln!(
            "[{}] FIGURES: peak RSS {} MiB (bound {} MiB: {} MiB at start + {} MiB store + {} MiB \
             in flight + {} connections x 256 KiB + 64 MiB slack); worst /health {} ms, worst \
             SMTP greeting {} ms ({failures} probes failed); {}",
            self.name,
            self.guard.peak_kib() / 1024,
            self.bound_kib() / 1024,
            self.baseline_kib / 1024,
            self.store_bytes / MIB,
            INFLIGHT_BYTES / MIB,
            self.connections,
            health.as_millis(),
            greeting.as_millis(),
            self.notes.join("; ")
        );
    }
}

/// A message whose From header's display name is about `size` bytes of the control bytes
/// 0x01..0x08 (six bytes each in JSON), folded into 998-byte lines.
fn control_from(subject: &str, size: usize) -> Vec<u8> {
    let mut raw = b"From: \"".to_vec();
    let line: Vec<u8> = (0..990).map(|i| 1 + (i % 8) as u8).collect();
    while raw.len() + line.len() + 64 < size {
        raw.extend_from_slice(&line);
        raw.extend_from_slice(b"\r\n ");
    }
    raw.extend_from_slice(b"\" <attacker@x.test>\r\n");
    raw.extend_from_slice(
        format!("To: victim@x.test\r\nSubject: {subject}\r\n\r\nbody\r\n").as_bytes(),
    );
    raw
}

/// A message whose header block is about `size` bytes of ordinary `X-Pad` headers.
fn large_header_block(subject: &str, size: usize) -> Vec<u8> {
    let mut raw = format!("From: Sender <s@x.test>\r\nTo: victim@x.test\r\nSubject: {subject}\r\n")
        .into_bytes();
    let mut n = 0;
    while raw.len() + 120 < size {
        raw.extend_from_slice(format!("X-Pad-{n}: {}\r\n", "p".repeat(90)).as_bytes());
        n += 1;
    }
    raw.extend_from_slice(b"\r\nbody\r\n");
    raw
}

/// A message whose subject is `subject` and then about `size` bytes of words, folded.
fn large_subject(subject: &str, size: usize) -> Vec<u8> {
    let mut raw = format!("From: Sender <s@x.test>\r\nSubject: {subject}").into_bytes();
    let line = " lorem ipsum dolor sit amet".repeat(30);
    while raw.len() + line.len() + 32 < size {
        raw.extend_from_slice(line.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"\r\n\r\nbody\r\n");
    raw
}

/// A connection with `GET target` written on it (`Connection: close`), its answer not read.
fn stalled_request(addr: SocketAddr, target: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect to the HTTP port");
    (&stream)
        .write_all(
            format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("write the request");
    stream
}

/// Subscribes to the event stream from the first message on, and counts its `stored` events
/// until it has seen `want` (or the stream ends).
fn replay(addr: SocketAddr, want: usize) -> usize {
    let stream = stalled_request(
        addr,
        "/api/events?afterId=00000000-0000-0000-0000-000000000000",
    );
    stream.set_read_timeout(Some(LONG_IO)).expect("timeout");
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader).expect("the stream's head");
    assert_eq!(status, 200);
    let mut stored = 0;
    let mut line = String::new();
    while stored < want {
        line.clear();
        if reader.read_line(&mut line).expect("an event line") == 0 {
            break;
        }
        stored += usize::from(line.starts_with("event: stored"));
    }
    stored
}

/// `GET target`, read to its end; the status and body.
fn read_all(addr: SocketAddr, target: &str) -> (u16, Vec<u8>) {
    let stream = stalled_request(addr, target);
    stream.set_read_timeout(Some(LONG_IO)).expect("timeout");
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader).expect("the response head");
    let mut body = Vec::new();
    read_body_with(&mut reader, &headers, |piece| body.extend_from_slice(piece))
        .expect("the response body");
    (status, body)
}

/// Waits until the process's RSS has not grown for `quiet`, at most `within`.
fn settle(pid: u32, quiet: Duration, within: Duration) {
    let deadline = Instant::now() + within;
    let mut last = common::rss_kib(pid).unwrap_or(0);
    let mut since = Instant::now();
    while Instant::now() < deadline && since.elapsed() < quiet {
        std::thread::sleep(Duration::from_millis(50));
        let now = common::rss_kib(pid).unwrap_or(0);
        if now > last + 1024 {
            since = Instant::now();
        }
        last = now;
    }
}

#[test]
fn f3_what_a_summary_keeps_is_counted_in_store_bytes() {
    const STORE: u64 = 24 * MIB;
    const SIZE: usize = 1024 * 1024;
    let mut attack = Attack::start("F3", STORE, 1);
    let start = Instant::now();
    for i in 0..20 {
        attack.send(&control_from(&format!("f3 {i}"), SIZE));
    }
    let health = attack.server.health();
    let before = health["storeBytes"].as_u64().expect("storeBytes");
    attack.note(format!(
        "{} messages ({} MiB of store bytes) stored in {} ms",
        health["messages"],
        before / MIB,
        start.elapsed().as_millis()
    ));
    let start = Instant::now();
    let (status, body) = read_all(attack.server.http, "/api/emails?view=summary");
    assert_eq!(status, 200);
    let list: Value = serde_json::from_slice(&body).expect("the list is JSON");
    let summaries = list["emails"].as_array().expect("emails");
    attack.note(format!(
        "summary list of {} messages, {} KiB, read in {} ms",
        summaries.len(),
        body.len() / 1024,
        start.elapsed().as_millis()
    ));
    assert_eq!(summaries.len() as u64, health["messages"].as_u64().unwrap());
    let from = summaries[0]["from"].as_str().expect("from");
    assert!(from.contains('\u{1}'), "the From header is the attack's");
    drop(list);
    settle(
        attack.server.pid(),
        Duration::from_millis(300),
        Duration::from_secs(5),
    );
    let resident = common::rss_kib(attack.server.pid()).expect("VmRSS");
    let after = attack.server.health()["storeBytes"]
        .as_u64()
        .expect("storeBytes");
    attack.note(format!(
        "after the list: {} MiB resident over {} MiB at start; storeBytes {} MiB",
        resident / 1024,
        attack.baseline_kib / 1024,
        after / MIB
    ));
    // What the summaries keep was counted when the messages were stored: the list adds nothing.
    assert_eq!(after, before, "storeBytes changed with the list");
    assert!(after <= STORE, "storeBytes {after} over the cap");
    assert!(
        resident <= attack.baseline_kib + (STORE + SLACK) / KIB,
        "{} MiB resident for good after one summary list, over {} MiB at start + the {} MiB \
         store + 64 MiB slack",
        resident / 1024,
        attack.baseline_kib / 1024,
        STORE / MIB
    );
    attack.check();
}

/// How many messages each phase of F4 stores.
const F4_MESSAGES: usize = 20;

/// Stores [`F4_MESSAGES`] messages made by `make`, and checks that all are kept.
fn store_all(attack: &mut Attack, what: &str, make: impl Fn(usize) -> Vec<u8>) {
    let start = Instant::now();
    for i in 0..F4_MESSAGES {
        attack.send(&make(i));
    }
    attack.note(format!(
        "{F4_MESSAGES} messages with {what} stored in {} ms (peak RSS so far {} MiB)",
        start.elapsed().as_millis(),
        attack.guard.peak_kib() / 1024
    ));
    let health = attack.server.health();
    assert_eq!(health["messages"], F4_MESSAGES, "all kept: {health}");
}

/// One phase of F4: runs `client` on `n` threads at once while the probers run; `client`
/// checks its own answer.
fn at_once(attack: &mut Attack, n: usize, phase: &'static str, client: fn(SocketAddr)) {
    let addr = attack.server.http;
    attack.probe();
    let start = Instant::now();
    let clients: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || client(addr)))
        .collect();
    for client in clients {
        client.join().expect("a client");
    }
    attack.note(format!("{phase} in {} ms", start.elapsed().as_millis()));
    attack.end_phase(phase);
}

/// `GET target`: 200 and the JSON list; its `emails`.
fn list_of(addr: SocketAddr, target: &str) -> Vec<Value> {
    let (status, body) = read_all(addr, target);
    assert_eq!(status, 200);
    let mut value: Value = serde_json::from_slice(&body).expect("JSON");
    match value["emails"].take() {
        Value::Array(emails) => emails,
        other => panic!("no emails array: {other}"),
    }
}

#[test]
fn f4_summaries_of_large_header_blocks_never_freeze_the_workers() {
    const SIZE: usize = 1024 * 1024;
    let mut attack = Attack::start("F4", 64 * MIB, 5);
    let headers =
        |phase: &'static str| move |i| large_header_block(&format!("f4 {phase} {i}"), SIZE);
    // Each phase has messages whose summaries no one has asked for yet. Two clients at once:
    // one is enough to block a worker, two block both workers of a 2-core machine whatever the
    // scheduler does.
    store_all(&mut attack, "1 MiB header blocks", headers("events"));
    at_once(&mut attack, 2, "two event replays", |addr| {
        assert_eq!(replay(addr, F4_MESSAGES), F4_MESSAGES);
    });

    assert_eq!(attack.server.delete_all(), F4_MESSAGES as u64);
    store_all(&mut attack, "1 MiB header blocks", headers("lists"));
    at_once(&mut attack, 2, "two summary lists", |addr| {
        assert_eq!(list_of(addr, "/api/emails?view=summary").len(), F4_MESSAGES);
    });
    // The full view shows the same header-only fields: they are not read again either.
    at_once(&mut attack, 2, "two full lists", |addr| {
        let emails = list_of(addr, "/api/emails?limit=5");
        assert_eq!(emails.len(), 5);
        assert_eq!(emails[0]["from"], "Sender <s@x.test>");
        assert_eq!(emails[0]["headers"]["x-pad-7"], "p".repeat(90));
    });

    // A filter reads what it filters on: over a few huge subjects, that is long work too.
    assert_eq!(attack.server.delete_all(), F4_MESSAGES as u64);
    store_all(&mut attack, "1 MiB subjects", |i| {
        large_subject(&format!("f4 subjects {i}"), SIZE)
    });
    // A needle that is not ASCII: each subject is lower-cased whole to be searched. Four lists:
    // each worker of a 2-core machine would run two, one after the other.
    at_once(&mut attack, 4, "four lists filtered by subject", |addr| {
        let target = "/api/emails?view=summary&subject=%C3%A9t%C3%A9";
        assert!(list_of(addr, target).is_empty());
    });
    attack.check();
}

/// `stalled` lists of `view` (`limit=1`) that do not read, of one message whose From header is
/// 3.5 MiB of control bytes (21 MiB in JSON): each may hold one chunk, not the message's JSON.
/// (A client that does not read still has the kernel's socket buffers filled first: about 4 MiB
/// of JSON escaped per connection, all the work there is in the attack.)
fn lists_that_do_not_read(name: &'static str, view: &str, stalled: usize) {
    const STORE: u64 = 32 * MIB;
    const SIZE: usize = 3 * 1024 * 1024 + 512 * 1024;
    let mut attack = Attack::start(name, STORE, stalled as u64);
    attack.send(&control_from("f1", SIZE));
    attack.probe();
    let addr = attack.server.http;
    let target = format!("/api/emails?view={view}&limit=1");
    let start = Instant::now();
    let clients: Vec<TcpStream> = (0..stalled)
        .map(|_| stalled_request(addr, &target))
        .collect();
    settle(
        attack.server.pid(),
        Duration::from_millis(500),
        Duration::from_secs(10),
    );
    attack.note(format!(
        "{stalled} lists of {target} that do not read, settled in {} ms",
        start.elapsed().as_millis()
    ));
    // The lists are whole and valid once read.
    let (status, body) = read_all(addr, &target);
    assert_eq!(status, 200);
    let value: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(value["emails"][0]["subject"], "f1");
    attack.check();
    drop(clients);
}

#[test]
fn f1_summary_lists_that_do_not_read_hold_one_chunk() {
    lists_that_do_not_read("F1 summary", "summary", 20);
}

#[test]
fn f1_full_lists_that_do_not_read_hold_one_chunk() {
    // Ten: each fills its socket buffers with 4 MiB of escaped JSON, on a debug build.
    lists_that_do_not_read("F1 full", "full", 10);
}
