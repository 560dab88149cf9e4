//! mailjar inside a Rust test: [`TestServer`] starts the real server on free
//! local ports in the test's own tokio runtime, tells where to send mail and
//! where its HTTP API is, and waits for matching messages without HTTP.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use mailjar::testing::{Filter, TestServer};
//!
//! let server = TestServer::start().await?;
//! // Point the application under test at server.smtp_addr(), then:
//! let email = server
//!     .wait_for(&Filter::new().to("alice@example.test"), Duration::from_secs(5))
//!     .await?;
//! assert_eq!(email.subject, "Welcome");
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! With access control, [`TestServer::builder`] starts it with an admin
//! token; the server's own helpers then act as the admin, and
//! [`TestServer::create_inbox`] with [`TestServer::client`] give each test
//! an inbox of its own and a [`Client`] that sees only that inbox's mail.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use mailjar::testing::{Filter, NewInbox, TestServer};
//!
//! let server = TestServer::builder().admin_token("admin-token-0123456789").start().await?;
//! let inbox = server.create_inbox(&NewInbox::new("signup").address("*@signup.test")).await?;
//! let mail = server.client(&inbox.token);
//! // The application sends to anyone@signup.test, or logs in with inbox.smtp.
//! let email = mail.wait_for(&Filter::new(), Duration::from_secs(5)).await?;
//! # let _ = email;
//! # Ok(())
//! # }
//! ```

mod inboxes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mailjar_core::api::Request;
use mailjar_core::api::{Body, Response};
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use warp::http;

use crate::access::Access;
use crate::state::{Answer, Shared};
use crate::{Server, Settings};

pub use inboxes::{CreatedInbox, InboxLimits, ListedInbox, NewInbox, SmtpLogin};

/// The longest one wait the API holds (README, "HTTP API": `timeoutMs` 1–60000); longer waits are several.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// A message as the API's JSON describes it (README.md, "CapturedEmail").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapturedEmail {
    /// The id (a UUIDv7).
    pub id: String,
    /// When it was received (RFC 3339).
    pub received_at: String,
    /// The SMTP envelope.
    pub envelope: Envelope,
    /// The From header text, else the envelope sender.
    pub from: String,
    /// The envelope recipients.
    pub to: Vec<String>,
    /// The Cc addresses.
    pub cc: Vec<String>,
    /// The decoded subject.
    pub subject: String,
    /// The text body.
    pub text: String,
    /// The HTML body ("" if none).
    pub html: String,
    /// The http(s) links found in the bodies.
    pub links: Vec<String>,
    /// The one-time codes (4 to 8 digits).
    pub codes: Vec<String>,
    /// The size of the raw message in bytes.
    pub size: u64,
    /// Whether a reader has seen it (IMAP `\\Seen`, POP3 RETR, the web UI, [`Client::mark_seen`]).
    #[serde(default)]
    pub seen: bool,
    /// The message as received (lossy UTF-8; the exact bytes are at `/api/emails/:id/raw`).
    pub raw: String,
    /// Every other field of the JSON (headers, attachments, date, ...).
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The SMTP envelope of a message.
#[derive(Debug, Clone, Deserialize)]
pub struct Envelope {
    /// MAIL FROM.
    pub from: String,
    /// RCPT TO, in order.
    pub to: Vec<String>,
}

/// The list filters (README.md, "HTTP API"); all given must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pairs: Vec<(&'static str, String)>,
}

impl Filter {
    /// No filter: every message.
    pub fn new() -> Filter {
        Filter::default()
    }

    /// Sent to this address (envelope, To or Cc; case-insensitive).
    pub fn to(mut self, address: &str) -> Filter {
        self.pairs.push(("to", address.to_owned()));
        self
    }

    /// The subject contains this text (case-insensitive).
    pub fn subject(mut self, text: &str) -> Filter {
        self.pairs.push(("subject", text.to_owned()));
        self
    }

    /// The subject matches this JavaScript regular expression, with these flags (e.g. "i").
    pub fn subject_pattern(mut self, pattern: &str, flags: &str) -> Filter {
        self.pairs.push(("subjectPattern", pattern.to_owned()));
        if !flags.is_empty() {
            self.pairs.push(("subjectFlags", flags.to_owned()));
        }
        self
    }

    /// Received after the message with this id.
    pub fn after_id(mut self, id: &str) -> Filter {
        self.pairs.push(("afterId", id.to_owned()));
        self
    }

    /// In this inbox only (the admin's narrowing; an inbox's own client is in its inbox already).
    pub fn inbox(mut self, name: &str) -> Filter {
        self.pairs.push(("inbox", name.to_owned()));
        self
    }

    fn query(&self, extra: Option<(&'static str, String)>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in self.pairs.iter().chain(extra.iter()) {
            query.append_pair(key, value);
        }
        query.finish()
    }
}

/// Why a [`TestServer`] call did not give a message.
#[derive(Debug)]
pub enum TestError {
    /// Nothing matched before the timeout.
    Timeout,
    /// The API refused the request: its status and `error` text (a bad filter is a 400).
    Refused(u16, String),
    /// The server is shutting down.
    Stopped,
}

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestError::Timeout => write!(f, "no message matched before the timeout"),
            TestError::Refused(status, error) => write!(f, "the API answered {status}: {error}"),
            TestError::Stopped => write!(f, "the server is shutting down"),
        }
    }
}

impl std::error::Error for TestError {}

/// A running mailjar inside a test; see the [module docs](self).
pub struct TestServer {
    smtp: SocketAddr,
    http: SocketAddr,
    /// The server's own helpers: the admin's client (or, without access control, anyone's).
    admin: Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// How a [`TestServer`] starts: its flags and its admin token.
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    flags: Vec<String>,
    admin_token: Option<String>,
}

impl TestServerBuilder {
    /// Turns access control on with this admin token (`--admin-token`, at
    /// least 16 characters): the server's helpers send it, and inboxes can be made.
    pub fn admin_token(mut self, token: &str) -> TestServerBuilder {
        self.admin_token = Some(token.to_owned());
        self
    }

    /// Adds these command-line flags (e.g. `["--max-messages", "10"]`).
    pub fn flags(mut self, flags: &[&str]) -> TestServerBuilder {
        self.flags.extend(flags.iter().map(|f| (*f).to_owned()));
        self
    }

    /// Starts on free local ports (unless the flags name them).
    pub async fn start(self) -> std::io::Result<TestServer> {
        // One argument: a token may start with "-".
        let token = self
            .admin_token
            .iter()
            .map(|t| format!("--admin-token={t}"));
        let args = ["mailjar", "--smtp-port", "0", "--http-port", "0"]
            .into_iter()
            .map(str::to_owned)
            .chain(self.flags.iter().cloned())
            .chain(token);
        let settings = <Settings as clap::Parser>::try_parse_from(args)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        settings
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // Also a token from the flags or MAILJAR_ADMIN_TOKEN: the helpers need it.
        let admin_token = settings.admin_token.clone();
        let server = Server::bind(settings).await?;
        let smtp = server.smtp_addr()?;
        let http = server.http_addr()?;
        let admin = Client {
            shared: server.shared.clone(),
            access: server.access.clone(),
            token: admin_token,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Ok(TestServer {
            smtp,
            http,
            admin,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

impl TestServer {
    /// Starts on 127.0.0.1 with free ports and the default limits.
    pub async fn start() -> std::io::Result<TestServer> {
        TestServer::start_with(&[]).await
    }

    /// Starts with these command-line flags (e.g. `["--max-messages", "10"]`),
    /// on free ports unless the flags name them.
    pub async fn start_with(flags: &[&str]) -> std::io::Result<TestServer> {
        TestServer::builder().flags(flags).start().await
    }

    /// How to start one with an admin token or flags: `TestServer::builder().admin_token(..).start()`.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// The admin token the server runs with (None: no access control).
    pub fn admin_token(&self) -> Option<&str> {
        self.admin.token.as_deref()
    }

    /// `Bearer <admin token>`, the `Authorization` value for an HTTP client of [`Self::http_url`].
    pub fn authorization(&self) -> Option<String> {
        self.admin.authorization()
    }

    /// A client of this server's API that sends `token` (an inbox's, from
    /// [`Self::create_inbox`]): it sees only that inbox's mail. Without
    /// access control no token is checked and every client sees everything.
    pub fn client(&self, token: &str) -> Client {
        Client {
            token: Some(token.to_owned()),
            ..self.admin.clone()
        }
    }

    /// Where the application under test sends mail.
    pub fn smtp_addr(&self) -> SocketAddr {
        self.smtp
    }

    /// The HTTP API's base URL, e.g. `http://127.0.0.1:41234`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The oldest message matching `filter` (after its `after_id`), waiting up
    /// to `timeout` for one to arrive.
    pub async fn wait_for(
        &self,
        filter: &Filter,
        timeout: Duration,
    ) -> Result<CapturedEmail, TestError> {
        self.admin.wait_for(filter, timeout).await
    }

    /// The messages matching `filter`, in receive order.
    pub async fn list(&self, filter: &Filter) -> Result<Vec<CapturedEmail>, TestError> {
        self.admin.list(filter).await
    }

    /// The newest message matching `filter`, if any.
    pub async fn latest(&self, filter: &Filter) -> Result<Option<CapturedEmail>, TestError> {
        self.admin.latest(filter).await
    }

    /// Deletes every message; returns how many there were.
    pub async fn clear(&self) -> Result<u64, TestError> {
        self.admin.clear().await
    }

    /// Marks message `id` seen (or unseen) for every reader; false when it is not stored.
    pub async fn mark_seen(&self, id: &str, seen: bool) -> Result<bool, TestError> {
        self.admin.mark_seen(id, seen).await
    }

    /// `method target` (e.g. `GET /health`, `POST /api/faults` with a JSON
    /// body) as the admin; the JSON of a 200, else the refusal.
    pub async fn request(
        &self,
        method: &str,
        target: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, TestError> {
        self.admin.request(method, target, body).await
    }

    /// Stops accepting, lets messages in flight finish, and waits for the server to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// A caller of a [`TestServer`]'s API inside the test, with one token: an
/// inbox's ([`TestServer::client`]) sees that inbox only. Its requests go
/// through the same access check as HTTP ones (a wrong or rotated token is
/// a 401), without a socket. Cloning it is cheap.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    access: Option<Arc<Access>>,
    token: Option<String>,
}

impl Client {
    /// The oldest message matching `filter` (after its `after_id`), waiting up
    /// to `timeout` for one to arrive.
    pub async fn wait_for(
        &self,
        filter: &Filter,
        timeout: Duration,
    ) -> Result<CapturedEmail, TestError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .min(MAX_WAIT);
            // The API takes 1 ms at least: a wait whose time is up still looks once.
            let query = filter.query(Some(("timeoutMs", left.as_millis().max(1).to_string())));
            let response = self
                .answer(Request::new("GET", &format!("/api/emails/wait?{query}")))
                .await?;
            match response.status {
                408 if tokio::time::Instant::now() < deadline => continue,
                408 => return Err(TestError::Timeout),
                _ => return email_of(response),
            }
        }
    }

    /// The messages matching `filter`, in receive order.
    pub async fn list(&self, filter: &Filter) -> Result<Vec<CapturedEmail>, TestError> {
        #[derive(Deserialize)]
        struct List {
            emails: Vec<CapturedEmail>,
        }
        let response = self
            .answer(Request::new(
                "GET",
                &format!("/api/emails?{}", filter.query(None)),
            ))
            .await?;
        let list: List = parse(response)?;
        Ok(list.emails)
    }

    /// The newest message matching `filter`, if any.
    pub async fn latest(&self, filter: &Filter) -> Result<Option<CapturedEmail>, TestError> {
        let response = self
            .answer(Request::new(
                "GET",
                &format!("/api/emails/latest?{}", filter.query(None)),
            ))
            .await?;
        if response.status == 404 {
            return Ok(None);
        }
        email_of(response).map(Some)
    }

    /// Deletes every message it sees (an inbox's client: its inbox's); returns how many there were.
    pub async fn clear(&self) -> Result<u64, TestError> {
        #[derive(Deserialize)]
        struct Deleted {
            deleted: u64,
        }
        let response = self.answer(Request::new("DELETE", "/api/emails")).await?;
        Ok(parse::<Deleted>(response)?.deleted)
    }

    /// Marks message `id` seen (or unseen) for every reader, as this client
    /// may (an inbox's client: its inbox's mail); false when it sees no such message.
    pub async fn mark_seen(&self, id: &str, seen: bool) -> Result<bool, TestError> {
        let mut request = Request::new("PATCH", &format!("/api/emails/{id}"));
        request.body = bytes::Bytes::from(serde_json::json!({ "seen": seen }).to_string());
        request.content_type = Some("application/json".to_owned());
        let response = self.answer(request).await?;
        if response.status == 404 {
            return Ok(false);
        }
        parse::<serde_json::Value>(response).map(|_| true)
    }

    /// `method target` with this client's token; the JSON of a 200, else the refusal.
    pub async fn request(
        &self,
        method: &str,
        target: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, TestError> {
        let mut request = Request::new(method, target);
        if let Some(body) = body {
            request.body = bytes::Bytes::from(body.to_string());
            request.content_type = Some("application/json".to_owned());
        }
        parse(self.answer(request).await?)
    }

    /// `Bearer <token>`, the `Authorization` value of this client's requests.
    pub fn authorization(&self) -> Option<String> {
        self.token.as_ref().map(|token| format!("Bearer {token}"))
    }

    /// Answers a request as the HTTP API would (credentials checked first,
    /// then the core in the token's scope), waiting out a parked wait.
    async fn answer(&self, mut request: Request) -> Result<Response, TestError> {
        let method = http::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| TestError::Refused(400, "not an HTTP method".to_owned()))?;
        if let Some(access) = &self.access {
            request.scope = self.scope(access, &request.path)?;
        }
        request.entropy = crate::state::request_entropy(&method);
        let response = match self.shared.handle(&request).await {
            Answer::Response(response) => response,
            Answer::Subscribe(subscription) => {
                self.shared.unsubscribe(subscription.id);
                return Err(TestError::Refused(
                    400,
                    "event streams are not served here".to_owned(),
                ));
            }
        };
        if let Some(access) = &self.access {
            return self.after(access, &method, &request.path, response).await;
        }
        Ok(response)
    }

    /// The scope this client's token opens for `path`, or the 401.
    fn scope(&self, access: &Access, path: &str) -> Result<mailjar_core::api::Scope, TestError> {
        if crate::access::is_open(path) {
            return Ok(mailjar_core::api::Scope::All);
        }
        let mut headers = http::HeaderMap::new();
        let value = self
            .authorization()
            .map(|v| http::HeaderValue::from_str(&v));
        match value {
            Some(Ok(value)) => drop(headers.insert(http::header::AUTHORIZATION, value)),
            // A token no header can carry opens nothing.
            Some(Err(_)) => return Err(refusal(crate::access::unauthorized())),
            None => {}
        }
        access
            .authenticate(&self.shared, &headers)
            .map(|caller| caller.scope)
            .map_err(refusal)
    }

    /// As after an HTTP request: a rotated or deleted inbox's browser
    /// sessions end, and with `--data-dir` the change is on disk.
    async fn after(
        &self,
        access: &Access,
        method: &http::Method,
        path: &str,
        response: Response,
    ) -> Result<Response, TestError> {
        access.after(&self.shared, method, path, response.status);
        if !crate::access::changes_inboxes(method, path, response.status) {
            return Ok(response);
        }
        match self.shared.save_inboxes().await {
            Ok(()) => Ok(response),
            Err(e) => Err(TestError::Refused(
                503,
                format!("the inboxes changed in memory but not on disk: {e}"),
            )),
        }
    }
}

impl Drop for TestServer {
    /// A server dropped without [`TestServer::shutdown`] stops in the background.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The whole body of a response.
fn body_bytes(response: Response) -> Vec<u8> {
    match response.body {
        Body::Full(bytes) => bytes.to_vec(),
        Body::Stream(mut source) => {
            let mut out = Vec::new();
            while source.next_chunk(&mut out) {}
            out
        }
    }
}

/// A JSON body, or the API's refusal.
fn parse<T: serde::de::DeserializeOwned>(response: Response) -> Result<T, TestError> {
    let status = response.status;
    if status != 200 {
        return Err(refusal(response));
    }
    let body = body_bytes(response);
    serde_json::from_slice(&body).map_err(|e| TestError::Refused(status, e.to_string()))
}

/// A refusal of the API: its status and `error` text (a 503 is a server shutting down).
fn refusal(response: Response) -> TestError {
    let status = response.status;
    let body = body_bytes(response);
    let error = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    if status == 503 {
        TestError::Stopped
    } else {
        TestError::Refused(status, error)
    }
}

/// The `email` of a `{"email": ...}` answer.
fn email_of(response: Response) -> Result<CapturedEmail, TestError> {
    #[derive(Deserialize)]
    struct One {
        email: CapturedEmail,
    }
    Ok(parse::<One>(response)?.email)
}
