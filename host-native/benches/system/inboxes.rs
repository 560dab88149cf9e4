//! `ONLY=inboxes`: what inboxes cost (issue 31's figures).
//!
//! - SMTP ingest with 100 inboxes configured (each `*@team-N.test` and
//!   `qa+*@team-N.test`, the mail addressed to one of them) as a ratio to
//!   none, both with `--admin-token`, in the same round; every message must be stored.
//! - Memory per inbox: the RSS of a mailjar with `INBOXES` (default
//!   10,000) inboxes made over the API, less its RSS before, divided by their number.

use super::*;

const ADMIN: &str = "bench-admin-token-0123456789";

/// `POST target` with the admin token and a JSON body; the status.
fn admin_post(port: u16, target: &str, body: &str) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect HTTP");
    write!(
        stream,
        "POST {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    read_response(&mut BufReader::new(stream)).0
}

/// Makes inboxes `team-0` .. `team-{count - 1}`, each with two patterns.
fn make_inboxes(mailjar: &Mailjar, count: usize) {
    for n in 0..count {
        let body = format!(
            r#"{{"name":"team-{n}","addresses":["*@team-{n}.test","qa+*@team-{n}.test"]}}"#
        );
        assert_eq!(admin_post(mailjar.http, "/api/inboxes", &body), 200);
    }
}

/// smtp-source to `to`, `sessions` reused sessions; the time it took.
fn send_to(port: u16, sessions: usize, messages: usize, to: &str) -> Duration {
    let start = Instant::now();
    let status = Command::new("smtp-source")
        .args(["-s", &sessions.to_string(), "-m", &messages.to_string()])
        .args(["-l", "2048", "-f", "sender@app.test", "-t", to, "-d"])
        .arg(format!("127.0.0.1:{port}"))
        .status()
        .expect("smtp-source (install postfix: benches/run.sh)");
    assert!(status.success(), "smtp-source failed");
    start.elapsed()
}

/// One round: the ingest rate with `inboxes` inboxes made first; every message stored.
fn ingest_rate(inboxes: usize, messages: usize) -> f64 {
    let mailjar = Mailjar::start(&["--admin-token", ADMIN]);
    make_inboxes(&mailjar, inboxes);
    let time = send_to(mailjar.smtp, 10, messages, "qa+signup@team-7.test");
    let stored = mailjar.health()["messages"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        stored, messages,
        "LOSS ({inboxes} inboxes): sent {messages}, stored {stored}"
    );
    messages as f64 / time.as_secs_f64()
}

/// The RSS a mailjar grows by per inbox, over `count` inboxes, in bytes.
fn bytes_per_inbox(count: usize) -> (u64, u64, f64) {
    let mailjar = Mailjar::start(&["--admin-token", ADMIN]);
    std::thread::sleep(Duration::from_millis(200));
    let before = rss(mailjar.pid());
    make_inboxes(&mailjar, count);
    std::thread::sleep(Duration::from_millis(200));
    let after = rss(mailjar.pid());
    let per = after.saturating_sub(before) as f64 / count as f64;
    (before, after, per)
}

/// Runs the section: `rounds` ingest rounds of `messages`, then the memory figure.
pub fn run(rounds: usize, messages: usize) {
    let mut ratios = Vec::new();
    let (mut none_rates, mut hundred_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternated, so that neither side always runs on a warmer machine.
        let (none, hundred) = if round % 2 == 0 {
            let none = ingest_rate(0, messages);
            (none, ingest_rate(100, messages))
        } else {
            let hundred = ingest_rate(100, messages);
            (ingest_rate(0, messages), hundred)
        };
        ratios.push(hundred / none);
        none_rates.push(none);
        hundred_rates.push(hundred);
    }
    println!(
        "ingest with 100 inboxes against none, 10 sessions, {messages} messages: ratio per round {}; median {:.2} (target >= 0.95); msg/s with none {}, with 100 {}",
        show(&ratios, 2),
        median(&mut ratios),
        show(&none_rates, 0),
        show(&hundred_rates, 0)
    );
    let count = env_usize("INBOXES", 10_000);
    let (before, after, per) = bytes_per_inbox(count);
    println!(
        "{count} inboxes: RSS {:.1} MiB before, {:.1} MiB after; {:.0} bytes per inbox",
        mib(before),
        mib(after),
        per
    );
}
