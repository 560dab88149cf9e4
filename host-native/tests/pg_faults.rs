//! Fault rules are cluster-wide on one PostgreSQL (`--database`): a rule set
//! on node A acts on SMTP sessions of node B; a rule used up on B is gone
//! from A; a rule deleted on A stops acting on B; rules made on both nodes
//! at once keep ids of their own.

mod common;
mod pg;

use std::time::Duration;

use common::{Server, Smtp};
use pg::{Nodes, Postgres, eventually};
use serde_json::Value;

/// How long a change made on one node may take to reach another.
const PROPAGATION: Duration = Duration::from_secs(5);

fn rules(server: &Server) -> Vec<Value> {
    server.get_ok("/api/faults")["faults"]
        .as_array()
        .expect("faults")
        .clone()
}

fn rule_ids(server: &Server) -> Vec<String> {
    let mut ids: Vec<String> = rules(server)
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    ids.sort();
    ids
}

/// The reply to `RCPT TO:<to>` in a new session.
fn rcpt(server: &Server, to: &str) -> u16 {
    let (mut smtp, _) = Smtp::connect(server.smtp);
    smtp.expect("EHLO sender.test", 250);
    smtp.expect("MAIL FROM:<app@sender.test>", 250);
    smtp.cmd(&format!("RCPT TO:<{to}>")).code
}

fn post_rule(server: &Server, body: &str) -> String {
    let response = server.post_json("/api/faults", body);
    assert_eq!(response.status, 200, "{}", response.body);
    response.json()["fault"]["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

#[test]
fn a_rule_set_on_one_node_acts_on_the_other_and_is_used_up_everywhere() {
    let pg = Postgres::start();
    let (a, b) = (pg.node(&[]), pg.node(&[]));
    let id = post_rule(
        &a,
        r#"{"match":{"to":"x@f.test"},"stage":"rcpt","action":{"reply":{"code":450,"text":"4.2.0 later"}},"times":1}"#,
    );
    assert!(
        eventually(PROPAGATION, || rule_ids(&b) == [id.clone()]),
        "the rule set on A never reached B"
    );
    assert_eq!(
        rcpt(&b, "x@f.test"),
        450,
        "the rule from A acts on B's session"
    );
    // Used up on B: gone from A too, and A takes the recipient.
    assert!(
        eventually(PROPAGATION, || rules(&a).is_empty()),
        "the rule used up on B is still on A: {:?}",
        rules(&a)
    );
    assert_eq!(rcpt(&a, "x@f.test"), 250);
    assert_eq!(rcpt(&b, "x@f.test"), 250);
}

#[test]
fn a_rule_deleted_on_one_node_stops_acting_on_the_other() {
    let pg = Postgres::start();
    let (a, b) = (pg.node(&[]), pg.node(&[]));
    let id = post_rule(
        &b,
        r#"{"stage":"rcpt","action":{"reply":{"code":550,"text":"5.1.1 no"}},"times":null}"#,
    );
    assert!(eventually(PROPAGATION, || rule_ids(&a) == [id.clone()]));
    assert_eq!(rcpt(&a, "y@f.test"), 550);
    assert_eq!(rcpt(&a, "y@f.test"), 550, "a rule for always stays");
    let deleted = a.request("DELETE", &format!("/api/faults/{id}"));
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert!(eventually(PROPAGATION, || rules(&b).is_empty()));
    assert_eq!(rcpt(&b, "y@f.test"), 250);
}

#[test]
fn rules_made_on_both_nodes_at_once_keep_ids_of_their_own() {
    let pg = Postgres::start();
    let (a, b) = (pg.node(&[]), pg.node(&[]));
    let body = r#"{"stage":"helo","action":{"delayMs":1},"times":null}"#;
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(post_rule(&a, body));
        made.push(post_rule(&b, body));
    }
    made.sort();
    made.dedup();
    assert_eq!(made.len(), 10, "ids collided: {made:?}");
    assert!(eventually(PROPAGATION, || rule_ids(&a) == made && rule_ids(&b) == made));
    // Cleared on one node: gone from both.
    assert_eq!(a.request("DELETE", "/api/faults").status, 200);
    assert!(eventually(PROPAGATION, || rules(&b).is_empty()));
}
