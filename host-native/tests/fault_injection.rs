//! Fault injection (`/api/faults`) against the real binary, seen by real clients: Python's
//! smtplib raises the exception it raises for a real server's refusal, swaks shows the reply,
//! curl adds the rules; a disconnect stores nothing, a delay holds the reply back, and rules for
//! other recipients leave the rest of the mail alone while many clients send at once.
//! (host-native/tests/faults.rs is about clients that misbehave; this file is about a server
//! that is told to.)

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Http, Server, Smtp, http_exchange, message, nonce, run_ok};
use serde_json::{Value, json};

/// `POST /api/faults` with `rule` as its JSON body; the response.
fn post_fault(server: &Server, rule: &Value) -> Http {
    server.post_json("/api/faults", &rule.to_string())
}

/// Adds a rule, which must be accepted; its id.
fn add_fault(server: &Server, rule: Value) -> String {
    let response = post_fault(server, &rule);
    assert_eq!(response.status, 200, "{rule}: {}", response.body);
    let id = response.json()["fault"]["id"].as_str().map(str::to_owned);
    id.expect("the rule's id")
}

/// What the scripts below start with: `PORT`, and `attempts(to, subject, body,
/// tries)`, which sends one message with smtplib until it goes through, at most
/// `tries` times, and lists what each try gave: `"sent"`, `"disconnected"`, or
/// `[error class, code, text]`.
const PY_PRELUDE: &str = r#"import json, smtplib, sys
PORT = int(sys.argv[1])

def attempts(to, subject, body, tries):
    out = []
    for _ in range(tries):
        try:
            with smtplib.SMTP("127.0.0.1", PORT) as s:
                s.sendmail("app@x.test", [to], f"Subject: {subject}\r\n\r\n{body}\r\n")
            out.append("sent")
            break
        except smtplib.SMTPResponseException as e:
            out.append([type(e).__name__, e.smtp_code, e.smtp_error.decode()])
        except smtplib.SMTPServerDisconnected:
            out.append("disconnected")
    return out
"#;

/// Runs a Python script after [`PY_PRELUDE`] with the SMTP port; its stdout parsed as JSON.
fn python(server: &Server, script: &str) -> Value {
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(format!("{PY_PRELUDE}{script}"))
            .arg(server.smtp.port().to_string()),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn stored_to(server: &Server, to: &str) -> Vec<Value> {
    server.emails(&format!("to={}", common::enc(to)))
}

#[test]
fn smtplib_sees_a_rejected_recipient_and_the_other_recipient_gets_the_mail() {
    let server = Server::start();
    let n = nonce();
    let (bob, carol) = (format!("bob{n}@x.test"), format!("carol{n}@x.test"));
    add_fault(
        &server,
        json!({"match": {"to": bob.to_uppercase()}, "stage": "rcpt", "times": null,
               "action": {"reply": {"code": 550, "text": "5.1.1 No such user"}}}),
    );
    let script = r#"
bob, carol = sys.argv[2], sys.argv[3]
out = {}
with smtplib.SMTP("127.0.0.1", PORT) as s:
    try:
        s.sendmail("app@x.test", [bob], "Subject: only bob\r\n\r\nhi\r\n")
        out["only"] = "sent"
    except smtplib.SMTPRecipientsRefused as e:
        out["only"] = {k: [v[0], v[1].decode()] for k, v in e.recipients.items()}
    refused = s.sendmail("app@x.test", [bob, carol], "Subject: both\r\n\r\nhi\r\n")
    out["both"] = {k: [v[0], v[1].decode()] for k, v in refused.items()}
print(json.dumps(out))
"#;
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import json, smtplib, sys\nPORT = int(sys.argv[1])\n{script}"
            ))
            .args([&server.smtp.port().to_string(), &bob, &carol]),
    );
    let out: Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(
        out["only"][&bob],
        json!([550, "5.1.1 No such user"]),
        "{out}"
    );
    assert_eq!(
        out["both"][&bob],
        json!([550, "5.1.1 No such user"]),
        "{out}"
    );
    assert!(out["both"].get(&carol).is_none(), "{out}");
    let to_carol = stored_to(&server, &carol);
    assert_eq!(to_carol.len(), 1);
    assert_eq!(to_carol[0]["envelope"]["to"], json!([carol]));
    assert!(stored_to(&server, &bob).is_empty());
}

#[test]
fn greylisting_refuses_the_first_attempt_and_stores_the_retry() {
    let server = Server::start();
    add_fault(
        &server,
        json!({"match": {"to": "grey@x.test"}, "stage": "message", "times": 1,
               "action": {"reply": {"code": 451, "text": "4.7.1 Greylisted, try again later"}}}),
    );
    assert_eq!(server.health()["faults"], 1);
    let out = python(
        &server,
        r#"print(json.dumps(attempts("grey@x.test", "greylisted", "hi", 3)))"#,
    );
    assert_eq!(
        out,
        json!([
            ["SMTPDataError", 451, "4.7.1 Greylisted, try again later"],
            "sent"
        ])
    );
    assert_eq!(stored_to(&server, "grey@x.test").len(), 1);
    // The rule was used up.
    assert_eq!(server.health()["faults"], 0);
    assert_eq!(server.get_ok("/api/faults")["faults"], json!([]));
}

#[test]
fn smtplib_sees_a_full_mailbox_and_a_rate_limit() {
    let server = Server::start();
    add_fault(
        &server,
        json!({"match": {"to": "full@x.test"}, "stage": "data",
               "action": {"reply": {"code": 552, "text": "5.2.2 Mailbox full"}}}),
    );
    add_fault(
        &server,
        json!({"match": {"from": "busy@x.test"}, "stage": "mail",
               "action": {"reply": {"code": 421, "text": "4.7.0 Too many messages, slow down"}}}),
    );
    let out = python(
        &server,
        r#"
out = {}
with smtplib.SMTP("127.0.0.1", PORT) as s:
    try:
        s.sendmail("app@x.test", ["full@x.test"], "Subject: full\r\n\r\nhi\r\n")
    except smtplib.SMTPDataError as e:
        out["full"] = [type(e).__name__, e.smtp_code, e.smtp_error.decode()]
s = smtplib.SMTP("127.0.0.1", PORT)
try:
    s.sendmail("busy@x.test", ["x@x.test"], "Subject: busy\r\n\r\nhi\r\n")
except smtplib.SMTPSenderRefused as e:
    out["busy"] = [type(e).__name__, e.smtp_code, e.smtp_error.decode()]
# A 421 closes the connection: the next command finds it gone.
try:
    s.noop()
    out["after"] = "open"
except smtplib.SMTPServerDisconnected:
    out["after"] = "closed"
print(json.dumps(out))
"#,
    );
    assert_eq!(
        out,
        json!({
            "full": ["SMTPDataError", 552, "5.2.2 Mailbox full"],
            "busy": ["SMTPSenderRefused", 421, "4.7.0 Too many messages, slow down"],
            "after": "closed",
        })
    );
    assert!(server.emails("").is_empty());
}

#[test]
fn a_disconnect_in_the_middle_of_data_stores_nothing() {
    let server = Server::start();
    add_fault(
        &server,
        json!({"match": {"to": "drop@x.test"}, "stage": "message", "action": {"disconnect": true}}),
    );
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    smtp.expect("MAIL FROM:<app@x.test>", 250);
    smtp.expect("RCPT TO:<drop@x.test>", 250);
    smtp.expect("DATA", 354);
    smtp.write(b"Subject: dropped\r\n\r\nhello\r\n.\r\n");
    // No reply: the connection just ends.
    assert!(
        smtp.try_reply().is_none(),
        "a reply after a disconnect rule"
    );
    // smtplib sees the same as SMTPServerDisconnected, and the rule is spent: its retry goes through.
    add_fault(
        &server,
        json!({"match": {"to": "drop@x.test"}, "stage": "message", "action": {"disconnect": true}}),
    );
    let out = python(
        &server,
        r#"print(json.dumps(attempts("drop@x.test", "dropped", "hello", 2)))"#,
    );
    assert_eq!(out, json!(["disconnected", "sent"]));
    assert_eq!(stored_to(&server, "drop@x.test").len(), 1);
}

#[test]
fn a_delay_holds_back_only_its_own_reply() {
    let server = Server::start();
    const DELAY_MS: u64 = 1500;
    add_fault(
        &server,
        json!({"match": {"to": "slow@x.test"}, "stage": "rcpt", "action": {"delayMs": DELAY_MS}}),
    );
    let mut slow = server.smtp();
    slow.expect("EHLO e2e.test", 250);
    slow.expect("MAIL FROM:<app@x.test>", 250);
    let started = Instant::now();
    slow.write(b"RCPT TO:<slow@x.test>\r\n");
    // While the slow reply is held back, another client sends a whole message.
    let n = nonce();
    let raw = message("app@x.test", "fast@x.test", &format!("fast {n}"), "hi");
    server.send("app@x.test", &["fast@x.test"], &raw);
    let fast_done = started.elapsed();
    let reply = slow.reply();
    let slow_done = started.elapsed();
    assert_eq!(reply.code, 250, "{}", reply.wire);
    // The delayed reply came after the other client's whole message and no earlier than the delay.
    assert!(
        slow_done >= Duration::from_millis(DELAY_MS),
        "{slow_done:?}"
    );
    assert!(fast_done < slow_done, "{fast_done:?} vs {slow_done:?}");
    slow.expect("QUIT", 221);
}

#[test]
fn swaks_shows_the_injected_reply() {
    let server = Server::start();
    add_fault(
        &server,
        json!({"match": {"to": "nobody@x.test"}, "stage": "rcpt",
               "action": {"reply": {"code": 550, "text": "5.1.1 No such user here"}}}),
    );
    let output = common::swaks(&server)
        .args(["--from", "app@x.test", "--to", "nobody@x.test"])
        .output()
        .expect("run swaks");
    let transcript = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "swaks succeeded: {transcript}");
    assert!(
        transcript.contains("<** 550 5.1.1 No such user here"),
        "{transcript}"
    );
    assert!(server.emails("").is_empty());
}

#[test]
fn curl_adds_lists_and_removes_rules() {
    let server = Server::start();
    let base = format!("http://{}", server.http);
    let rule = r#"{"match": {"to": "bob@x.test"}, "stage": "rcpt", "action": {"reply": {"code": 550, "text": "5.1.1 No such user"}}}"#;
    let added = run_ok(Command::new("curl").args([
        "-sS",
        "-H",
        "Content-Type: application/json",
        "-d",
        rule,
        &format!("{base}/api/faults"),
    ]));
    let added: Value = serde_json::from_str(&added).expect("JSON");
    let id = added["fault"]["id"].as_str().expect("an id").to_owned();
    // curl -d without a Content-Type sends a form: refused.
    let refused = run_ok(Command::new("curl").args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-d",
        rule,
        &format!("{base}/api/faults"),
    ]));
    assert_eq!(refused, "415");
    let list = server.get_ok("/api/faults");
    assert_eq!(list["faults"][0]["id"], id.as_str());
    let deleted = run_ok(Command::new("curl").args([
        "-sS",
        "-X",
        "DELETE",
        &format!("{base}/api/faults/{id}"),
    ]));
    assert_eq!(
        serde_json::from_str::<Value>(&deleted).ok(),
        Some(json!({"deleted": 1}))
    );
    assert_eq!(server.health()["faults"], 0);
}

#[test]
fn rules_for_some_recipients_leave_the_others_alone_under_parallel_load() {
    let server = Server::start();
    let n = nonce();
    let victim = format!("victim{n}@x.test");
    add_fault(
        &server,
        json!({"match": {"to": victim}, "stage": "rcpt", "times": null,
               "action": {"reply": {"code": 550, "text": "5.1.1 No"}}}),
    );
    add_fault(
        &server,
        json!({"match": {"from": format!("dropper{n}@x.test")}, "stage": "message", "times": null,
               "action": {"disconnect": true}}),
    );
    const CLIENTS: usize = 8;
    const EACH: usize = 10;
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (smtp_addr, victim) = (server.smtp, victim.clone());
            std::thread::spawn(move || {
                let mut sent = 0;
                for i in 0..EACH {
                    let (mut smtp, greeting) = Smtp::connect(smtp_addr);
                    assert_eq!(greeting.code, 220);
                    smtp.expect("EHLO e2e.test", 250);
                    let to = format!("user{c}-{i}-{n}@x.test");
                    match i % 3 {
                        // The victim is refused, the other recipient of the same message is not.
                        0 => {
                            smtp.expect("MAIL FROM:<app@x.test>", 250);
                            smtp.expect(&format!("RCPT TO:<{victim}>"), 550);
                            smtp.expect(&format!("RCPT TO:<{to}>"), 250);
                            smtp.expect("DATA", 354);
                            smtp.write(b"Subject: load\r\n\r\nhi\r\n.\r\n");
                            assert_eq!(smtp.reply().code, 250);
                            sent += 1;
                        }
                        // The dropped sender's message ends in a disconnect.
                        1 => {
                            smtp.expect(&format!("MAIL FROM:<dropper{n}@x.test>"), 250);
                            smtp.expect(&format!("RCPT TO:<{to}>"), 250);
                            smtp.expect("DATA", 354);
                            smtp.write(b"Subject: dropped\r\n\r\nhi\r\n.\r\n");
                            assert!(smtp.try_reply().is_none());
                            continue;
                        }
                        _ => {
                            smtp.expect("MAIL FROM:<app@x.test>", 250);
                            smtp.expect(&format!("RCPT TO:<{to}>"), 250);
                            smtp.expect("DATA", 354);
                            smtp.write(b"Subject: load\r\n\r\nhi\r\n.\r\n");
                            assert_eq!(smtp.reply().code, 250);
                            sent += 1;
                        }
                    }
                    smtp.expect("QUIT", 221);
                }
                sent
            })
        })
        .collect();
    let sent: usize = threads
        .into_iter()
        .map(|t| t.join().expect("a client thread"))
        .sum();
    let stored = server.emails("");
    assert_eq!(stored.len(), sent);
    assert!(stored.iter().all(|m| m["subject"] == "load"));
    assert!(stored_to(&server, &victim).is_empty());
    // Both rules are still there (times: null) and fired as often as the clients asked them to.
    let faults = server.get_ok("/api/faults")["faults"].clone();
    let fired: Vec<u64> = faults
        .as_array()
        .expect("faults")
        .iter()
        .map(|f| f["fired"].as_u64().expect("fired"))
        .collect();
    let per_kind = |k: usize| (0..EACH).filter(|i| i % 3 == k).count() * CLIENTS;
    assert_eq!(fired, vec![per_kind(0) as u64, per_kind(1) as u64]);
}

#[test]
fn each_fault_that_fires_is_logged() {
    let mut child = Command::new(common::binary())
        .args(["--smtp-port", "0", "--http-port", "0", "--ready-json"])
        .env_remove("RUST_LOG")
        .env_remove("MAILJAR_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mailjar");
    let mut ready = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("the ready line");
    let ready: Value = serde_json::from_str(&ready).expect("ready JSON");
    let (lines_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let http: std::net::SocketAddr = ready["http"]
        .as_str()
        .and_then(|h| h.strip_prefix("http://"))
        .and_then(|h| h.parse().ok())
        .expect("http address");
    let smtp: std::net::SocketAddr = ready["smtp"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("smtp address");
    let body = r#"{"stage": "helo", "action": {"reply": {"code": 554, "text": "5.7.1 Go away"}}}"#;
    let request = format!(
        "POST /api/faults HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let response = http_exchange(http, request.as_bytes());
    assert_eq!(response.status, 200, "{}", response.body);
    let id = response.json()["fault"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (mut conn, _) = Smtp::connect(smtp);
    conn.expect("EHLO e2e.test", 554);
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("fault injected") => break line,
            Ok(_) => {}
            Err(e) => panic!("no fault logged: {e:?}"),
        }
    };
    for part in ["stage=\"helo\"", "code=554", &format!("rule={id}")] {
        assert!(logged.contains(part), "{part} not in {logged:?}");
    }
    let _ = child.kill();
    let _ = child.wait();
}
