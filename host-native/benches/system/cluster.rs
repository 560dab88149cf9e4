//! `ONLY=cluster`: two nodes on one PostgreSQL (`--database`), started by
//! the bench itself (Debian's `postgresql`, as the tests do).
//!
//! - SMTP ingest through two nodes (smtp-source, 2 KiB messages, 5 reused
//!   sessions on each, 10 in all) as a ratio to one memory-only node with 10
//!   reused sessions in the same round; every message must be on both nodes.
//!   One node alone on PostgreSQL (10 sessions) is measured beside them: what
//!   the database costs, apart from what a second node costs.
//! - Cross-node wait latency: a message acknowledged (250) on node A to the
//!   wait parked on node B answered, p50 and p99 over `WAIT_SAMPLES` (default 200).
//! - Catch-up after a 10 s database outage (`OUTAGE_SECS`): the database is
//!   stopped and started; then 1000 messages go to node A; the time from the
//!   database's start to node B holding all of them.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use super::pgcluster::Postgres;
use super::*;

/// A minimal SMTP client on one connection (EHLO once, then transactions).
struct Smtp {
    reader: BufReader<TcpStream>,
}

impl Smtp {
    fn connect(port: u16) -> Smtp {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect SMTP");
        stream.set_nodelay(true).ok();
        let mut smtp = Smtp {
            reader: BufReader::new(stream),
        };
        smtp.reply();
        smtp.send("EHLO bench.test\r\n");
        smtp
    }

    /// The code of the next reply (its last line).
    fn reply(&mut self) -> u16 {
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("read reply");
            if line.as_bytes().get(3) != Some(&b'-') {
                return line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
            }
        }
    }

    fn send(&mut self, text: &str) -> u16 {
        self.reader
            .get_mut()
            .write_all(text.as_bytes())
            .expect("write");
        self.reply()
    }

    fn message(&mut self, subject: &str) -> u16 {
        self.send("MAIL FROM:<app@app.test>\r\n");
        self.send("RCPT TO:<user@local.test>\r\n");
        self.send("DATA\r\n");
        self.send(&format!("Subject: {subject}\r\n\r\nbody\r\n.\r\n"))
    }
}

fn messages_on(node: &Mailjar) -> usize {
    node.health()["messages"].as_u64().unwrap_or(0) as usize
}

/// Waits until `node` holds `n` messages; the time it took.
fn until_holds(node: &Mailjar, n: usize, timeout: Duration) -> Duration {
    let started = Instant::now();
    while messages_on(node) < n {
        assert!(
            started.elapsed() < timeout,
            "LOSS: {} of {n} on a node",
            messages_on(node)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    started.elapsed()
}

fn nodes(pg: &Postgres) -> (Mailjar, Mailjar) {
    let url = pg.url();
    let flags = ["--database", url.as_str(), "--max-messages", "1000000"];
    (Mailjar::start(&flags), Mailjar::start(&flags))
}

/// One round of ingest's rates in messages a second.
struct Round {
    memory: f64,
    one_node: f64,
    two_nodes: f64,
}

/// One round of ingest: one memory-only node, one node on PostgreSQL, two nodes on it.
fn ingest(messages: usize) -> Round {
    let rate = |t: Duration| messages as f64 / t.as_secs_f64();
    let memory = Mailjar::start(&["--max-messages", "1000000"]);
    let memory_time = smtp_source(memory.smtp, 10, messages, true);
    assert_eq!(messages_on(&memory), messages, "LOSS (memory)");
    drop(memory);
    let pg = Postgres::start();
    let url = pg.url();
    let alone = Mailjar::start(&["--database", url.as_str(), "--max-messages", "1000000"]);
    let alone_time = smtp_source(alone.smtp, 10, messages, true);
    assert_eq!(messages_on(&alone), messages, "LOSS (one node)");
    drop((alone, pg));
    let pg = Postgres::start();
    let (a, b) = nodes(&pg);
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| smtp_source(a.smtp, 5, messages / 2, true));
        s.spawn(|| smtp_source(b.smtp, 5, messages - messages / 2, true));
    });
    let cluster_time = started.elapsed();
    until_holds(&a, messages, Duration::from_secs(30));
    until_holds(&b, messages, Duration::from_secs(30));
    Round {
        memory: rate(memory_time),
        one_node: rate(alone_time),
        two_nodes: rate(cluster_time),
    }
}

/// Cross-node wait latencies in ms, sorted.
fn wait_latency(samples: usize) -> Vec<f64> {
    let pg = Postgres::start();
    let (a, b) = nodes(&pg);
    let mut smtp = Smtp::connect(a.smtp);
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        let http = b.http;
        let (tx, rx) = std::sync::mpsc::channel();
        let target = format!("/api/emails/wait?subject=lat-{i}&timeoutMs=5000");
        let waiter = std::thread::spawn(move || {
            let (status, _) = http_get(http, &target);
            let _ = tx.send(Instant::now());
            status
        });
        // Parked before the mail comes.
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(smtp.message(&format!("lat-{i}")), 250);
        let acked = Instant::now();
        let answered = rx.recv().expect("the wait answers");
        assert_eq!(waiter.join().expect("waiter"), 200);
        latencies.push(answered.saturating_duration_since(acked).as_secs_f64() * 1000.0);
    }
    latencies.sort_by(|x, y| x.total_cmp(y));
    latencies
}

/// Seconds from the database's start after an outage to node B holding what A took after.
fn catch_up(outage: Duration) -> (f64, f64) {
    let pg = Postgres::start();
    let (a, b) = nodes(&pg);
    smtp_source(a.smtp, 5, 500, true);
    until_holds(&b, 500, Duration::from_secs(30));
    pg.stop();
    std::thread::sleep(outage);
    pg.start_again();
    let started = Instant::now();
    // Node A's senders retry until it takes mail again (its first writes reconnect).
    let mut smtp = Smtp::connect(a.smtp);
    let mut sent = 0;
    while sent < 1000 {
        if smtp.message(&format!("after-{sent}")) == 250 {
            sent += 1;
        }
    }
    let ingested = started.elapsed();
    until_holds(&b, 1500, Duration::from_secs(60));
    (ingested.as_secs_f64(), started.elapsed().as_secs_f64())
}

/// Runs every section and prints its figures.
pub fn run(rounds: usize, messages: usize) {
    let (mut ratios, mut alone) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let Round {
            memory,
            one_node,
            two_nodes,
        } = ingest(messages);
        println!(
            "round {round}: two nodes {two_nodes:.0} msg/s, one node on PostgreSQL {one_node:.0} msg/s, \
             one memory-only node {memory:.0} msg/s, ratio {:.2}",
            two_nodes / memory
        );
        ratios.push(two_nodes / memory);
        alone.push(one_node / memory);
    }
    println!(
        "ingest through two nodes on PostgreSQL against memory-only: ratio per round {}; median {:.2} (target >= 0.5); no loss",
        show(&ratios, 2),
        median(&mut ratios)
    );
    println!(
        "one node on PostgreSQL against memory-only: ratio per round {}; median {:.2}",
        show(&alone, 2),
        median(&mut alone)
    );
    let samples = env_usize("WAIT_SAMPLES", 200);
    let latencies = wait_latency(samples);
    println!(
        "cross-node wait latency (250 on A to the wait answered on B), {samples} samples: p50 {:.2} ms, p99 {:.2} ms (target p50 <= 5 ms)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    let outage = Duration::from_secs(env_usize("OUTAGE_SECS", 10) as u64);
    let (ingested, caught_up) = catch_up(outage);
    println!(
        "after a {} s database outage: node A took 1000 messages {ingested:.2} s after the database started; node B held them all at {caught_up:.2} s",
        outage.as_secs()
    );
}
