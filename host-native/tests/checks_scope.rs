//! The checks and the transcript with access control (`--admin-token`): an
//! inbox token reaches them for its own messages only (404 for another
//! inbox's, as every endpoint), and no token gets 401 before any check runs.

mod common;

use common::{Server, http_exchange};
use serde_json::Value;

const ADMIN: &str = "admin-token-for-the-checks-test-0123456789";

fn call(
    server: &Server,
    method: &str,
    target: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.http,
        body.len()
    );
    let response = http_exchange(server.http, request.as_bytes());
    let json = serde_json::from_str(&response.body).unwrap_or(Value::Null);
    (response.status, json)
}

#[test]
fn an_inbox_token_checks_its_own_mail_only() {
    let server = Server::start_with_env(&[], &[("MAILJAR_ADMIN_TOKEN", ADMIN.as_ref())]);
    let mut tokens = Vec::new();
    for name in ["team-a", "team-b"] {
        let body = format!(r#"{{"name": "{name}", "addresses": ["*@{name}.test"]}}"#);
        let (status, json) = call(&server, "POST", "/api/inboxes", Some(ADMIN), &body);
        assert_eq!(status, 200, "{json}");
        tokens.push(json["inbox"]["token"].as_str().expect("token").to_owned());
    }
    let raw = b"Subject: s\r\nContent-Type: text/html\r\n\r\n<p style=\"display:flex\">x</p>\r\n";
    assert_eq!(server.send("a@x.test", &["bob@team-a.test"], raw).code, 250);
    let (_, list) = call(&server, "GET", "/api/emails", Some(&tokens[0]), "");
    let id = list["emails"][0]["id"]
        .as_str()
        .expect("team-a sees its message")
        .to_owned();
    for kind in [
        "checks/html",
        "checks/spam",
        "checks/auth",
        "checks/links",
        "transcript",
    ] {
        let target = format!("/api/emails/{id}/{kind}");
        let (status, json) = call(&server, "GET", &target, Some(&tokens[1]), "");
        assert_eq!(status, 404, "team-b on {kind}: {json}");
        assert!(
            json["error"]
                .as_str()
                .unwrap_or("")
                .contains("no stored message"),
            "{kind}: {json}"
        );
        let (status, _) = call(&server, "GET", &target, None, "");
        assert_eq!(status, 401, "no token on {kind}");
    }
    let own = |kind: &str| {
        call(
            &server,
            "GET",
            &format!("/api/emails/{id}/{kind}"),
            Some(&tokens[0]),
            "",
        )
    };
    assert_eq!(own("checks/html").0, 200);
    assert_eq!(own("transcript").0, 200);
    assert_eq!(own("checks/links").0, 200);
    // Its own message: the spam check is reached, and says it has no spamd.
    assert_eq!(own("checks/spam").1["error"], "no spam checker configured");
}
