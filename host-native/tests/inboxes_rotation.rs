//! Waits and event streams parked with an inbox's token end when that token
//! is rotated or the inbox deleted: they get none of the inbox's later mail.

mod common;
mod inboxes_common;

use std::time::{Duration, Instant};

use inboxes_common::{ADMIN, call, events, inbox, send, start};

/// How long a rotation or deletion may take to end a parked wait.
const PROMPT: Duration = Duration::from_millis(1000);

/// Parks a wait with `token`, runs `change` once it is parked, sends mail
/// to `to`, and returns the wait's answer and how long after the change it came.
fn wait_across(
    server: &common::Server,
    token: &str,
    change: impl FnOnce(),
    to: &str,
) -> (common::Http, Duration) {
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let target = "/api/emails/wait?timeoutMs=10000";
            let answer = call(server, "GET", target, Some(token), None);
            (answer, Instant::now())
        });
        server.poll_health("waits", 1, Duration::from_secs(5));
        change();
        let changed = Instant::now();
        send(server, &[to], "after the change");
        let (answer, at) = waiting.join().expect("the wait's thread");
        (answer, at.saturating_duration_since(changed))
    })
}

#[test]
fn a_wait_with_the_old_token_ends_401_at_rotation() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let rotate = || {
        let rotated = call(&server, "POST", "/api/inboxes/a/token", Some(ADMIN), None);
        assert_eq!(rotated.status, 200, "{}", rotated.body);
    };
    let (answer, after) = wait_across(&server, &a.token, rotate, "x@a.test");
    assert_eq!(
        answer.status, 401,
        "the old token's wait got: {}",
        answer.body
    );
    assert_eq!(answer.error(), "unauthorized");
    assert!(after < PROMPT, "answered {after:?} after the rotation");
    eprintln!("wait ended {} ms after the rotation", after.as_millis());
}

#[test]
fn a_wait_in_a_deleted_inbox_ends_401_at_once() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let delete = || {
        let deleted = call(&server, "DELETE", "/api/inboxes/a", Some(ADMIN), None);
        assert_eq!(deleted.status, 200, "{}", deleted.body);
    };
    let (answer, after) = wait_across(&server, &a.token, delete, "x@a.test");
    assert_eq!(
        answer.status, 401,
        "the deleted inbox's wait got: {}",
        answer.body
    );
    assert!(after < PROMPT, "answered {after:?} after the deletion");
    eprintln!("wait ended {} ms after the deletion", after.as_millis());
}

#[test]
fn an_admin_wait_in_an_inbox_lives_through_rotation() {
    let server = start(&[]);
    inbox(&server, "a", &["*@a.test"]);
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let target = "/api/emails/wait?inbox=a&timeoutMs=10000";
            call(&server, "GET", target, Some(ADMIN), None)
        });
        server.poll_health("waits", 1, Duration::from_secs(5));
        let rotated = call(&server, "POST", "/api/inboxes/a/token", Some(ADMIN), None);
        assert_eq!(rotated.status, 200);
        send(&server, &["x@a.test"], "for the admin");
        let answer = waiting.join().expect("the wait's thread");
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.json()["email"]["subject"], "for the admin");
    });
}

#[test]
fn an_event_stream_with_the_old_token_ends_at_rotation() {
    let server = start(&[]);
    let a = inbox(&server, "a", &["*@a.test"]);
    let auth = vec![format!("Authorization: Bearer {}", a.token)];
    std::thread::scope(|scope| {
        let stream = scope.spawn(|| {
            let (status, text) = events(server.http, "/api/events", &auth, Duration::from_secs(8));
            (status, text, Instant::now())
        });
        server.poll_health("subscribers", 1, Duration::from_secs(5));
        let rotated = call(&server, "POST", "/api/inboxes/a/token", Some(ADMIN), None);
        assert_eq!(rotated.status, 200);
        let changed = Instant::now();
        send(&server, &["x@a.test"], "after the rotation");
        let (status, text, ended) = stream.join().expect("the stream's thread");
        assert_eq!(status, 200);
        assert!(!text.contains("event: stored"), "{text}");
        let after = ended.saturating_duration_since(changed);
        assert!(
            after < PROMPT,
            "the stream went on {after:?} after the rotation"
        );
        eprintln!("stream ended {} ms after the rotation", after.as_millis());
    });
}
