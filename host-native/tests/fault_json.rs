//! The JSON of a fault rule over HTTP: a key given twice in one object, at any level, is
//! refused with a 400 naming it, and no rule is added (before, the last one won silently).

mod common;

use common::{Http, Server, message};
use serde_json::{Value, json};

/// `POST /api/faults` with `body` sent as it is.
fn post_raw(server: &Server, body: &str) -> Http {
    server.post_json("/api/faults", body)
}

#[test]
fn duplicate_keys_in_a_rule_are_refused_naming_the_key() {
    let server = Server::start();
    let cases = [
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "stage": "connect"}"#,
            "stage",
        ),
        (
            r#"{"match": {"to": "other@x.test", "to": "dup@x.test"}, "stage": "rcpt", "action": {"disconnect": true}}"#,
            "match.to",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 550}, "reply": {"code": 450}}}"#,
            "action.reply",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 250, "text": "x", "code": 550}}}"#,
            "action.reply.code",
        ),
        (
            r#"{"stage": "rcpt", "action": {"delayMs": 0, "delayMs": 60000}}"#,
            "action.delayMs",
        ),
        (
            r#"{"stage": "data", "action": {"disconnect": true}, "times": 1, "times": null}"#,
            "times",
        ),
    ];
    for (body, key) in cases {
        let response = post_raw(&server, body);
        assert_eq!(response.status, 400, "{body}: {}", response.body);
        let error = response.error();
        assert!(
            error.contains(&format!("duplicate field {key:?}")),
            "{body}: {error}"
        );
    }
    // Nothing was added, so mail goes through untouched.
    assert_eq!(server.get_ok("/api/faults")["faults"], json!([]));
    let raw = message("a@x.test", "dup@x.test", "through", "body");
    server.send("a@x.test", &["dup@x.test"], &raw);

    // The same key in different objects is fine, and the rule works.
    let body = r#"{"match": {"to": "dup@x.test"}, "stage": "rcpt", "action": {"reply": {"code": 550, "text": "5.1.1 to"}}}"#;
    let added = post_raw(&server, body);
    assert_eq!(added.status, 200, "{}", added.body);
    let rules: Value = server.get_ok("/api/faults");
    assert_eq!(rules["faults"].as_array().map(Vec::len), Some(1));
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    smtp.expect("MAIL FROM:<a@x.test>", 250);
    let refused = smtp.cmd("RCPT TO:<dup@x.test>");
    assert_eq!(refused.code, 550, "{}", refused.wire);
}
