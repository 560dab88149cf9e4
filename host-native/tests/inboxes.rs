//! Inboxes and access control over real sockets: every route with another
//! inbox's token and with none, routing by each pattern kind, a message in
//! two inboxes, quotas per inbox, rotation, the open warning.

mod common;
mod inboxes_common;

use std::time::Duration;

use common::Server;
use inboxes_common::{ADMIN, call, call_with, events, get_ok, ids, inbox, send, start};
use serde_json::json;

/// A message id that was never stored.
const GHOST: &str = "01a21787-0000-7000-8000-000000000000";

/// Every route, as inbox `b` (or nobody) would try it on inbox `a`'s mail.
fn routes(a: &str, id_a: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GET", "/api/emails".to_owned()),
        ("GET", format!("/api/emails?inbox={a}")),
        ("GET", "/api/emails/latest".to_owned()),
        ("GET", format!("/api/emails/latest?inbox={a}")),
        ("GET", "/api/emails/latest?to=x%40a.test".to_owned()),
        (
            "GET",
            "/api/emails/wait?to=x%40a.test&timeoutMs=300".to_owned(),
        ),
        ("GET", format!("/api/emails/wait?inbox={a}&timeoutMs=300")),
        ("GET", format!("/api/emails/{id_a}")),
        ("GET", format!("/api/emails/{id_a}/raw")),
        ("GET", format!("/api/emails/{id_a}/html")),
        ("GET", format!("/api/emails/{id_a}/attachments/0")),
        ("GET", format!("/api/events?inbox={a}")),
        ("DELETE", format!("/api/emails/{id_a}")),
        ("DELETE", "/api/emails?to=x%40a.test".to_owned()),
        ("GET", "/api/faults".to_owned()),
        ("POST", "/api/faults".to_owned()),
        ("DELETE", "/api/faults".to_owned()),
        ("GET", "/api/inboxes".to_owned()),
        ("POST", "/api/inboxes".to_owned()),
        ("GET", format!("/api/inboxes/{a}")),
        ("DELETE", format!("/api/inboxes/{a}")),
        ("POST", format!("/api/inboxes/{a}/token")),
        ("GET", "/api/no-such-endpoint".to_owned()),
        ("GET", "/metrics".to_owned()),
    ]
}

/// What inbox `b`'s token must get on each of [`routes`]: the status, and
/// for a 200 what its body may hold (never `a`'s id, never a count of `a`'s mail).
fn expected_for_other_inbox(method: &str, target: &str) -> u16 {
    match (method, target) {
        (_, t) if t.contains("inbox=a") => 404,
        ("GET", "/api/emails" | "/api/emails/latest") => 200,
        (_, t) if t.starts_with("/api/emails/latest") => 404,
        (_, t) if t.starts_with("/api/emails/wait") => 408,
        ("DELETE", t) if t.starts_with("/api/emails?") => 200,
        (_, t) if t.starts_with("/api/emails/") => 404,
        // Its own rules (none): the list is empty, clearing deletes none,
        // and the table's body is no rule.
        ("POST", "/api/faults") => 400,
        (_, "/api/faults") => 200,
        ("GET", "/api/inboxes/a") => 404,
        (_, t) if t.starts_with("/api/inboxes") => 403,
        // An admin-only route (see the README's access control).
        ("GET", "/metrics") => 403,
        _ => 404,
    }
}

#[test]
fn another_inbox_and_nobody_see_nothing_on_any_route() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let b = inbox(&server, "b", &["*@b.test"]);
    let id_a = send(&server, &["x@a.test"], "for a");
    let id_b = send(&server, &["y@b.test"], "for b");
    for (method, target) in routes("a", &id_a) {
        let body = (method == "POST").then(|| json!({ "name": "c" }));
        // Nobody: 401, with the challenge, for every route, known or not.
        let response = call(&server, method, &target, None, body.as_ref());
        assert_eq!(response.status, 401, "{method} {target}: {}", response.body);
        assert_eq!(response.error(), "unauthorized");
        assert_eq!(response.header("www-authenticate"), Some("Bearer"));
        // A wrong token is nobody too.
        let wrong = call(
            &server,
            method,
            &target,
            Some("not-a-token-at-all"),
            body.as_ref(),
        );
        assert_eq!(wrong.status, 401, "{method} {target} with a wrong token");
        // The other inbox: 404 for a's things, 403 for the admin's, and
        // nothing of a's in what it may see.
        let response = call(&server, method, &target, Some(&b.token), body.as_ref());
        let want = expected_for_other_inbox(method, &target);
        assert_eq!(
            response.status, want,
            "{method} {target}: {}",
            response.body
        );
        if want == 403 {
            assert_eq!(response.error(), "admin token required");
        }
        assert!(
            !response.body.contains("for a"),
            "{method} {target} leaked: {}",
            response.body
        );
        if response.status != 404 || !target.contains(id_a.as_str()) {
            assert!(
                !response.body.contains(&id_a),
                "{method} {target} leaked: {}",
                response.body
            );
            continue;
        }
        // A 404 names the id it was given, and says the same of an id never stored.
        let ghost_target = target.replace(&id_a, GHOST);
        let ghost = call(
            &server,
            method,
            &ghost_target,
            Some(&b.token),
            body.as_ref(),
        );
        assert_eq!(ghost.status, 404, "{method} {ghost_target}");
        assert_eq!(
            response.body.replace(&id_a, GHOST),
            ghost.body,
            "{method} {target}"
        );
    }
    // b's own list held b's message only (the DELETE ?to= above matched nothing of b's).
    assert_eq!(ids(&server, &b.token, ""), vec![id_b.clone()]);
    // a's message survived every attempt; the admin sees both.
    assert_eq!(ids(&server, &a.token, ""), vec![id_a.clone()]);
    assert_eq!(ids(&server, ADMIN, "").len(), 2);
    assert_eq!(ids(&server, ADMIN, "inbox=a"), vec![id_a.clone()]);
    // The open paths stay open.
    for target in ["/health", "/api/openapi.json"] {
        assert_eq!(
            call(&server, "GET", target, None, None).status,
            200,
            "{target}"
        );
    }
    let ui = call_with(&server, "GET", "/", &[], b"");
    assert_eq!(ui.status, 200);
}

#[test]
fn event_streams_carry_only_their_inbox() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let b = inbox(&server, "b", &["*@b.test"]);
    let id_a = send(&server, &["x@a.test"], "for a");
    let id_b = send(&server, &["y@b.test"], "for b");
    // Without a token: 401, no stream.
    let (status, text) = events(server.http, "/api/events", &[], Duration::from_millis(300));
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains(&id_a));
    // b's stream carries b's live message; a live message to a is not in it,
    // nor is a's deletion of its own message.
    let watcher = {
        let (http, token) = (server.http, b.token.clone());
        std::thread::spawn(move || {
            events(
                http,
                "/api/events",
                &auth_lines(&token),
                Duration::from_millis(1500),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let live_a = send(&server, &["z@a.test"], "live for a");
    let deleted = call(
        &server,
        "DELETE",
        &format!("/api/emails/{id_a}"),
        Some(&a.token),
        None,
    );
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let live_b = send(&server, &["w@b.test"], "live for b");
    let (status, text) = watcher.join().expect("watcher");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&live_b), "{text}");
    assert!(!id_b.is_empty());
    for leaked in [&id_a, &live_a] {
        assert!(
            !text.contains(leaked.as_str()),
            "b's stream named a's {leaked}: {text}"
        );
    }
    assert!(!text.contains("\"all\""), "{text}");
}

fn auth_lines(token: &str) -> Vec<String> {
    vec![format!("Authorization: Bearer {token}")]
}

#[test]
fn each_pattern_kind_routes_and_one_message_is_in_two_inboxes() {
    let server = start(&[]);
    let a = inbox(
        &server,
        "team-a",
        &["*@team-a.test", "qa+*@local.test", "bob@example.test"],
    );
    let b = inbox(&server, "team-b", &["BOB@Example.test"]);
    let by_domain = send(&server, &["anyone@TEAM-A.test"], "domain");
    let by_tag = send(&server, &["qa+signup-7@local.test"], "tagged");
    let untagged = send(&server, &["qa@local.test"], "not tagged");
    let subdomain = send(&server, &["x@sub.team-a.test"], "subdomain");
    let both = send(&server, &["bob@example.test"], "both");
    // Oldest first, as every list.
    assert_eq!(
        ids(&server, &a.token, ""),
        vec![by_domain, by_tag, both.clone()]
    );
    assert_eq!(ids(&server, &b.token, ""), vec![both.clone()]);
    // Unrouted mail is the admin's alone.
    let all = ids(&server, ADMIN, "");
    assert!(all.contains(&untagged) && all.contains(&subdomain));
    // A delete through one inbox leaves the other's copy; the last one frees it.
    let path = format!("/api/emails/{both}");
    assert_eq!(
        call(&server, "DELETE", &path, Some(&a.token), None).status,
        200
    );
    assert_eq!(
        call(&server, "GET", &path, Some(&a.token), None).status,
        404
    );
    assert_eq!(
        call(&server, "GET", &path, Some(&b.token), None).status,
        200
    );
    assert_eq!(call(&server, "GET", &path, Some(ADMIN), None).status, 200);
    assert_eq!(
        call(&server, "DELETE", &path, Some(&b.token), None).status,
        200
    );
    assert_eq!(call(&server, "GET", &path, Some(ADMIN), None).status, 404);
    // The listing counts each inbox's own mail.
    let listed = get_ok(&server, "/api/inboxes", ADMIN);
    let counts: Vec<(String, u64)> = listed["inboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_owned(),
                i["messages"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![("team-a".to_owned(), 2), ("team-b".to_owned(), 0)]
    );
}

#[test]
fn a_flood_into_one_inbox_evicts_only_its_own_mail() {
    let server = start(&[]);
    let flood = inboxes_common::create(
        &server,
        json!({ "name": "flood", "addresses": ["*@flood.test"], "maxMessages": 3 }),
    );
    let quiet = inbox(&server, "quiet", &["*@quiet.test"]);
    let oldest_quiet = send(&server, &["q@quiet.test"], "quiet one");
    let mut sent = Vec::new();
    for i in 0..20 {
        sent.push(send(&server, &["f@flood.test"], &format!("flood {i}")));
    }
    let kept = ids(&server, &flood.token, "");
    let newest: Vec<String> = sent[sent.len() - 3..].to_vec();
    assert_eq!(kept, newest);
    assert_eq!(ids(&server, &quiet.token, ""), vec![oldest_quiet.clone()]);
    // What the flood evicted left the store (no other inbox held it).
    assert_eq!(ids(&server, ADMIN, "").len(), 4);
    let listed = get_ok(&server, "/api/inboxes", ADMIN);
    let flood_row = listed["inboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "flood")
        .cloned()
        .unwrap();
    assert_eq!(flood_row["evicted"], 17, "{flood_row}");
    assert_eq!(flood_row["messages"], 3, "{flood_row}");
}

#[test]
fn rotation_ends_the_old_token_at_once() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let id = send(&server, &["x@a.test"], "rotate me");
    assert_eq!(ids(&server, &a.token, ""), vec![id.clone()]);
    // A stream opened with the old token ends with it: no later mail reaches it.
    let watcher = {
        let (http, headers) = (server.http, auth_lines(&a.token));
        std::thread::spawn(move || {
            events(http, "/api/events", &headers, Duration::from_millis(1500))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let rotated = call(&server, "POST", "/api/inboxes/a/token", Some(ADMIN), None);
    let after = send(&server, &["y@a.test"], "after the rotation");
    let (status, text) = watcher.join().expect("watcher");
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains(&after),
        "the old token's stream got {after}: {text}"
    );
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new_token = rotated.json()["inbox"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new_token, a.token);
    assert!(new_token.len() >= 22);
    let old = call(&server, "GET", "/api/emails", Some(&a.token), None);
    assert_eq!(old.status, 401, "{}", old.body);
    assert_eq!(ids(&server, &new_token, ""), vec![id, after]);
    // Deleted: its token opens nothing.
    assert_eq!(
        call(&server, "DELETE", "/api/inboxes/a", Some(ADMIN), None).status,
        200
    );
    assert_eq!(
        call(&server, "GET", "/api/emails", Some(&new_token), None).status,
        401
    );
}

#[test]
fn the_admin_token_is_checked_at_start_and_open_mailjars_say_so() {
    let output = std::process::Command::new(common::binary())
        .args([
            "--smtp-port",
            "0",
            "--http-port",
            "0",
            "--admin-token",
            "too-short",
        ])
        .output()
        .expect("run mailjar");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--admin-token"));
    // Without access control on loopback: as before, no "open".
    let closed = Server::start();
    assert!(closed.health().get("open").is_none());
    assert!(closed.health().get("inboxes").is_none());
    let open = Server::start_with(&["--http-host", "0.0.0.0"]);
    let health = call(&open, "GET", "/health", None, None).json();
    assert_eq!(health["open"], true, "{health}");
    let guarded = start(&["--http-host", "0.0.0.0"]);
    let health = call(&guarded, "GET", "/health", None, None).json();
    assert!(health.get("open").is_none(), "{health}");
    assert_eq!(health["inboxes"], 0);
}
