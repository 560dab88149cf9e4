//! The seen flag every reader shares: `PATCH /api/emails/:id`, what the
//! message JSON and the summaries say of it, and who may change it.

use super::*;
use crate::budget::StoppedClock;
use crate::inbox::Digest32;
use crate::smtp::{Envelope, Incoming};
use serde_json::Value;

fn prepared(to: &str, subject: &str) -> Prepared {
    Prepared::new(Incoming {
        envelope: Envelope {
            from: "s@x.test".into(),
            to: vec![to.into()],
        },
        raw: format!("Subject: {subject}\r\n\r\nbody\r\n").into_bytes(),
        helo: None,
        session: Default::default(),
        transcript: Default::default(),
    })
}

/// The answer to a request that needs no wait, run through its job if it has one.
fn answer(api: &mut Api<()>, request: &Request) -> Response {
    match api.answer((), request, 1_000, &StoppedClock) {
        Answered::Ready(response) => response,
        other => panic!("{} {}: {other:?}", request.method, request.path),
    }
}

fn patch(api: &mut Api<()>, id: &str, body: &str, scope: Scope) -> Response {
    let mut request = Request::new("PATCH", &format!("/api/emails/{id}"));
    request.body = bytes::Bytes::from(body.to_owned());
    request.content_type = Some("application/json".into());
    request.scope = scope;
    answer(api, &request)
}

fn json(api: &mut Api<()>, target: &str) -> Value {
    serde_json::from_str(&answer(api, &Request::new("GET", target)).into_text()).unwrap()
}

#[test]
fn patch_sets_seen_and_every_view_of_the_message_says_so() {
    let mut api: Api<()> = Api::new(ApiConfig::default());
    let a = api.deliver(prepared("a@x.test", "a"), 1_000, [0; 10]);
    let b = api.deliver(prepared("a@x.test", "b"), 1_000, [0; 10]);
    assert_eq!(
        json(&mut api, &format!("/api/emails/{a}"))["email"]["seen"],
        false
    );
    let patched = patch(&mut api, &a.to_string(), r#"{"seen": true}"#, Scope::All);
    assert_eq!(patched.status, 200);
    let summary: Value = serde_json::from_str(&patched.into_text()).unwrap();
    assert_eq!(summary["id"], a.to_string());
    assert_eq!(summary["seen"], true);
    assert!(api.is_seen(a) && !api.is_seen(b));
    assert_eq!(
        json(&mut api, &format!("/api/emails/{a}"))["email"]["seen"],
        true
    );
    let seen = |list: &Value| -> Vec<Value> {
        list["emails"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seen"].clone())
            .collect()
    };
    let full = json(&mut api, "/api/emails");
    assert_eq!(seen(&full), [true, false]);
    let summaries = json(&mut api, "/api/emails?view=summary");
    assert_eq!(seen(&summaries), [true, false]);
    assert_eq!(
        summaries["emails"][0]["subject"], "a",
        "the rest of the summary is intact"
    );
    assert_eq!(json(&mut api, "/api/emails/latest")["email"]["seen"], false);
    // And back.
    let patched = patch(&mut api, &a.to_string(), r#"{"seen": false}"#, Scope::All);
    assert_eq!(patched.status, 200);
    assert_eq!(
        seen(&json(&mut api, "/api/emails?view=summary")),
        [false, false]
    );
}

#[test]
fn patch_refuses_unknown_ids_and_bad_bodies_and_forgets_deleted_messages() {
    let mut api: Api<()> = Api::new(ApiConfig::default());
    let a = api.deliver(prepared("a@x.test", "a"), 1_000, [0; 10]);
    let id = a.to_string();
    let padded = format!(r#"{{"seen": {}true}}"#, " ".repeat(300));
    for body in [
        "",
        "{}",
        r#"{"seen": "yes"}"#,
        r#"{"seen": true, "x": 1}"#,
        "[true]",
        &padded,
    ] {
        let response = patch(&mut api, &id, body, Scope::All);
        assert_eq!(response.status, 400, "{body:?}");
        assert!(response.into_text().contains("error"));
    }
    assert!(!api.is_seen(a), "a refused body changes nothing");
    let unknown = patch(
        &mut api,
        "0000000000000-0000",
        r#"{"seen": true}"#,
        Scope::All,
    );
    assert_eq!(unknown.status, 404);
    assert_eq!(
        patch(&mut api, &id, r#"{"seen":true}"#, Scope::All).status,
        200
    );
    let allowed = answer(&mut api, &Request::new("PUT", &format!("/api/emails/{id}")));
    assert_eq!(allowed.status, 405);
    assert!(allowed.header("allow").is_some_and(|a| a.contains("PATCH")));
    answer(
        &mut api,
        &Request::new("DELETE", &format!("/api/emails/{id}")),
    );
    assert!(!api.is_seen(a));
    assert!(api.store().snapshot().is_seen(a) == api.is_seen(a));
}

#[test]
fn an_inbox_token_marks_only_its_own_mail_and_its_view_agrees_with_the_admins() {
    let mut api: Api<()> = Api::new(ApiConfig {
        access_control: true,
        ..ApiConfig::default()
    });
    let mut create = Request::new("POST", "/api/inboxes");
    create.body = bytes::Bytes::from_static(br#"{"name":"qa","addresses":["*@qa.test"]}"#);
    create.entropy = [7; 32];
    let created: Value = serde_json::from_str(&answer(&mut api, &create).into_text()).unwrap();
    let token = created["inbox"]["token"].as_str().unwrap().to_owned();
    let scope = api.inboxes().token_scope(&Digest32::of(&token)).unwrap();
    let mine = api.deliver(prepared("u@qa.test", "mine"), 1_000, [0; 10]);
    let other = api.deliver(prepared("u@else.test", "other"), 1_000, [0; 10]);
    assert_eq!(
        patch(&mut api, &other.to_string(), r#"{"seen":true}"#, scope).status,
        404
    );
    assert!(!api.is_seen(other));
    assert_eq!(
        patch(&mut api, &mine.to_string(), r#"{"seen":true}"#, scope).status,
        200
    );
    assert!(api.is_seen(mine), "the admin sees it seen");
    let mut list = Request::new("GET", "/api/emails?view=summary");
    list.scope = scope;
    let listed: Value = serde_json::from_str(&answer(&mut api, &list).into_text()).unwrap();
    assert_eq!(
        listed["emails"][0]["seen"], true,
        "and so does the inbox's own list"
    );
    assert!(api.set_seen(scope, other, true).is_none());
    assert!(api.set_seen(Scope::All, other, true).is_some());
}

#[test]
fn a_durable_host_is_told_of_each_change_and_nothing_else() {
    let mut api: Api<()> = Api::new(ApiConfig {
        durable: true,
        ..ApiConfig::default()
    });
    let a = api.deliver(prepared("a@x.test", "a"), 1_000, [0; 10]);
    while api.poll_output().is_some() {}
    api.set_seen(Scope::All, a, true);
    api.set_seen(Scope::All, a, true);
    api.set_seen(Scope::All, a, false);
    let outputs: Vec<(MessageId, bool)> = std::iter::from_fn(|| api.poll_output())
        .filter_map(|o| match o {
            Output::Seen {
                id,
                seen,
                stored: false,
            } => Some((id, seen)),
            _ => None,
        })
        .collect();
    assert_eq!(
        outputs,
        [(a, true), (a, false)],
        "no output for what did not change"
    );
}

#[test]
fn a_change_heard_from_the_database_is_told_as_stored() {
    let mut api: Api<()> = Api::new(ApiConfig {
        durable: true,
        ..ApiConfig::default()
    });
    let a = api.deliver(prepared("a@x.test", "a"), 1_000, [0; 10]);
    while api.poll_output().is_some() {}
    api.hear_seen(vec![(a, true), (a, true)]);
    let outputs: Vec<(MessageId, bool, bool)> = std::iter::from_fn(|| api.poll_output())
        .filter_map(|o| match o {
            Output::Seen { id, seen, stored } => Some((id, seen, stored)),
            _ => None,
        })
        .collect();
    assert_eq!(
        outputs,
        [(a, true, true)],
        "heard once, not to be written again"
    );
    assert!(api.is_seen(a));
}
