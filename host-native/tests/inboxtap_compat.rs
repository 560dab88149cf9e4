//! A test written the way a user of InboxTap's HTTP API writes one: same
//! paths, same parameters (to, subject, subjectPattern, subjectFlags,
//! afterId, limit, timeoutMs), same envelopes (`{emails}`, `{email}`,
//! `{deleted}`). Only the base URL changes.

mod common;

use std::time::Duration;

use common::{Server, enc, nonce, run_smtplib};
use serde_json::Value;

/// The little client such a test suite carries around.
struct Inbox<'a> {
    server: &'a Server,
}

impl Inbox<'_> {
    fn clear(&self) -> u64 {
        let response = self.server.request("DELETE", "/api/emails");
        assert_eq!(response.status, 200);
        response.json()["deleted"].as_u64().expect("{deleted}")
    }

    fn wait_for(&self, to: &str, subject_pattern: &str, after_id: Option<&str>) -> Value {
        let mut target = format!(
            "/api/emails/wait?to={}&subjectPattern={}&subjectFlags=i&timeoutMs=10000",
            enc(to),
            enc(subject_pattern)
        );
        if let Some(id) = after_id {
            target.push_str(&format!("&afterId={id}"));
        }
        let response = self.server.get(&target);
        assert_eq!(response.status, 200, "no mail for {to}: {}", response.body);
        response.json()["email"].clone()
    }

    fn list(&self, to: &str, limit: u32) -> Vec<Value> {
        let body = self
            .server
            .get_ok(&format!("/api/emails?to={}&limit={limit}", enc(to)));
        body["emails"].as_array().expect("{emails}").clone()
    }

    fn latest(&self, to: &str, subject: &str) -> Value {
        let target = format!("/api/emails/latest?to={}&subject={}", enc(to), enc(subject));
        self.server.get_ok(&target)["email"].clone()
    }
}

/// The application under test: sends a multipart (text + HTML) mail with smtplib.
fn app_sends(server: &Server, to: &str, subject: &str, text: &str, html: &str) {
    let script = r#"
from email.message import EmailMessage
m = EmailMessage()
m["From"] = "Example App <no-reply@app.example.test>"
m["To"] = sys.argv[1]
m["Subject"] = sys.argv[2]
m.set_content(sys.argv[3])
m.add_alternative(sys.argv[4], subtype="html")
client = Recorder(HOST, PORT)
client.send_message(m)
client.quit()
"#;
    run_smtplib(server, script, &[to, subject, text, html], b"");
}

fn verification_mail(server: &Server, user: &str, code: u64, token: &str) -> String {
    let link = format!(
        "https://app.example.test/verify?token={token}&email={}",
        enc(user)
    );
    let text = format!(
        "Your verification code is {code}. It expires in 10 minutes.\n\nOr open {link}\n\n© 2025 Example Inc."
    );
    let html = format!(
        "<html><body><p>Your verification code is <b>{code}</b>.</p>\
         <p><a href=\"{}\">Verify my address</a></p><p>&copy; 2025 Example Inc.</p></body></html>",
        link.replace('&', "&amp;")
    );
    app_sends(server, user, "Verify your email address", &text, &html);
    link
}

#[test]
fn signup_flow() {
    let server = Server::start();
    let inbox = Inbox { server: &server };
    let user = format!("new.user+{}@example.test", nonce() % 100_000);

    // Left over from an earlier run: the suite clears the mailbox first.
    verification_mail(&server, &user, 111_111, "stale");
    assert_eq!(inbox.clear(), 1);

    let code = 100_000 + nonce() % 900_000;
    let token = format!("{:x}", nonce());
    let expected_link = std::thread::scope(|scope| {
        // The app handles the signup in the background: welcome first, then the code.
        let app = scope.spawn(|| {
            app_sends(
                &server,
                &user,
                "Welcome to Example!",
                "Thanks for signing up. Your customer number is 55501234.",
                "<p>Thanks for signing up. Your customer number is 55501234.</p>",
            );
            server.poll_health("waits", 1, Duration::from_secs(10));
            verification_mail(&server, &user, code, &token)
        });
        let email = inbox.wait_for(&user, "^verify your (e-?mail|address)", None);
        let link = app.join().expect("app");
        assert_eq!(email["subject"], "Verify your email address");
        assert_eq!(email["to"], serde_json::json!([user]));
        assert_eq!(
            email["codes"],
            serde_json::json!([code.to_string()]),
            "only the code, not the year after ©"
        );
        let links: Vec<&str> = email["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(
            links,
            [link.as_str()],
            "the verification link, once, with &amp; decoded"
        );
        link
    });

    // Both mails arrived, in order.
    let mails = inbox.list(&user, 10);
    let subjects: Vec<&str> = mails
        .iter()
        .map(|m| m["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        ["Welcome to Example!", "Verify your email address"]
    );
    assert_eq!(mails[0]["codes"], serde_json::json!(["55501234"]));
    assert!(
        mails[0]["html"]
            .as_str()
            .unwrap()
            .contains("Thanks for signing up")
    );

    // "Resend code": the next wait starts after the mail already seen.
    let first = inbox.latest(&user, "verify");
    assert!(
        first["links"]
            .as_array()
            .unwrap()
            .contains(&Value::from(expected_link))
    );
    let first_id = first["id"].as_str().unwrap().to_owned();
    let new_code = 100_000 + (code + 1 + nonce() % 1000) % 900_000;
    verification_mail(&server, &user, new_code, "second");
    let resent = inbox.wait_for(&user, "verify", Some(&first_id));
    assert_eq!(resent["codes"], serde_json::json!([new_code.to_string()]));
    assert!(resent["id"].as_str().unwrap() > first_id.as_str());
}
