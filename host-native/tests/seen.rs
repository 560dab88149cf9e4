//! The mailbox identity every mail reader shares, end to end on the real
//! binary: UIDs that survive a restart and are never given twice (SQLite
//! and a PostgreSQL cluster, read back from the database files and tables
//! themselves), the UIDVALIDITY kept with them, and the seen flag that
//! `PATCH /api/emails/:id` (with curl), POP3 RETR (Python's poplib) and a
//! restart with `--data-dir` agree on, at the memory README's resource model gives it.

mod common;
mod pg;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::readers::{authed, listener, python_json, send_one};
use common::{Server, message, run_ok};
use pg::{Nodes, Postgres};
use serde_json::Value;

/// A fresh data directory for this test.
fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mailjar-seen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Stops a server with SIGTERM and waits for a clean exit (the database is closed).
fn stop(mut server: Server) {
    server.sigterm();
    assert!(
        server
            .wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
}

/// What Python's sqlite3 reads from `DIR/mailjar.db`: one line a row, fields joined by `|`.
fn sqlite(dir: &Path, sql: &str) -> String {
    let db = dir.join("mailjar.db");
    let script = "import sqlite3, sys\n\
                  c = sqlite3.connect(sys.argv[1])\n\
                  for row in c.execute(sys.argv[2]):\n    print('|'.join(str(v) for v in row))\n";
    run_ok(Command::new("python3").args(["-c", script, db.to_str().unwrap(), sql]))
        .trim()
        .to_owned()
}

#[test]
fn sqlite_uids_survive_a_restart_and_the_newest_deleted_one_is_not_given_again() {
    let dir = data_dir("uids");
    let flags = ["--data-dir", dir.to_str().unwrap()];
    let server = Server::start_with(&flags);
    let ids: Vec<String> = (0..3)
        .map(|i| send_one(&server, &format!("m{i}")))
        .collect();
    // The newest goes before the restart: its UID must not come back.
    let deleted = server.request("DELETE", &format!("/api/emails/{}", ids[2]));
    assert_eq!(deleted.status, 200);
    stop(server);
    let stored = sqlite(&dir, "SELECT uid FROM messages ORDER BY seq");
    assert_eq!(stored, "1\n2");
    let validity = sqlite(&dir, "SELECT value FROM meta WHERE key = 'uid_validity'");
    assert!(validity.parse::<u32>().is_ok_and(|v| v > 0), "{validity}");
    let server = Server::start_with(&flags);
    assert_eq!(server.emails("view=summary").len(), 2);
    send_one(&server, "after the restart");
    stop(server);
    assert_eq!(
        sqlite(&dir, "SELECT uid FROM messages ORDER BY seq"),
        "1\n2\n4",
        "the deleted newest message's UID 3 is not given again"
    );
    assert_eq!(
        sqlite(&dir, "SELECT value FROM meta WHERE key = 'uid_validity'"),
        validity,
        "UIDVALIDITY stays with the file"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_uids_are_one_sequence_across_nodes_and_older_rows_are_numbered() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    for i in 0..3 {
        send_one(&a, &format!("a{i}"));
        send_one(&b, &format!("b{i}"));
    }
    let uids = || pg.psql("SELECT string_agg(uid::text, ',' ORDER BY id) FROM mailjar_messages");
    assert_eq!(uids(), "1,2,3,4,5,6", "in id order, whichever node took it");
    let validity = pg.psql("SELECT uid_validity FROM mailjar_head");
    assert!(validity.parse::<u32>().is_ok_and(|v| v > 0), "{validity}");
    // The newest goes; the next message, on the other node, gets 7.
    let newest = b.latest()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        b.request("DELETE", &format!("/api/emails/{newest}")).status,
        200
    );
    send_one(&a, "after");
    assert_eq!(uids(), "1,2,3,4,5,7");
    assert!(pg::eventually(Duration::from_secs(10), || {
        b.emails("view=summary").len() == 6
    }));
    stop(a);
    stop(b);
    // As the schema before UIDs left it: the rows there are numbered in id order.
    pg.psql(
        "ALTER TABLE mailjar_messages DROP COLUMN uid, DROP COLUMN seen, DROP COLUMN seen_seq; \
         ALTER TABLE mailjar_head DROP COLUMN uid, DROP COLUMN uid_validity, \
             DROP COLUMN config_seq; \
         DROP TABLE mailjar_faults; \
         UPDATE mailjar_schema SET version = 1",
    );
    let a = pg.node(&[]);
    assert_eq!(uids(), "1,2,3,4,5,6");
    assert_eq!(pg.psql("SELECT uid FROM mailjar_head"), "6");
    send_one(&a, "migrated");
    assert_eq!(uids(), "1,2,3,4,5,6,7");
}

/// `curl -X PATCH` of `{"seen": ...}` (or any body): the status and the JSON answer.
fn curl_patch(server: &Server, id: &str, body: &str, token: Option<&str>) -> (u16, Value) {
    let url = format!("http://{}/api/emails/{id}", server.http);
    let mut command = Command::new("curl");
    command.args(["-sS", "-X", "PATCH", "-H", "Content-Type: application/json"]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    command.args(["--data-binary", body, "-w", "\n%{http_code}", &url]);
    let out = run_ok(&mut command);
    let (json, status) = out.trim_end().rsplit_once('\n').expect("a status line");
    let json = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    (status.parse().expect("a status"), json)
}

/// Each stored message's `seen`, oldest first, as the summaries and the full list say.
fn seen_flags(server: &Server) -> Vec<bool> {
    let summaries: Vec<bool> = server
        .emails("view=summary")
        .iter()
        .map(|e| e["seen"].as_bool().expect("seen is a boolean"))
        .collect();
    let full: Vec<bool> = server
        .emails("")
        .iter()
        .map(|e| e["seen"].as_bool().expect("seen is a boolean"))
        .collect();
    assert_eq!(summaries, full, "summaries and messages agree");
    summaries
}

#[test]
fn patch_marks_seen_and_unseen_and_refuses_what_it_cannot_take() {
    let server = Server::start();
    let a = send_one(&server, "a");
    send_one(&server, "b");
    assert_eq!(seen_flags(&server), [false, false]);
    let (status, summary) = curl_patch(&server, &a, r#"{"seen": true}"#, None);
    assert_eq!(status, 200);
    assert_eq!(summary["id"], a.as_str());
    assert_eq!(summary["seen"], true);
    assert_eq!(summary["subject"], "a");
    assert_eq!(seen_flags(&server), [true, false]);
    assert_eq!(
        server.get_ok(&format!("/api/emails/{a}"))["email"]["seen"],
        true
    );
    let (status, summary) = curl_patch(&server, &a, r#"{"seen": false}"#, None);
    assert_eq!((status, &summary["seen"]), (200, &Value::Bool(false)));
    assert_eq!(seen_flags(&server), [false, false]);
    for body in [
        "",
        "{",
        r#"{"seen": 1}"#,
        r#"{"seen": true, "more": 1}"#,
        "[true]",
    ] {
        let (status, answer) = curl_patch(&server, &a, body, None);
        assert_eq!(status, 400, "{body:?}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    let (status, answer) = curl_patch(&server, "0000000000000-0000", r#"{"seen":true}"#, None);
    assert_eq!(status, 404, "{answer}");
    assert!(answer["error"].is_string());
    assert_eq!(seen_flags(&server), [false, false]);
}

#[test]
fn an_inbox_token_marks_only_its_own_mail() {
    let token = "admin-token-for-the-seen-tests-0123456789";
    let server = Server::start_with(&["--admin-token", token]);
    let created = authed(
        &server,
        token,
        "POST",
        "/api/inboxes",
        r#"{"name":"qa","addresses":["*@qa.test"]}"#,
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let inbox_token = created.json()["inbox"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let raw = message("app@app.test", "u@qa.test", "mine", "x");
    assert_eq!(server.send("app@app.test", &["u@qa.test"], &raw).code, 250);
    let raw = message("app@app.test", "u@else.test", "other", "x");
    assert_eq!(
        server.send("app@app.test", &["u@else.test"], &raw).code,
        250
    );
    let list = |token: &str| -> Vec<Value> {
        authed(&server, token, "GET", "/api/emails?view=summary", "").json()["emails"]
            .as_array()
            .unwrap()
            .clone()
    };
    let all = list(token);
    let id = |subject: &str| {
        all.iter().find(|e| e["subject"] == subject).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (status, _) = curl_patch(
        &server,
        &id("other"),
        r#"{"seen":true}"#,
        Some(&inbox_token),
    );
    assert_eq!(
        status, 404,
        "another inbox's mail is not there for this token"
    );
    let (status, _) = curl_patch(&server, &id("mine"), r#"{"seen":true}"#, Some(&inbox_token));
    assert_eq!(status, 200);
    let flags: Vec<(String, bool)> = list(token)
        .iter()
        .map(|e| {
            (
                e["subject"].as_str().unwrap().to_owned(),
                e["seen"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [("mine".to_owned(), true), ("other".to_owned(), false)]
    );
    assert_eq!(list(&inbox_token)[0]["seen"], true);
}

/// Runs a poplib script, logged in as `u` on `ADDR` (host:port) as `p`; its stdout as JSON.
fn poplib(script: &str, addr: &str) -> Value {
    let login = "p = poplib.POP3(host, port, timeout=10)\np.user('u')\np.pass_('p')\n";
    python_json("json, poplib, sys", &format!("{login}{script}"), &[addr])
}

#[test]
fn pop3_retr_marks_seen_top_does_not_and_a_restart_keeps_it() {
    let dir = data_dir("pop3");
    let flags = ["--pop3-port", "0", "--data-dir", dir.to_str().unwrap()];
    let server = Server::start_with(&flags);
    let ids: Vec<String> = (0..3)
        .map(|i| send_one(&server, &format!("m{i}")))
        .collect();
    let addr = listener(&server, "pop3");
    let read = poplib(
        "top = p.top(1, 0)[0]\nretr = p.retr(2)[0]\np.quit()\n\
         print(json.dumps({'top': top.decode(), 'retr': retr.decode()}))\n",
        &addr,
    );
    assert!(read["retr"].as_str().unwrap().starts_with("+OK"), "{read}");
    assert_eq!(
        seen_flags(&server),
        [false, true, false],
        "RETR 2 marks it, TOP 1 does not"
    );
    // The UI marks the third, and unmarks nothing: all of it must survive a restart.
    let (status, _) = curl_patch(&server, &ids[2], r#"{"seen": true}"#, None);
    assert_eq!(status, 200);
    let (status, _) = curl_patch(&server, &ids[2], r#"{"seen": false}"#, None);
    assert_eq!(status, 200);
    let (status, _) = curl_patch(&server, &ids[0], r#"{"seen": true}"#, None);
    assert_eq!(status, 200);
    assert_eq!(seen_flags(&server), [true, true, false]);
    stop(server);
    assert_eq!(
        sqlite(&dir, "SELECT seen FROM messages ORDER BY seq"),
        "1\n1\n0"
    );
    let server = Server::start_with(&flags);
    assert_eq!(
        seen_flags(&server),
        [true, true, false],
        "kept across the restart"
    );
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn seen_flags_cost_what_the_resource_model_says() {
    const N: usize = 10_000;
    let server = Server::start();
    let mut smtp = server.smtp();
    smtp.expect("EHLO sender.test", 250);
    for i in 0..N {
        let raw = message("app@app.test", "user@local.test", &format!("m{i}"), "x");
        assert_eq!(
            smtp.transaction("app@app.test", &["user@local.test"], &raw)
                .code,
            250
        );
    }
    let ids: Vec<String> = server
        .emails("view=summary")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), N);
    let mut stream = std::net::TcpStream::connect(server.http).unwrap();
    stream.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
    let mut patch = |id: &str, seen: bool| {
        let body = format!(r#"{{"seen":{seen}}}"#);
        let request = format!(
            "PATCH /api/emails/{id} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            server.http,
            body.len()
        );
        std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
        let response = common::read_http_response(&mut stream);
        assert_eq!(response.status, 200, "{}", response.body);
    };
    // Warm up the allocator and the connection with one round trip of flags.
    patch(&ids[0], true);
    patch(&ids[0], false);
    let before = common::rss_kib(server.pid()).unwrap();
    for id in &ids {
        patch(id, true);
    }
    let after = common::rss_kib(server.pid()).unwrap();
    assert!(seen_flags(&server).iter().all(|&seen| seen));
    let grown = after.saturating_sub(before);
    // README: about 48 bytes a seen message (its id in a persistent B-tree set).
    let bound_kib = (N * 48 / 1024) as u64;
    eprintln!("{N} messages marked seen: RSS grew {grown} KiB (model: {bound_kib} KiB)");
    assert!(
        grown <= bound_kib + 1024,
        "marking {N} messages seen grew RSS by {grown} KiB, over the model's {bound_kib} KiB (+1 MiB slack)"
    );
}
