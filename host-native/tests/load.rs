//! A bounded load test over loopback against the real binary: 20 SMTP senders, 500 concurrent
//! waits and a stream of list / latest / by-id / delete-by-id queries, for 10 s by default or
//! `MAILJAR_LOAD_SECS` seconds (e.g. `MAILJAR_LOAD_SECS=60`).
//!
//! Pass: every message acknowledged with 250 is retrievable (or was deleted by the test, or
//! evicted by the store bound, which `/health` counts); no response is a 5xx and no SMTP reply
//! a 4xx or 5xx; every wait is answered by the message meant for it (each wait filters on a
//! recipient of its own, whose message a sender delivers during the run) or, only if that
//! message came too late, by its 408; the server's RSS stays bounded. The figures are printed.

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::{KeepAlive, RssSampler, Server, Smtp, enc};

const SENDERS: usize = 20;
const WAITERS: usize = 500;
const QUERIERS: usize = 4;
/// The wait timeout: long enough that a sender always gets to the message in time.
const WAIT_MS: u64 = 20_000;
/// Messages per SMTP connection before a sender reconnects.
const PER_CONNECTION: u64 = 100;
/// The ceiling on the server's RSS.
const MAX_RSS_MIB: u64 = 512;
/// Where the queriers' delete-by-id takes its messages from.
const TRASH: &str = "trash@load.test";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Everything the threads share.
#[derive(Default)]
struct Shared {
    /// Set when the run time is over: no new waits, no filler messages.
    stop: AtomicBool,
    /// Waiter threads still running.
    waiters_alive: AtomicUsize,
    /// Wait recipients that still need their message.
    targets: Mutex<VecDeque<String>>,
    /// Wait recipient to (subject, when its 250 was read).
    delivered_to: Mutex<HashMap<String, (String, Instant)>>,
    /// Subjects of the messages the queriers deleted.
    deleted: Mutex<HashSet<String>>,
    /// HTTP responses with a 5xx status, and what they were.
    server_errors: Mutex<Vec<String>>,
    /// SMTP replies that were not the positive one expected.
    smtp_errors: Mutex<Vec<String>>,
    /// Problems with wait answers.
    wait_errors: Mutex<Vec<String>>,
    /// (recipient, subject) of every wait answered with a message.
    answered: Mutex<Vec<(String, String)>>,
    /// Waits answered with a 408, checked afterwards.
    waits_408: Mutex<Vec<(String, Instant)>>,
    /// Query latencies.
    latencies: Mutex<Vec<Duration>>,
}

impl Shared {
    fn http_check(&self, what: &str, status: u16) {
        if status >= 500 {
            lock(&self.server_errors).push(format!("{what}: {status}"));
        }
    }
}

/// One SMTP transaction on an open connection; the subject on success.
fn send_one(smtp: &mut Smtp, shared: &Shared, to: &str, subject: &str) -> bool {
    let raw = format!("From: load@load.test\r\nTo: {to}\r\nSubject: {subject}\r\n\r\nx\r\n");
    let mut wire = format!("MAIL FROM:<load@load.test>\r\nRCPT TO:<{to}>\r\nDATA\r\n").into_bytes();
    // Pipelined: MAIL, RCPT and DATA in one write, then the text.
    smtp.write(&wire);
    for want in [250, 250, 354] {
        let reply = smtp.reply();
        if reply.code != want {
            lock(&shared.smtp_errors).push(format!("{subject}: {}", reply.wire));
            return false;
        }
    }
    wire.clear();
    wire.extend(common::dot_stuff(raw.as_bytes()));
    wire.extend_from_slice(b".\r\n");
    smtp.write(&wire);
    let reply = smtp.reply();
    if reply.code != 250 {
        lock(&shared.smtp_errors).push(format!("{subject}: {}", reply.wire));
        return false;
    }
    true
}

/// Sends until the run is over and every wait has its message; returns the acknowledged subjects.
fn sender(server: &Server, shared: &Shared, s: usize) -> Vec<String> {
    let mut acked = Vec::new();
    let mut smtp: Option<Smtp> = None;
    let mut seq = 0u64;
    loop {
        let stopping = shared.stop.load(Ordering::Relaxed);
        // One message in three is filler (one in nine for the trash) while the run lasts; the
        // others go to the waits' recipients.
        let filler = !stopping && seq.is_multiple_of(3);
        let target = if filler {
            None
        } else {
            lock(&shared.targets).pop_front()
        };
        let to = match target {
            Some(to) => to,
            None if !stopping => {
                if seq.is_multiple_of(9) {
                    TRASH.to_owned()
                } else {
                    format!("bulk{s}@load.test")
                }
            }
            None if shared.waiters_alive.load(Ordering::Relaxed) > 0 => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            None => break,
        };
        let connection = smtp.get_or_insert_with(|| {
            let mut smtp = server.smtp();
            smtp.expect("EHLO load.test", 250);
            smtp
        });
        let subject = format!("load {s} {seq}");
        if send_one(connection, shared, &to, &subject) {
            if to.starts_with('w') {
                lock(&shared.delivered_to).insert(to.clone(), (subject.clone(), Instant::now()));
            }
            acked.push(subject);
        }
        seq += 1;
        if seq.is_multiple_of(PER_CONNECTION)
            && let Some(mut old) = smtp.take()
        {
            old.expect("QUIT", 221);
        }
    }
    if let Some(mut smtp) = smtp {
        smtp.expect("QUIT", 221);
    }
    acked
}

/// Waits for messages addressed to recipients of its own until the run is over.
fn waiter(server: &Server, shared: &Shared, w: usize, nonce: u64) {
    let mut http = KeepAlive::new(server.http);
    let mut round = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let to = format!("w{w}.{round}.{nonce}@load.test");
        round += 1;
        let issued = Instant::now();
        lock(&shared.targets).push_back(to.clone());
        let target = format!("/api/emails/wait?to={}&timeoutMs={WAIT_MS}", enc(&to));
        let response = http.get(&target);
        shared.http_check("wait", response.status);
        match response.status {
            200 => {
                let email = response.json()["email"].clone();
                let got_to = &email["envelope"]["to"];
                if got_to != &serde_json::json!([to]) {
                    lock(&shared.wait_errors).push(format!("wait for {to} got {got_to}"));
                }
                // Checked against what the sender recorded, once everything has stopped.
                let subject = email["subject"].as_str().unwrap_or("").to_owned();
                lock(&shared.answered).push((to, subject));
            }
            408 => lock(&shared.waits_408).push((to, issued)),
            status => {
                lock(&shared.wait_errors).push(format!("wait for {to}: {status} {}", response.body))
            }
        }
    }
    shared.waiters_alive.fetch_sub(1, Ordering::Relaxed);
}

/// Lists, fetches the newest, fetches by id and deletes by id until the run is over.
fn querier(server: &Server, shared: &Shared, q: usize) {
    let mut http = KeepAlive::new(server.http);
    let mut latencies = Vec::new();
    let mut timed = |http: &mut KeepAlive, method: &str, target: &str| {
        let start = Instant::now();
        let response = http.request(method, target);
        latencies.push(start.elapsed());
        shared.http_check(&format!("{method} {target}"), response.status);
        response
    };
    let mut i = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        i += 1;
        let list = timed(&mut http, "GET", "/api/emails?limit=20");
        assert_eq!(list.status, 200, "{}", list.body);
        let list = list.json();
        let latest = timed(
            &mut http,
            "GET",
            &format!("/api/emails/latest?to=bulk{}@load.test", (i + q) % SENDERS),
        );
        assert!(matches!(latest.status, 200 | 404), "{}", latest.body);
        // By id: a listed message that is not in the trash is never deleted, so it is there.
        if let Some(email) = list["emails"]
            .as_array()
            .and_then(|e| e.iter().rev().find(|e| e["to"][0] != TRASH))
        {
            let id = email["id"].as_str().unwrap();
            let by_id = timed(&mut http, "GET", &format!("/api/emails/{id}"));
            assert_eq!(by_id.status, 200, "{}", by_id.body);
            assert_eq!(by_id.json()["email"]["id"], id);
        }
        // Delete by id: the newest message in the trash (another querier may get it first).
        let trash = timed(&mut http, "GET", &format!("/api/emails/latest?to={TRASH}"));
        if trash.status == 200 {
            let email = trash.json()["email"].clone();
            let id = email["id"].as_str().unwrap();
            let deleted = timed(&mut http, "DELETE", &format!("/api/emails/{id}"));
            match deleted.status {
                200 => {
                    assert_eq!(deleted.json()["deleted"], 1);
                    let subject = email["subject"].as_str().unwrap().to_owned();
                    lock(&shared.deleted).insert(subject);
                }
                404 => {}
                status => panic!("DELETE {id}: {status} {}", deleted.body),
            }
        }
    }
    lock(&shared.latencies).extend(latencies);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

#[test]
fn senders_waits_and_queries_under_load_lose_nothing() {
    let run = Duration::from_secs(std::env::var("MAILJAR_LOAD_SECS").ok().map_or(10, |s| {
        s.parse().expect("MAILJAR_LOAD_SECS is a number of seconds")
    }));
    // The default store bounds hold well over what a minute of this load delivers; evictions
    // are counted anyway.
    let server = Server::start();
    let sampler = RssSampler::start(server.pid(), Duration::from_millis(50));
    let shared = Shared {
        waiters_alive: AtomicUsize::new(WAITERS),
        ..Shared::default()
    };
    let nonce = common::nonce();
    let start = Instant::now();
    let acked: Vec<String> = std::thread::scope(|scope| {
        let (server, shared) = (&server, &shared);
        for w in 0..WAITERS {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(scope, move || waiter(server, shared, w, nonce))
                .expect("spawn a waiter");
        }
        for q in 0..QUERIERS {
            scope.spawn(move || querier(server, shared, q));
        }
        let senders: Vec<_> = (0..SENDERS)
            .map(|s| scope.spawn(move || sender(server, shared, s)))
            .collect();
        std::thread::sleep(run);
        shared.stop.store(true, Ordering::Relaxed);
        senders
            .into_iter()
            .flat_map(|h| h.join().expect("sender thread"))
            .collect()
    });
    let elapsed = start.elapsed();
    let peak_mib = sampler.peak_kib() / 1024;
    drop(sampler);

    // Every acknowledged message is stored, deleted by a querier, or evicted.
    let health = server.health();
    let evicted = health["evicted"].as_u64().unwrap();
    let deleted = lock(&shared.deleted).clone();
    let mut stored: HashSet<String> = HashSet::new();
    let mut listed = 0;
    for filter in (0..SENDERS)
        .map(|s| format!("subject={}", enc(&format!("load {s} "))))
        .collect::<Vec<_>>()
    {
        for email in server.emails(&filter) {
            listed += 1;
            stored.insert(email["subject"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(listed, stored.len(), "a subject stored twice");
    assert_eq!(
        health["messages"].as_u64(),
        Some(stored.len() as u64),
        "only the test's messages are stored"
    );
    let acked_set: HashSet<&String> = acked.iter().collect();
    assert_eq!(acked_set.len(), acked.len(), "subjects are unique");
    let missing: Vec<&String> = acked
        .iter()
        .filter(|s| !stored.contains(*s) && !deleted.contains(*s))
        .collect();
    let unacked: Vec<&String> = stored.iter().filter(|s| !acked_set.contains(s)).collect();
    let lost = missing.len() as u64 - evicted.min(missing.len() as u64);

    // Every wait answered with a message got the one sent to its recipient.
    let delivered_to = lock(&shared.delivered_to).clone();
    let answered = lock(&shared.answered).clone();
    let mut wait_errors = lock(&shared.wait_errors).clone();
    for (to, subject) in &answered {
        match delivered_to.get(to) {
            Some((sent, _)) if sent == subject => {}
            other => wait_errors.push(format!("wait for {to} got {subject:?}, sent {other:?}")),
        }
    }
    // A 408 is right only when the message was acknowledged too late for the wait.
    let timeouts = lock(&shared.waits_408).clone();
    for (to, issued) in &timeouts {
        if let Some((_, acked_at)) = delivered_to.get(to)
            && *acked_at + Duration::from_millis(500) < *issued + Duration::from_millis(WAIT_MS)
        {
            wait_errors.push(format!(
                "wait for {to} timed out though its message was acknowledged {:?} after it began",
                acked_at.saturating_duration_since(*issued)
            ));
        }
    }

    let mut latencies = lock(&shared.latencies).clone();
    latencies.sort();
    let queries = latencies.len();
    let server_errors = lock(&shared.server_errors).clone();
    let smtp_errors = lock(&shared.smtp_errors).clone();
    println!(
        "load for {run:?} ({elapsed:.1?} with the drain): {SENDERS} senders, {WAITERS} waiters, {QUERIERS} queriers\n\
         sent and acknowledged {} ({:.0}/s), stored {}, deleted by id {}, evicted {evicted}, lost {lost}, \
         stored without a 250 {}\n\
         waits resolved {} ({} by their message, {} by 408)\n\
         queries {queries}, p50 {:?}, p99 {:?}, max {:?}\n\
         5xx responses {}, SMTP errors {}, wait errors {}\n\
         peak RSS {peak_mib} MiB",
        acked.len(),
        acked.len() as f64 / elapsed.as_secs_f64(),
        stored.len(),
        deleted.len(),
        unacked.len(),
        answered.len() + timeouts.len(),
        answered.len(),
        timeouts.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        server_errors.len(),
        smtp_errors.len(),
        wait_errors.len(),
    );
    assert!(
        server_errors.is_empty(),
        "5xx: {:?}",
        &server_errors[..server_errors.len().min(10)]
    );
    assert!(
        smtp_errors.is_empty(),
        "SMTP: {:?}",
        &smtp_errors[..smtp_errors.len().min(10)]
    );
    assert!(
        wait_errors.is_empty(),
        "waits: {:?}",
        &wait_errors[..wait_errors.len().min(10)]
    );
    assert_eq!(
        lost,
        0,
        "lost (first few): {:?}",
        &missing[..missing.len().min(10)]
    );
    assert!(unacked.is_empty(), "stored without a 250: {unacked:?}");
    assert!(acked.len() > 100, "only {} messages sent", acked.len());
    assert!(
        answered.len() >= WAITERS,
        "only {} waits answered",
        answered.len()
    );
    assert!(queries > 100, "only {queries} queries");
    assert!(peak_mib < MAX_RSS_MIB, "peak RSS {peak_mib} MiB");
    assert_eq!(health["waits"], 0, "no wait left parked: {health}");
}
