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
        "1|5"
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
        stderr.contains("schema 99") && stderr.contains("up to schema 5"),
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

/// The database numbers a batch after the head with `mailjar_after`, the
/// SQL twin of `order::after`: both agree on ids at every carry (the 62
/// random bits full, the 12 above them full too) and on random ones.
#[test]
fn the_database_counts_ids_up_as_the_node_does() {
    use mailjar::storage::postgres::order::after;
    use mailjar_core::id::{IdGenerator, MessageId};
    let pg = Postgres::start();
    drop(pg.node(&[]));
    let mut ids = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for n in 0..300u64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut generator = IdGenerator::new();
        let mut entropy = [0u8; 10];
        for (i, b) in entropy.iter_mut().enumerate() {
            *b = (state >> (i * 6)) as u8;
        }
        // Every carry: the low random bits all ones, then the high ones too.
        match n % 3 {
            0 => entropy[2..].fill(0xff),
            1 => entropy.fill(0xff),
            _ => {}
        }
        ids.push(generator.next(1_700_000_000_000 + state % 1_000_000_000, entropy));
    }
    let hex = |id: MessageId| format!("{:032x}", id.as_u128());
    let list: Vec<String> = ids.iter().map(|&id| format!("'{}'", hex(id))).collect();
    let sql = format!(
        "SELECT encode(mailjar_after(decode(x, 'hex')), 'hex') FROM unnest(ARRAY[{}]) WITH ORDINALITY AS t(x, n) ORDER BY n",
        list.join(", ")
    );
    let database: Vec<String> = pg.psql(&sql).lines().map(str::to_owned).collect();
    let node: Vec<String> = ids.iter().map(|&id| hex(after(id))).collect();
    assert_eq!(database, node);
}

/// `mailjar_write` numbers a batch as `order::assign` does (the ordering
/// logic tested against a model): proposals that sort after the head keep
/// their ids, the others count up from the one before them.
#[test]
fn the_database_numbers_a_batch_as_the_ordering_logic_does() {
    use mailjar::storage::postgres::order::assign;
    use mailjar_core::id::MessageId;
    let pg = Postgres::start();
    drop(pg.node(&[]));
    let hex = |id: MessageId| format!("{:032x}", id.as_u128());
    let id = |ms: u128, n: u128| MessageId::from_u128((ms << 80) | (0x7 << 76) | (0b10 << 62) | n);
    let cases: [(MessageId, Vec<MessageId>); 4] = [
        // Every proposal after the head: kept.
        (id(5, 0), vec![id(6, 1), id(7, 0)]),
        // All at or before the head: counted up from it.
        (id(9, 4), vec![id(9, 4), id(3, 0), id(9, 2)]),
        // Some before, some after: the later ones kept once past.
        (id(8, 0), vec![id(7, 0), id(8, 5), id(8, 1), id(12, 0)]),
        // A proposal at the end of its millisecond's counter.
        (id(4, (1 << 62) - 1), vec![id(4, 7)]),
    ];
    for (head, proposed) in cases {
        let list = |f: &dyn Fn(&MessageId) -> String| {
            proposed.iter().map(f).collect::<Vec<_>>().join(", ")
        };
        let sql = format!(
            "BEGIN; UPDATE mailjar_head SET id = decode('{}', 'hex'); \
             SELECT encode(x, 'hex') FROM mailjar_write(ARRAY[{}], ARRAY[{}]::int8[], \
             ARRAY[{}], ARRAY[{}], ARRAY[{}], ARRAY[{}]::bytea[], ARRAY[{}]::bytea[], \
             'test', false, '{{}}', '{{}}') w, unnest(w.o_ids) WITH ORDINALITY AS t(x, n) \
             ORDER BY n; ROLLBACK",
            hex(head),
            list(&|p| format!("decode('{}', 'hex')", hex(*p))),
            list(&|_| "0".to_owned()),
            list(&|_| "'\"\"'".to_owned()),
            list(&|_| "'[]'".to_owned()),
            list(&|_| "'{}'".to_owned()),
            list(&|_| "''".to_owned()),
            list(&|_| "NULL".to_owned()),
        );
        let output = pg.psql(&sql);
        let database: Vec<&str> = output
            .lines()
            .filter(|l| l.len() == 32 && l.bytes().all(|b| b.is_ascii_hexdigit()))
            .collect();
        let expected: Vec<String> = assign(Some(head), &proposed).into_iter().map(hex).collect();
        assert_eq!(database, expected, "head {head:?}, proposed {proposed:?}");
    }
}
