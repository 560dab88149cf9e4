//! Helpers both benchmarks (`system`, `tls`) use: the environment, ports,
//! `/proc` readings and the figures' formatting. Included by each bench as
//! `mod common;` (a folder, so cargo does not take it for a bench of its own).

#![allow(dead_code)]

use std::io::BufRead;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The `mailjar` binary to measure: `MAILJAR_BIN` when set (to compare two
/// builds with the same bench), else the one cargo built for this bench.
pub fn mailjar() -> String {
    std::env::var("MAILJAR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mailjar").to_owned())
}

/// A count from the environment, or `default` when unset or not a number.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A loopback port nothing listens on (at the time of asking).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits (up to 10 s) until something accepts connections on a loopback port.
pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Resident memory in bytes (`VmRSS`), from /proc; 0 when unreadable.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The median (the upper one for an even count); sorts `values`.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Every value with `digits` decimals, space-separated (the "per round" column).
pub fn show(values: &[f64], digits: usize) -> String {
    values
        .iter()
        .map(|v| format!("{v:.digits$}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads one SMTP reply, all its lines (`250-...` up to `250 ...`).
pub fn read_reply(reader: &mut impl BufRead) -> String {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("SMTP reply");
        all.push_str(&line);
        if line.len() < 4 || line.as_bytes()[3] == b' ' {
            return all;
        }
    }
}
