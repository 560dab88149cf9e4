//! The event-stream findings of issue 29 against the real binary, each bounded by README's
//! "Resource model": memory is the process's peak RSS (`VmHWM`) against the formula, freezes are
//! the worst `/health` (one kept-alive prober, one on new connections) and SMTP greeting latency
//! while the attack runs.
//!
//! The memory bound of every test is README's formula with the test's flags:
//!
//! ```text
//! RSS at start + --max-store-bytes + --max-inflight-bytes
//!   + event streams x PER_STREAM + other connections x PER_CONNECTION
//!   + what the test adds (named there) + SLACK
//! ```
//!
//! `PER_STREAM` is README's per event stream constant (idle, plus the step it is writing); the
//! other connections are the probers, readers' and senders' sockets; `SLACK` covers the runtime's
//! threads, allocator arenas and the transient copies of the message being parsed.
//!
//! The attacks run one at a time (they measure latency on 2 shared cores). Run:
//! `cargo test -p mailjar --test resource_events -- --nocapture` prints each attack's figures,
//! also when it fails. `fan_out_ingest_ratios` is a measurement, not a check (`--ignored`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{GreetingProber, HealthProber, RssGuard, Server, Smtp, read_head};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// `--max-store-bytes` of every attack.
const STORE_BYTES: u64 = 64 * MIB;
/// `--max-inflight-bytes` of every attack.
const INFLIGHT_BYTES: u64 = 16 * MIB;
/// README's "per event stream" constant: about 4 KiB idle, and while a step is written up to
/// 32 KiB of its own framing and its events' data, at most 256 KiB (shared with the store and
/// the other streams; its own only for mail deleted since).
const PER_STREAM: u64 = 4 * KIB + 32 * KIB + 256 * KIB;
/// Any other connection a test holds open (probers, readers, SMTP senders): README's HTTP
/// connection while a response streams (about 160 KiB), rounded up.
const PER_CONNECTION: u64 = 256 * KIB;
/// The runtime's threads, allocator arenas and transient parse copies.
const SLACK: u64 = 64 * MIB;
/// The worst `/health` or SMTP greeting latency allowed while an attack runs.
const FAST: Duration = Duration::from_millis(100);
/// How often the probers ask.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// The id before every id: `afterId` of it replays the whole store.
const ZERO_ID: &str = "00000000-0000-0000-0000-000000000000";
/// How long a reader waits for what it expects before the test fails.
const LONG_IO: Duration = Duration::from_secs(60);

/// One attack at a time: they measure latency on shared cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flags of every attack, then `extra`.
fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec![
        "--max-store-bytes",
        "64MiB",
        "--max-message-bytes",
        "8MiB",
        "--max-inflight-bytes",
        "16MiB",
    ];
    flags.extend_from_slice(extra);
    flags
}

/// The worst latencies of one phase of an attack.
struct Phase {
    label: &'static str,
    health: common::ProbeReport,
    greeting: Duration,
    greeting_failures: u64,
}

impl Phase {
    fn worst(&self) -> Duration {
        self.health.worst().max(self.greeting)
    }
}

/// One attack: the server, its memory guard and its probers; checks the bound at the end.
struct Attack {
    name: &'static str,
    baseline_kib: u64,
    /// The phase being probed, and its probers.
    probing: Option<(&'static str, HealthProber, GreetingProber)>,
    phases: Vec<Phase>,
    guard: RssGuard,
    server: Server,
}

impl Attack {
    /// Starts a server with [`flags`]`(extra)` and its memory guard; the probers start with
    /// [`Attack::probe`], once the scene is set.
    fn start(name: &'static str, extra: &[&str]) -> Attack {
        let server = Server::start_with(&flags(extra));
        let baseline_kib = common::peak_rss_kib(server.pid()).expect("read /proc/PID/status");
        let guard = RssGuard::start(server.pid(), RssGuard::CEILING_KIB);
        Attack {
            name,
            baseline_kib,
            probing: None,
            phases: Vec::new(),
            guard,
            server,
        }
    }

    /// Starts probing `/health` and the SMTP greeting for a phase of the attack named `label`
    /// (ending the phase before, whose worst latencies are kept).
    fn probe(&mut self, label: &'static str) {
        self.end_phase();
        self.probing = Some((
            label,
            HealthProber::start(self.server.http, PROBE_EVERY),
            GreetingProber::start(self.server.smtp, PROBE_EVERY),
        ));
    }

    fn end_phase(&mut self) {
        if let Some((label, health, greeting)) = self.probing.take() {
            let health = health.stop();
            let (greeting, greeting_failures) = greeting.stop();
            self.phases.push(Phase {
                label,
                health,
                greeting,
                greeting_failures,
            });
        }
    }

    fn note(&self, figure: impl AsRef<str>) {
        eprintln!("[{}] {}", self.name, figure.as_ref());
    }

    /// Stops the probers and checks: peak RSS within the formula, `/health` and greetings fast.
    fn finish(mut self, streams: u64, connections: u64, extra: (u64, &str)) {
        self.end_phase();
        let peak_kib = self.guard.peak_kib();
        // The probers' three connections count too.
        let connections = connections + 3;
        let bound_kib = self.baseline_kib
            + (STORE_BYTES
                + INFLIGHT_BYTES
                + streams * PER_STREAM
                + connections * PER_CONNECTION
                + extra.0
                + SLACK)
                / KIB;
        self.note(format!(
            "peak RSS {} MiB (bound {} MiB = {} MiB at start + 64 MiB store + 16 MiB in flight \
             + {streams} streams x {} KiB + {connections} connections x {} KiB + {} MiB ({}) \
             + 64 MiB slack)",
            peak_kib / 1024,
            bound_kib / 1024,
            self.baseline_kib / 1024,
            PER_STREAM / KIB,
            PER_CONNECTION / KIB,
            extra.0 / MIB,
            extra.1,
        ));
        let mut failed = Vec::new();
        for phase in &self.phases {
            let figures = format!(
                "{}: worst /health {} ms ({} probes, {} failed), worst SMTP greeting {} ms ({} failed)",
                phase.label,
                phase.health.worst().as_millis(),
                phase.health.probes,
                phase.health.failures,
                phase.greeting.as_millis(),
                phase.greeting_failures
            );
            self.note(&figures);
            if phase.worst() >= FAST || phase.health.failures + phase.greeting_failures > 0 {
                failed.push(figures);
            }
        }
        if let Some(kib) = self.guard.killed() {
            failed.push(format!("killed at {} MiB RSS", kib / 1024));
        }
        if peak_kib > bound_kib {
            failed.push(format!(
                "peak RSS {} MiB is over the bound {} MiB",
                peak_kib / 1024,
                bound_kib / 1024
            ));
        }
        assert!(failed.is_empty(), "[{}] {}", self.name, failed.join("; "));
    }
}

/// Opens `GET target` and reads nothing (not even the head).
fn open_stream(addr: SocketAddr, target: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect HTTP");
    write!(stream, "GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("send the request");
    stream
}

/// One event as a client parses it; `data` keeps at most what its reader keeps of a line.
#[derive(Debug, Clone, Default)]
struct Sse {
    event: String,
    id: Option<String>,
    data: String,
    data_len: usize,
}

/// Parses `text/event-stream` bytes as they come, line by line.
struct SseParser {
    /// The most bytes of a line kept (a test reader should cost little CPU beside the server).
    keep: usize,
    line: Vec<u8>,
    event: Sse,
    /// Data bytes beyond what `line` keeps (a long `data:` line is counted, not kept).
    long: usize,
}

impl SseParser {
    /// Feeds bytes; calls `each` with every complete event; stops (false) when it says so.
    fn feed(&mut self, mut bytes: &[u8], each: &mut impl FnMut(Sse) -> bool) -> bool {
        while !bytes.is_empty() {
            let Some(at) = memchr::memchr(b'\n', bytes) else {
                self.keep(bytes);
                return true;
            };
            self.keep(&bytes[..at]);
            bytes = &bytes[at + 1..];
            if !self.end_line(each) {
                return false;
            }
        }
        true
    }

    fn keep(&mut self, part: &[u8]) {
        let room = self.keep.saturating_sub(self.line.len());
        self.line.extend_from_slice(&part[..part.len().min(room)]);
        self.long += part.len().saturating_sub(room);
    }

    fn end_line(&mut self, each: &mut impl FnMut(Sse) -> bool) -> bool {
        let line = String::from_utf8_lossy(&self.line).into_owned();
        let long = std::mem::take(&mut self.long);
        self.line.clear();
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            return event.event.is_empty() || each(event);
        }
        if let Some(name) = line.strip_prefix("event: ") {
            self.event.event = name.to_owned();
        } else if let Some(id) = line.strip_prefix("id: ") {
            self.event.id = Some(id.to_owned());
        } else if let Some(data) = line.strip_prefix("data: ") {
            self.event.data = data.to_owned();
            self.event.data_len = data.len() + long;
        }
        true
    }
}

/// Reads an event stream (head, then its chunks) and hands each event to `each` until it
/// returns false; Err when the stream ends or stalls first. Keeps at most `keep` bytes of a line.
fn read_events(
    stream: TcpStream,
    keep: usize,
    mut each: impl FnMut(Sse) -> bool,
) -> Result<(), String> {
    stream.set_read_timeout(Some(LONG_IO)).unwrap();
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let (status, _) = read_head(&mut reader).map_err(|e| format!("head: {e}"))?;
    if status != 200 {
        return Err(format!("status {status}"));
    }
    let mut parser = SseParser {
        keep,
        line: Vec::new(),
        event: Sse::default(),
        long: 0,
    };
    loop {
        let mut size = String::new();
        reader
            .read_line(&mut size)
            .map_err(|e| format!("chunk size: {e}"))?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| format!("{size:?}"))?;
        if size == 0 {
            return Err("the stream ended".to_owned());
        }
        let mut left = size;
        while left > 0 {
            let buf = reader.fill_buf().map_err(|e| format!("chunk: {e}"))?;
            if buf.is_empty() {
                return Err("EOF in a chunk".to_owned());
            }
            let take = buf.len().min(left);
            let more = parser.feed(&buf[..take], &mut each);
            reader.consume(take);
            left -= take;
            if !more {
                return Ok(());
            }
        }
        let mut crlf = [0u8; 2];
        reader
            .read_exact(&mut crlf)
            .map_err(|e| format!("chunk end: {e}"))?;
    }
}

/// Reads a stream on a thread until it has `stored` stored events; their ids, or why not.
fn reader(stream: TcpStream, stored: usize) -> std::thread::JoinHandle<Result<Vec<Sse>, String>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut count = 0;
        read_events(stream, 256, |event| {
            if event.event == "stored" {
                count += 1;
                got.push(event);
            } else if event.event != "deleted" {
                got.push(event);
            }
            count < stored
        })
        .map_err(|e| format!("after {count} stored events: {e}; last: {:?}", got.last()))?;
        Ok(got)
    })
}

/// Sends `count` messages over `sessions` SMTP sessions at once; `make(i)` is message i's
/// recipient and text. Every one must get its 250.
fn send_all(
    addr: SocketAddr,
    sessions: usize,
    count: usize,
    make: impl Fn(usize) -> (String, Vec<u8>) + Sync,
) {
    std::thread::scope(|scope| {
        for session in 0..sessions {
            let make = &make;
            scope.spawn(move || {
                let (mut smtp, greeting) = Smtp::connect(addr);
                assert_eq!(greeting.code, 220);
                smtp.expect("EHLO e2e.test", 250);
                for i in (session..count).step_by(sessions) {
                    let (to, raw) = make(i);
                    let reply = smtp.transaction("sender@app.test", &[&to], &raw);
                    assert_eq!(reply.code, 250, "message {i}: {}", reply.wire);
                }
                smtp.expect("QUIT", 221);
            });
        }
    });
}

/// A header field of `len` bytes of `byte`, folded into lines of at most 900.
fn folded(name: &str, byte: u8, len: usize) -> Vec<u8> {
    let mut out = format!("{name}: ").into_bytes();
    for (i, chunk) in vec![byte; len].chunks(900).enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\r\n ");
        }
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A message to `to` with `headers` (complete lines) and a short body.
fn message_with(to: &str, headers: &[u8], body: &str) -> Vec<u8> {
    let mut raw = format!("To: {to}\r\n").into_bytes();
    raw.extend_from_slice(headers);
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(body.as_bytes());
    raw.extend_from_slice(b"\r\n");
    raw
}

/// Waits until `/health` counts `subscribers` event streams.
fn wait_subscribers(server: &Server, subscribers: u64) {
    server.poll_health("subscribers", subscribers, Duration::from_secs(30));
}

/// Finding 1: one message whose summary is large (a From header of control bytes, six bytes
/// each in JSON) goes to 30 streams whose clients do not read. Each stream used to copy the
/// summary into its own buffer and hold it: 30 copies. Now every stream writes the one shared
/// summary, and it is built off the async workers.
#[test]
fn f1_one_large_summary_to_streams_that_do_not_read_is_shared() {
    let _one = one_at_a_time();
    let mut attack = Attack::start("F1", &[]);
    let server = &attack.server;
    let reading = open_stream(server.http, "/api/events?to=big@local.test");
    let stalled: Vec<_> = (0..30)
        .map(|_| open_stream(server.http, "/api/events?to=big@local.test"))
        .collect();
    wait_subscribers(server, 31);
    let reading = reader(reading, 1);
    attack.probe("the message to 31 streams");
    let raw = message_with(
        "big@local.test",
        &[folded("From", 0x01, 2 << 20), b"Subject: big\r\n".to_vec()].concat(),
        "body",
    );
    let start = Instant::now();
    attack
        .server
        .send("sender@app.test", &["big@local.test"], &raw);
    attack.note(format!(
        "the message's 250 after {} ms",
        start.elapsed().as_millis()
    ));
    let events = reading.join().unwrap().expect("the reading stream");
    let summary = events[0].data_len as u64;
    attack.note(format!(
        "one {} KiB message, its summary {} MiB, to 31 streams (30 do not read), event after {} ms",
        raw.len() / 1024,
        summary / MIB,
        start.elapsed().as_millis()
    ));
    std::thread::sleep(Duration::from_millis(500));
    attack.finish(
        31,
        1,
        (
            summary + raw.len() as u64,
            "the message's summary, once, and its raw bytes",
        ),
    );
    drop(stalled);
}

/// Finding 2: 20 streams that do not read while 1000 messages with 16 KiB subjects arrive, then
/// read. A stream used to take everything since its last write as one batch (16 MiB each), copied.
/// Now it takes bounded steps.
#[test]
fn f2_streams_that_pause_while_mail_arrives_catch_up_in_bounded_steps() {
    let _one = one_at_a_time();
    const STREAMS: usize = 20;
    const MESSAGES: usize = 1000;
    let mut attack = Attack::start("F2 pause", &[]);
    let server = &attack.server;
    let paused: Vec<_> = (0..STREAMS)
        .map(|_| open_stream(server.http, "/api/events"))
        .collect();
    wait_subscribers(server, STREAMS as u64);
    attack.probe("mail arrives while the streams are paused");
    let subject = folded("Subject", b's', 16 * 1024);
    let start = Instant::now();
    send_all(attack.server.smtp, 4, MESSAGES, |i| {
        let to = format!("pause{i}@local.test");
        (to.clone(), message_with(&to, &subject, "paused"))
    });
    let health = attack.server.health();
    attack.note(format!(
        "{MESSAGES} messages in {} ms; store {} MiB, evicted {}",
        start.elapsed().as_millis(),
        health["storeBytes"].as_u64().unwrap_or(0) / MIB,
        health["evicted"]
    ));
    assert_eq!(health["evicted"], 0, "the attack is sized to evict nothing");
    attack.probe("the streams catch up");
    let readers: Vec<_> = paused.into_iter().map(|s| reader(s, MESSAGES)).collect();
    for reader in readers {
        let events = reader.join().unwrap().expect("a stream that caught up");
        let ids: std::collections::BTreeSet<_> = events.iter().map(|e| e.id.clone()).collect();
        assert_eq!(ids.len(), MESSAGES, "every message once");
    }
    attack.note(format!(
        "{STREAMS} streams caught up {MESSAGES} events each in {} ms",
        start.elapsed().as_millis()
    ));
    attack.finish(STREAMS as u64, 4, (0, "nothing"));
}

/// Finding 2: one `DELETE ?to=` of 20,000 messages with 400 streams that do not read (and whose
/// filter matches none of them): 20 `deleted` events of 1000 ids each, about 780 KB, that every
/// stream used to copy. Their JSON is built once and shared.
#[test]
fn f2_one_large_delete_to_streams_that_do_not_read_is_shared() {
    let _one = one_at_a_time();
    const STREAMS: usize = 400;
    const MESSAGES: usize = 20_000;
    let mut attack = Attack::start("F2 delete", &[]);
    let server = &attack.server;
    let start = Instant::now();
    send_all(server.smtp, 8, MESSAGES, |i| {
        let raw = common::message("a@app.test", "bulk@local.test", &format!("m{i}"), "x");
        ("bulk@local.test".to_owned(), raw)
    });
    attack.note(format!(
        "{MESSAGES} messages stored in {} ms",
        start.elapsed().as_millis()
    ));
    let idle: Vec<_> = (0..STREAMS)
        .map(|_| open_stream(server.http, "/api/events?to=nobody@local.test"))
        .collect();
    let watching = open_stream(server.http, "/api/events?to=nobody@local.test");
    wait_subscribers(server, STREAMS as u64 + 1);
    // A stream that reads: every deleted id reaches it.
    let watching = std::thread::spawn(move || {
        let mut ids = 0;
        let read = read_events(watching, 64 * 1024, |event| {
            if event.event == "deleted" {
                let data: serde_json::Value = serde_json::from_str(&event.data).unwrap_or_default();
                ids += data["ids"].as_array().map_or(0, Vec::len);
            }
            ids < MESSAGES
        });
        read.map(|()| ids)
    });
    // Probed from the DELETE's answer on: the removal itself (20,000 ids out of the store
    // under the lock, the same with or without streams) is not the event path.
    let start = Instant::now();
    let deleted = attack
        .server
        .request("DELETE", "/api/emails?to=bulk%40local.test");
    attack.probe("the deleted events go out");
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json()["deleted"], MESSAGES as u64);
    attack.note(format!(
        "the DELETE answered after {} ms",
        start.elapsed().as_millis()
    ));
    let ids = watching.join().unwrap().expect("the reading stream");
    assert_eq!(ids, MESSAGES);
    attack.note(format!(
        "a reading stream had every deleted id {} ms after the DELETE",
        start.elapsed().as_millis()
    ));
    std::thread::sleep(Duration::from_millis(500));
    attack.finish(
        STREAMS as u64 + 1,
        0,
        (MESSAGES as u64 * 64, "the event log: 64 bytes per id"),
    );
    drop(idle);
}

/// Finding 6: a stream that resumes from the zero id and does not read used to hold a snapshot
/// of the whole store until it had read it: deleted mail stayed in memory. Four rounds of: fill
/// the store (40 MiB), open 5 such streams, delete everything.
#[test]
fn f6_resuming_streams_that_stall_do_not_pin_deleted_mail() {
    let _one = one_at_a_time();
    const ROUNDS: usize = 4;
    const STREAMS: usize = 5;
    const MESSAGES: usize = 400;
    let mut attack = Attack::start("F6", &[]);
    attack.probe("fill, stall 5 resuming streams, delete, 4 times");
    let subject = folded("Subject", b'r', 32 * 1024);
    let mut stalled = Vec::new();
    for round in 0..ROUNDS {
        send_all(attack.server.smtp, 4, MESSAGES, |i| {
            let to = format!("r{round}-{i}@local.test");
            (to.clone(), message_with(&to, &subject, "resume"))
        });
        let health = attack.server.health();
        attack.note(format!(
            "round {round}: store {} MiB",
            health["storeBytes"].as_u64().unwrap_or(0) / MIB
        ));
        for _ in 0..STREAMS {
            stalled.push(open_stream(
                attack.server.http,
                &format!("/api/events?afterId={ZERO_ID}"),
            ));
        }
        wait_subscribers(&attack.server, stalled.len() as u64);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(attack.server.delete_all(), MESSAGES as u64);
    }
    std::thread::sleep(Duration::from_millis(300));
    attack.finish(stalled.len() as u64, 4, (0, "nothing"));
    drop(stalled);
}

/// Finding 4: streams resuming over messages with 3 MiB header blocks used to build their
/// summaries on the async workers, all in one batch: `/health` and SMTP froze. Now a step is
/// judged by the bytes it reads, and a heavy one runs on the blocking pool.
#[test]
fn f4_a_replay_over_huge_header_blocks_freezes_no_one() {
    let _one = one_at_a_time();
    const MESSAGES: usize = 6;
    const STREAMS: usize = 3;
    let mut attack = Attack::start("F4 headers", &[]);
    let mut headers = Vec::new();
    for i in 0..30_000 {
        headers.extend_from_slice(format!("X-Pad-{i}: {}\r\n", "p".repeat(90)).as_bytes());
    }
    headers.extend_from_slice(b"From: Huge <huge@app.test>\r\nSubject: huge headers\r\n");
    send_all(attack.server.smtp, 2, MESSAGES, |_| {
        (
            "huge@local.test".to_owned(),
            message_with("huge@local.test", &headers, "h"),
        )
    });
    attack.probe("the replays");
    let start = Instant::now();
    // Two streams or more: one for each async worker.
    let readers: Vec<_> = (0..STREAMS)
        .map(|_| {
            let stream = open_stream(
                attack.server.http,
                &format!("/api/events?afterId={ZERO_ID}"),
            );
            reader(stream, MESSAGES)
        })
        .collect();
    for reader in readers {
        let events = reader.join().unwrap().expect("the replay");
        assert_eq!(events.len(), MESSAGES);
    }
    attack.note(format!(
        "{STREAMS} replays of {MESSAGES} messages with {} KiB header blocks in {} ms",
        headers.len() / 1024,
        start.elapsed().as_millis()
    ));
    attack.finish(STREAMS as u64, 2, (0, "nothing"));
}

/// Finding 4: a storm of 30 streams resuming at once over 5000 messages with non-ASCII
/// subjects, each read to its end.
#[test]
fn f4_a_replay_storm_freezes_no_one() {
    let _one = one_at_a_time();
    const MESSAGES: usize = 5000;
    const STREAMS: usize = 30;
    let mut attack = Attack::start("F4 storm", &[]);
    send_all(attack.server.smtp, 4, MESSAGES, |i| {
        let subject = format!(
            "=?utf-8?b?{}?=",
            base64(format!("Привет, мир {i}: ваш код — ✓ {}", "ё".repeat(60)).as_bytes())
        );
        let raw = common::message("a@app.test", "storm@local.test", &subject, "тело письма");
        ("storm@local.test".to_owned(), raw)
    });
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| {
            open_stream(
                attack.server.http,
                &format!("/api/events?afterId={ZERO_ID}"),
            )
        })
        .collect();
    attack.probe("the replays");
    let start = Instant::now();
    let readers: Vec<_> = streams.into_iter().map(|s| reader(s, MESSAGES)).collect();
    for reader in readers {
        let events = reader.join().unwrap().expect("a replay");
        assert_eq!(events.len(), MESSAGES);
    }
    attack.note(format!(
        "{STREAMS} replays of {MESSAGES} messages in {} ms",
        start.elapsed().as_millis()
    ));
    attack.finish(STREAMS as u64, 0, (0, "nothing"));
}

/// Standard base64 (for encoded-word subjects).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Finding 7: event streams used to be able to take every HTTP connection slot, and streams
/// are never reclaimed: `/health`, DELETE and the UI got 503. Now streams never take more than
/// `limits.maxSubscribers` slots, which leaves `limits.reservedHttpConnections` to the API.
#[test]
fn f7_event_streams_leave_connections_for_the_api() {
    let _one = one_at_a_time();
    const CONNECTIONS: usize = 40;
    let server = Server::start_with(&["--max-http-connections", &CONNECTIONS.to_string()]);
    let mut streams = Vec::new();
    let mut refused = None;
    // Open streams until one is refused: each must be answered before the next opens.
    for _ in 0..CONNECTIONS {
        let mut stream = open_stream(server.http, "/api/events");
        stream.set_read_timeout(Some(LONG_IO)).unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).expect("a status line");
        let status = String::from_utf8_lossy(&head[9..12]).into_owned();
        if status != "200" {
            refused = Some(status);
            break;
        }
        streams.push(stream);
    }
    eprintln!(
        "[F7] {} streams open of {CONNECTIONS} connections; the next: {refused:?}",
        streams.len()
    );
    let health = server.get("/health");
    assert_eq!(
        health.status, 200,
        "/health with every stream open: {}",
        health.body
    );
    let health = health.json();
    let max = health["limits"]["maxSubscribers"].as_u64().unwrap_or(0);
    let reserved = health["limits"]["reservedHttpConnections"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(streams.len() as u64, max, "streams open up to the cap");
    assert_eq!(refused.as_deref(), Some("503"), "the stream past the cap");
    assert!(
        reserved > 0 && max + reserved <= CONNECTIONS as u64,
        "{health}"
    );
    let delete = server.request("DELETE", "/api/emails");
    assert_eq!(
        delete.status, 200,
        "DELETE with every stream open: {}",
        delete.body
    );
    let list = server.get("/api/emails");
    assert_eq!(
        list.status, 200,
        "a list with every stream open: {}",
        list.body
    );
    let ui = common::http_exchange(
        server.http,
        format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            server.http
        )
        .as_bytes(),
    );
    assert_eq!(ui.status, 200, "the UI with every stream open");
    drop(streams);
}

/// Every stored id, oldest first (paged with `beforeId`; a page is oldest first).
fn all_ids(server: &Server) -> Vec<String> {
    let mut pages = Vec::new();
    let mut query = "limit=100".to_owned();
    loop {
        let page: Vec<String> = server
            .emails(&query)
            .iter()
            .map(|e| e["id"].as_str().unwrap_or_default().to_owned())
            .collect();
        let Some(oldest) = page.first() else { break };
        query = format!("limit=100&beforeId={oldest}");
        pages.push(page);
    }
    pages.into_iter().rev().flatten().collect()
}

/// Finding 6's replay reads the live store step by step: a stream resumed from the middle of
/// the store while mail arrives and leaves gets every message stored after its id exactly once,
/// in order (the ones deleted before their turn only as `deleted`), then the live ones.
#[test]
fn a_resumed_stream_gets_each_message_once_in_order_while_mail_comes_and_goes() {
    let _one = one_at_a_time();
    let server = Server::start_with(&flags(&[]));
    // Large enough summaries that the replay takes many steps while the client reads slowly.
    let subject = folded("Subject", b'g', 8 * 1024);
    send_all(server.smtp, 2, 300, |i| {
        let to = format!("g{i}@local.test");
        (to.clone(), message_with(&to, &subject, "gap"))
    });
    let before = all_ids(&server);
    assert_eq!(before.len(), 300);
    let resume = before[99].clone();
    let stream = open_stream(server.http, &format!("/api/events?afterId={resume}"));
    let (ids_tx, ids_rx) = std::sync::mpsc::channel();
    let slow = std::thread::spawn(move || {
        let mut count = 0;
        read_events(stream, 256, |event| {
            if event.event == "stored" {
                ids_tx.send(event.id.unwrap_or_default()).unwrap();
                count += 1;
                // A slow client: the replay has to wait for it.
                std::thread::sleep(Duration::from_millis(2));
            }
            count < 400
        })
    });
    // While it replays: delete a few it has not reached, and add 100.
    let deleted: Vec<&String> = before[250..260].iter().collect();
    for id in &deleted {
        assert_eq!(
            server
                .request("DELETE", &format!("/api/emails/{id}"))
                .status,
            200
        );
    }
    send_all(server.smtp, 2, 100, |i| {
        let to = format!("late{i}@local.test");
        (to.clone(), message_with(&to, &subject, "late"))
    });
    let after = all_ids(&server);
    let want: Vec<String> = after.iter().filter(|id| **id > resume).cloned().collect();
    let mut got: Vec<String> = Vec::new();
    while got.iter().filter(|id| !deleted.contains(id)).count() < want.len() {
        match ids_rx.recv_timeout(LONG_IO) {
            Ok(id) => got.push(id),
            Err(e) => panic!("after {} of {} ids: {e}", got.len(), want.len()),
        }
    }
    // Those deleted before the replay reached them were never sent; nothing else is missing.
    let sent_deleted: Vec<&String> = got.iter().filter(|id| deleted.contains(id)).collect();
    let got_stored: Vec<String> = got
        .iter()
        .filter(|id| !deleted.contains(id))
        .cloned()
        .collect();
    assert_eq!(got_stored, want, "every stored message once, in order");
    eprintln!(
        "resumed stream: {} events, {} of the 10 deleted during the replay had been sent first",
        got.len(),
        sent_deleted.len()
    );
    drop(server);
    let _ = slow.join();
}

/// The CPU time (user + system) a process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (in parentheses, which may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// A subscriber that reads everything as it comes, counting `stored` events in large reads,
/// until it has `messages` of them; its count.
fn counting_reader(addr: SocketAddr, messages: usize) -> std::thread::JoinHandle<usize> {
    let mut stream = open_stream(addr, "/api/events");
    std::thread::spawn(move || {
        const STORED: &[u8] = b"event: stored";
        const OVERFLOW: &[u8] = b"event: overflow";
        let mut seen = 0;
        let mut buf = vec![0u8; 64 * 1024];
        let mut carry = 0;
        while seen < messages {
            let n = match stream.read(&mut buf[carry..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let filled = carry + n;
            let data = &buf[..filled];
            seen += memchr::memmem::find_iter(data, STORED).count();
            assert!(memchr::memmem::find(data, OVERFLOW).is_none(), "overflow");
            // A tail shorter than a marker: a marker split across reads is counted once.
            carry = (STORED.len() - 1).min(filled);
            buf.copy_within(filled - carry..filled, 0);
        }
        seen
    })
}

/// Finding 9: ingest with 0, 100 and 900 event streams that keep up (every stream gets every
/// event), as a ratio to none, and what a stream costs in server CPU. 20 SMTP sessions send
/// `MESSAGES` (default 20,000) messages of 2 KiB, as `smtp-source -s 20 -l 2048` does.
/// `STREAMS=0,100,900` and `ROUNDS=1` by default. A measurement, whose figures mean
/// something in a release build of the server and of this test (its readers and senders share
/// the cores): `cargo test --release -p mailjar --test resource_events -- --ignored
/// --nocapture fan_out` (with `MAILJAR_E2E_BIN` naming another build to compare).
#[test]
#[ignore = "a measurement; run it with --ignored --nocapture"]
fn fan_out_ingest_ratios() {
    let _one = one_at_a_time();
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let messages = env("MESSAGES", 20_000);
    let rounds = env("ROUNDS", 1);
    let counts: Vec<usize> = std::env::var("STREAMS")
        .unwrap_or_else(|_| "0,100,900".to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let body = "x".repeat(1900);
    let mut table = Vec::new();
    for round in 0..rounds {
        let mut alone = None;
        for &subscribers in &counts {
            let server = Server::start_with(&[
                "--max-http-connections",
                "2100",
                "--max-subscribers",
                "1000",
            ]);
            let readers: Vec<_> = (0..subscribers)
                .map(|_| counting_reader(server.http, messages))
                .collect();
            wait_subscribers(&server, subscribers as u64);
            let cpu = cpu_time(server.pid());
            let start = Instant::now();
            send_all(server.smtp, 20, messages, |i| {
                let raw = common::message("a@app.test", "fan@local.test", &format!("m{i}"), &body);
                ("fan@local.test".to_owned(), raw)
            });
            let took = start.elapsed();
            for reader in readers {
                assert_eq!(reader.join().unwrap(), messages, "a stream lost events");
            }
            let delivered = start.elapsed();
            let cpu = cpu_time(server.pid()) - cpu;
            let rate = messages as f64 / took.as_secs_f64();
            let alone_rate = *alone.get_or_insert(rate);
            let line = format!(
                "round {round}: {subscribers} streams: {rate:.0} messages/s, ratio to none {:.2}; \
                 every event delivered after {:.2} s; server CPU {:.2} s ({:.1} us per event sent)",
                rate / alone_rate,
                delivered.as_secs_f64(),
                cpu.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / (messages * subscribers.max(1)) as f64,
            );
            eprintln!("[F9] {line}");
            table.push(line);
        }
    }
    eprintln!("[F9] summary:\n{}", table.join("\n"));
}
