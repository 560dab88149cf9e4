//! Inboxes live across nodes on one PostgreSQL (`--database`): an inbox
//! made, rotated or deleted on node A is so on node B at once (a
//! notification, not a restart): mail sent to B routes into it, its token
//! reads on B, a rotation on A ends B's waits admitted by the old token, and
//! a deletion on A takes the inbox and its mail off B, and its fault rules
//! out of the database.

mod common;
#[path = "inboxes_common/mod.rs"]
mod inboxes_common;
mod pg;

use std::time::{Duration, Instant};

use common::Server;
use inboxes_common::{ADMIN, call, get_ok, ids, inbox};
use pg::{Nodes, Postgres, eventually};

/// How long a change made on one node may take to reach another.
const PROPAGATION: Duration = Duration::from_secs(5);

fn node(pg: &Postgres) -> Server {
    pg.node(&["--admin-token", ADMIN])
}

fn status(server: &Server, target: &str, token: &str) -> u16 {
    call(server, "GET", target, Some(token), None).status
}

#[test]
fn inboxes_made_rotated_and_deleted_on_one_node_are_so_on_the_other() {
    let pg = Postgres::start();
    let (a, b) = (node(&pg), node(&pg));
    let team = inbox(&a, "team", &["*@team.test"]);
    let started = Instant::now();
    assert!(
        eventually(PROPAGATION, || status(&b, "/api/inboxes/team", ADMIN)
            == 200),
        "the inbox made on A never reached B"
    );
    eprintln!("creation reached B in {} ms", started.elapsed().as_millis());
    // Mail sent to B routes into it; its token reads it on B, and on A.
    let raw = common::message("app@sender.test", "x@team.test", "routed", "hello");
    assert_eq!(b.send("app@sender.test", &["x@team.test"], &raw).code, 250);
    let on_b = ids(&b, &team.token, "");
    assert_eq!(on_b.len(), 1, "B's inbox lists what B took");
    assert!(eventually(PROPAGATION, || ids(&a, &team.token, "") == on_b));
    let listed = get_ok(&b, "/api/inboxes/team", &team.token);
    assert_eq!(listed["inbox"]["messages"], 1, "{listed}");

    // A wait on B with the token; the rotation on A ends it 401.
    let rotated = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let target = "/api/emails/wait?subject=never&timeoutMs=10000";
            let answer = call(&b, "GET", target, Some(&team.token), None);
            (answer.status, Instant::now())
        });
        b.poll_health("waits", 1, Duration::from_secs(5));
        let rotation = call(&a, "POST", "/api/inboxes/team/token", Some(ADMIN), None);
        assert_eq!(rotation.status, 200, "{}", rotation.body);
        let at = Instant::now();
        let (code, ended) = waiting.join().expect("the wait's thread");
        assert_eq!(code, 401, "B's wait with the old token after A's rotation");
        eprintln!(
            "B's wait ended {} ms after A's rotation",
            (ended - at).as_millis()
        );
        rotation.json()["inbox"]["token"]
            .as_str()
            .expect("token")
            .to_owned()
    });
    assert_eq!(
        status(&b, "/api/emails", &team.token),
        401,
        "the old token on B"
    );
    assert_eq!(ids(&b, &rotated, ""), on_b, "the new token reads on B");

    let deleted = call(&a, "DELETE", "/api/inboxes/team", Some(ADMIN), None);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert!(
        eventually(PROPAGATION, || status(&b, "/api/inboxes/team", ADMIN)
            == 404),
        "the inbox deleted on A is still on B"
    );
    assert_eq!(status(&b, "/api/emails", &rotated), 401, "its token on B");
    // The mail only it held left the store on both nodes.
    assert!(eventually(PROPAGATION, || ids(&b, ADMIN, "").is_empty()));
    assert!(ids(&a, ADMIN, "").is_empty());
}

#[test]
fn a_node_started_later_has_the_inboxes_and_changes_reach_it_too() {
    let pg = Postgres::start();
    let a = node(&pg);
    let first = inbox(&a, "first", &["*@first.test"]);
    let b = node(&pg);
    assert_eq!(status(&b, "/api/emails", &first.token), 200);
    // Made on B now, read on A.
    let second = inbox(&b, "second", &["*@second.test"]);
    assert!(eventually(PROPAGATION, || status(
        &a,
        "/api/emails",
        &second.token
    ) == 200));
    let listed = get_ok(&a, "/api/inboxes", ADMIN);
    let names: Vec<&str> = listed["inboxes"]
        .as_array()
        .expect("inboxes")
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(names, ["first", "second"], "{listed}");
}

#[test]
fn an_inbox_deleted_takes_its_fault_rules_out_of_the_database() {
    let pg = Postgres::start();
    let a = node(&pg);
    let team = inbox(&a, "team", &["*@team.test"]);
    let rule = serde_json::json!({
        "match": {"to": "x@team.test"},
        "stage": "rcpt",
        "action": {"reply": {"code": 450, "text": "4.2.0 later"}},
    });
    let made = call(&a, "POST", "/api/faults", Some(&team.token), Some(&rule));
    assert_eq!(made.status, 200, "{}", made.body);
    assert_eq!(pg.psql("SELECT count(*) FROM mailjar_faults"), "1");
    let deleted = call(&a, "DELETE", "/api/inboxes/team", Some(ADMIN), None);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(
        pg.psql("SELECT count(*) FROM mailjar_faults"),
        "0",
        "the rule of the deleted inbox is still in the database"
    );
    // A node started now starts without it.
    let b = node(&pg);
    let faults = get_ok(&b, "/api/faults", ADMIN);
    assert_eq!(faults["faults"], serde_json::json!([]), "{faults}");
}
