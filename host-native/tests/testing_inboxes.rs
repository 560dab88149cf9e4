//! The Rust test API with access control: a `TestServer` started with an
//! admin token, inboxes made through it, and a client per inbox that sees
//! only that inbox's mail. The applications send with lettre over real SMTP
//! (to an inbox's address, or with its SMTP login); the token also works
//! over real HTTP.

mod common;

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use mailjar::testing::{Filter, NewInbox, TestError, TestServer};

const ADMIN: &str = "testing-inboxes-admin-0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// Sends one message through `smtp` to `to`, logging in when `login` is given.
async fn send(smtp: std::net::SocketAddr, to: &str, subject: &str, login: Option<(&str, &str)>) {
    let message = Message::builder()
        .from("app@sender.test".parse().unwrap())
        .to(to.parse().unwrap())
        .subject(subject)
        .header(ContentType::TEXT_PLAIN)
        .body(format!("Your code is 482913 ({subject})"))
        .unwrap();
    let mut builder =
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.ip().to_string())
            .port(smtp.port());
    if let Some((user, password)) = login {
        builder = builder.credentials(Credentials::new(user.to_owned(), password.to_owned()));
    }
    builder.build().send(message).await.unwrap();
}

fn subjects(emails: &[mailjar::testing::CapturedEmail]) -> Vec<&str> {
    emails.iter().map(|e| e.subject.as_str()).collect()
}

#[tokio::test]
async fn each_inbox_client_sees_only_its_own_mail() {
    let server = TestServer::builder()
        .admin_token(ADMIN)
        .start()
        .await
        .unwrap();
    assert_eq!(server.admin_token(), Some(ADMIN));
    let a = server
        .create_inbox(
            &NewInbox::new("team-a")
                .address("*@a.local.test")
                .max_messages(10),
        )
        .await
        .unwrap();
    let b = server
        .create_inbox(&NewInbox::new("team-b").address("*@b.local.test"))
        .await
        .unwrap();
    assert_eq!(
        (a.name.as_str(), a.smtp.username.as_str()),
        ("team-a", "team-a")
    );
    assert_eq!(a.limits.max_messages, Some(10));
    assert!(a.token.len() >= 22 && a.smtp.password.len() >= 22);
    let (client_a, client_b) = (server.client(&a.token), server.client(&b.token));

    // A wait parked before the mail comes, in inbox a's scope.
    let any = Filter::new();
    let waiting = client_a.wait_for(&any, WAIT);
    let sending = async {
        send(server.smtp_addr(), "user@b.local.test", "for b", None).await;
        send(server.smtp_addr(), "user@a.local.test", "for a", None).await;
        // b's SMTP login routes mail to b whatever its recipient.
        send(
            server.smtp_addr(),
            "someone@else.test",
            "b by login",
            Some((&b.smtp.username, &b.smtp.password)),
        )
        .await;
    };
    let (got_a, ()) = tokio::join!(waiting, sending);
    assert_eq!(got_a.unwrap().subject, "for a");

    assert_eq!(
        subjects(&client_a.list(&Filter::new()).await.unwrap()),
        ["for a"]
    );
    assert_eq!(
        subjects(&client_b.list(&Filter::new()).await.unwrap()),
        ["for b", "b by login"]
    );
    assert_eq!(
        client_b
            .latest(&Filter::new())
            .await
            .unwrap()
            .unwrap()
            .subject,
        "b by login"
    );
    // The server's own helpers are the admin's: everything, or one inbox with `inbox`.
    assert_eq!(server.list(&Filter::new()).await.unwrap().len(), 3);
    let only_b = server.list(&Filter::new().inbox("team-b")).await.unwrap();
    assert_eq!(subjects(&only_b), ["for b", "b by login"]);

    let listed = server.inboxes().await.unwrap();
    let counts: Vec<(&str, u64)> = listed
        .iter()
        .map(|i| (i.name.as_str(), i.messages))
        .collect();
    assert_eq!(counts, [("team-a", 1), ("team-b", 2)]);

    // Admin routes are the admin's: an inbox token is 403, another inbox's name 404.
    match client_a.request("GET", "/api/inboxes", None).await {
        Err(TestError::Refused(403, text)) => assert_eq!(text, "admin token required"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client_a.request("GET", "/api/inboxes/team-b", None).await,
        Err(TestError::Refused(404, _))
    ));
    // A clear through an inbox empties that inbox only.
    assert_eq!(client_b.clear().await.unwrap(), 2);
    assert_eq!(
        subjects(&client_a.list(&Filter::new()).await.unwrap()),
        ["for a"]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_wrong_or_rotated_token_is_401_and_a_deleted_inbox_ends() {
    let server = TestServer::builder()
        .admin_token(ADMIN)
        .flags(&["--max-messages", "50"])
        .start()
        .await
        .unwrap();
    assert_eq!(
        server.request("GET", "/health", None).await.unwrap()["limits"]["maxMessages"],
        50
    );
    let c = server.create_inbox(&NewInbox::new("c")).await.unwrap();
    let wrong = server.client("not-a-token-of-this-server");
    match wrong
        .wait_for(&Filter::new(), Duration::from_millis(50))
        .await
    {
        Err(TestError::Refused(401, text)) => assert_eq!(text, "unauthorized"),
        other => panic!("{other:?}"),
    }
    let old = server.client(&c.token);
    assert!(old.list(&Filter::new()).await.unwrap().is_empty());
    let rotated = server.rotate_inbox("c").await.unwrap();
    assert_ne!(rotated.token, c.token);
    assert!(matches!(
        old.list(&Filter::new()).await,
        Err(TestError::Refused(401, _))
    ));
    assert!(
        server
            .client(&rotated.token)
            .list(&Filter::new())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        server.create_inbox(&NewInbox::new("c")).await,
        Err(TestError::Refused(409, _))
    ));
    assert!(matches!(
        server.create_inbox(&NewInbox::new("Not A Name")).await,
        Err(TestError::Refused(400, _))
    ));
    assert_eq!(server.delete_inbox("c").await.unwrap(), 0);
    assert!(matches!(
        server.client(&rotated.token).list(&Filter::new()).await,
        Err(TestError::Refused(401, _))
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn the_token_works_over_real_http_and_none_is_401() {
    let server = TestServer::builder()
        .admin_token(ADMIN)
        .start()
        .await
        .unwrap();
    let authorization = server.authorization().unwrap();
    assert_eq!(authorization, format!("Bearer {ADMIN}"));
    let addr: std::net::SocketAddr = server
        .http_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let (with, without) = tokio::task::spawn_blocking(move || {
        let ask = |header: &str| {
            let request = format!(
                "GET /api/emails HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{header}\r\n"
            );
            common::http_exchange(addr, request.as_bytes())
        };
        (ask(&format!("Authorization: {authorization}\r\n")), ask(""))
    })
    .await
    .unwrap();
    assert_eq!(with.status, 200, "{}", with.body);
    assert_eq!(without.status, 401);
    assert_eq!(without.header("www-authenticate"), Some("Bearer"));
    server.shutdown().await;
}

#[tokio::test]
async fn without_an_admin_token_there_are_no_inboxes_and_no_token_is_needed() {
    let server = TestServer::start().await.unwrap();
    assert_eq!((server.admin_token(), server.authorization()), (None, None));
    match server.create_inbox(&NewInbox::new("a")).await {
        Err(TestError::Refused(404, text)) => assert!(text.contains("--admin-token"), "{text}"),
        other => panic!("{other:?}"),
    }
    // A builder without a token is `start_with` its flags.
    let flagged = TestServer::builder()
        .flags(&["--max-messages", "3"])
        .start()
        .await
        .unwrap();
    assert_eq!(
        flagged.request("GET", "/health", None).await.unwrap()["limits"]["maxMessages"],
        3
    );
    assert!(matches!(
        TestServer::builder().admin_token("short").start().await,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput
    ));
    flagged.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_token_that_starts_with_a_dash_is_a_token_not_a_flag() {
    // A random base64url token starts with "-" one time in 64.
    let token = "-Sstarts-with-a-dash-0123456789";
    let server = TestServer::builder()
        .admin_token(token)
        .start()
        .await
        .unwrap();
    assert_eq!(server.admin_token(), Some(token));
    assert!(server.inboxes().await.unwrap().is_empty());
}
