//! Fault rules scoped to an inbox, over real sockets: a rule made with an
//! inbox token acts only on that inbox's mail (checked with Python's
//! smtplib), and each inbox sees and deletes only its own rules.

mod common;
mod inboxes_common;

use inboxes_common::{ADMIN, Inbox, call, get_ok, inbox, smtplib_send, start};
use serde_json::{Value, json};

fn smtplib(server: &common::Server, login: Option<&Inbox>, to: &str, subject: &str) -> String {
    smtplib_send(
        server,
        login.map(|i| (i.user.as_str(), i.password.as_str())),
        to,
        subject,
    )
}

/// Adds a rule with `token`; the rule as the answer shows it.
fn add_rule(server: &common::Server, token: &str, rule: Value) -> Value {
    let response = call(server, "POST", "/api/faults", Some(token), Some(&rule));
    assert_eq!(response.status, 200, "POST /api/faults: {}", response.body);
    response.json()["fault"].clone()
}

/// The ids of the rules a token lists.
fn rule_ids(server: &common::Server, token: &str) -> Vec<String> {
    let body = get_ok(server, "/api/faults", token);
    body["faults"]
        .as_array()
        .unwrap_or_else(|| panic!("no faults in {body}"))
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn an_inbox_rule_refuses_its_own_recipients_only_and_is_invisible_to_other_inboxes() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let b = inbox(&server, "b", &["*@b.test"]);
    let rule = json!({
        "stage": "rcpt",
        "action": {"reply": {"code": 550, "text": "5.1.1 refused for a"}},
        "times": null,
    });
    let a_rule = add_rule(&server, &a.token, rule);
    let a_rule = a_rule["id"].as_str().expect("id").to_owned();

    assert_eq!(smtplib(&server, None, "x@b.test", "to b"), "sent");
    assert_eq!(smtplib(&server, None, "x@a.test", "to a"), "rcpt 550");
    assert_eq!(smtplib(&server, None, "x@nowhere.test", "unrouted"), "sent");

    let b_rule = add_rule(
        &server,
        &b.token,
        json!({"stage": "data", "action": {"reply": {"code": 451}}, "times": null}),
    );
    let b_rule = b_rule["id"].as_str().expect("id").to_owned();
    // Each inbox sees its own rule; the admin sees both, named by inbox.
    assert_eq!(rule_ids(&server, &a.token), std::slice::from_ref(&a_rule));
    assert_eq!(rule_ids(&server, &b.token), std::slice::from_ref(&b_rule));
    let all = get_ok(&server, "/api/faults", ADMIN);
    let inboxes: Vec<&Value> = all["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .map(|r| &r["inbox"])
        .collect();
    assert_eq!(inboxes, [&json!("a"), &json!("b")], "{all}");
    // Another inbox's rule is 404, and deleting all deletes only one's own.
    let other = call(
        &server,
        "DELETE",
        &format!("/api/faults/{b_rule}"),
        Some(&a.token),
        None,
    );
    assert_eq!(other.status, 404, "{}", other.body);
    let cleared = call(&server, "DELETE", "/api/faults", Some(&a.token), None);
    assert_eq!(cleared.json()["deleted"], 1, "{}", cleared.body);
    assert_eq!(rule_ids(&server, ADMIN), [b_rule]);
    assert_eq!(smtplib(&server, None, "x@a.test", "to a again"), "sent");
    assert_eq!(smtplib(&server, None, "y@b.test", "to b again"), "data 451");
}

#[test]
fn an_inbox_rule_at_mail_acts_only_on_sessions_logged_in_as_that_inbox() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let b = inbox(&server, "b", &["*@b.test"]);
    add_rule(
        &server,
        &a.token,
        json!({"stage": "mail", "action": {"reply": {"code": 451}}, "times": null}),
    );
    // Addressed to a, but no login named a: MAIL is not a's yet.
    assert_eq!(smtplib(&server, None, "x@a.test", "no login"), "sent");
    assert_eq!(smtplib(&server, Some(&b), "x@a.test", "as b"), "sent");
    assert_eq!(smtplib(&server, Some(&a), "x@b.test", "as a"), "mail 451");
}
