//! `ONLY=persist`: what `--data-dir` costs and what it keeps.
//!
//! - SMTP ingest with `--data-dir` as a ratio to memory-only in the same
//!   round (2 KiB messages from smtp-source), 10 reused sessions and 10
//!   sessions with a new connection per message; every message must be stored.
//! - Start time with `PERSIST_STORED` (default 100,000) stored 2 KiB
//!   messages, from the process start to the first `/health` answer, and what mailjar
//!   logs as its load time; the database's bytes per message against the raw bytes.
//! - (`PERSIST_SECTIONS=ingest,start,kill` picks sections; `PERSIST_STORED`, `PERSIST_SENDERS`.)
//! - `kill -9` under load from Python smtplib senders: acknowledged, stored after the restart, lost.

use super::*;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mailjar-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn stop(mailjar: Mailjar) {
    let _ = Command::new("kill")
        .args(["-TERM", &mailjar.pid().to_string()])
        .status();
    let mut proc = mailjar.proc;
    let _ = proc.0.wait();
}

/// One round of [`ingest_ratio`]: rates, and the server's CPU time a 1000 messages.
struct IngestPair {
    ratio: f64,
    disk_rate: f64,
    memory_rate: f64,
    disk_cpu_ms: f64,
    memory_cpu_ms: f64,
}

fn ingest_ratio(sessions: usize, messages: usize, reuse: bool) -> IngestPair {
    let per_1000 = |cpu: Duration| cpu.as_secs_f64() * 1000.0 * 1000.0 / messages as f64;
    let memory = Mailjar::start(&[]);
    let cpu_before = cpu_time(memory.pid());
    let memory_time = smtp_source(memory.smtp, sessions, messages, reuse);
    let memory_cpu = cpu_time(memory.pid()) - cpu_before;
    let stored = memory.health()["messages"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        stored, messages,
        "LOSS (memory): sent {messages}, stored {stored}"
    );
    drop(memory);

    let dir = temp_dir("ingest");
    let disk = Mailjar::start(&["--data-dir", dir.to_str().unwrap()]);
    let cpu_before = cpu_time(disk.pid());
    let disk_time = smtp_source(disk.smtp, sessions, messages, reuse);
    let disk_cpu = cpu_time(disk.pid()) - cpu_before;
    let health = disk.health();
    let stored = health["messages"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        stored, messages,
        "LOSS (--data-dir): sent {messages}, stored {stored}"
    );
    assert_eq!(health["storage"]["ok"], true, "{health}");
    stop(disk);
    // Everything acknowledged is on disk.
    let again = Mailjar::start(&["--data-dir", dir.to_str().unwrap()]);
    let reloaded = again.health()["messages"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        reloaded, messages,
        "LOSS after restart: {reloaded} of {messages}"
    );
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
    let rate = |t: Duration| messages as f64 / t.as_secs_f64();
    IngestPair {
        ratio: rate(disk_time) / rate(memory_time),
        disk_rate: rate(disk_time),
        memory_rate: rate(memory_time),
        disk_cpu_ms: per_1000(disk_cpu),
        memory_cpu_ms: per_1000(memory_cpu),
    }
}

/// Starts mailjar on `dir`; the wall time until `/health` answers, and the load time it logged.
fn timed_start(dir: &std::path::Path) -> (Mailjar, Duration, Option<u64>) {
    let (smtp, http) = (free_port(), free_port());
    let started = Instant::now();
    let mut child = Command::new(mailjar())
        .args([
            "--smtp-port",
            &smtp.to_string(),
            "--http-port",
            &http.to_string(),
        ])
        .args(["--log", "info", "--data-dir", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mailjar");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("loaded ").nth(1)
                && let Some(ms) = rest
                    .split(" in ")
                    .nth(1)
                    .and_then(|t| t.trim().trim_end_matches(" ms").trim().parse::<u64>().ok())
            {
                let _ = tx.send(ms);
            }
        }
    });
    // The listeners are bound before the load: wait for the first /health answer.
    wait_for_port(http);
    let (status, _) = http_get(http, "/health");
    assert_eq!(status, 200);
    let elapsed = started.elapsed();
    let logged = rx.recv_timeout(Duration::from_secs(5)).ok();
    (
        Mailjar {
            proc: Proc(child),
            smtp,
            http,
        },
        elapsed,
        logged,
    )
}

/// Python smtplib senders that print each acknowledged subject (shared with tests/persistence.rs).
const SENDERS: &str = include_str!("../../tests/common/smtplib_senders.py");

fn kill_under_load(senders: usize, seconds: f64) -> (usize, usize, usize) {
    let dir = temp_dir("kill9");
    let mailjar = Mailjar::start(&["--data-dir", dir.to_str().unwrap()]);
    let mut python = Command::new("python3")
        .arg("-c")
        .arg(SENDERS)
        .arg("127.0.0.1")
        .arg(mailjar.smtp.to_string())
        .arg(senders.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let stdout = python.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<std::collections::BTreeSet<String>>()
    });
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let _ = Command::new("kill")
        .args(["-KILL", &mailjar.pid().to_string()])
        .status();
    let mut proc = mailjar.proc;
    let _ = proc.0.wait();
    let _ = python.wait();
    let acknowledged = reader.join().unwrap_or_default();
    let again = Mailjar::start(&["--data-dir", dir.to_str().unwrap()]);
    let (status, body) = http_get(again.http, "/api/emails?view=summary");
    assert_eq!(status, 200);
    let list: serde_json::Value = serde_json::from_str(&body).expect("list JSON");
    let stored: std::collections::BTreeSet<String> = list["emails"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["subject"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let lost = acknowledged.difference(&stored).count();
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
    (acknowledged.len(), stored.len(), lost)
}

/// Runs the `ONLY=persist` section.
pub fn run(rounds: usize, messages: usize) {
    // PERSIST_SECTIONS=ingest,start,kill (the default: all three).
    let sections = std::env::var("PERSIST_SECTIONS").unwrap_or_else(|_| "ingest,start,kill".into());
    let section = |name: &str| sections.split(',').any(|s| s.trim() == name);
    if section("ingest") {
        ingest(rounds, messages);
    }
    if section("start") {
        start(rounds);
    }
    if section("kill") {
        kill(rounds);
    }
}

fn ingest(rounds: usize, messages: usize) {
    println!(
        "## --data-dir ingest, 2 KiB messages, {messages} per round, {rounds} rounds (ratio = --data-dir / memory-only, same round)"
    );
    // The server's CPU a message moves less with the machine than the rates do:
    // memory-only CPU / --data-dir CPU is what the ratio would be if mailjar's
    // own work were all that mattered.
    println!(
        "| sessions | connections | ratio per round | median ratio | target | --data-dir msg/s | memory msg/s | CPU ms / 1000 msgs, --data-dir / memory | CPU ratio per round | median CPU ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (reuse, target) in [(true, 0.6), (false, 0.8)] {
        let results: Vec<_> = (0..rounds)
            .map(|_| ingest_ratio(10, messages, reuse))
            .collect();
        let mut ratios: Vec<f64> = results.iter().map(|r| r.ratio).collect();
        let mut disk: Vec<f64> = results.iter().map(|r| r.disk_rate).collect();
        let mut memory: Vec<f64> = results.iter().map(|r| r.memory_rate).collect();
        let mut disk_cpu: Vec<f64> = results.iter().map(|r| r.disk_cpu_ms).collect();
        let mut memory_cpu: Vec<f64> = results.iter().map(|r| r.memory_cpu_ms).collect();
        let mut cpu_ratios: Vec<f64> = results
            .iter()
            .map(|r| r.memory_cpu_ms / r.disk_cpu_ms)
            .collect();
        let per_round = show(&ratios, 2);
        let cpu_per_round = show(&cpu_ratios, 2);
        println!(
            "| 10 | {} | {per_round} | {:.2} | >= {target} | {:.0} | {:.0} | {:.0} / {:.0} | {cpu_per_round} | {:.2} |",
            if reuse { "reused" } else { "new per message" },
            median(&mut ratios),
            median(&mut disk),
            median(&mut memory),
            median(&mut disk_cpu),
            median(&mut memory_cpu),
            median(&mut cpu_ratios)
        );
    }
    println!("zero loss: every round stored every message, in memory and after a restart on disk");
}

fn start(rounds: usize) {
    let stored = env_usize("PERSIST_STORED", 100_000);
    println!("\n## start with {stored} stored 2 KiB messages");
    let dir = temp_dir("start");
    let filler = Mailjar::start(&["--data-dir", dir.to_str().unwrap()]);
    smtp_source(filler.smtp, 20, stored, true);
    let health = filler.health();
    assert_eq!(health["messages"].as_u64(), Some(stored as u64), "{health}");
    let (_, body) = http_get(filler.http, "/api/emails?limit=1");
    let one: serde_json::Value = serde_json::from_str(&body).expect("list JSON");
    let raw = one["emails"][0]["size"].as_u64().unwrap_or(0);
    stop(filler);
    let mut times = Vec::new();
    let mut logged = Vec::new();
    let mut bytes = 0;
    for _ in 0..rounds {
        let (mailjar, elapsed, load_ms) = timed_start(&dir);
        let health = mailjar.health();
        assert_eq!(health["messages"].as_u64(), Some(stored as u64));
        bytes = health["storage"]["bytes"].as_u64().unwrap_or(0);
        times.push(elapsed.as_secs_f64() * 1000.0);
        logged.extend(load_ms.map(|ms| ms as f64));
        stop(mailjar);
    }
    println!(
        "start to the first /health answer: {} ms per round, median {:.0} ms (target <= 1000); logged load time median {:.0} ms",
        times
            .iter()
            .map(|t| format!("{t:.0}"))
            .collect::<Vec<_>>()
            .join(" "),
        median(&mut times.clone()),
        median(&mut logged)
    );
    println!(
        "database {:.1} MiB (file + WAL) for {stored} messages: {:.0} bytes a message, raw {raw} bytes: {:.2}x raw",
        mib(bytes),
        bytes as f64 / stored as f64,
        bytes as f64 / stored as f64 / raw.max(1) as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn kill(rounds: usize) {
    let senders = env_usize("PERSIST_SENDERS", 8);
    println!(
        "\n## kill -9 under load: {senders} Python smtplib senders, killed after 3 s, then restarted"
    );
    println!("| round | acknowledged (250) | stored after restart | lost |");
    println!("|---|---|---|---|");
    for round in 0..rounds {
        let (acknowledged, stored, lost) = kill_under_load(senders, 3.0);
        println!("| {} | {acknowledged} | {stored} | {lost} |", round + 1);
        assert_eq!(lost, 0, "acknowledged messages lost");
    }
}
