//! Clients that give up on a wait must not leave it parked.
//!
//! In its own test binary: it holds a thousand sockets open at once.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, message};

#[test]
fn a_thousand_abandoned_waits_are_all_cancelled() {
    const WAITS: usize = 1000;
    // A thousand parked waits and /health beside them: past the default cap of 1000 connections.
    let server = Server::start_with(&["--max-http-connections", "1100"]);
    let start = Instant::now();
    // In batches of a hundred, each parked before the next: the listener's
    // accept queue holds 128, and a burst past it costs a 1 s SYN retransmission.
    let mut streams = Vec::with_capacity(WAITS);
    for i in 0..WAITS {
        let mut stream = TcpStream::connect(server.http).expect("connect");
        let request = format!(
            "GET /api/emails/wait?to=abandoned{i}@example.test&timeoutMs=60000 HTTP/1.1\r\nHost: localhost\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .expect("write the wait");
        streams.push(stream);
        if streams.len().is_multiple_of(100) {
            server.poll_health("waits", streams.len() as u64, Duration::from_secs(10));
        }
    }
    let connected = start.elapsed();
    server.poll_health("waits", WAITS as u64, Duration::from_secs(10));
    println!(
        "{WAITS} waits sent in {connected:?}, all parked after {:?}",
        start.elapsed()
    );
    // Every client goes away without reading a byte.
    drop(streams);
    let closed = Instant::now();
    server.poll_health("waits", 0, Duration::from_secs(5));
    println!(
        "{WAITS} abandoned waits cancelled within {:?}",
        closed.elapsed()
    );
    // The server is still fine, and a message for one of them wakes nobody.
    let raw = message("a@example.test", "abandoned7@example.test", "too late", "x");
    server.send("a@example.test", &["abandoned7@example.test"], &raw);
    server.assert_latest("a@example.test", &["abandoned7@example.test"], &raw);
    assert_eq!(server.health()["waits"], 0);
}
