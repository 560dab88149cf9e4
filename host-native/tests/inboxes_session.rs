//! Browser sessions: a token traded for an `HttpOnly; SameSite=Strict`
//! cookie, what the cookie opens, the cross-site check on cookie writes,
//! logout, and the end of an inbox's sessions when its token is rotated.

mod common;
mod inboxes_common;

use std::time::Duration;

use inboxes_common::{ADMIN, call, call_with, events, inbox, send, start};
use serde_json::json;

/// Opens a session with `token`: the cookie's `name=value`.
fn login(server: &common::Server, token: &str) -> String {
    let body = json!({ "token": token }).to_string();
    let response = call_with(
        server,
        "POST",
        "/api/session",
        &["Content-Type: application/json".to_owned()],
        body.as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", response.body);
    let set = response
        .header("set-cookie")
        .expect("Set-Cookie")
        .to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.split("; ").any(|p| p == part), "{part} in {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    let pair = set.split(';').next().unwrap().to_owned();
    let id = pair
        .strip_prefix("mailjar_session=")
        .expect("the cookie's name");
    // 128 random bits.
    assert!(id.len() >= 22, "{id}");
    pair
}

fn cookie(pair: &str) -> String {
    format!("Cookie: {pair}")
}

#[test]
fn a_session_cookie_opens_reads_streams_and_same_site_writes() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let _b = inbox(&server, "b", &["*@b.test"]);
    let id_a = send(&server, &["x@a.test"], "for a");
    let id_b = send(&server, &["y@b.test"], "for b");
    // A bad token is a 401, and no cookie.
    let bad = call_with(
        &server,
        "POST",
        "/api/session",
        &["Content-Type: application/json".to_owned()],
        br#"{"token":"nope-nope-nope"}"#,
    );
    assert_eq!(bad.status, 401);
    assert!(bad.header("set-cookie").is_none());
    let session = login(&server, &a.token);
    let list = call_with(&server, "GET", "/api/emails", &[cookie(&session)], b"");
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains(&id_a) && !list.body.contains(&id_b),
        "{}",
        list.body
    );
    reads_and_streams_with_the_cookie(&server, &session, &id_a);
    writes_need_the_same_site(&server, &session, &a.token, &id_a);
}

/// The HTML iframe and the event stream work with the cookie alone.
fn reads_and_streams_with_the_cookie(server: &common::Server, session: &str, id_a: &str) {
    let html = call_with(
        server,
        "GET",
        &format!("/api/emails/{id_a}/html"),
        &[cookie(session)],
        b"",
    );
    assert_ne!(html.status, 401, "{}", html.body);
    let watcher = {
        let (http, headers) = (server.http, vec![cookie(session)]);
        std::thread::spawn(move || {
            events(http, "/api/events", &headers, Duration::from_millis(1200))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let live_b = send(server, &["y@b.test"], "live for b");
    let live_a = send(server, &["x@a.test"], "live for a");
    let (status, text) = watcher.join().expect("watcher");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&live_a) && !text.contains(&live_b), "{text}");
}

/// Cookie writes pass the cross-site check first; logout ends the session.
fn writes_need_the_same_site(server: &common::Server, session: &str, a_token: &str, id_a: &str) {
    // A cross-site write with the cookie: 403 before anything else, even
    // for a message that does not exist.
    let target = format!("/api/emails/{id_a}");
    for headers in [
        vec![cookie(session)],
        vec![cookie(session), "Origin: http://evil.test".to_owned()],
        vec![cookie(session), "Content-Type: text/plain".to_owned()],
    ] {
        let refused = call_with(server, "DELETE", &target, &headers, b"");
        assert_eq!(refused.status, 403, "{headers:?}: {}", refused.body);
        assert!(refused.error().contains("cross-site"), "{}", refused.body);
        let unknown = call_with(server, "POST", "/api/nothing-here", &headers, b"x");
        assert_eq!(unknown.status, 403, "{headers:?}");
    }
    assert_eq!(call(server, "GET", &target, Some(ADMIN), None).status, 200);
    // Same-site: its own Origin, or JSON.
    let origin = format!("Origin: http://{}", server.http);
    let deleted = call_with(server, "DELETE", &target, &[cookie(session), origin], b"");
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(call(server, "GET", &target, Some(ADMIN), None).status, 404);
    // A bearer token is not a cookie: no cross-site check applies.
    let by_token = call(server, "DELETE", "/api/emails", Some(a_token), None);
    assert_eq!(by_token.status, 200);
    // Logout ends the session on the server: the same cookie is refused after.
    let json_type = "Content-Type: application/json".to_owned();
    let out = call_with(
        server,
        "DELETE",
        "/api/session",
        &[cookie(session), json_type],
        b"",
    );
    assert_eq!(out.status, 200, "{}", out.body);
    assert_eq!(out.json()["ended"], true);
    let after = call_with(server, "GET", "/api/emails", &[cookie(session)], b"");
    assert_eq!(after.status, 401);
}

#[test]
fn sessions_end_with_their_token_and_are_bounded() {
    let server = start(&["--max-sessions", "3"]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let session = login(&server, &a.token);
    let admin = login(&server, ADMIN);
    assert_eq!(
        call_with(&server, "GET", "/api/emails", &[cookie(&session)], b"").status,
        200
    );
    let health = call(&server, "GET", "/health", None, None).json();
    assert_eq!(health["sessions"], 2, "{health}");
    assert_eq!(health["limits"]["maxSessions"], 3, "{health}");
    let rotated = call(&server, "POST", "/api/inboxes/a/token", Some(ADMIN), None);
    assert_eq!(rotated.status, 200);
    assert_eq!(
        call_with(&server, "GET", "/api/emails", &[cookie(&session)], b"").status,
        401
    );
    let health = call(&server, "GET", "/health", None, None).json();
    assert_eq!(
        health["sessions"], 1,
        "the rotated inbox's session ended: {health}"
    );
    // The admin's session is untouched; past the bound the oldest goes.
    assert_eq!(
        call_with(&server, "GET", "/api/inboxes", &[cookie(&admin)], b"").status,
        200
    );
    for _ in 0..3 {
        login(&server, ADMIN);
    }
    let health = call(&server, "GET", "/health", None, None).json();
    assert_eq!(health["sessions"], 3, "{health}");
    assert_eq!(
        call_with(&server, "GET", "/api/inboxes", &[cookie(&admin)], b"").status,
        401
    );
}
