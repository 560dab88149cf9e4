//! The mailbox identity every mail reader shares, end to end on the real
//! binary: UIDs that survive a restart and are never given twice (SQLite
//! and a PostgreSQL cluster, read back from the database files and tables
//! themselves), and the UIDVALIDITY kept with them.

mod common;
mod pg;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Server, message, run_ok};
use pg::{Nodes, Postgres};

/// A fresh data directory for this test.
fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mailjar-seen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Sends one message with this subject; its id.
fn send(server: &Server, subject: &str) -> String {
    let raw = message("app@app.test", "user@local.test", subject, "body");
    assert_eq!(
        server.send("app@app.test", &["user@local.test"], &raw).code,
        250
    );
    let latest = server.latest();
    assert_eq!(latest["subject"], subject);
    latest["id"].as_str().expect("an id").to_owned()
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
    let ids: Vec<String> = (0..3).map(|i| send(&server, &format!("m{i}"))).collect();
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
    send(&server, "after the restart");
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
        send(&a, &format!("a{i}"));
        send(&b, &format!("b{i}"));
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
    send(&a, "after");
    assert_eq!(uids(), "1,2,3,4,5,7");
    assert!(pg::eventually(Duration::from_secs(10), || {
        b.emails("view=summary").len() == 6
    }));
    stop(a);
    stop(b);
    // As the schema before UIDs left it: the rows there are numbered in id order.
    pg.psql(
        "ALTER TABLE mailjar_messages DROP COLUMN uid; \
         ALTER TABLE mailjar_head DROP COLUMN uid, DROP COLUMN uid_validity; \
         UPDATE mailjar_schema SET version = version - 1",
    );
    let a = pg.node(&[]);
    assert_eq!(uids(), "1,2,3,4,5,6");
    assert_eq!(pg.psql("SELECT uid FROM mailjar_head"), "6");
    send(&a, "migrated");
    assert_eq!(uids(), "1,2,3,4,5,6,7");
}
