//! The Rust test API as a user's test would use it: a TestServer inside the
//! test, an application that sends with lettre over real SMTP, and waits that
//! need no HTTP.

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use mailjar::testing::{Filter, TestError, TestServer};

/// The application under test: sends a welcome mail through `smtp`.
async fn send_welcome(smtp: std::net::SocketAddr, to: &str, code: &str) {
    let message = Message::builder()
        .from("app@example.test".parse().unwrap())
        .to(to.parse().unwrap())
        .subject("Welcome")
        .header(ContentType::TEXT_PLAIN)
        .body(format!(
            "Your code is {code}. Start at https://app.example.test/start"
        ))
        .unwrap();
    let mailer = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.ip().to_string())
        .port(smtp.port())
        .build();
    mailer.send(message).await.unwrap();
}

#[tokio::test]
async fn a_lettre_message_is_captured_and_awaited_in_process() {
    let server = TestServer::start().await.unwrap();
    let alice = Filter::new().to("alice@example.test");
    let waiting = server.wait_for(&alice, Duration::from_secs(10));
    let (email, ()) = tokio::join!(
        waiting,
        send_welcome(server.smtp_addr(), "alice@example.test", "482913")
    );
    let email = email.unwrap();
    assert_eq!(email.subject, "Welcome");
    assert_eq!(email.envelope.to, ["alice@example.test"]);
    assert_eq!(email.codes, ["482913"]);
    assert_eq!(email.links, ["https://app.example.test/start"]);

    // after_id: the next wait sees only newer mail.
    send_welcome(server.smtp_addr(), "bob@example.test", "551204").await;
    let next = server
        .wait_for(&Filter::new().after_id(&email.id), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(next.codes, ["551204"]);
    assert_eq!(
        server
            .list(&Filter::new().subject("welcome"))
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        server.latest(&Filter::new()).await.unwrap().unwrap().id,
        next.id
    );

    // The HTTP API serves the same store.
    assert!(server.http_url().starts_with("http://127.0.0.1:"));

    // A wait that nothing answers times out; a bad filter is refused with the API's text.
    let none = server
        .wait_for(
            &Filter::new().to("nobody@example.test"),
            Duration::from_millis(50),
        )
        .await;
    assert!(matches!(none, Err(TestError::Timeout)), "{none:?}");
    let already = server
        .wait_for(&Filter::new().to("bob@example.test"), Duration::ZERO)
        .await;
    assert_eq!(
        already.unwrap().id,
        next.id,
        "no time left still finds what is there"
    );
    let bad = server.list(&Filter::new().subject_pattern("(", "")).await;
    assert!(
        matches!(&bad, Err(TestError::Refused(400, text)) if text.contains("subjectPattern")),
        "{bad:?}"
    );
    assert_eq!(server.clear().await.unwrap(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn flags_apply_and_two_servers_run_side_by_side() {
    let small = TestServer::start_with(&["--max-messages", "1"])
        .await
        .unwrap();
    let other = TestServer::start().await.unwrap();
    assert_ne!(small.smtp_addr(), other.smtp_addr());
    send_welcome(small.smtp_addr(), "a@example.test", "1111").await;
    send_welcome(small.smtp_addr(), "b@example.test", "2222").await;
    let kept = small.list(&Filter::new()).await.unwrap();
    assert_eq!(kept.len(), 1, "--max-messages 1 evicted the older");
    assert_eq!(kept[0].codes, ["2222"]);
    assert!(other.list(&Filter::new()).await.unwrap().is_empty());
    assert!(
        TestServer::start_with(&["--max-messages", "lots"])
            .await
            .is_err()
    );
    small.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn a_test_server_with_a_data_dir_lets_the_next_one_in_after_shutdown() {
    let dir = std::env::temp_dir().join(format!("mailjar-testing-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = ["--data-dir", dir.to_str().unwrap()];
    let first = TestServer::start_with(&flags).await.unwrap();
    send_welcome(first.smtp_addr(), "kept@example.test", "7777").await;
    first.shutdown().await;
    // The same directory, the same process: the first server let go of its lock and its writer.
    let second = TestServer::start_with(&flags).await.unwrap();
    let kept = second.list(&Filter::new()).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].codes, ["7777"]);
    second.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
