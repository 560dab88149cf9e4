//! Helpers of the inbox tests: a mailjar with `--admin-token`, requests
//! with a bearer token or a cookie, inboxes made over the API.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Http, Server, http_exchange};

/// The admin token every inbox test starts mailjar with.
pub const ADMIN: &str = "admin-token-0123456789";

/// A mailjar with access control on, and `flags` besides.
pub fn start(flags: &[&str]) -> Server {
    let mut all = vec!["--admin-token", ADMIN];
    all.extend_from_slice(flags);
    Server::start_with(&all)
}

/// `METHOD target` with these extra header lines and body; checks the JSON contract.
pub fn call_with(
    server: &Server,
    method: &str,
    target: &str,
    headers: &[String],
    body: &[u8],
) -> Http {
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        server.http,
        body.len()
    );
    for line in headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    let response = http_exchange(server.http, &bytes);
    if response.header("content-type") == Some("application/json") || response.status >= 400 {
        response.assert_json_contract(&format!("{method} {target}"));
    }
    response
}

/// `METHOD target` with a bearer token (none: no `Authorization`) and an optional JSON body.
pub fn call(
    server: &Server,
    method: &str,
    target: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Http {
    let mut headers = Vec::new();
    if let Some(token) = token {
        headers.push(format!("Authorization: Bearer {token}"));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    if !body.is_empty() {
        headers.push("Content-Type: application/json".to_owned());
    }
    call_with(server, method, target, &headers, body.as_bytes())
}

/// `GET target` with `token`, which must answer 200; its JSON.
pub fn get_ok(server: &Server, target: &str, token: &str) -> Value {
    let response = call(server, "GET", target, Some(token), None);
    assert_eq!(response.status, 200, "GET {target}: {}", response.body);
    response.json()
}

/// An inbox made by the admin.
#[derive(Debug, Clone)]
pub struct Inbox {
    /// Its name.
    pub name: String,
    /// Its API token.
    pub token: String,
    /// Its SMTP user name.
    pub user: String,
    /// Its SMTP password.
    pub password: String,
}

/// Creates an inbox with this description (a `name` and the rest) as the admin.
pub fn create(server: &Server, description: Value) -> Inbox {
    let response = call(
        server,
        "POST",
        "/api/inboxes",
        Some(ADMIN),
        Some(&description),
    );
    assert_eq!(
        response.status, 200,
        "create {description}: {}",
        response.body
    );
    let inbox = response.json()["inbox"].clone();
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{inbox}")).to_owned();
    Inbox {
        name: text(&inbox["name"]),
        token: text(&inbox["token"]),
        user: text(&inbox["smtp"]["username"]),
        password: text(&inbox["smtp"]["password"]),
    }
}

/// Creates an inbox with these address patterns.
pub fn inbox(server: &Server, name: &str, addresses: &[&str]) -> Inbox {
    create(server, json!({ "name": name, "addresses": addresses }))
}

/// The ids a token lists (`GET /api/emails?query`), oldest first.
pub fn ids(server: &Server, token: &str, query: &str) -> Vec<String> {
    let body = get_ok(server, &format!("/api/emails?{query}"), token);
    body["emails"]
        .as_array()
        .unwrap_or_else(|| panic!("no emails in {body}"))
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Sends one message to `to`; its id, as the admin sees it (the newest).
pub fn send(server: &Server, to: &[&str], subject: &str) -> String {
    let raw = crate::common::message("app@sender.test", to[0], subject, "hello");
    server.send("app@sender.test", to, &raw);
    let body = get_ok(server, "/api/emails/latest", ADMIN);
    assert_eq!(body["email"]["subject"], subject, "{body}");
    body["email"]["id"].as_str().expect("id").to_owned()
}

/// What an event stream sent within `for_how_long` (its replay and live events), as text.
pub fn events(
    http: std::net::SocketAddr,
    target: &str,
    headers: &[String],
    for_how_long: Duration,
) -> (u16, String) {
    let mut stream = TcpStream::connect(http).expect("connect");
    let mut request = format!("GET {target} HTTP/1.1\r\nHost: {http}\r\n");
    for line in headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let deadline = Instant::now() + for_how_long;
    let mut got = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buffer[..n]),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Sends one message with smtplib, logging in first when a user is given;
/// prints `sent`, or the code that refused it: `auth CODE`, `mail CODE`,
/// `rcpt CODE` or `data CODE`.
const SMTPLIB_SEND: &str = r#"
user, password, to, subject = sys.argv[1:5]
client = Recorder(HOST, PORT)
client.ehlo("inbox-tests.test")
try:
    if user:
        client.login(user, password)
    message = f"From: app@sender.test\r\nTo: {to}\r\nSubject: {subject}\r\n\r\nhello\r\n"
    client.sendmail("app@sender.test", [to], message)
    print("sent")
except smtplib.SMTPAuthenticationError as e:
    print(f"auth {e.smtp_code}")
except smtplib.SMTPRecipientsRefused as e:
    code = list(e.recipients.values())[0][0]
    print(f"rcpt {code}")
except smtplib.SMTPSenderRefused as e:
    print(f"mail {e.smtp_code}")
except smtplib.SMTPDataError as e:
    print(f"data {e.smtp_code}")
client.quit()
done(client)
"#;

/// One message to `to` through Python's smtplib, as `login` (user, password)
/// when given: `sent`, or what refused it (see [`SMTPLIB_SEND`]).
pub fn smtplib_send(
    server: &Server,
    login: Option<(&str, &str)>,
    to: &str,
    subject: &str,
) -> String {
    let (user, password) = login.unwrap_or(("", ""));
    let (out, _) =
        crate::common::run_smtplib(server, SMTPLIB_SEND, &[user, password, to, subject], b"");
    out.trim().to_owned()
}
