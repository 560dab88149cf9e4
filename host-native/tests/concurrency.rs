//! Concurrent SMTP clients and concurrent waits against the real binary.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Server, message};

#[test]
fn receive_order_under_eight_concurrent_connections() {
    const CONNECTIONS: usize = 8;
    const PER_CONNECTION: usize = 25;
    let server = Server::start();
    std::thread::scope(|scope| {
        for c in 0..CONNECTIONS {
            let server = &server;
            scope.spawn(move || {
                let mut smtp = server.smtp();
                smtp.expect("EHLO e2e.test", 250);
                let from = format!("conn{c}@example.test");
                for seq in 0..PER_CONNECTION {
                    let raw = message(
                        &from,
                        "order@example.test",
                        &format!("conn {c} seq {seq}"),
                        "x",
                    );
                    let reply = smtp.transaction(&from, &["order@example.test"], &raw);
                    assert_eq!(reply.code, 250, "{}", reply.wire);
                }
                smtp.expect("QUIT", 221);
            });
        }
    });
    let emails = server.emails("");
    assert_eq!(emails.len(), CONNECTIONS * PER_CONNECTION);
    let mut next_seq: HashMap<usize, usize> = HashMap::new();
    for email in &emails {
        let subject = email["subject"].as_str().unwrap();
        let words: Vec<&str> = subject.split(' ').collect();
        let (c, seq): (usize, usize) = (words[1].parse().unwrap(), words[3].parse().unwrap());
        let expected = next_seq.entry(c).or_insert(0);
        assert_eq!(seq, *expected, "connection {c}: messages out of send order");
        *expected += 1;
        assert_eq!(email["envelope"]["from"], format!("conn{c}@example.test"));
    }
    assert!(
        next_seq.values().all(|&n| n == PER_CONNECTION),
        "{next_seq:?}"
    );
    let ids: Vec<&str> = emails.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids strictly increasing in list order"
    );
    let received: Vec<&str> = emails
        .iter()
        .map(|e| e["receivedAt"].as_str().unwrap())
        .collect();
    assert!(
        received.windows(2).all(|w| w[0] <= w[1]),
        "receivedAt never goes back"
    );
    // limit picks the newest, still in receive order.
    let newest: Vec<&str> = ids[ids.len() - 100..].to_vec();
    let limited = server.emails("limit=100");
    let limited: Vec<&str> = limited.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(limited, newest);
}

#[test]
fn a_hundred_concurrent_waits_each_get_their_own_message() {
    const WAITS: usize = 100;
    let server = Server::start();
    let n = common::nonce();
    let address = |i: usize| format!("waiter{i}.{n}@example.test");
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WAITS)
            .map(|i| {
                let server = &server;
                let to = address(i);
                scope.spawn(move || {
                    let response = server.get(&format!("/api/emails/wait?to={to}&timeoutMs=30000"));
                    assert_eq!(response.status, 200, "wait {i}: {}", response.body);
                    response.json()["email"].clone()
                })
            })
            .collect();
        server.poll_health("waits", WAITS as u64, Duration::from_secs(10));
        // Deliver in reverse order over two connections, to shake out any pairing by arrival.
        let mut raws = Vec::new();
        let mut smtp = server.smtp();
        smtp.expect("EHLO e2e.test", 250);
        for i in (0..WAITS).rev() {
            let to = address(i);
            let raw = message(
                "app@example.test",
                &to,
                &format!("for waiter {i}"),
                &format!("secret {i}"),
            );
            assert_eq!(smtp.transaction("app@example.test", &[&to], &raw).code, 250);
            raws.push((i, raw));
        }
        smtp.expect("QUIT", 221);
        raws.sort_by_key(|(i, _)| *i);
        for ((i, handle), (j, raw)) in handles.into_iter().enumerate().zip(raws) {
            assert_eq!(i, j);
            let email = handle.join().expect("wait thread");
            common::assert_stored(&email, "app@example.test", &[&address(i)], &raw);
            assert_eq!(email["subject"], format!("for waiter {i}"));
        }
    });
    assert_eq!(server.health()["waits"], 0);
}

/// `receivedAt` must agree with receive order (and with the time in the UUIDv7 ids):
/// eight connections each pipeline a burst of small messages, so deliveries race.
#[test]
fn received_at_never_goes_back_in_receive_order() {
    const CONNECTIONS: usize = 8;
    const PER_CONNECTION: usize = 400;
    let server = Server::start();
    std::thread::scope(|scope| {
        for c in 0..CONNECTIONS {
            let server = &server;
            scope.spawn(move || {
                let mut wire = b"EHLO e2e.test\r\n".to_vec();
                for seq in 0..PER_CONNECTION {
                    wire.extend(
                        b"MAIL FROM:<a@example.test>\r\nRCPT TO:<b@example.test>\r\nDATA\r\n",
                    );
                    wire.extend(format!("Subject: {c} {seq}\r\n\r\nx\r\n.\r\n").as_bytes());
                }
                wire.extend(b"QUIT\r\n");
                let mut smtp = server.smtp();
                smtp.write(&wire);
                let codes: Vec<u16> = std::iter::from_fn(|| smtp.try_reply())
                    .map(|r| r.code)
                    .collect();
                assert_eq!(codes.len(), 2 + 4 * PER_CONNECTION);
                assert!(codes.iter().all(|&c| c < 400), "{codes:?}");
            });
        }
    });
    let emails = server.emails("");
    assert_eq!(emails.len(), CONNECTIONS * PER_CONNECTION);
    for pair in emails.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a["id"].as_str() < b["id"].as_str());
        assert!(
            a["receivedAt"].as_str() <= b["receivedAt"].as_str(),
            "receivedAt goes back in receive order: {} ({}) then {} ({})",
            a["receivedAt"],
            a["id"],
            b["receivedAt"],
            b["id"]
        );
    }
}
