//! `ONLY=webhooks` and `ONLY=webhooks-memory`: what webhooks cost (issue 35's figures).
//!
//! - `webhooks`: SMTP ingest (smtp-source, 10 reused sessions, 2 KiB
//!   messages) with a receiver that answers each POST after about
//!   `WEBHOOK_DELAY_MS` (1) ms, and with one that never answers, as ratios to
//!   the same build without `--webhook`, in the same round. The queue is as
//!   large as the round (`--webhook-queue MESSAGES`) so that every message is
//!   posted and its cost counted, and signed (`--webhook-secret`) as an
//!   operator would; mailjar's CPU per message is taken once
//!   the queue has drained, and the receiver's CPU (its own process: this
//!   bench run again as a tiny tokio server) is reported apart.
//! - `webhooks-memory`: `RATE` (1000) messages a second for `DOWN_SECS` (60)
//!   seconds with the receiver down (connection refused), with
//!   `--relay-auto` to a relay that is down, and with neither; peak RSS
//!   (VmHWM) of each, and the difference against README's bound for
//!   `--webhook-queue` and `--relay-queue`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// The variable that makes this bench a webhook receiver (`ok:<ms>` or `hang`).
pub const RECEIVER_VAR: &str = "MAILJAR_BENCH_RECEIVER";

/// The receiver: this bench's binary run again, so its CPU is its own.
struct Receiver {
    proc: Proc,
    port: u16,
}

impl Receiver {
    fn start(mode: &str) -> Receiver {
        let exe = std::env::current_exe().expect("the bench's own path");
        let mut child = Command::new(exe)
            .env(RECEIVER_VAR, mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = line.trim().parse().expect("a port number");
        Receiver {
            proc: Proc(child),
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn cpu(&self) -> Duration {
        cpu_time(self.proc.0.id())
    }
}

/// The receiver's process: prints its port, then answers every POST (after
/// `ok:<ms>`), or never (`hang`), on one thread.
pub fn receiver_main(mode: &str) {
    let delay = mode
        .strip_prefix("ok:")
        .map(|ms| Duration::from_millis(ms.parse().expect("ok:<ms>")));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("its address").port());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(stream, delay));
        }
    });
}

/// One kept-alive connection: each request read whole, then answered after `delay`.
async fn serve(mut stream: tokio::net::TcpStream, delay: Option<Duration>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = Vec::with_capacity(4096);
    loop {
        let needed = loop {
            if let Some(length) = request_length(&buffer) {
                break length;
            }
            if stream.read_buf(&mut buffer).await.unwrap_or(0) == 0 {
                return;
            }
        };
        while buffer.len() < needed {
            if stream.read_buf(&mut buffer).await.unwrap_or(0) == 0 {
                return;
            }
        }
        buffer.drain(..needed);
        let Some(delay) = delay else {
            continue; // hang: read on, answer nothing
        };
        tokio::time::sleep(delay).await;
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        if stream.write_all(reply).await.is_err() {
            return;
        }
    }
}

/// The length of the first whole request head plus its body, once the head is in `buffer`.
fn request_length(buffer: &[u8]) -> Option<usize> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head) = request.parse(buffer).ok()? else {
        return None;
    };
    let body = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .unwrap_or(0usize);
    Some(head + body)
}

/// One ingest run's figures.
struct Run {
    rate: f64,
    /// mailjar's CPU over the ingest and the webhooks' drain, per message.
    cpu_us: f64,
    /// The receiver's CPU per message.
    receiver_cpu_us: f64,
    /// From the end of the ingest until no webhook was queued.
    drain: Duration,
    webhooks: serde_json::Value,
}

/// Polls `/health` until no webhook is queued (at most 120 s); how long it took.
fn drained(mailjar: &Mailjar) -> Duration {
    let start = Instant::now();
    while mailjar.health()["webhooks"]["queued"].as_u64() != Some(0) {
        assert!(start.elapsed() < Duration::from_secs(120), "never drained");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

/// Ingest of `messages` with `receiver` (`None`: no `--webhook`); every message must be stored.
fn ingest(receiver: Option<&Receiver>, hang: bool, messages: usize) -> Run {
    let queue = messages.to_string();
    let flags: Vec<String> = match receiver {
        Some(r) => vec![
            "--webhook".into(),
            r.url(),
            "--webhook-queue".into(),
            queue,
            "--webhook-secret".into(),
            "bench-webhook-secret".into(),
        ],
        None => Vec::new(),
    };
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mailjar = Mailjar::start(&flags);
    let receiver_before = receiver.map_or(Duration::ZERO, Receiver::cpu);
    let before = cpu_time(mailjar.pid());
    let time = smtp_source(mailjar.smtp, 10, messages, true);
    let health = mailjar.health();
    let stored = health["messages"].as_u64().unwrap_or(0) as usize;
    assert_eq!(stored, messages, "LOSS: sent {messages}, stored {stored}");
    let drain = if receiver.is_some() && !hang {
        drained(&mailjar)
    } else {
        Duration::ZERO
    };
    let per_message = |d: Duration| d.as_secs_f64() * 1e6 / messages as f64;
    Run {
        rate: messages as f64 / time.as_secs_f64(),
        cpu_us: per_message(cpu_time(mailjar.pid()) - before),
        receiver_cpu_us: per_message(
            receiver.map_or(Duration::ZERO, Receiver::cpu) - receiver_before,
        ),
        drain,
        webhooks: mailjar.health()["webhooks"].clone(),
    }
}

/// Runs `ONLY=webhooks`: `rounds` rounds of none, a 1 ms receiver and a hanging one.
pub fn run(rounds: usize, messages: usize) {
    let delay = env_usize("WEBHOOK_DELAY_MS", 1);
    let answering = Receiver::start(&format!("ok:{delay}"));
    let hanging = Receiver::start("hang");
    let (mut ok_ratios, mut hang_ratios, mut whole_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Rotated, so that no side always runs on a warmer machine.
        let mut runs: Vec<(usize, Run)> = Vec::new();
        for which in (0..3).map(|i| (i + round) % 3) {
            let run = match which {
                0 => ingest(None, false, messages),
                1 => ingest(Some(&answering), false, messages),
                _ => ingest(Some(&hanging), true, messages),
            };
            runs.push((which, run));
        }
        runs.sort_by_key(|(which, _)| *which);
        let [(_, none), (_, ok), (_, hang)] = <[_; 3]>::try_from(runs).ok().expect("three runs");
        ok_ratios.push(ok.rate / none.rate);
        // Until the last webhook was delivered: what a sustained load could keep up with.
        let whole = messages as f64 / (messages as f64 / ok.rate + ok.drain.as_secs_f64());
        whole_ratios.push(whole / none.rate);
        hang_ratios.push(hang.rate / none.rate);
        println!(
            "round {round}: msg/s none {:.0}, {delay} ms receiver {:.0} ({:.2}), hanging {:.0} ({:.2}); \
             mailjar CPU µs/msg none {:.1}, with webhooks {:.1} (+{:.1} per POST); \
             receiver CPU µs/request {:.1}; drained {} ms after the ingest; webhooks {}; hanging: {}",
            none.rate,
            ok.rate,
            ok.rate / none.rate,
            hang.rate,
            hang.rate / none.rate,
            none.cpu_us,
            ok.cpu_us,
            ok.cpu_us - none.cpu_us,
            ok.receiver_cpu_us,
            ok.drain.as_millis(),
            ok.webhooks,
            hang.webhooks
        );
    }
    println!(
        "ingest with a webhook receiver answering in about {delay} ms, against none, 10 reused sessions, {messages} messages: \
         ratio per round {}; median {:.2} (target >= 0.95)",
        show(&ok_ratios, 2),
        median(&mut ok_ratios)
    );
    println!(
        "the same, until the last webhook was delivered: ratio per round {}; median {:.2}",
        show(&whole_ratios, 2),
        median(&mut whole_ratios)
    );
    println!(
        "ingest with a hanging webhook receiver, against none: ratio per round {}; median {:.2} (target >= 0.95)",
        show(&hang_ratios, 2),
        median(&mut hang_ratios)
    );
}

/// Sends `rate` messages a second for `secs` over 10 connections; how many were sent.
fn paced(port: u16, rate: usize, secs: usize) -> usize {
    const CONNECTIONS: usize = 10;
    let each = rate * secs / CONNECTIONS;
    let step = Duration::from_secs_f64(CONNECTIONS as f64 / rate as f64);
    let late = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let late = late.clone();
            std::thread::spawn(move || {
                let mut smtp = smtp_connect(port);
                let start = Instant::now() + step.mul_f64(c as f64 / CONNECTIONS as f64);
                for k in 0..each {
                    let due = start + step * k as u32;
                    match due.checked_duration_since(Instant::now()) {
                        Some(wait) => std::thread::sleep(wait),
                        None if Instant::now() - due > Duration::from_secs(1) => {
                            late.store(true, Ordering::Relaxed)
                        }
                        None => {}
                    }
                    let to = format!("user{}@local.test", k % 100);
                    let reply = send_message(&mut smtp, &to, "paced", || {});
                    assert!(reply.starts_with("250"), "{reply}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a sender");
    }
    if late.load(Ordering::Relaxed) {
        println!("  (the senders fell more than 1 s behind {rate}/s: the machine is busy)");
    }
    each * CONNECTIONS
}

/// One memory run with `flags`; (peak RSS, /health after, the size of one summary).
fn memory_run(flags: &[&str], rate: usize, secs: usize) -> (u64, serde_json::Value, u64, usize) {
    let mut all = vec!["--max-messages", "1000"];
    all.extend_from_slice(flags);
    let mailjar = Mailjar::start(&all);
    let sent = paced(mailjar.smtp, rate, secs);
    let (_, body) = http_get(mailjar.http, "/api/emails?view=summary&limit=1");
    let list: serde_json::Value = serde_json::from_str(&body).expect("list JSON");
    let summary = serde_json::to_vec(&list["emails"][0]).map_or(0, |s| s.len() as u64);
    let peak = peak_rss(mailjar.pid());
    (peak, mailjar.health(), summary, sent)
}

/// The peak resident memory in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs `ONLY=webhooks-memory`.
pub fn memory(rounds: usize) {
    let rate = env_usize("RATE", 1000);
    let secs = env_usize("DOWN_SECS", 60);
    let queue = env_usize("QUEUE", 1000);
    let down = format!("127.0.0.1:{}", free_port());
    let hook = format!("http://{down}/hook");
    let queue_flag = queue.to_string();
    println!(
        "## {rate} messages/s for {secs} s, --max-messages 1000, receiver and relay down (connection refused), queues {queue}"
    );
    for round in 0..rounds {
        let (none, _, summary, sent) = memory_run(&[], rate, secs);
        let (hooked, health, _, _) = memory_run(
            &["--webhook", &hook, "--webhook-queue", &queue_flag],
            rate,
            secs,
        );
        let (relayed, relay_health, _, _) = memory_run(
            &[
                "--relay",
                &down,
                "--relay-auto",
                "*@local.test",
                "--relay-queue",
                &queue_flag,
            ],
            rate,
            secs,
        );
        // README: (--webhook-queue + 17) x (a summary) + 16 x (a request of that size + 20 KiB).
        let bound = |summary: u64| (queue as u64 + 17) * summary + 16 * (summary + 32 + 20 * 1024);
        let w = &health["webhooks"];
        let r = &relay_health["relay"];
        println!(
            "round {round}: {sent} messages; peak RSS none {:.1} MiB, --webhook {:.1} MiB (+{:.2} MiB; README's bound {:.2} MiB \
             with this {summary}-byte summary, {:.1} MiB with 24 KiB ones), webhooks {w}; \
             --relay-auto {:.1} MiB (+{:.2} MiB), relay {r}",
            mib(none),
            mib(hooked),
            (hooked as f64 - none as f64) / 1048576.0,
            mib(bound(summary)),
            mib(bound(24 * 1024)),
            mib(relayed),
            (relayed as f64 - none as f64) / 1048576.0,
        );
    }
}
