//! Faults over real sockets against the real binary: clients that vanish mid-message, slow and
//! stalled clients, more connections than the cap, a full store, and a flood of large messages.
//! Nothing acknowledged may be lost, nothing unacknowledged may be stored, and one bad client
//! must never hold up the others.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::{KeepAlive, RssSampler, Server, Smtp, connect_when_free, message};

/// How quickly an unrelated request must complete while a bad client is connected. Generous
/// for a loaded 2-core machine running debug builds; a server blocked by the bad client would
/// take seconds (the length of the slow client's session).
const QUICK: Duration = Duration::from_secs(1);

/// Runs `f` and returns how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// Reads from `stream` until what has been read contains `want`.
fn read_until(stream: &mut TcpStream, seen: &mut Vec<u8>, want: &[u8]) {
    let mut buf = [0u8; 4096];
    while !seen.windows(want.len()).any(|w| w == want) {
        let n = stream.read(&mut buf).expect("read a reply");
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(seen));
        seen.extend_from_slice(&buf[..n]);
    }
}

/// A raw SMTP conversation up to the point where the client vanishes. The server runs with one
/// slot: the connection before may still hold it for a moment after it closed, so a 421 is
/// retried until a deadline.
fn open_transaction(server: &Server) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut stream, mut seen) = loop {
        let mut stream = TcpStream::connect(server.smtp).unwrap();
        stream.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
        let mut seen = Vec::new();
        read_until(&mut stream, &mut seen, b"\r\n");
        if seen.starts_with(b"220 ") {
            break (stream, seen);
        }
        assert!(
            seen.starts_with(b"421 "),
            "{:?}",
            String::from_utf8_lossy(&seen)
        );
        assert!(Instant::now() < deadline, "no slot freed within 5 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    stream
        .write_all(
            b"EHLO vanish.test\r\nMAIL FROM:<a@example.test>\r\nRCPT TO:<b@example.test>\r\n",
        )
        .unwrap();
    read_until(&mut stream, &mut seen, b"250 2.1.5");
    stream
}

/// Waits (with a deadline) until `stream` has unread bytes, without consuming them.
fn wait_for_unread(stream: &TcpStream) {
    let mut byte = [0u8; 1];
    let n = stream.peek(&mut byte).expect("peek");
    assert!(n > 0, "the server closed instead of replying");
}

/// How the client goes away.
#[derive(Debug, Clone, Copy)]
enum Vanish {
    /// `close()` after reading everything: a FIN.
    Close,
    /// `close()` with a reply still unread in the receive buffer: the kernel sends a RST.
    Reset,
}

/// A client that disconnects in the middle of DATA or of a BDAT chunk leaves nothing stored and
/// frees its connection slot (the server runs with one slot only).
#[test]
fn disconnect_mid_data_or_mid_bdat_stores_nothing_and_frees_the_slot() {
    let server = Server::start_with(&["--max-connections", "1"]);
    let half = b"From: a@example.test\r\nSubject: half\r\n\r\nthe first half\r\n".as_slice();
    let cases: [(&str, Vanish); 6] = [
        ("DATA", Vanish::Close),
        ("DATA", Vanish::Reset),
        ("BDAT LAST", Vanish::Close),
        ("BDAT LAST", Vanish::Reset),
        ("second BDAT", Vanish::Close),
        ("second BDAT", Vanish::Reset),
    ];
    for (round, (command, vanish)) in cases.into_iter().enumerate() {
        let what = format!("{command} then {vanish:?}");
        let mut stream = open_transaction(&server);
        match command {
            "DATA" => {
                // DATA and half a message; the 354 is left unread for a reset.
                stream.write_all(b"DATA\r\n").unwrap();
                stream.write_all(half).unwrap();
            }
            "BDAT LAST" => {
                // A chunk announced as 1000 bytes, of which fewer arrive. BDAT sends no 354:
                // a pipelined NOOP before it leaves a reply to (not) read.
                stream.write_all(b"NOOP\r\nBDAT 1000 LAST\r\n").unwrap();
                stream.write_all(half).unwrap();
            }
            _ => {
                // One complete chunk (250), then half of the last one.
                let mut wire = format!("BDAT {}\r\n", half.len()).into_bytes();
                wire.extend_from_slice(half);
                wire.extend_from_slice(b"BDAT 1000 LAST\r\n");
                wire.extend_from_slice(half);
                stream.write_all(&wire).unwrap();
            }
        }
        wait_for_unread(&stream);
        match vanish {
            Vanish::Close => {
                let mut buf = [0u8; 512];
                let _ = stream.read(&mut buf);
                let _ = stream.shutdown(Shutdown::Both);
            }
            Vanish::Reset => {}
        }
        drop(stream);
        // The only slot comes back once the server has seen the disconnect.
        let (mut smtp, freed_in) = timed(|| connect_when_free(server.smtp, Duration::from_secs(5)));
        println!("{what}: slot freed after {freed_in:?}");
        let health = server.health();
        assert_eq!(health["messages"], 0, "{what}: nothing stored: {health}");
        assert!(server.emails("").is_empty(), "{what}");
        // The new connection works, and what it sends is the only message.
        smtp.expect("EHLO e2e.test", 250);
        let raw = message(
            "a@example.test",
            "b@example.test",
            &format!("after {round}"),
            "x",
        );
        assert_eq!(
            smtp.transaction("a@example.test", &["b@example.test"], &raw)
                .code,
            250
        );
        smtp.expect("QUIT", 221);
        server.assert_latest("a@example.test", &["b@example.test"], &raw);
        assert_eq!(server.delete_all(), 1, "{what}");
        assert!(smtp.closed());
    }
}

/// The idle timeout is per read: it limits how long the server waits for the next bytes, not
/// how long a command or a message may take. A client that trickles one byte every 300 ms with
/// `--idle-timeout 1s` keeps its session, across a command and the message text, for several
/// times the timeout; when it stops sending, it gets `421 4.4.2` about 1 s later and is closed,
/// and the message it was in the middle of is not stored. Meanwhile other SMTP clients and HTTP
/// requests are served as quickly as ever.
#[test]
fn slow_smtp_client_keeps_its_session_a_stalled_one_gets_421_others_are_not_held_up() {
    let server = Server::start_with(&["--idle-timeout", "1s"]);
    let trickle = |smtp: &mut Smtp, bytes: &[u8]| {
        for &b in bytes {
            smtp.write(&[b]);
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            let start = Instant::now();
            let mut smtp = server.smtp();
            trickle(&mut smtp, b"NOOP\r\n"); // 1.8 s for one command
            assert_eq!(smtp.reply().code, 250);
            smtp.expect("EHLO slow.test", 250);
            smtp.expect("MAIL FROM:<slow@example.test>", 250);
            smtp.expect("RCPT TO:<b@example.test>", 250);
            smtp.expect("DATA", 354);
            trickle(&mut smtp, b"Subject: trickled\r\n"); // 5.7 s of message text
            smtp.write(b"\r\nslowly\r\n.\r\n");
            let accepted = smtp.reply();
            assert_eq!(accepted.code, 250, "{}", accepted.wire);
            let session = start.elapsed();
            assert!(session > Duration::from_secs(5), "{session:?}");
            // Now a second message that stalls halfway.
            smtp.expect("MAIL FROM:<slow@example.test>", 250);
            smtp.expect("RCPT TO:<b@example.test>", 250);
            smtp.expect("DATA", 354);
            smtp.write(b"Subject: stalled\r\n\r\nhalf of it");
            let (reply, waited) = timed(|| smtp.reply());
            assert_eq!(reply.code, 421, "{}", reply.wire);
            assert!(reply.lines[0].starts_with("4.4.2"), "{}", reply.wire);
            assert!(
                waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
                "421 after {waited:?}, want about 1 s"
            );
            assert!(smtp.closed());
            println!("slow client: session of {session:?}, then 421 after {waited:?} of silence");
        });
        // While the slow client is connected: sends and queries are quick.
        let mut http = KeepAlive::new(server.http);
        let mut slowest = Duration::ZERO;
        let mut rounds = 0;
        while !slow.is_finished() {
            let raw = message(
                "fast@example.test",
                "b@example.test",
                &format!("fast {rounds}"),
                "x",
            );
            let ((), took) =
                timed(|| drop(server.send("fast@example.test", &["b@example.test"], &raw)));
            slowest = slowest.max(took);
            // Only the fast ones: the trickled message, to the same address, may
            // complete between this send and this query.
            let (response, took) =
                timed(|| http.get("/api/emails/latest?to=b@example.test&subject=fast"));
            assert_eq!(response.status, 200);
            assert_eq!(
                response.json()["email"]["subject"],
                format!("fast {rounds}")
            );
            slowest = slowest.max(took);
            rounds += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        slow.join().expect("slow client thread");
        println!("{rounds} sends and queries meanwhile, slowest {slowest:?}");
        assert!(rounds >= 20, "only {rounds} rounds");
        assert!(slowest < QUICK, "slowest send or query took {slowest:?}");
    });
    // The trickled message is stored whole; the stalled one is not.
    let slow = server.emails("subject=trickled");
    assert_eq!(slow.len(), 1);
    assert_eq!(slow[0]["raw"], "Subject: trickled\r\n\r\nslowly\r\n");
    assert!(server.emails("subject=stalled").is_empty());
}

/// A client that sends its request head slowly and never finishes it is cut off with a 408 JSON
/// error by the head timeout (`--http-head-timeout`), and other requests are served meanwhile.
#[test]
fn slow_http_head_is_cut_off_by_the_header_timeout_without_blocking_others() {
    /// The server's head timeout.
    const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
    let server = Server::start_with(&["--http-head-timeout", "2s"]);
    let mut stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(HEADER_TIMEOUT + Duration::from_secs(5)))
        .unwrap();
    let start = Instant::now();
    let mut writer = stream.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let head = "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        // One byte every 250 ms, never the blank line that ends the head.
        for _ in 0..80 {
            std::thread::sleep(Duration::from_millis(250));
            if writer.write_all(b"a").is_err() {
                return;
            }
        }
    });
    // Meanwhile, other requests are quick.
    let mut http = KeepAlive::new(server.http);
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let (response, took) = timed(|| http.get("/health"));
        assert_eq!(response.status, 200);
        slowest = slowest.max(took);
        let raw = message("a@example.test", "b@example.test", "meanwhile", "x");
        let ((), took) = timed(|| drop(server.send("a@example.test", &["b@example.test"], &raw)));
        slowest = slowest.max(took);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(slowest < QUICK, "slowest request took {slowest:?}");
    // The slow head gets no answer and the connection is closed.
    let mut rest = Vec::new();
    let ended = stream.read_to_end(&mut rest);
    let cut_after = start.elapsed();
    println!(
        "slow head cut after {cut_after:?} ({ended:?}, {:?}); others meanwhile: slowest {slowest:?}",
        String::from_utf8_lossy(&rest)
    );
    match ended {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(
        cut_after >= HEADER_TIMEOUT - Duration::from_millis(500)
            && cut_after < HEADER_TIMEOUT + Duration::from_secs(3),
        "cut off after {cut_after:?}, want about {HEADER_TIMEOUT:?}"
    );
    let answer = String::from_utf8_lossy(&rest);
    assert!(
        answer.starts_with("HTTP/1.1 408") && answer.contains("application/json"),
        "the slow head should get a 408 JSON error: {answer:?}"
    );
    assert!(answer.contains(r#"{"error":"#), "{answer:?}");
    trickler.join().unwrap();
}

/// Fifty connections over the cap at once: each gets `421 4.7.0` and is closed, the connections
/// that hold the slots keep working, HTTP answers quickly, and a slot freed later is usable.
#[test]
fn fifty_connections_over_the_cap_at_once_are_refused_and_the_service_stays_responsive() {
    const CAP: usize = 5;
    const EXTRA: usize = 50;
    let server = Server::start_with(&["--max-connections", &CAP.to_string()]);
    let mut held: Vec<Smtp> = (0..CAP).map(|_| server.smtp()).collect();
    let barrier = std::sync::Barrier::new(EXTRA);
    let refusals: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..EXTRA)
            .map(|_| {
                let barrier = &barrier;
                let addr = server.smtp;
                scope.spawn(move || {
                    barrier.wait();
                    let (mut smtp, reply) = Smtp::connect(addr);
                    assert!(smtp.closed(), "a refused connection is closed");
                    reply.wire
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for wire in &refusals {
        assert!(wire.starts_with("421 4.7.0 "), "{wire:?}");
    }
    let (health, took) = timed(|| server.health());
    assert!(took < QUICK, "/health took {took:?}");
    assert_eq!(health["messages"], 0);
    for smtp in &mut held {
        smtp.expect("NOOP", 250);
    }
    let raw = message("a@example.test", "b@example.test", "held slot", "x");
    held[0].expect("EHLO e2e.test", 250);
    assert_eq!(
        held[0]
            .transaction("a@example.test", &["b@example.test"], &raw)
            .code,
        250
    );
    server.assert_latest("a@example.test", &["b@example.test"], &raw);
    // Give one slot back: a new client gets it and sends normally.
    held.pop().unwrap().expect("QUIT", 221);
    let mut smtp = connect_when_free(server.smtp, Duration::from_secs(5));
    smtp.expect("EHLO e2e.test", 250);
    let raw = message("c@example.test", "d@example.test", "freed slot", "x");
    assert_eq!(
        smtp.transaction("c@example.test", &["d@example.test"], &raw)
            .code,
        250
    );
    server.assert_latest("c@example.test", &["d@example.test"], &raw);
    assert_eq!(server.health()["messages"], 2);
}

/// `--max-messages 5`: every message is still accepted, the oldest are evicted, and `/health`
/// counts what is kept, what was evicted and the limits.
#[test]
fn store_full_by_count_evicts_the_oldest_and_keeps_accepting() {
    let server = Server::start_with(&["--max-messages", "5"]);
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let mut sizes = Vec::new();
    for i in 0..8 {
        let raw = message("a@example.test", "b@example.test", &format!("n{i}"), "x");
        let reply = smtp.transaction("a@example.test", &["b@example.test"], &raw);
        assert_eq!(reply.code, 250, "message {i}: {}", reply.wire);
        sizes.push(raw.len() as u64);
        let health = server.health();
        let kept = (i + 1).min(5);
        assert_eq!(health["messages"], kept, "{health}");
        assert_eq!(health["evicted"], (i + 1) - kept, "{health}");
        let kept_raw: u64 = sizes[sizes.len() - kept..].iter().sum();
        let store_bytes = health["storeBytes"].as_u64().expect("storeBytes");
        assert!(store_bytes >= kept_raw, "{store_bytes} < {kept_raw}");
    }
    smtp.expect("QUIT", 221);
    let health = server.health();
    assert_eq!(health["limits"]["maxMessages"], 5);
    assert_eq!(health["limits"]["maxStoreBytes"], 512 * 1024 * 1024);
    assert_eq!(health["limits"]["maxMessageBytes"], 25 * 1024 * 1024);
    let subjects: Vec<String> = server
        .emails("")
        .iter()
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(subjects, ["n3", "n4", "n5", "n6", "n7"]);
    assert_eq!(server.delete_all(), 5);
    let health = server.health();
    assert_eq!(health["storeBytes"], 0, "{health}");
    assert_eq!(health["evicted"], 3, "deleting is not evicting: {health}");
}

/// `--max-store-bytes 64KiB --max-message-bytes 16KiB`: messages of 12 KiB are all accepted,
/// the store never holds more than 64 KiB, the oldest go first, and a 17 KiB message is a 552
/// that changes nothing.
#[test]
fn store_full_by_bytes_evicts_the_oldest_and_keeps_accepting() {
    const STORE: u64 = 64 * 1024;
    let server =
        Server::start_with(&["--max-store-bytes", "64KiB", "--max-message-bytes", "16KiB"]);
    let body =
        |n: usize| "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.\n".repeat(n);
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    const SENT: u64 = 20;
    for i in 0..SENT {
        let raw = message(
            "a@example.test",
            "b@example.test",
            &format!("big {i}"),
            &body(190),
        );
        assert!(raw.len() > 12 * 1024 && raw.len() < 13 * 1024);
        let reply = smtp.transaction("a@example.test", &["b@example.test"], &raw);
        assert_eq!(reply.code, 250, "message {i}: {}", reply.wire);
        let health = server.health();
        let (messages, evicted) = (
            health["messages"].as_u64().unwrap(),
            health["evicted"].as_u64().unwrap(),
        );
        let store_bytes = health["storeBytes"].as_u64().unwrap();
        assert_eq!(messages + evicted, i + 1, "{health}");
        assert!(store_bytes <= STORE, "{health}");
        assert!(store_bytes >= messages * raw.len() as u64, "{health}");
        assert!(messages >= 2.min(i + 1), "room for at least two: {health}");
    }
    let before = server.health();
    // Over the message limit: refused, and the store is as it was.
    let raw = message("a@example.test", "b@example.test", "too big", &body(270));
    assert!(raw.len() > 16 * 1024);
    smtp.expect("MAIL FROM:<a@example.test>", 250);
    smtp.expect("RCPT TO:<b@example.test>", 250);
    smtp.expect("DATA", 354);
    let mut data = common::dot_stuff(&raw);
    data.extend_from_slice(b".\r\n");
    smtp.write(&data);
    let refused = smtp.reply();
    assert_eq!(refused.code, 552, "{}", refused.wire);
    smtp.expect("QUIT", 221);
    let health = server.health();
    for field in ["messages", "storeBytes", "evicted"] {
        assert_eq!(health[field], before[field], "{field}: {health}");
    }
    assert_eq!(health["limits"]["maxStoreBytes"], STORE);
    assert_eq!(health["limits"]["maxMessageBytes"], 16 * 1024);
    assert_eq!(health["limits"]["maxMessages"], 100_000);
    // What is kept is the newest, in order.
    let kept = health["messages"].as_u64().unwrap();
    let subjects: Vec<String> = server
        .emails("")
        .iter()
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect();
    let want: Vec<String> = (SENT - kept..SENT).map(|i| format!("big {i}")).collect();
    assert_eq!(subjects, want);
    println!(
        "kept {kept} of {SENT} messages in {} of {STORE} bytes",
        health["storeBytes"]
    );
}

/// Sends messages of 20 MiB over two connections at once with `--max-message-bytes 21MiB`,
/// sampling the server's RSS (VmRSS) every 20 ms: every message gets a 250, the RSS stays under
/// 400 MiB, and the store stays within its byte limit, evicting the oldest.
///
/// The default run sends 8 messages (160 MiB) through a 64 MiB store: about 15 s with a debug
/// build, where one 20 MiB message takes about 1.8 s to receive and parse (0.2 s in release).
/// `MAILJAR_FLOOD_MESSAGES=200` runs the full flood, 4 GiB through a 256 MiB store; it needs a
/// release build to finish within a minute:
/// `MAILJAR_FLOOD_MESSAGES=200 cargo test --release -p mailjar --test faults flood -- --nocapture`.
#[test]
fn flood_of_twenty_mebibyte_messages_keeps_memory_bounded() {
    const MIB: u64 = 1024 * 1024;
    let (count, store_mib): (usize, u64) = match std::env::var("MAILJAR_FLOOD_MESSAGES") {
        Ok(n) => (n.parse().expect("MAILJAR_FLOOD_MESSAGES is a number"), 256),
        Err(_) => (8, 64),
    };
    let store_flag = format!("{store_mib}MiB");
    let server = Server::start_with(&[
        "--max-store-bytes",
        &store_flag,
        "--max-message-bytes",
        "21MiB",
    ]);
    // One 20 MiB body of 78-byte lines, built once (no line starts with a dot: no stuffing).
    let line = "The quick brown fox jumps over the lazy dog, again and again and again. 0123\r\n";
    let body = line.repeat((20 * MIB as usize) / line.len());
    let sampler = RssSampler::start(server.pid(), Duration::from_millis(20));
    let start = Instant::now();
    const CONNECTIONS: usize = 2;
    std::thread::scope(|scope| {
        for c in 0..CONNECTIONS {
            let (server, body) = (&server, &body);
            scope.spawn(move || {
                let mut smtp = server.smtp();
                smtp.expect("EHLO flood.test", 250);
                for i in (c..count).step_by(CONNECTIONS) {
                    smtp.expect("MAIL FROM:<flood@example.test>", 250);
                    smtp.expect("RCPT TO:<b@example.test>", 250);
                    smtp.expect("DATA", 354);
                    smtp.write(format!("Subject: flood {i}\r\n\r\n").as_bytes());
                    smtp.write(body.as_bytes());
                    smtp.write(b".\r\n");
                    let reply = smtp.reply();
                    assert_eq!(reply.code, 250, "message {i}: {}", reply.wire);
                }
                smtp.expect("QUIT", 221);
            });
        }
    });
    let sent_in = start.elapsed();
    let health = server.health();
    let peak_mib = sampler.peak_kib() / 1024;
    drop(sampler);
    let store_bytes = health["storeBytes"].as_u64().unwrap();
    println!(
        "{count} messages of {} bytes in {sent_in:?} ({:.0} MiB/s); peak RSS {peak_mib} MiB; \
         store {} messages, {:.1} MiB, {} evicted",
        body.len(),
        (count as f64 * body.len() as f64) / (MIB as f64) / sent_in.as_secs_f64(),
        health["messages"],
        store_bytes as f64 / MIB as f64,
        health["evicted"]
    );
    assert!(peak_mib < 400, "peak RSS {peak_mib} MiB");
    assert!(store_bytes <= store_mib * MIB, "{health}");
    assert_eq!(health["limits"]["maxStoreBytes"], store_mib * MIB);
    let messages = health["messages"].as_u64().unwrap();
    assert_eq!(messages + health["evicted"].as_u64().unwrap(), count as u64);
    assert!(messages >= 1);
    if count as u64 * 20 > store_mib {
        assert!(health["evicted"].as_u64().unwrap() > 0, "{health}");
    }
    // The newest is whole (only its size and subject: the JSON of 20 MiB is large enough).
    let newest = server.get_ok("/api/emails?limit=1")["emails"][0].clone();
    let subject = newest["subject"].as_str().unwrap();
    assert!(subject.starts_with("flood "), "{subject}");
    assert_eq!(
        newest["size"].as_u64(),
        Some((format!("{subject}\r\n\r\n").len() + "Subject: ".len() + body.len()) as u64)
    );
}
