//! Inboxes through the API: routing, scope on every endpoint, quotas, streams.

use super::*;
use crate::budget::StoppedClock;
use crate::smtp::{Envelope, Incoming};
use serde_json::{Value, json};

const NOW: u64 = 1_763_779_327_000;

type TestApi = Api<u64>;

fn api() -> TestApi {
    Api::new(ApiConfig {
        access_control: true,
        ..ApiConfig::default()
    })
}

/// A request in a scope, with a body when given.
fn req(method: &str, target: &str, scope: &Scope, body: Option<Value>) -> Request {
    let mut request = Request::new(method, target);
    request.scope = *scope;
    if let Some(body) = body {
        request.body = bytes::Bytes::from(body.to_string());
        request.content_type = Some("application/json".into());
    }
    // Different bytes for every request: tokens differ.
    static N: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
    request.entropy = [N.fetch_add(1, std::sync::atomic::Ordering::Relaxed); 32];
    request.entropy[31] = request.entropy[0].wrapping_mul(7);
    request
}

fn call(api: &mut TestApi, request: &Request) -> Answered {
    api.answer(0, request, NOW, &StoppedClock)
}

fn ready(api: &mut TestApi, method: &str, target: &str, scope: &Scope) -> (u16, Value) {
    ready_with(api, method, target, scope, None)
}

fn ready_with(
    api: &mut TestApi,
    method: &str,
    target: &str,
    scope: &Scope,
    body: Option<Value>,
) -> (u16, Value) {
    match call(api, &req(method, target, scope, body)) {
        Answered::Ready(r) => (r.status, serde_json::from_str(&r.into_text()).unwrap()),
        other => panic!("{method} {target} was not answered at once: {other:?}"),
    }
}

std::thread_local! {
    /// The scope each inbox's token gave when this test made it.
    static TOKENS: std::cell::RefCell<HashMap<String, Scope>> = Default::default();
}

/// The scope the token of the inbox with this name gave when it was made
/// (a host finds it by the token, [`InboxQuery::token_scope`]).
fn inbox(name: &str) -> Scope {
    TOKENS.with(|t| t.borrow().get(name).copied().expect("an inbox made here"))
}

/// Creates an inbox; its token and SMTP password.
fn create(api: &mut TestApi, body: Value) -> (String, String) {
    let (status, created) = ready_with(api, "POST", "/api/inboxes", &Scope::All, Some(body));
    assert_eq!(status, 200, "{created}");
    let token = created["inbox"]["token"].as_str().unwrap().to_owned();
    let scope = api.inboxes().token_scope(&Digest32::of(&token)).unwrap();
    let name = created["inbox"]["name"].as_str().unwrap().to_owned();
    TOKENS.with(|t| t.borrow_mut().insert(name, scope));
    let password = created["inbox"]["smtp"]["password"]
        .as_str()
        .unwrap()
        .to_owned();
    (token, password)
}

fn deliver(api: &mut TestApi, to: &[&str], subject: &str, auth: Option<&str>) -> String {
    let session = crate::smtp::SessionFacts {
        auth: auth.map(|user| crate::smtp::AuthInfo {
            mechanism: "PLAIN".into(),
            username: user.into(),
        }),
        ..Default::default()
    };
    let prepared = Prepared::new(Incoming {
        envelope: Envelope {
            from: "app@app.test".into(),
            to: to.iter().map(|s| s.to_string()).collect(),
        },
        raw: format!("Subject: {subject}\r\n\r\nHello\r\n").into_bytes(),
        helo: None,
        session,
        transcript: Default::default(),
    });
    let delivered = api.deliver_and_wake(prepared, NOW, [3; 10], &StoppedClock);
    delivered.id.to_string()
}

fn subjects(api: &mut TestApi, target: &str, scope: &Scope) -> Vec<String> {
    let (status, body) = ready(api, "GET", target, scope);
    assert_eq!(status, 200, "{body}");
    body["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect()
}

/// Two inboxes with mail in each, one message in both, one in neither.
fn two_teams() -> (TestApi, [String; 4]) {
    let mut api = api();
    create(
        &mut api,
        json!({"name": "team-a", "addresses": ["*@a.test"]}),
    );
    create(
        &mut api,
        json!({"name": "team-b", "addresses": ["*@b.test", "shared@c.test"]}),
    );
    let ids = [
        deliver(&mut api, &["x@a.test"], "only a", None),
        deliver(&mut api, &["y@b.test"], "only b", None),
        deliver(&mut api, &["x@a.test", "shared@c.test"], "both", None),
        deliver(&mut api, &["z@nowhere.test"], "unrouted", None),
    ];
    (api, ids)
}

#[test]
fn inboxes_need_access_control() {
    let mut api: TestApi = Api::new(ApiConfig::default());
    let (status, body) = ready(&mut api, "GET", "/api/inboxes", &Scope::All);
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("--admin-token"));
}

#[test]
fn creation_shows_secrets_once_and_the_list_never() {
    let mut api = api();
    let (token, password) = create(
        &mut api,
        json!({"name": "team-a", "addresses": ["*@a.test"], "maxMessages": 5}),
    );
    assert!(token.len() >= 22 && password.len() >= 22 && token != password);
    let (status, listed) = ready(&mut api, "GET", "/api/inboxes", &Scope::All);
    assert_eq!(status, 200);
    let text = listed.to_string();
    assert!(
        !text.contains(&token) && !text.contains(&password),
        "{text}"
    );
    assert_eq!(listed["inboxes"][0]["name"], "team-a");
    assert_eq!(listed["inboxes"][0]["limits"]["maxMessages"], 5);
    // Taken names, bad names, bad patterns, unknown fields: clear 4xx.
    for (body, status) in [
        (json!({"name": "team-a"}), 409),
        (json!({"name": "Team A"}), 400),
        (json!({"name": "c", "addresses": ["a*b@x.test"]}), 400),
        (json!({"name": "c", "colour": "red"}), 400),
    ] {
        let (got, answer) = ready_with(&mut api, "POST", "/api/inboxes", &Scope::All, Some(body));
        assert_eq!(got, status, "{answer}");
        assert!(answer["error"].is_string());
    }
}

#[test]
fn an_inbox_token_sees_its_own_mail_and_nothing_of_another_inbox() {
    let (mut api, [only_a, only_b, both, unrouted]) = two_teams();
    let a = inbox("team-a");
    assert_eq!(subjects(&mut api, "/api/emails", &a), ["only a", "both"]);
    assert_eq!(
        subjects(&mut api, "/api/emails", &inbox("team-b")),
        ["only b", "both"]
    );
    assert_eq!(subjects(&mut api, "/api/emails", &Scope::All).len(), 4);
    // The admin narrows with ?inbox=; an inbox may name only itself.
    assert_eq!(
        subjects(&mut api, "/api/emails?inbox=team-a", &Scope::All),
        ["only a", "both"]
    );
    assert_eq!(
        ready(&mut api, "GET", "/api/emails?inbox=team-b", &a).0,
        404
    );
    assert_eq!(
        ready(&mut api, "GET", "/api/emails?inbox=nope", &Scope::All).0,
        404
    );
    // Another inbox's message, or the admin's, is 404 on every read: the
    // same answer as an id never stored.
    for id in [&only_b, &unrouted] {
        for path in [
            format!("/api/emails/{id}"),
            format!("/api/emails/{id}/raw"),
            format!("/api/emails/{id}/html"),
            format!("/api/emails/{id}/attachments/0"),
        ] {
            let (status, body) = ready(&mut api, "GET", &path, &a);
            assert_eq!(status, 404, "{path}: {body}");
        }
        assert_eq!(
            ready(&mut api, "DELETE", &format!("/api/emails/{id}"), &a).0,
            404
        );
    }
    assert_eq!(
        ready(&mut api, "GET", &format!("/api/emails/{only_a}"), &a).0,
        200
    );
    let raw = call(
        &mut api,
        &req("GET", &format!("/api/emails/{both}/raw"), &a, None),
    );
    assert!(matches!(raw, Answered::Ready(r) if r.status == 200));
    let (status, latest) = ready(&mut api, "GET", "/api/emails/latest", &a);
    assert_eq!(
        (status, latest["email"]["subject"].as_str()),
        (200, Some("both"))
    );
    // Inbox management is the admin's; its own inbox an inbox may read.
    assert_eq!(ready(&mut api, "GET", "/api/inboxes", &a).0, 403);
    assert_eq!(ready(&mut api, "GET", "/api/inboxes/team-a", &a).0, 200);
    assert_eq!(ready(&mut api, "GET", "/api/inboxes/team-b", &a).0, 404);
    assert_eq!(ready(&mut api, "DELETE", "/api/inboxes/team-b", &a).0, 403);
}

#[test]
fn a_delete_through_an_inbox_removes_the_message_from_that_inbox_only() {
    let (mut api, [_, _, both, _]) = two_teams();
    let (a, b) = (inbox("team-a"), inbox("team-b"));
    let path = format!("/api/emails/{both}");
    assert_eq!(
        ready(&mut api, "DELETE", &path, &a),
        (200, json!({"deleted": 1}))
    );
    assert_eq!(ready(&mut api, "GET", &path, &a).0, 404);
    assert_eq!(ready(&mut api, "GET", &path, &b).0, 200);
    assert_eq!(ready(&mut api, "GET", &path, &Scope::All).0, 200);
    // Its last inbox lets it go: it leaves the store.
    assert_eq!(ready(&mut api, "DELETE", &path, &b).0, 200);
    assert_eq!(ready(&mut api, "GET", &path, &Scope::All).0, 404);
    // An inbox's delete-all empties it only.
    assert_eq!(
        ready(&mut api, "DELETE", "/api/emails", &a),
        (200, json!({"deleted": 1}))
    );
    assert_eq!(
        subjects(&mut api, "/api/emails", &Scope::All),
        ["only b", "unrouted"]
    );
}

#[test]
fn a_flood_into_one_inbox_evicts_only_its_own_oldest_mail() {
    let mut api = api();
    create(
        &mut api,
        json!({"name": "a", "addresses": ["*@a.test"], "maxMessages": 3}),
    );
    create(&mut api, json!({"name": "b", "addresses": ["*@b.test"]}));
    deliver(&mut api, &["x@b.test"], "b oldest", None);
    deliver(&mut api, &["x@a.test", "x@b.test"], "shared", None);
    for n in 0..10 {
        deliver(&mut api, &["x@a.test"], &format!("flood {n}"), None);
    }
    assert_eq!(
        subjects(&mut api, "/api/emails", &inbox("a")),
        ["flood 7", "flood 8", "flood 9"]
    );
    // b keeps its oldest, and the shared message a let go of.
    assert_eq!(
        subjects(&mut api, "/api/emails", &inbox("b")),
        ["b oldest", "shared"]
    );
    assert_eq!(api.store().len(), 5);
    let (_, listed) = ready(&mut api, "GET", "/api/inboxes", &Scope::All);
    assert_eq!(listed["inboxes"][0]["evicted"], 8);
    assert_eq!(listed["inboxes"][0]["messages"], 3);
}

#[test]
fn smtp_credentials_route_to_their_inbox_whatever_the_recipients() {
    let mut api = api();
    create(&mut api, json!({"name": "a", "addresses": []}));
    deliver(&mut api, &["anyone@elsewhere.test"], "by auth", Some("a"));
    deliver(&mut api, &["anyone@elsewhere.test"], "no auth", None);
    assert_eq!(subjects(&mut api, "/api/emails", &inbox("a")), ["by auth"]);
}

#[test]
fn a_wait_in_one_inbox_is_answered_by_its_mail_only() {
    let (mut api, _) = two_teams();
    let waiting = call(
        &mut api,
        &req(
            "GET",
            "/api/emails/wait?subject=new&timeoutMs=5000",
            &inbox("team-a"),
            None,
        ),
    );
    let Answered::Waiting { .. } = waiting else {
        panic!("{waiting:?}");
    };
    let woken = api.deliver_and_wake(
        incoming(&["x@b.test"], "new for b"),
        NOW,
        [1; 10],
        &StoppedClock,
    );
    assert!(
        woken.woken.is_empty(),
        "another inbox's mail answered the wait"
    );
    let woken = api.deliver_and_wake(
        incoming(&["x@a.test"], "new for a"),
        NOW,
        [1; 10],
        &StoppedClock,
    );
    let mut woken = woken.woken;
    assert_eq!(woken.len(), 1);
    assert!(woken.remove(0).1.into_text().contains("new for a"));
}

fn incoming(to: &[&str], subject: &str) -> Prepared {
    Prepared::new(Incoming {
        envelope: Envelope {
            from: "app@app.test".into(),
            to: to.iter().map(|s| s.to_string()).collect(),
        },
        raw: format!("Subject: {subject}\r\n\r\nHello\r\n").into_bytes(),
        helo: None,
        session: Default::default(),
        transcript: Default::default(),
    })
}

/// Every event a subscriber has now, as `(event, data)`.
fn events(api: &mut TestApi, id: SubscriberId) -> Vec<(String, String)> {
    let mut all = Vec::new();
    loop {
        match api.poll_events(id) {
            NextEvents::Batch(batch) => {
                let mut ran = batch.run(&StoppedClock);
                if let Some(progress) = ran.progress.take() {
                    api.handle_progress(progress);
                }
                for event in ran.events {
                    all.push((
                        event.name().to_owned(),
                        String::from_utf8_lossy(event.data()).into_owned(),
                    ));
                }
                if ran.caught_up {
                    return all;
                }
            }
            NextEvents::Idle | NextEvents::Ended | NextEvents::Overflow => return all,
        }
    }
}

#[test]
fn an_inbox_stream_hears_of_its_own_mail_and_deletions_only() {
    let (mut api, [only_a, only_b, both, _]) = two_teams();
    let Answered::Subscribed(sub) =
        call(&mut api, &req("GET", "/api/events", &inbox("team-a"), None))
    else {
        panic!("no stream");
    };
    let Answered::Subscribed(admin) = call(&mut api, &req("GET", "/api/events", &Scope::All, None))
    else {
        panic!("no stream");
    };
    deliver(&mut api, &["q@b.test"], "b later", None);
    let a_new = deliver(&mut api, &["q@a.test"], "a later", None);
    ready(
        &mut api,
        "DELETE",
        &format!("/api/emails/{only_b}"),
        &inbox("team-b"),
    );
    ready(
        &mut api,
        "DELETE",
        &format!("/api/emails/{both}"),
        &inbox("team-b"),
    );
    ready(
        &mut api,
        "DELETE",
        &format!("/api/emails/{only_a}"),
        &inbox("team-a"),
    );
    let seen = events(&mut api, sub.id);
    let text = format!("{seen:?}");
    assert!(text.contains(&a_new) && text.contains(&only_a), "{text}");
    assert!(
        !text.contains(&only_b) && !text.contains("b later"),
        "{text}"
    );
    // b deleted the shared message from b only: a still holds it, a hears nothing.
    assert!(!text.contains(&both), "{text}");
    // The admin sees messages leave the store: only_b and only_a, not the shared one.
    let admin_seen = format!("{:?}", events(&mut api, admin.id));
    assert!(
        admin_seen.contains(&only_b) && admin_seen.contains(&only_a),
        "{admin_seen}"
    );
    let deleted: Vec<_> = events_named(&admin_seen);
    assert!(!deleted.iter().any(|d| d.contains(&both)), "{admin_seen}");
}

fn events_named(debug: &str) -> Vec<String> {
    debug
        .split("(\"")
        .filter(|part| part.starts_with("deleted"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_inbox_max_age_expires_its_own_mail_on_time() {
    let mut api = api();
    create(
        &mut api,
        json!({"name": "a", "addresses": ["*@a.test"], "maxAgeMs": 1000}),
    );
    api.deliver(incoming(&["x@a.test"], "old"), NOW, [1; 10]);
    api.deliver(incoming(&["x@b.test"], "admin's"), NOW, [1; 10]);
    assert_eq!(api.poll_timeout(), Some(NOW + 1000));
    api.handle_timeout(NOW + 999);
    assert_eq!(api.store().len(), 2);
    api.handle_timeout(NOW + 1000);
    assert_eq!(
        api.store().len(),
        1,
        "the inbox's message left; the admin's stays"
    );
    assert_eq!(api.poll_timeout(), None);
}

#[test]
fn rotation_ends_the_old_credentials_and_deletion_takes_only_mail_no_one_else_holds() {
    let (mut api, [_, _, both, _]) = two_teams();
    let (status, rotated) = ready(&mut api, "POST", "/api/inboxes/team-a/token", &Scope::All);
    assert_eq!(status, 200);
    assert!(rotated["inbox"]["token"].as_str().unwrap().len() >= 22);
    assert_eq!(
        ready(&mut api, "POST", "/api/inboxes/nope/token", &Scope::All).0,
        404
    );
    let (status, deleted) = ready(&mut api, "DELETE", "/api/inboxes/team-a", &Scope::All);
    assert_eq!((status, deleted), (200, json!({"deleted": 1})));
    assert_eq!(
        ready(
            &mut api,
            "GET",
            &format!("/api/emails/{both}"),
            &inbox("team-b")
        )
        .0,
        200
    );
    // The old token's grant opens nothing any more.
    assert_eq!(
        ready(&mut api, "GET", "/api/emails", &inbox("team-a")).0,
        401
    );
    assert_eq!(api.store().len(), 3);
}
