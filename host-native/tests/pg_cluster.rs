//! Several mailjar nodes on one real PostgreSQL (`--database`): mail sent
//! to one node (Python's smtplib, the Rust SMTP helper) answers waits and
//! flows into event streams (curl) on the other; commits on both nodes at
//! once give one order with no gap and no duplicate for any cursor; deletes
//! and `--max-messages` are cluster-wide.

mod common;
mod pg;

use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::curl::curl_lines;
use common::{Server, run_smtplib};
use pg::load::send_codes;
use pg::{Nodes, Postgres, eventually};
use serde_json::Value;

/// Ids of the stored messages, in the list's (id) order.
fn ids(server: &Server, query: &str) -> Vec<String> {
    let query = if query.is_empty() {
        "view=summary".to_owned()
    } else {
        format!("view=summary&{query}")
    };
    server
        .emails(&query)
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect()
}

fn subjects(server: &Server) -> Vec<String> {
    server
        .emails("view=summary")
        .iter()
        .map(|e| e["subject"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// An event stream read by curl (with `Last-Event-ID` when given): its lines as they come.
fn stream(server: &Server, last_event_id: Option<&str>) -> (Child, mpsc::Receiver<String>) {
    let url = format!("http://{}/api/events", server.http);
    let header = last_event_id.map(|id| format!("Last-Event-ID: {id}"));
    match &header {
        Some(header) => curl_lines(&["-H", header, &url]),
        None => curl_lines(&[&url]),
    }
}

/// The ids of `stored` events read until `n` came (or 20 s passed), then
/// a short while more, to catch a duplicate.
fn stored_ids(rx: &mpsc::Receiver<String>, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut ids, mut event) = (Vec::new(), String::new());
    let mut settle = None;
    loop {
        let now = Instant::now();
        let until = settle.unwrap_or(deadline);
        if now >= until {
            return ids;
        }
        let Ok(line) = rx.recv_timeout(until - now) else {
            return ids;
        };
        if let Some(kind) = line.strip_prefix("event: ") {
            event = kind.to_owned();
        } else if let Some(id) = line.strip_prefix("id: ")
            && event == "stored"
        {
            ids.push(id.to_owned());
        }
        if ids.len() >= n && settle.is_none() {
            settle = Some(Instant::now() + Duration::from_millis(300));
        }
    }
}

/// A wait parked on `server` on its own connection, answered into the receiver.
fn park_wait(server: &Server, query: &str) -> mpsc::Receiver<(Value, Instant)> {
    let (tx, rx) = mpsc::channel();
    let http = server.http;
    let target = format!("/api/emails/wait?{query}");
    std::thread::spawn(move || {
        let request =
            format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let response = common::http_exchange(http, request.as_bytes());
        let _ = tx.send((response.json(), Instant::now()));
    });
    rx
}

#[test]
fn mail_sent_to_one_node_answers_a_wait_and_streams_once_in_order_on_the_other() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    let waiting = park_wait(&b, "subject=hello-7&timeoutMs=15000");
    let (mut curl, events) = stream(&b, None);
    // Let the stream and the wait be parked before the mail comes.
    std::thread::sleep(Duration::from_millis(300));
    let script = r#"
import smtplib
s = smtplib.SMTP(HOST, PORT)
for i in range(20):
    s.sendmail("app@app.test", ["user@local.test"], "Subject: hello-%d\r\n\r\nbody %d\r\n" % (i, i))
s.quit()
"#;
    run_smtplib(&a, script, &[], b"");
    let (found, _) = waiting
        .recv_timeout(Duration::from_secs(15))
        .expect("the wait on B is answered");
    assert_eq!(found["email"]["subject"], "hello-7", "{found}");
    let on_a = ids(&a, "");
    assert_eq!(on_a.len(), 20);
    assert!(eventually(Duration::from_secs(10), || ids(&b, "") == on_a));
    let streamed = stored_ids(&events, 20);
    let _ = curl.kill();
    assert_eq!(streamed, on_a, "B's stream: every message once, in order");
    let health = b.health();
    assert_eq!(health["storage"]["kind"], "postgres");
    assert_eq!(health["storage"]["ok"], true);
    let url = health["storage"]["url"].as_str().expect("url");
    assert!(!url.contains("secret"), "the password is not shown: {url}");
    assert_ne!(health["storage"]["node"], a.health()["storage"]["node"]);
}

#[test]
fn commits_on_both_nodes_at_once_give_one_order_for_every_cursor() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    let per = 150;
    let (codes_a, codes_b) = std::thread::scope(|s| {
        let on_a = s.spawn(|| send_codes(&a, "a", per, "hello"));
        let on_a2 = s.spawn(|| send_codes(&a, "a2", per, "hello"));
        let on_b = s.spawn(|| send_codes(&b, "b", per, "hello"));
        let on_b2 = s.spawn(|| send_codes(&b, "b2", per, "hello"));
        let mut codes_a = on_a.join().unwrap();
        codes_a.extend(on_a2.join().unwrap());
        let mut codes_b = on_b.join().unwrap();
        codes_b.extend(on_b2.join().unwrap());
        (codes_a, codes_b)
    });
    assert!(codes_a.iter().chain(&codes_b).all(|&c| c == 250));
    let total = 4 * per;
    assert!(eventually(Duration::from_secs(15), || {
        ids(&a, "").len() == total && ids(&b, "").len() == total
    }));
    let all = ids(&a, "");
    assert_eq!(ids(&b, ""), all, "one order on both nodes");
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, all, "in id order, no duplicate");
    let mut from_both: Vec<String> = subjects(&a);
    from_both.sort();
    from_both.dedup();
    assert_eq!(from_both.len(), total, "every message, once");
    for cut in [0, 1, total / 3, total / 2, total - 2] {
        let after = &all[cut];
        let query = format!("afterId={after}");
        let want = all[cut + 1..].to_vec();
        assert_eq!(ids(&a, &query), want, "A after #{cut}");
        assert_eq!(ids(&b, &query), want, "B after #{cut}");
    }
    // An event stream resumed on B after message #100 replays the rest once, in order.
    let (mut curl, events) = stream(&b, Some(&all[100]));
    let replayed = stored_ids(&events, total - 101);
    let _ = curl.kill();
    assert_eq!(replayed, all[101..].to_vec());
}

#[test]
fn deletes_and_message_limits_are_the_same_on_every_node() {
    let pg = Postgres::start();
    let a = pg.node(&["--max-messages", "10"]);
    let b = pg.node(&["--max-messages", "10"]);
    for round in 0..3 {
        assert!(
            send_codes(&a, &format!("a{round}"), 5, "hello")
                .iter()
                .all(|&c| c == 250)
        );
        assert!(
            send_codes(&b, &format!("b{round}"), 5, "hello")
                .iter()
                .all(|&c| c == 250)
        );
    }
    assert!(eventually(Duration::from_secs(10), || ids(&a, "") == ids(&b, "")));
    let kept = ids(&a, "");
    assert_eq!(kept.len(), 10);
    let newest: Vec<String> = (0..5)
        .map(|i| format!("a2-{i}"))
        .chain((0..5).map(|i| format!("b2-{i}")))
        .collect();
    assert_eq!(subjects(&a), newest, "the newest ten on A");
    assert_eq!(subjects(&b), newest, "the same newest ten on B");
    let stored = pg.psql("SELECT count(*) FROM mailjar_messages");
    assert_eq!(stored, "10", "evictions reach the database");
    // A delete on A disappears on B.
    let gone = &kept[3];
    assert_eq!(
        a.request("DELETE", &format!("/api/emails/{gone}")).status,
        200
    );
    assert!(eventually(Duration::from_secs(5), || !ids(&b, "").contains(gone)));
    assert_eq!(b.get(&format!("/api/emails/{gone}")).status, 404);
    // Clearing on B empties A.
    assert_eq!(b.delete_all(), 9);
    assert!(eventually(Duration::from_secs(5), || ids(&a, "").is_empty()));
    assert_eq!(pg.psql("SELECT count(*) FROM mailjar_messages"), "0");
}

#[test]
fn more_than_one_catch_up_step_of_large_messages_arrives_whole_and_in_order() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    // 12 MiB in all: more than one 8 MiB step, live on B and at C's start.
    let body = "x".repeat(1024 * 1024);
    assert_eq!(send_codes(&a, "big", 12, &body), [250; 12]);
    let on_a = ids(&a, "");
    assert!(eventually(Duration::from_secs(20), || ids(&b, "") == on_a));
    let c = pg.node(&[]);
    assert_eq!(ids(&c, ""), on_a);
    let sizes: Vec<u64> = c
        .emails("view=summary")
        .iter()
        .map(|e| e["size"].as_u64().unwrap_or(0))
        .collect();
    assert!(sizes.iter().all(|&s| s > 1024 * 1024), "{sizes:?}");
}
