//! SMTP protocol edge cases over raw sockets against the real binary.

mod common;

use std::time::{Duration, Instant};

use common::{Server, Smtp, assert_stored, dot_unstuff, message};

#[test]
fn greeting_and_ehlo_reply_exactly() {
    let server = Server::start();
    let (mut smtp, greeting) = Smtp::connect(server.smtp);
    assert_eq!(greeting.wire, "220 local.test ESMTP mailjar ready\r\n");
    let ehlo = smtp.expect("EHLO client.e2e.test", 250);
    assert_eq!(
        ehlo.wire,
        "250-local.test greets client.e2e.test\r\n\
         250-PIPELINING\r\n\
         250-SIZE 26214400\r\n\
         250-8BITMIME\r\n\
         250-SMTPUTF8\r\n\
         250-ENHANCEDSTATUSCODES\r\n\
         250-CHUNKING\r\n\
         250 AUTH PLAIN LOGIN\r\n"
    );
    println!("EHLO reply as recorded:\n{}", ehlo.wire);
    smtp.expect("QUIT", 221);
    assert!(smtp.closed());

    // The host name and SIZE follow the flags.
    let server = Server::start_with(&["--domain", "mx.e2e.test", "--max-message-bytes", "1MiB"]);
    let (mut smtp, greeting) = Smtp::connect(server.smtp);
    assert_eq!(greeting.wire, "220 mx.e2e.test ESMTP mailjar ready\r\n");
    let ehlo = smtp.expect("EHLO c", 250);
    assert_eq!(ehlo.lines[0], "mx.e2e.test greets c");
    assert_eq!(ehlo.lines[2], format!("SIZE {}", 1024 * 1024));
}

#[test]
fn pipelined_commands_are_answered_in_order() {
    let server = Server::start();
    let first = message(
        "a@example.test",
        "b@example.test",
        "pipelined one",
        "one\n.dot",
    );
    let second = message("c@example.test", "d@example.test", "pipelined two", "two");
    let mut wire = b"EHLO e2e.test\r\nMAIL FROM:<a@example.test>\r\nRCPT TO:<b@example.test>\r\nRCPT TO:<b2@example.test>\r\nDATA\r\n".to_vec();
    wire.extend(common::dot_stuff(&first));
    wire.extend(b".\r\nNOOP\r\nMAIL FROM:<c@example.test>\r\nRCPT TO:<d@example.test>\r\nDATA\r\n");
    wire.extend(common::dot_stuff(&second));
    wire.extend(b".\r\nRSET\r\nQUIT\r\n");
    let mut smtp = server.smtp();
    smtp.write(&wire); // all of it in one write
    let codes: Vec<u16> = std::iter::from_fn(|| smtp.try_reply())
        .map(|r| r.code)
        .collect();
    assert_eq!(
        codes,
        [
            250, 250, 250, 250, 354, 250, 250, 250, 250, 354, 250, 250, 221
        ]
    );
    let emails = server.emails("");
    assert_eq!(emails.len(), 2);
    assert_stored(
        &emails[0],
        "a@example.test",
        &["b@example.test", "b2@example.test"],
        &first,
    );
    assert_stored(&emails[1], "c@example.test", &["d@example.test"], &second);
}

/// Each variant hides what would be a second transaction behind an end of DATA that is not CRLF.CRLF.
#[test]
fn smuggling_variants_never_end_data() {
    let server = Server::start();
    let variants: [(&str, &[u8]); 8] = [
        ("LF.LF", b"\n.\n"),
        ("CRLF.LF", b"\r\n.\n"),
        ("LF.CRLF", b"\n.\r\n"),
        ("CR.CR", b"\r.\r"),
        ("CRLF.CR", b"\r\n.\r"),
        ("CR.CRLF", b"\r.\r\n"),
        ("CRLF.NUL CRLF", b"\r\n.\0\r\n"),
        ("CRLF NUL.CRLF", b"\r\n\0.\r\n"),
    ];
    for (name, end) in variants {
        assert!(server.delete_all() <= 1);
        let mut data = b"From: a@example.test\r\nSubject: smuggling\r\n\r\nbefore".to_vec();
        data.extend_from_slice(end);
        data.extend_from_slice(
            b"MAIL FROM:<evil@example.test>\r\nRCPT TO:<victim@example.test>\r\nDATA\r\n\
              Subject: smuggled\r\n\r\nevil\r\n",
        );
        data.extend_from_slice(end);
        data.extend_from_slice(b"after\r\n.\r\nQUIT\r\n");
        let mut smtp = server.smtp();
        smtp.expect("EHLO e2e.test", 250);
        smtp.expect("MAIL FROM:<a@example.test>", 250);
        smtp.expect("RCPT TO:<b@example.test>", 250);
        smtp.expect("DATA", 354);
        smtp.write(&data);
        let replies: Vec<String> = std::iter::from_fn(|| smtp.try_reply())
            .map(|r| r.wire)
            .collect();
        assert_eq!(replies.len(), 2, "{name}: {replies:?}");
        assert!(replies[0].starts_with("250 2.0.0"), "{name}: {replies:?}");
        assert!(replies[1].starts_with("221"), "{name}: {replies:?}");
        let emails = server.emails("");
        assert_eq!(emails.len(), 1, "{name}: exactly one message");
        // What the server must store: everything before the real CRLF.CRLF, unstuffed.
        let text_end = data.len() - b".\r\nQUIT\r\n".len();
        let expected = dot_unstuff(&data[..text_end]);
        assert_stored(&emails[0], "a@example.test", &["b@example.test"], &expected);
        assert_eq!(emails[0]["subject"], "smuggling", "{name}");
    }
}

#[test]
fn bdat_chunks_with_last() {
    let server = Server::start();
    // BDAT text is taken as is: no dot-stuffing, and CRLF.CRLF inside it ends nothing.
    let chunk1 =
        b"From: a@example.test\r\nSubject: chunked\r\n\r\nfirst\r\n.\r\n..two dots\r\n".to_vec();
    let chunk2 = b"second\r\nno final CRLF".to_vec();
    let mut wire = format!(
        "EHLO e2e.test\r\nMAIL FROM:<a@example.test>\r\nRCPT TO:<b@example.test>\r\nBDAT {}\r\n",
        chunk1.len()
    )
    .into_bytes();
    wire.extend(&chunk1);
    wire.extend(format!("BDAT {} LAST\r\n", chunk2.len()).as_bytes());
    wire.extend(&chunk2);
    wire.extend(b"QUIT\r\n");
    let mut smtp = server.smtp();
    smtp.write(&wire);
    let replies: Vec<_> = std::iter::from_fn(|| smtp.try_reply()).collect();
    let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 250, 250, 250, 221], "{replies:?}");
    let raw = [chunk1, chunk2].concat();
    assert_eq!(
        replies[4].lines[0],
        format!("2.0.0 Message accepted ({} bytes)", raw.len())
    );
    assert_stored(
        &server.latest(),
        "a@example.test",
        &["b@example.test"],
        &raw,
    );
    assert_eq!(server.health()["messages"], 1);
}

#[test]
fn bdat_then_bdat_zero_last() {
    let server = Server::start();
    let chunk = message(
        "a@example.test",
        "b@example.test",
        "zero last",
        "body\n.\nend",
    );
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    smtp.expect("MAIL FROM:<a@example.test>", 250);
    smtp.expect("RCPT TO:<b@example.test>", 250);
    smtp.write(format!("BDAT {}\r\n", chunk.len()).as_bytes());
    smtp.write(&chunk);
    assert_eq!(smtp.reply().code, 250);
    smtp.expect("BDAT 0 LAST", 250);
    smtp.expect("QUIT", 221);
    assert_stored(
        &server.latest(),
        "a@example.test",
        &["b@example.test"],
        &chunk,
    );
}

#[test]
fn idle_connection_gets_421_after_the_idle_timeout() {
    let server = Server::start_with(&["--idle-timeout", "300ms"]);
    let mut smtp = server.smtp();
    // Activity keeps the connection open past the timeout (600 ms of NOOPs, 100 ms apart).
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(100));
        smtp.expect("NOOP", 250);
    }
    let start = Instant::now();
    let reply = smtp.reply();
    let waited = start.elapsed();
    assert_eq!(reply.code, 421);
    assert!(reply.lines[0].starts_with("4.4.2"), "{}", reply.wire);
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert!(smtp.closed());
}

#[test]
fn connection_cap_refuses_with_421_and_frees_slots() {
    let server = Server::start_with(&["--max-connections", "2"]);
    let mut first = server.smtp();
    let mut second = server.smtp();
    let (mut third, refused) = Smtp::connect(server.smtp);
    assert_eq!(refused.code, 421, "{}", refused.wire);
    assert!(refused.lines[0].starts_with("4.7.0"), "{}", refused.wire);
    assert!(third.closed());
    first.expect("QUIT", 221);
    assert!(first.closed());
    // The slot comes back once the server has seen the close.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut fresh = loop {
        let (mut smtp, reply) = Smtp::connect(server.smtp);
        if reply.code == 220 {
            break smtp;
        }
        assert!(smtp.closed());
        assert!(Instant::now() < deadline, "no slot freed: {}", reply.wire);
        std::thread::sleep(Duration::from_millis(20));
    };
    fresh.expect("EHLO e2e.test", 250);
    second.expect("NOOP", 250);
    let raw = message("a@example.test", "b@example.test", "after the cap", "x");
    assert_eq!(
        fresh
            .transaction("a@example.test", &["b@example.test"], &raw)
            .code,
        250
    );
    assert_stored(
        &server.latest(),
        "a@example.test",
        &["b@example.test"],
        &raw,
    );
}

#[test]
fn twenty_bad_commands_in_a_row_close_the_connection() {
    let server = Server::start();
    let mut smtp = server.smtp();
    // 19 bad ones, then a good one resets the count.
    smtp.write(&b"BOGUS\r\n".repeat(19));
    for _ in 0..19 {
        assert_eq!(smtp.reply().code, 502);
    }
    smtp.expect("NOOP", 250);
    smtp.write(&b"MAIL NONSENSE\r\nBOGUS\r\n".repeat(10));
    let replies: Vec<_> = std::iter::from_fn(|| smtp.try_reply()).collect();
    let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
    assert_eq!(codes.len(), 21, "{replies:?}");
    assert!(
        codes[..20].iter().all(|&c| c == 501 || c == 502),
        "{codes:?}"
    );
    assert_eq!(codes[20], 421, "{replies:?}");
    assert!(replies[20].lines[0].starts_with("4.7.0"));
}

#[test]
fn overlong_command_line_and_too_many_recipients() {
    let server = Server::start_with(&["--max-recipients", "2"]);
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let long = format!("MAIL FROM:<{}@example.test>", "a".repeat(5000));
    let reply = smtp.expect(&long, 500);
    assert!(reply.lines[0].starts_with("5.5.6"), "{}", reply.wire);
    smtp.expect("MAIL FROM:<a@example.test>", 250);
    smtp.expect("RCPT TO:<one@example.test>", 250);
    smtp.expect("RCPT TO:<two@example.test>", 250);
    smtp.expect("RCPT TO:<three@example.test>", 452);
    let raw = message("a@example.test", "one@example.test", "two recipients", "x");
    smtp.expect("DATA", 354);
    smtp.write(&common::dot_stuff(&raw));
    assert_eq!(smtp.cmd(".").code, 250);
    assert_stored(
        &server.latest(),
        "a@example.test",
        &["one@example.test", "two@example.test"],
        &raw,
    );
}

#[test]
fn sigterm_sends_421_to_idle_clients_and_exits_zero() {
    let mut server = Server::start();
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    // A client in the middle of DATA, and a parked wait.
    let mut sending = server.smtp();
    sending.expect("EHLO e2e.test", 250);
    sending.expect("MAIL FROM:<a@example.test>", 250);
    sending.expect("RCPT TO:<b@example.test>", 250);
    sending.expect("DATA", 354);
    sending.write(b"Subject: in flight\r\n\r\nfirst half\r\n");
    let mut wait = std::net::TcpStream::connect(server.http).unwrap();
    wait.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
    std::io::Write::write_all(
        &mut wait,
        b"GET /api/emails/wait?to=never@example.test&timeoutMs=60000 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .unwrap();
    server.poll_health("waits", 1, Duration::from_secs(5));

    let start = Instant::now();
    server.sigterm();
    let reply = smtp.reply();
    assert_eq!(reply.code, 421, "{}", reply.wire);
    assert!(reply.lines[0].starts_with("4.3.2"), "{}", reply.wire);
    assert!(smtp.closed());
    // The parked wait is answered, not dropped.
    let response = common::read_http_response(&mut wait);
    assert_eq!(response.status, 503, "{}", response.body);
    response.assert_json_contract("wait during shutdown");
    // The message in flight is finished and acknowledged, then the connection is closed.
    sending.write(b"second half\r\n.\r\n");
    let accepted = sending.reply();
    assert_eq!(accepted.code, 250, "{}", accepted.wire);
    assert_eq!(sending.reply().code, 421);
    assert!(sending.closed());
    let status = server
        .wait_exit(Duration::from_secs(2).saturating_sub(start.elapsed()))
        .expect("the process exits within 2 s of SIGTERM");
    assert_eq!(status.code(), Some(0), "{status}");
}
