//! Inboxes over SMTP with Python's smtplib: routing by AUTH with an inbox's
//! own credentials, a wrong password refused, and `--unrouted reject`.

mod common;
mod inboxes_common;

use inboxes_common::{ADMIN, ids, inbox, smtplib_send as smtplib, start};

/// The subjects a token lists.
fn subjects(server: &common::Server, token: &str) -> Vec<String> {
    let body = inboxes_common::get_ok(server, "/api/emails", token);
    body["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn auth_with_an_inbox_credentials_routes_to_it_and_a_wrong_password_is_535() {
    let server = start(&[]);
    let a = inbox(&server, "a", &[]);
    let b = inbox(&server, "b", &["*@b.test"]);
    let sent = smtplib(
        &server,
        Some((&a.user, &a.password)),
        "someone@nowhere.test",
        "by auth",
    );
    assert_eq!(sent, "sent");
    // Its recipient matches b as well: the message is in both, stored once.
    let both = smtplib(
        &server,
        Some((&a.user, &a.password)),
        "x@b.test",
        "auth and rcpt",
    );
    assert_eq!(both, "sent");
    assert_eq!(subjects(&server, &a.token), ["by auth", "auth and rcpt"]);
    assert_eq!(subjects(&server, &b.token), ["auth and rcpt"]);
    assert_eq!(ids(&server, ADMIN, "").len(), 2);
    // A wrong password for an inbox's user name: 535, and nothing stored.
    let wrong = smtplib(
        &server,
        Some((&a.user, "not-the-password")),
        "z@nowhere.test",
        "wrong",
    );
    assert_eq!(wrong, "auth 535");
    // Its old password stops with a rotation.
    let rotated = inboxes_common::call(&server, "POST", "/api/inboxes/a/token", Some(ADMIN), None);
    assert_eq!(rotated.status, 200);
    let token = rotated.json()["inbox"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let old = smtplib(
        &server,
        Some((&a.user, &a.password)),
        "z@nowhere.test",
        "old password",
    );
    assert_eq!(old, "auth 535");
    // Any other user name logs in as before, and its mail is the admin's.
    let other = smtplib(
        &server,
        Some(("someone-else", "anything")),
        "q@nowhere.test",
        "not an inbox",
    );
    assert_eq!(other, "sent");
    assert_eq!(subjects(&server, &token), ["by auth", "auth and rcpt"]);
    let all = subjects(&server, ADMIN);
    assert_eq!(all, ["by auth", "auth and rcpt", "not an inbox"]);
}

#[test]
fn unrouted_reject_refuses_rcpt_unless_an_inbox_takes_it_or_sends_it() {
    let server = start(&["--unrouted", "reject"]);
    let a = inbox(&server, "a", &["*@a.test"]);
    assert_eq!(
        smtplib(&server, None, "x@nowhere.test", "unrouted"),
        "rcpt 550"
    );
    assert_eq!(smtplib(&server, None, "x@a.test", "routed"), "sent");
    // A session logged in as the inbox: everything goes to it.
    let by_auth = smtplib(
        &server,
        Some((&a.user, &a.password)),
        "x@nowhere.test",
        "by auth",
    );
    assert_eq!(by_auth, "sent");
    // Logged in as nobody in particular: still refused.
    let other = smtplib(&server, Some(("someone", "x")), "x@nowhere.test", "other");
    assert_eq!(other, "rcpt 550");
    assert_eq!(subjects(&server, &a.token), ["routed", "by auth"]);
    assert_eq!(subjects(&server, ADMIN), ["routed", "by auth"]);
}
