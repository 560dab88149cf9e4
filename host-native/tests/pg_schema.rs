//! The schema of a `--database` service on a real PostgreSQL: nodes that
//! start together on an empty database migrate it once; an older node
//! refuses a newer schema naming both versions; `--database` and
//! `--data-dir` are exclusive; every node restarted finds every message.

mod common;
mod pg;

use std::process::Command;
use std::time::Duration;

use common::{Server, Smtp, binary, message};
use pg::{Nodes, Postgres};

/// Runs the binary until it exits (it must); its code and what it wrote to stderr.
fn refused(flags: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(binary())
        .args(["--smtp-port", "0", "--http-port", "0"])
        .args(flags)
        .output()
        .expect("run mailjar");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn nodes_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    let pg = Postgres::start();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| pg.node(&[]));
        let b = s.spawn(|| pg.node(&[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(
        pg.psql("SELECT count(*), max(version) FROM mailjar_schema"),
        "1|4"
    );
    assert_eq!(pg.psql("SELECT count(*) FROM mailjar_head"), "1");
    assert_eq!(a.health()["storage"]["ok"], true);
    assert_eq!(b.health()["storage"]["ok"], true);
    drop((a, b));
    pg.psql("UPDATE mailjar_schema SET version = 99");
    let url = pg.url();
    let (code, stderr) = refused(&["--database", &url]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("schema 99") && stderr.contains("up to schema 4"),
        "names both versions: {stderr}"
    );
    assert!(
        !stderr.contains("secret"),
        "no password in the message: {stderr}"
    );
}

#[test]
fn database_and_data_dir_are_exclusive_and_a_bad_url_is_refused() {
    let (code, stderr) = refused(&[
        "--database",
        "postgres://x@127.0.0.1:1/db",
        "--data-dir",
        "/tmp/x",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--database") && stderr.contains("--data-dir"),
        "{stderr}"
    );
    let (code, stderr) = refused(&["--database", "mysql://x@127.0.0.1/db"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("postgres://"), "{stderr}");
    // Nothing listens there: a clear error, exit 1.
    let (code, stderr) = refused(&["--database", "postgres://x@127.0.0.1:1/db"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot connect to the database"),
        "{stderr}"
    );
}

#[test]
fn every_node_restarted_finds_every_message_and_new_ids_sort_after_them() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    for (node, name) in [(&a, "a"), (&b, "b")] {
        let (mut smtp, _) = Smtp::connect(node.smtp);
        smtp.expect("EHLO sender.test", 250);
        for i in 0..10 {
            let raw = message(
                "app@app.test",
                "user@local.test",
                &format!("{name}-{i}"),
                "x",
            );
            assert_eq!(
                smtp.transaction("app@app.test", &["user@local.test"], &raw)
                    .code,
                250
            );
        }
    }
    assert!(pg::eventually(Duration::from_secs(10), || {
        a.emails("view=summary").len() == 20
    }));
    let before = a.emails("view=summary");
    let newest = before.last().expect("stored")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for mut node in [a, b] {
        node.sigterm();
        assert!(
            node.wait_exit(Duration::from_secs(10))
                .is_some_and(|s| s.success())
        );
    }
    let a = pg.node(&[]);
    let b: Server = pg.node(&[]);
    assert_eq!(a.emails("view=summary"), before);
    assert_eq!(b.emails("view=summary"), before);
    let (mut smtp, _) = Smtp::connect(b.smtp);
    smtp.expect("EHLO sender.test", 250);
    let raw = message("app@app.test", "user@local.test", "later", "x");
    assert_eq!(
        smtp.transaction("app@app.test", &["user@local.test"], &raw)
            .code,
        250
    );
    let later = a.get_ok(&format!("/api/emails/wait?afterId={newest}&timeoutMs=5000"));
    assert_eq!(later["email"]["subject"], "later");
}
