//! `GET /metrics`: read by Python's `prometheus_client` parser (the one
//! Prometheus' own client library ships), after known traffic; the counters
//! must move by exactly that traffic, and only the admin may scrape.

mod common;
mod inboxes_common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use common::{Server, http_exchange};
use inboxes_common::{ADMIN, call};
use serde_json::Value;

/// A sample's name with its labels sorted, e.g. `x{a="1",b="2"}`.
type Samples = BTreeMap<String, f64>;

/// Parses the text format with `prometheus_client.parser`; fails on anything it rejects.
fn parse(text: &str) -> Samples {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[s.name + ("{" + labels + "}" if labels else "")] = s.value
print(json.dumps(out))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3 (with prometheus_client: scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape to the parser");
    let output = child.wait_with_output().expect("the parser ran");
    assert!(
        output.status.success(),
        "prometheus_client refused the scrape: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: BTreeMap<String, Value> =
        serde_json::from_slice(&output.stdout).expect("the parser's JSON");
    parsed
        .into_iter()
        .map(|(k, v)| (k, v.as_f64().expect("a number")))
        .collect()
}

/// `GET /metrics` with `token` (None: no credentials): the status and the body.
fn scrape(server: &Server, token: Option<&str>) -> (u16, Option<String>, String) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
        server.http
    );
    let response = http_exchange(server.http, request.as_bytes());
    let content_type = response.header("content-type").map(str::to_owned);
    (response.status, content_type, response.body)
}

fn scrape_ok(server: &Server, token: Option<&str>) -> Samples {
    let (status, content_type, body) = scrape(server, token);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        content_type.as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse(&body)
}

fn value(samples: &Samples, name: &str) -> f64 {
    samples.get(name).copied().unwrap_or(0.0)
}

/// How much each of `names` moved between two scrapes.
fn moved(before: &Samples, after: &Samples, name: &str) -> f64 {
    value(after, name) - value(before, name)
}

#[test]
fn counters_move_by_exactly_the_traffic_sent() {
    let server = Server::start_with(&["--max-messages", "4"]);
    let before = scrape_ok(&server, None);
    for name in [
        "mailjar_messages_received_total",
        "mailjar_messages_stored",
        "mailjar_store_bytes",
        "mailjar_waits",
        "mailjar_subscribers",
        "mailjar_smtp_connections",
        "mailjar_ingest_seconds_count",
        "mailjar_storage_write_seconds_count",
    ] {
        assert!(before.contains_key(name), "{name} is not in the scrape");
    }

    let sent = 5;
    for i in 0..sent {
        let raw = common::message("a@sender.test", "b@rcpt.test", &format!("m{i}"), "hi");
        server.send("a@sender.test", &["b@rcpt.test"], &raw);
    }
    // Two SMTP errors: RCPT before MAIL (503) and an unknown command (502).
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    smtp.expect("RCPT TO:<b@rcpt.test>", 503);
    smtp.expect("FROB", 502);
    smtp.expect("QUIT", 221);
    // One delete, and one 404.
    let latest = server.latest();
    let id = latest["id"].as_str().expect("id");
    let deleted = server.request("DELETE", &format!("/api/emails/{id}"));
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(server.get(&format!("/api/emails/{id}")).status, 404);
    let health = server.health();

    let after = scrape_ok(&server, None);
    let d = |name: &str| moved(&before, &after, name);
    assert_eq!(d("mailjar_messages_received_total"), f64::from(sent));
    assert_eq!(d("mailjar_ingest_seconds_count"), f64::from(sent));
    assert!(d("mailjar_ingest_seconds_sum") > 0.0);
    assert_eq!(
        d(r#"mailjar_ingest_seconds_bucket{le="+Inf"}"#),
        f64::from(sent)
    );
    // --max-messages 4: the fifth message evicted the first.
    assert_eq!(d("mailjar_messages_evicted_total"), 1.0);
    assert_eq!(d("mailjar_messages_deleted_total"), 1.0);
    assert_eq!(
        value(&after, "mailjar_messages_stored"),
        health["messages"].as_f64().expect("messages")
    );
    assert_eq!(
        value(&after, "mailjar_store_bytes"),
        health["storeBytes"].as_f64().expect("storeBytes")
    );
    assert_eq!(
        d(r#"mailjar_smtp_replies_total{code="354"}"#),
        f64::from(sent)
    );
    assert_eq!(d(r#"mailjar_smtp_replies_total{code="503"}"#), 1.0);
    assert_eq!(d(r#"mailjar_smtp_replies_total{code="502"}"#), 1.0);
    assert_eq!(
        d(r#"mailjar_smtp_replies_total{code="220"}"#),
        f64::from(sent + 1)
    );
    let http = |route: &str, status: u16| {
        d(&format!(
            r#"mailjar_http_requests_total{{route="{route}",status="{status}"}}"#
        ))
    };
    assert_eq!(http("/api/emails/:id", 200), 1.0, "the delete");
    assert_eq!(http("/api/emails/:id", 404), 1.0);
    assert_eq!(http("/api/emails/latest", 200), 1.0);
    assert_eq!(http("/health", 200), 1.0);
    // The first scrape is counted once it is answered.
    assert_eq!(http("/metrics", 200), 1.0);
    // No --data-dir: nothing is written to disk.
    assert_eq!(value(&after, "mailjar_storage_write_seconds_count"), 0.0);
}

#[test]
fn gauges_follow_open_connections_and_parked_waits() {
    let server = Server::start();
    let _open = server.smtp();
    let waiter = {
        let http = server.http;
        std::thread::spawn(move || {
            let request = format!(
                "GET /api/emails/wait?timeoutMs=5000 HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
            );
            http_exchange(http, request.as_bytes())
        })
    };
    server.poll_health("waits", 1, std::time::Duration::from_secs(5));
    let samples = scrape_ok(&server, None);
    assert_eq!(value(&samples, "mailjar_waits"), 1.0);
    assert_eq!(value(&samples, "mailjar_smtp_connections"), 1.0);
    let raw = common::message("a@sender.test", "b@rcpt.test", "wake", "hi");
    server.send("a@sender.test", &["b@rcpt.test"], &raw);
    assert_eq!(waiter.join().expect("the wait").status, 200);
}

#[test]
fn durable_writes_are_timed() {
    let dir = std::env::temp_dir().join(format!("mailjar-metrics-{}", common::nonce()));
    let dir_text = dir.to_str().expect("a UTF-8 temp path").to_owned();
    let server = Server::start_with(&["--data-dir", &dir_text]);
    for i in 0..3 {
        let raw = common::message("a@sender.test", "b@rcpt.test", &format!("d{i}"), "hi");
        server.send("a@sender.test", &["b@rcpt.test"], &raw);
    }
    let samples = scrape_ok(&server, None);
    assert_eq!(value(&samples, "mailjar_storage_write_seconds_count"), 3.0);
    assert_eq!(value(&samples, "mailjar_messages_received_total"), 3.0);
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn only_the_admin_scrapes_with_an_admin_token() {
    let server = inboxes_common::start(&[]);
    let (status, _, body) = scrape(&server, None);
    assert_eq!(status, 401, "{body}");
    let inbox = inboxes_common::inbox(&server, "team-a", &["*@team-a.test"]);
    let (status, _, body) = scrape(&server, Some(&inbox.token));
    assert_eq!(status, 403, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON error");
    assert_eq!(error["error"], "admin token required");
    scrape_ok(&server, Some(ADMIN));
    let post = call(&server, "POST", "/metrics", Some(ADMIN), None);
    assert_eq!(post.status, 405);
}
