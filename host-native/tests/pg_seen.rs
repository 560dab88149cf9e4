//! The seen flag every reader shares, across `--database` nodes on a real
//! PostgreSQL: `PATCH /api/emails/:id` (curl) on one node and POP3 RETR
//! (Python's poplib) on another are seen by every node, a node started
//! later loads the flags, and no change is written back by the nodes that hear it.

mod common;
mod pg;

use std::process::Command;
use std::time::Duration;

use common::readers::{listener, send_one};
use common::{Server, run_ok};
use pg::{Nodes, Postgres, eventually};
use serde_json::Value;

/// `curl -X PATCH` of a body: the status and the JSON answer.
fn curl_patch(server: &Server, id: &str, body: &str) -> (u16, Value) {
    let url = format!("http://{}/api/emails/{id}", server.http);
    let out = run_ok(Command::new("curl").args([
        "-sS",
        "-X",
        "PATCH",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        body,
        "-w",
        "\n%{http_code}",
        &url,
    ]));
    let (json, status) = out.trim_end().rsplit_once('\n').expect("a status line");
    let json = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    (status.parse().expect("a status"), json)
}

/// Each stored message's `seen`, oldest first.
fn seen_flags(server: &Server) -> Vec<bool> {
    server
        .emails("view=summary")
        .iter()
        .map(|e| e["seen"].as_bool().expect("seen is a boolean"))
        .collect()
}

/// Python's poplib: RETR of message `n` on `server`'s POP3 listener.
fn pop3_retr(server: &Server, n: usize) {
    let addr = listener(server, "pop3");
    let script = format!(
        "import poplib, sys\nhost, port = sys.argv[1].rsplit(':', 1)\n\
         p = poplib.POP3(host, int(port), timeout=10)\np.user('u')\np.pass_('p')\n\
         print(p.retr({n})[0].decode())\np.quit()\n"
    );
    let out = run_ok(Command::new("python3").arg("-c").arg(script).arg(addr));
    assert!(out.starts_with("+OK"), "{out}");
}

fn settles(what: &str, server: &Server, want: &[bool]) {
    assert!(
        eventually(Duration::from_secs(5), || seen_flags(server) == want),
        "{what}: {:?}, not {want:?}",
        seen_flags(server)
    );
}

#[test]
fn seen_is_shared_by_every_node() {
    let pg = Postgres::start();
    let a = pg.node(&["--pop3-port", "0"]);
    let b = pg.node(&["--pop3-port", "0"]);
    let ids: Vec<String> = (0..3).map(|i| send_one(&a, &format!("m{i}"))).collect();
    settles("B holds the messages", &b, &[false, false, false]);
    let seq_before: i64 = pg
        .psql("SELECT config_seq FROM mailjar_head")
        .parse()
        .unwrap();

    let (status, _) = curl_patch(&a, &ids[0], r#"{"seen": true}"#);
    assert_eq!(status, 200);
    settles("B after PATCH on A", &b, &[true, false, false]);

    pop3_retr(&b, 2);
    settles("B after its RETR", &b, &[true, true, false]);
    settles("A after RETR on B", &a, &[true, true, false]);

    let (status, _) = curl_patch(&b, &ids[0], r#"{"seen": false}"#);
    assert_eq!(status, 200);
    settles("A after unseen on B", &a, &[false, true, false]);

    // Three changes, three writes: a node that heard one did not write it back.
    std::thread::sleep(Duration::from_millis(500));
    let seq_after: i64 = pg
        .psql("SELECT config_seq FROM mailjar_head")
        .parse()
        .unwrap();
    assert_eq!(seq_after - seq_before, 3, "a heard change was written back");
    assert_eq!(
        pg.psql("SELECT string_agg(seen::text, ',' ORDER BY id) FROM mailjar_messages"),
        "false,true,false"
    );

    let c = pg.node(&[]);
    assert_eq!(seen_flags(&c), [false, true, false], "a node started later");
}
