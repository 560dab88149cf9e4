//! Hostile SMTP clients against the real binary (issue 9, findings 3, 11, 12):
//! the budget of bytes in flight bounds the memory of many unfinished
//! messages, paths over 256 octets are refused, a command line or a message
//! trickled in slowly is cut off by its deadline, and EHLO is echoed without
//! control characters.

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{Server, Smtp};

/// A figure of `/proc/<pid>/status` in KiB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

const MIB: u64 = 1024;

/// An SMTP connection with its greeting read, up to the 354 of DATA.
fn open_data(server: &Server) -> Smtp {
    let mut smtp = server.smtp();
    smtp.set_nodelay();
    smtp.expect("EHLO attacker.test", 250);
    smtp.expect("MAIL FROM:<a@attacker.test>", 250);
    smtp.expect("RCPT TO:<victim@local.test>", 250);
    smtp.expect("DATA", 354);
    smtp
}

#[test]
fn unfinished_messages_are_bounded_by_the_inflight_budget() {
    const CONNECTIONS: usize = 300;
    const PER_CONNECTION: usize = 3 * 1024 * 1024;
    const STORE_MIB: u64 = 64;
    const BUDGET_MIB: u64 = 16;
    let server = Server::start_with(&[
        "--max-store-bytes",
        "64MiB",
        "--max-inflight-bytes",
        "16MiB",
        "--max-message-bytes",
        "8MiB",
    ]);
    let pid = server.pid();
    let started_kib = status_kib(pid, "VmRSS");

    // The per-connection constant: what an open connection in DATA costs before any text.
    let mut connections: Vec<Smtp> = (0..CONNECTIONS).map(|_| open_data(&server)).collect();
    let open_kib = status_kib(pid, "VmRSS");
    let per_connection_kib = open_kib.saturating_sub(started_kib) / CONNECTIONS as u64;
    eprintln!(
        "RSS at start {started_kib} KiB, with {CONNECTIONS} connections in DATA {open_kib} KiB: ~{per_connection_kib} KiB each"
    );

    // Every attacker sends its text without the final dot, then all wait.
    let line = {
        let mut l = vec![b'x'; 1022];
        l.extend_from_slice(b"\r\n");
        l.repeat(64)
    };
    let line = Arc::new(line);
    let barrier = Arc::new(Barrier::new(CONNECTIONS + 1));
    let finished = Arc::new(Barrier::new(CONNECTIONS + 1));
    let attackers: Vec<_> = connections
        .drain(..)
        .map(|mut smtp| {
            let (line, barrier, finished) = (line.clone(), barrier.clone(), finished.clone());
            std::thread::spawn(move || {
                let mut sent = 0;
                while sent < PER_CONNECTION {
                    smtp.write(&line);
                    sent += line.len();
                }
                barrier.wait();
                finished.wait();
                smtp.write(b".\r\n");
                let reply = smtp.reply();
                smtp.expect("RSET", 250);
                reply
            })
        })
        .collect();
    barrier.wait();
    // Every attacker has written its text; what the server has read of it, it holds or dropped.
    // A normal client meanwhile still gets its small message stored.
    let raw = common::message(
        "app@app.test",
        "user@local.test",
        "during the attack",
        "hello",
    );
    let reply = server.send("app@app.test", &["user@local.test"], &raw);
    assert_eq!(reply.code, 250, "{}", reply.wire);
    finished.wait();
    let replies: Vec<common::Reply> = attackers
        .into_iter()
        .map(|t| t.join().expect("attacker thread"))
        .collect();
    let refused = replies.iter().filter(|r| r.code == 452).count();
    for reply in &replies {
        assert!(
            reply.code == 250
                || reply
                    .wire
                    .starts_with("452 4.3.1 Insufficient system storage"),
            "{}",
            reply.wire
        );
    }
    assert!(refused > 0, "no attacker was refused");

    // Read before anything else asks the server for a big answer.
    let peak_kib = status_kib(pid, "VmHWM");
    // store + budget + connections x (read buffer + free allowance + twice the measured
    // constant), plus what storing a message of 3 MiB costs for a moment (its parse, a few
    // times its size), over the RSS at start.
    let per_connection_bound_kib = 16 + 16 + per_connection_kib.max(16) * 2;
    let bound_kib = started_kib
        + (STORE_MIB + BUDGET_MIB) * MIB
        + CONNECTIONS as u64 * per_connection_bound_kib
        + 4 * 3 * MIB;
    eprintln!(
        "peak RSS {peak_kib} KiB ({} MiB), bound {bound_kib} KiB ({} MiB); {refused} of {CONNECTIONS} refused with 452",
        peak_kib / MIB,
        bound_kib / MIB
    );
    assert!(
        peak_kib <= bound_kib,
        "peak RSS {peak_kib} KiB over the bound {bound_kib} KiB"
    );

    // What was acknowledged is whole: the newest message is an attacker's with every byte,
    // or, when every attacker was refused, the normal client's.
    let newest = server.latest();
    let raw = newest["raw"].as_str().expect("raw");
    if refused < CONNECTIONS {
        assert_eq!(
            raw.len(),
            PER_CONNECTION,
            "an acknowledged message is whole"
        );
    } else {
        assert!(raw.ends_with("hello\r\n"), "{raw:?}");
    }
}

#[test]
fn paths_over_256_octets_get_501() {
    let server = Server::start();
    let mut smtp = server.smtp();
    smtp.expect("EHLO c.test", 250);
    let path = |octets: usize| format!("{}@x.test", "a".repeat(octets - 2 - "@x.test".len()));
    let reply = smtp.expect(&format!("MAIL FROM:<{}>", path(257)), 501);
    assert!(reply.wire.starts_with("501 5.1.7 "), "{}", reply.wire);
    smtp.expect(&format!("MAIL FROM:<{}>", path(256)), 250);
    let reply = smtp.expect(&format!("RCPT TO:<{}>", path(257)), 501);
    assert!(reply.wire.starts_with("501 5.1.3 "), "{}", reply.wire);
    smtp.expect(&format!("RCPT TO:<{}>", path(256)), 250);
    smtp.expect("QUIT", 221);
}

/// On a raw connection: sends `setup` (reading the greeting and one reply per line
/// of it), then writes `trickle` one byte every `every` until the server answers;
/// returns that answer, the time since the first trickled byte, and whether the
/// server then closed the connection.
fn trickle(
    addr: std::net::SocketAddr,
    setup: &[&str],
    trickle: &[u8],
    every: Duration,
) -> (String, Duration, bool) {
    use std::io::{BufRead, BufReader, Read, Write};
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let read_reply = |reader: &mut BufReader<std::net::TcpStream>| {
        let mut wire = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("read a reply");
            wire.push_str(&line);
            if line.len() < 4 || line.as_bytes()[3] != b'-' {
                return wire;
            }
        }
    };
    reader
        .get_ref()
        .set_read_timeout(Some(common::IO_TIMEOUT))
        .unwrap();
    assert!(read_reply(&mut reader).starts_with("220"));
    for line in setup {
        writer.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        let reply = read_reply(&mut reader);
        assert!(
            reply.starts_with('2') || reply.starts_with('3'),
            "{line}: {reply}"
        );
    }
    // Waiting for a reply between bytes is the pause between them.
    reader.get_ref().set_read_timeout(Some(every)).unwrap();
    let start = Instant::now();
    let mut bytes = trickle.iter().cycle();
    loop {
        let byte = *bytes.next().expect("cycle");
        // The server may have closed already: a failed write is fine, the reply tells.
        let _ = writer.write_all(&[byte]);
        let mut peek = [0u8; 1];
        match reader.get_ref().peek(&mut peek) {
            Ok(n) if n > 0 => break,
            Ok(_) => panic!("closed without a reply after {:?}", start.elapsed()),
            Err(_) => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no reply after a minute of trickling"
        );
    }
    let elapsed = start.elapsed();
    reader
        .get_ref()
        .set_read_timeout(Some(common::IO_TIMEOUT))
        .unwrap();
    let reply = read_reply(&mut reader);
    let mut rest = Vec::new();
    let closed = reader.read_to_end(&mut rest).is_ok() && rest.is_empty();
    (reply, elapsed, closed)
}

#[test]
fn a_trickled_command_line_is_cut_off_by_its_deadline() {
    let server = Server::start_with(&["--smtp-command-timeout", "2s", "--idle-timeout", "5m"]);
    let mut smtp = server.smtp();
    // Whole lines spread over more than the deadline are fine: it counts per line.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        smtp.expect("NOOP", 250);
        std::thread::sleep(Duration::from_millis(500));
    }
    smtp.expect("QUIT", 221);
    // One line, one byte every 300 ms: the idle timer never fires, the line's deadline does.
    let (reply, elapsed, closed) = trickle(
        server.smtp,
        &["EHLO slow.test"],
        b"NOOP and never an end ",
        Duration::from_millis(300),
    );
    assert!(
        reply.starts_with("421 4.4.2 Command line took too long"),
        "{reply}"
    );
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert!(closed, "the connection is closed after the 421");
}

#[test]
fn a_trickled_message_is_cut_off_by_its_deadline() {
    let server = Server::start_with(&[
        "--smtp-data-timeout",
        "3s",
        "--smtp-command-timeout",
        "2s",
        "--idle-timeout",
        "5m",
    ]);
    let (reply, elapsed, closed) = trickle(
        server.smtp,
        &[
            "EHLO slow.test",
            "MAIL FROM:<a@slow.test>",
            "RCPT TO:<b@local.test>",
            "DATA",
        ],
        b"line\r\n",
        Duration::from_millis(300),
    );
    assert!(
        reply.starts_with("421 4.4.2 Message data took too long"),
        "{reply}"
    );
    assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
    assert!(closed, "the connection is closed after the 421");
    assert!(server.emails("").is_empty(), "nothing was stored");
    // The same with BDAT: the deadline runs from the first chunk over all of them.
    let mut smtp = server.smtp();
    smtp.expect("EHLO slow.test", 250);
    smtp.expect("MAIL FROM:<a@slow.test>", 250);
    smtp.expect("RCPT TO:<b@local.test>", 250);
    let start = Instant::now();
    let reply = loop {
        smtp.write(b"BDAT 1\r\nx");
        let reply = smtp.reply();
        if reply.code != 250 {
            break reply;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no deadline");
        std::thread::sleep(Duration::from_millis(400));
    };
    assert!(
        reply
            .wire
            .starts_with("421 4.4.2 Message data took too long"),
        "{}",
        reply.wire
    );
    assert!(start.elapsed() >= Duration::from_secs(3));
    assert!(smtp.closed());
    assert!(server.emails("").is_empty(), "nothing was stored");
}

#[test]
fn ehlo_is_echoed_without_control_characters() {
    let server = Server::start();
    let mut smtp = server.smtp();
    let reply = smtp.expect("EHLO a\x1b[31mb\x1b]0;title\x07c", 250);
    assert!(
        !reply
            .wire
            .contains(|c: char| c.is_control() && c != '\r' && c != '\n'),
        "{:?}",
        reply.wire
    );
    assert_eq!(reply.lines[0], "local.test greets a?[31mb?]0;title?c");
    let reply = smtp.expect("HELO \u{202e}evil.test", 250);
    assert_eq!(reply.lines[0], "local.test greets ?evil.test");
}
