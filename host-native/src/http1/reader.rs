//! The sans-IO request reader of the HTTP/1.1 driver: bytes in, request
//! heads and body boundaries out, no sockets and no clocks.
//!
//! Kept apart from the connection loop so that the framing (where a head
//! ends, how long its body is, what is refused) can be tested and fuzzed
//! without a runtime: the fuzz target `http_request` feeds the same bytes
//! whole and split at random points and checks the [`Step`]s are the same.
//!
//! What it decides (RFC 9112):
//! - request targets: origin-form (`/path?query`) is served; absolute-form
//!   (`http://host:port/path`) is accepted as RFC 9112 3.2.2 requires, its
//!   authority replacing any `Host` header (3.2.2: the origin server must
//!   ignore the received Host); authority-form, asterisk-form, `CONNECT`,
//!   other schemes and userinfo are refused with 400, and the connection goes
//!   on when the framing is intact;
//! - framing: `Content-Length` is one or more digits and nothing else; several
//!   fields must agree (a list in one field is refused, RFC 9110 8.6 allows
//!   that); `Transfer-Encoding` is refused (bodies need a length); a body
//!   up to [`MAX_BODY_BYTES`] is read and kept for the request
//!   ([`RequestReader::take_body`]; only `POST /api/faults` reads one);
//! - more than one `Host` field is 400 (RFC 9112 3.2);
//! - `Expect: 100-continue` counts only from HTTP/1.1 clients.

use std::fmt;

use bytes::Bytes;
use http_body_util::Empty;
use warp::http::{self, HeaderName, HeaderValue};

/// The largest request head accepted, in bytes (431 above it).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The largest request body read (413 above it).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The longest request target (path and query) served, in bytes (414 above it).
pub const MAX_URL_BYTES: usize = 8 * 1024;
/// The most header bytes served, names and values (431 above it).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// The most header fields in one request (431 above it).
pub const MAX_HEADERS: usize = 100;
/// The most CR and LF bytes ignored before a request line (400 above it).
pub const MAX_EMPTY_LINE_BYTES: usize = 64;
/// The request headers the API looks at; the others are not handed to the filter.
const FORWARDED_HEADERS: [&str; 9] = [
    "host",
    "origin",
    "access-control-request-method",
    "access-control-request-headers",
    // Where an event stream resumes.
    "last-event-id",
    // The web UI's revalidation (304).
    "if-none-match",
    // What a body is (POST /api/faults wants JSON).
    "content-type",
    // Access control (`--admin-token`): a bearer token, or a browser session.
    "authorization",
    "cookie",
];

/// An answer the driver gives instead of calling the API: a status and the
/// text of the JSON `{"error"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status (4xx).
    pub status: u16,
    /// What is wrong, for the client.
    pub error: String,
}

impl Refusal {
    fn new(status: u16, error: impl Into<String>) -> Refusal {
        Refusal {
            status,
            error: error.into(),
        }
    }
}

/// One request head, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method as sent (HEAD stays HEAD here; the driver asks the API for GET).
    pub method: http::Method,
    /// The target in origin-form, also when the client sent absolute-form.
    pub target: http::uri::PathAndQuery,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: http::Version,
    /// The header fields the API reads (see the module doc); the rest are dropped.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether the connection stays open after the answer.
    pub keep_alive: bool,
    /// The body length announced by `Content-Length` (0 without one).
    pub body_length: usize,
    /// An HTTP/1.1 client asked for `100 Continue` before it sends the body.
    pub expect_continue: bool,
    /// The request is refused, but its framing is intact: answer this (the
    /// body is still skipped) and go on with the next request.
    pub refusal: Option<Refusal>,
}

impl RequestHead {
    /// The request handed to the warp service, with an empty body.
    pub fn to_request(&self) -> http::Request<Empty<Bytes>> {
        let mut request = http::Request::new(Empty::new());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = http::Uri::from(self.target.clone());
        *request.version_mut() = self.version;
        // Sized to the headers: a first append would reserve room for six
        // (over 600 bytes), which a parked request keeps for its whole wait.
        let mut headers = http::HeaderMap::with_capacity(self.headers.len());
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        *request.headers_mut() = headers;
        request
    }
}

/// What the reader has to say after being fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing more can be read from the bytes so far.
    NeedMore,
    /// A request head; its body follows, then [`Step::BodyDone`].
    Head(Box<RequestHead>),
    /// The body of the last head has been read (and dropped): the request is complete.
    BodyDone,
    /// The bytes cannot be read as HTTP: answer this and close the connection.
    Fatal(Refusal),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a head; `scanned` bytes of the buffer were parsed (or
    /// hold no line feed), `skipped` empty-line bytes came before it.
    Head { scanned: usize, skipped: usize },
    /// Skipping this many body bytes.
    Body { left: usize },
    /// A fatal error was reported; nothing more is read.
    Failed,
}

/// One route whose request bodies may be larger than [`MAX_BODY_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeBodyRoute {
    /// A `POST` to this path (with or without a query)...
    pub path: &'static str,
    /// ...may have a body of this many bytes.
    pub limit: usize,
}

impl LargeBodyRoute {
    /// The body limit of a request: this route's for a `POST` to its path, else [`MAX_BODY_BYTES`].
    fn limit_for(route: Option<LargeBodyRoute>, method: &str, target: &str) -> usize {
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        match route {
            Some(route) if method == "POST" && path.trim_end_matches('/') == route.path => {
                route.limit.max(MAX_BODY_BYTES)
            }
            _ => MAX_BODY_BYTES,
        }
    }
}

/// Reads requests from bytes fed in any pieces.
pub struct RequestReader {
    buf: Vec<u8>,
    state: State,
    /// The body of the request being read, at most [`MAX_BODY_BYTES`] (or a large route's limit).
    body: Vec<u8>,
    /// The route that takes larger bodies, if any.
    large: Option<LargeBodyRoute>,
}

impl fmt::Debug for RequestReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestReader")
            .field("buffered", &self.buf.len())
            .field("state", &self.state)
            .finish()
    }
}

impl Default for RequestReader {
    fn default() -> Self {
        RequestReader::new()
    }
}

impl RequestReader {
    /// A reader at the start of a connection.
    pub fn new() -> RequestReader {
        RequestReader {
            buf: Vec::new(),
            body: Vec::new(),
            state: State::Head {
                scanned: 0,
                skipped: 0,
            },
            large: None,
        }
    }

    /// Lets `POST`s to `route.path` have bodies up to `route.limit`.
    pub fn allow_large_body(&mut self, route: Option<LargeBodyRoute>) {
        self.large = route;
    }

    /// Adds bytes received from the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The buffer itself, for a driver that reads straight into it (appending only).
    pub fn buffer_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// How many received bytes are not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Waiting for a new request with nothing received of it.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Head { .. }) && self.buf.is_empty()
    }

    /// Frees the buffer's memory when it holds nothing (a parked or idle
    /// connection should not keep a read buffer).
    pub fn release(&mut self) {
        if self.buf.is_empty() {
            self.buf = Vec::new();
        }
    }

    /// The body of the request whose [`Step::BodyDone`] came last (empty
    /// without one); the reader keeps nothing of it after.
    pub fn take_body(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.body))
    }

    /// The next thing the bytes so far say.
    pub fn next_step(&mut self) -> Step {
        match self.state {
            State::Failed => Step::NeedMore,
            State::Body { left } => {
                let take = left.min(self.buf.len());
                self.body.extend(self.buf.drain(..take));
                if take == left {
                    self.state = State::Head {
                        scanned: 0,
                        skipped: 0,
                    };
                    Step::BodyDone
                } else {
                    self.state = State::Body { left: left - take };
                    Step::NeedMore
                }
            }
            State::Head { scanned, skipped } => {
                // Empty lines before a request line are ignored (RFC 9112 2.2),
                // a few of them: httparse would skip them again on every parse.
                let lead = self.buf[scanned..]
                    .iter()
                    .take_while(|&&b| b == b'\r' || b == b'\n')
                    .count();
                let (scanned, skipped) = if scanned == 0 && lead > 0 {
                    self.buf.drain(..lead);
                    (0, skipped + lead)
                } else {
                    (scanned, skipped)
                };
                if skipped > MAX_EMPTY_LINE_BYTES {
                    return self.fail(Refusal::new(
                        400,
                        "too many empty lines before the request line",
                    ));
                }
                // A head can only end at a line feed: parse again only when one
                // has arrived, so a head sent a byte at a time costs linear
                // time, and parse only up to the last one, so that what the
                // bytes say does not depend on how they were split.
                let Some(last) = self.buf[scanned..].iter().rposition(|&b| b == b'\n') else {
                    if self.buf.len() >= MAX_HEAD_BYTES {
                        return self.fail(head_too_large());
                    }
                    self.state = State::Head {
                        scanned: self.buf.len(),
                        skipped,
                    };
                    return Step::NeedMore;
                };
                match parse_head(&self.buf[..=scanned + last], self.large) {
                    Parsed::Partial if self.buf.len() >= MAX_HEAD_BYTES => {
                        self.fail(head_too_large())
                    }
                    Parsed::Partial => {
                        // The next parse waits for a line feed after these bytes.
                        self.state = State::Head {
                            scanned: self.buf.len(),
                            skipped,
                        };
                        Step::NeedMore
                    }
                    Parsed::Error(refusal) => self.fail(refusal),
                    Parsed::Complete(consumed, head) => {
                        self.buf.drain(..consumed);
                        // A body not taken belongs to the request before: never to this one.
                        self.body.clear();
                        self.state = State::Body {
                            left: head.body_length,
                        };
                        Step::Head(head)
                    }
                }
            }
        }
    }

    fn fail(&mut self, refusal: Refusal) -> Step {
        self.state = State::Failed;
        self.buf = Vec::new();
        Step::Fatal(refusal)
    }
}

fn head_too_large() -> Refusal {
    Refusal::new(
        431,
        format!("the request head is larger than {MAX_HEAD_BYTES} bytes"),
    )
}

enum Parsed {
    Complete(usize, Box<RequestHead>),
    Partial,
    Error(Refusal),
}

fn parse_head(buf: &[u8], large: Option<LargeBodyRoute>) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let consumed = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Error(Refusal::new(
                431,
                format!("more than {MAX_HEADERS} header fields"),
            ));
        }
        Err(e) => return Parsed::Error(Refusal::new(400, format!("malformed HTTP request: {e}"))),
    };
    if consumed > MAX_HEAD_BYTES {
        return Parsed::Error(head_too_large());
    }
    let (Some(method), Some(path), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Parsed::Error(Refusal::new(400, "malformed HTTP request line"));
    };
    let mut keep_alive = version == 1;
    let mut body_length: Option<u64> = None;
    let mut expect_continue = false;
    let mut header_bytes = 0usize;
    let mut hosts = 0usize;
    let mut forwarded = Vec::new();
    for header in parsed.headers.iter() {
        let name = header.name;
        header_bytes += name.len() + header.value.len() + 4;
        if name.eq_ignore_ascii_case("connection") {
            let value = String::from_utf8_lossy(header.value).to_ascii_lowercase();
            if value.split(',').any(|t| t.trim() == "close") {
                keep_alive = false;
            } else if value.split(',').any(|t| t.trim() == "keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let Some(length) = content_length(header.value) else {
                return Parsed::Error(Refusal::new(
                    400,
                    "malformed Content-Length (only digits are allowed)",
                ));
            };
            if body_length.is_some_and(|seen| seen != length) {
                return Parsed::Error(Refusal::new(400, "conflicting Content-Length fields"));
            }
            body_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Error(Refusal::new(
                400,
                "request bodies are not accepted (Transfer-Encoding)",
            ));
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = version == 1 && header.value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        }
        // The filter reads only these; a parked wait keeps its request, so the rest is not copied.
        if FORWARDED_HEADERS
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f))
        {
            // httparse has checked the name is a token and the value has no control bytes.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(header.value),
            ) {
                forwarded.push((name, value));
            } else {
                return Parsed::Error(Refusal::new(400, "malformed header field"));
            }
        }
    }
    // Path and query, the `?` between them not counted.
    if path.len() - usize::from(path.contains('?')) > MAX_URL_BYTES {
        return Parsed::Error(Refusal::new(
            414,
            format!("the URL is longer than {MAX_URL_BYTES} bytes"),
        ));
    }
    if header_bytes > MAX_HEADER_BYTES {
        return Parsed::Error(Refusal::new(
            431,
            format!("the request headers are larger than {MAX_HEADER_BYTES} bytes"),
        ));
    }
    let body_length = body_length.unwrap_or(0);
    let limit = LargeBodyRoute::limit_for(large, method, path);
    if body_length > limit as u64 {
        return Parsed::Error(Refusal::new(
            413,
            format!("request bodies are not accepted (more than {limit} bytes)"),
        ));
    }
    // The framing is sound from here on: what is wrong below is answered, and
    // the connection goes on.
    let body_length = usize::try_from(body_length).unwrap_or(MAX_BODY_BYTES);
    let mut refusal = None;
    let method = http::Method::from_bytes(method.as_bytes()).unwrap_or_else(|_| {
        refusal.get_or_insert(Refusal::new(400, "malformed method"));
        http::Method::GET
    });
    let target = match origin_form(&method, path) {
        Ok((target, authority)) => {
            if let Some(authority) = authority {
                // RFC 9112 3.2.2: the target's authority is the Host.
                forwarded.retain(|(name, _)| name != http::header::HOST);
                forwarded.push((http::header::HOST, authority));
                hosts = 1;
            }
            target
        }
        Err(error) => {
            refusal.get_or_insert(error);
            http::uri::PathAndQuery::from_static("/")
        }
    };
    if hosts > 1 {
        refusal.get_or_insert(Refusal::new(400, "more than one Host header field"));
    }
    Parsed::Complete(
        consumed,
        Box::new(RequestHead {
            method,
            target,
            version: if version == 0 {
                http::Version::HTTP_10
            } else {
                http::Version::HTTP_11
            },
            headers: forwarded,
            keep_alive,
            body_length,
            expect_continue,
            refusal,
        }),
    )
}

/// `1*DIGIT` and nothing else (no sign, no list); a number too large for
/// `u64` is `u64::MAX`, which is over any limit.
fn content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// The request target in origin-form, and the authority when the client
/// sent absolute-form; a refusal for every other form.
fn origin_form(
    method: &http::Method,
    target: &str,
) -> Result<(http::uri::PathAndQuery, Option<HeaderValue>), Refusal> {
    if method == http::Method::CONNECT {
        return Err(Refusal::new(
            400,
            "CONNECT is not served: this is not a proxy",
        ));
    }
    if target.starts_with('/') {
        return http::uri::PathAndQuery::try_from(target)
            .map(|target| (target, None))
            .map_err(|e| Refusal::new(400, format!("malformed request target: {e}")));
    }
    if target == "*" {
        return Err(Refusal::new(
            400,
            "asterisk-form request targets (*) are not served; ask for a path",
        ));
    }
    let Some((scheme, _)) = target.split_once("://") else {
        return Err(Refusal::new(
            400,
            "the request target must be a path such as /health (authority-form is for proxies)",
        ));
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(Refusal::new(
            400,
            "absolute-form request targets must use the http scheme",
        ));
    }
    let uri: http::Uri = target
        .parse()
        .map_err(|e| Refusal::new(400, format!("malformed request target: {e}")))?;
    let Some(authority) = uri.authority() else {
        return Err(Refusal::new(400, "the request target has no host"));
    };
    if authority.as_str().contains('@') {
        return Err(Refusal::new(
            400,
            "the request target must not carry userinfo",
        ));
    }
    if authority.host().is_empty() {
        return Err(Refusal::new(400, "the request target has no host"));
    }
    let authority = HeaderValue::from_str(authority.as_str())
        .map_err(|_| Refusal::new(400, "malformed host in the request target"))?;
    // Built again from its text: the http crate keeps the `/` of
    // `http://host` (and of `http://host:#x`) as an empty path, which an
    // origin-form URI would then report as "".
    let text = uri.path_and_query().map_or("/", |path| path.as_str());
    let text = if text.starts_with('/') {
        text.to_owned()
    } else {
        // `http://host?query` has an empty path: it means `/`.
        format!("/{text}")
    };
    let path = http::uri::PathAndQuery::try_from(text)
        .map_err(|e| Refusal::new(400, format!("malformed request target: {e}")))?;
    Ok((path, Some(authority)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step the bytes give, fed whole.
    fn steps(raw: &[u8]) -> Vec<Step> {
        let mut reader = RequestReader::new();
        reader.feed(raw);
        drain(&mut reader)
    }

    fn drain(reader: &mut RequestReader) -> Vec<Step> {
        let mut out = Vec::new();
        loop {
            match reader.next_step() {
                Step::NeedMore => return out,
                step @ Step::Fatal(_) => {
                    out.push(step);
                    return out;
                }
                step => out.push(step),
            }
        }
    }

    fn head(raw: &[u8]) -> RequestHead {
        match steps(raw).into_iter().next() {
            Some(Step::Head(head)) => *head,
            other => panic!("not a head: {other:?}"),
        }
    }

    fn fatal(raw: &[u8]) -> u16 {
        match steps(raw).pop() {
            Some(Step::Fatal(refusal)) => refusal.status,
            other => panic!("not fatal: {other:?}"),
        }
    }

    fn refused(raw: &[u8]) -> Refusal {
        head(raw).refusal.expect("a refusal")
    }

    #[test]
    fn a_body_is_kept_whole_however_it_arrives_and_taken_once() {
        let raw = b"POST /api/faults HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": true}";
        for split in 0..raw.len() {
            let mut reader = RequestReader::new();
            reader.feed(&raw[..split]);
            let mut seen = drain(&mut reader);
            reader.feed(&raw[split..]);
            seen.extend(drain(&mut reader));
            assert!(
                matches!(seen.get(1), Some(Step::BodyDone)),
                "{split}: {seen:?}"
            );
            let Some(Step::Head(head)) = seen.first() else {
                panic!("{split}: no head")
            };
            assert!(
                head.headers
                    .iter()
                    .any(|(n, v)| n == "content-type" && v == "application/json")
            );
            assert_eq!(&reader.take_body()[..], b"{\"a\": true}", "{split}");
            assert!(reader.take_body().is_empty(), "{split}: taken once");
        }
    }

    #[test]
    fn heads_parse_with_keep_alive_rules() {
        let mut reader = RequestReader::new();
        reader.feed(b"GET /health?x=1 HTTP/1.1\r\nHost: localhost\r\nX-Other: 1\r\n\r\nGET /next");
        let Step::Head(head) = reader.next_step() else {
            panic!("no head")
        };
        assert_eq!(head.target, "/health?x=1");
        assert_eq!(head.headers.len(), 1, "only forwarded headers are kept");
        assert!(head.keep_alive);
        assert_eq!(head.refusal, None);
        assert_eq!(reader.next_step(), Step::BodyDone);
        assert_eq!(reader.buffered(), 9);
        assert_eq!(reader.next_step(), Step::NeedMore);
        assert!(!head_of(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(head_of(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(!head_of(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
        let head =
            head_of(b"DELETE / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
        assert_eq!(head.body_length, 5);
        assert!(head.expect_continue);
        let request = head.to_request();
        assert_eq!(request.method(), http::Method::DELETE);
        assert_eq!(request.uri().path(), "/");
    }

    fn head_of(raw: &[u8]) -> RequestHead {
        head(raw)
    }

    #[test]
    fn the_request_carries_every_header_in_a_map_of_its_size() {
        let head = head_of(
            b"GET /a HTTP/1.1\r\nHost: localhost\r\nIf-None-Match: x\r\nIf-None-Match: y\r\nLast-Event-ID: 7\r\n\r\n",
        );
        let request = head.to_request();
        let headers = request.headers();
        assert_eq!(headers.len(), head.headers.len());
        let tags: Vec<_> = headers.get_all("if-none-match").iter().collect();
        assert_eq!(tags, ["x", "y"]);
        assert_eq!(headers["host"], "localhost");
        assert_eq!(headers["last-event-id"], "7");
        // Room for what it holds, not the six a first insert reserves.
        assert!(
            headers.capacity() <= 2 * headers.len(),
            "{}",
            headers.capacity()
        );
        let one = head_of(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").to_request();
        assert_eq!(one.headers().capacity(), 1);
    }

    #[test]
    fn bodies_are_skipped_and_pipelined_requests_follow() {
        let raw = b"DELETE /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyzGET /b HTTP/1.1\r\n\r\n";
        let all = steps(raw);
        assert_eq!(all.len(), 4, "{all:?}");
        assert!(matches!(&all[0], Step::Head(h) if h.target == "/a" && h.body_length == 3));
        assert_eq!(all[1], Step::BodyDone);
        assert!(matches!(&all[2], Step::Head(h) if h.target == "/b"));
        assert_eq!(all[3], Step::BodyDone);
        // A byte at a time gives the same steps.
        let mut reader = RequestReader::new();
        let mut split = Vec::new();
        for byte in raw {
            reader.feed(&[*byte]);
            split.extend(drain(&mut reader));
        }
        assert_eq!(split, all);
        // A body not all there yet.
        let mut reader = RequestReader::new();
        reader.feed(b"DELETE / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
        assert!(matches!(reader.next_step(), Step::Head(_)));
        assert_eq!(reader.next_step(), Step::NeedMore);
        assert_eq!(reader.buffered(), 0, "body bytes are not kept");
        reader.feed(b"defghij");
        assert_eq!(reader.next_step(), Step::BodyDone);
        assert!(reader.is_idle());
    }

    #[test]
    fn bad_framing_is_fatal() {
        assert_eq!(steps(b"GET / HTTP/1.1\r\n"), []);
        assert_eq!(fatal(b"\x01\x02 / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(fatal(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"), 400);
        assert_eq!(
            fatal(b"GET / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc"),
            400
        );
        assert_eq!(fatal(b"GET / HTTP/1.1\r\nContent-Length: -0\r\n\r\n"), 400);
        assert_eq!(fatal(b"GET / HTTP/1.1\r\nContent-Length: 0x3\r\n\r\n"), 400);
        assert_eq!(
            fatal(b"GET / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n"),
            400
        );
        assert_eq!(fatal(b"GET / HTTP/1.1\r\nContent-Length: \r\n\r\n"), 400);
        assert_eq!(
            fatal(b"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
            400
        );
        assert_eq!(
            fatal(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(
            fatal(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            413
        );
        assert_eq!(
            fatal(b"POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\n"),
            413
        );
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            fatal(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            431
        );
        // Identical duplicates are one length.
        let head = head(b"GET / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 003\r\n\r\nabc");
        assert_eq!(head.body_length, 3);
        // After a fatal error nothing more is read.
        let mut reader = RequestReader::new();
        reader.feed(b"GET / HTTP/1.1\r\nContent-Length: +3\r\n\r\nGET / HTTP/1.1\r\n\r\n");
        assert!(matches!(reader.next_step(), Step::Fatal(_)));
        assert_eq!(reader.next_step(), Step::NeedMore);
    }

    #[test]
    fn the_verdict_does_not_depend_on_the_split() {
        // A bad byte after the last line feed is judged once its line ends,
        // however the bytes came (found by the http_request fuzz target).
        let raw = b"GET / HTTP/1.1\r\nHost: localhost\r\nHost: evil\x00\x00";
        assert_eq!(steps(raw), []);
        let mut reader = RequestReader::new();
        for byte in raw {
            reader.feed(&[*byte]);
            assert_eq!(drain(&mut reader), []);
        }
        reader.feed(b"\r\n\r\n");
        assert!(matches!(drain(&mut reader).as_slice(), [Step::Fatal(r)] if r.status == 400));
    }

    #[test]
    fn a_few_empty_lines_before_a_request_are_ignored() {
        let head = head(b"\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
        assert_eq!(head.target, "/x");
        let all = steps(b"GET /a HTTP/1.1\r\n\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
        assert!(
            matches!(&all[2], Step::Head(h) if h.target == "/b"),
            "{all:?}"
        );
        let many = [
            &[b'\n'; MAX_EMPTY_LINE_BYTES + 1][..],
            b"GET / HTTP/1.1\r\n\r\n",
        ]
        .concat();
        assert_eq!(fatal(&many), 400);
    }

    #[test]
    fn a_head_without_line_feeds_is_refused_at_the_size_cap() {
        let mut reader = RequestReader::new();
        reader.feed(&vec![b'a'; MAX_HEAD_BYTES - 1]);
        assert_eq!(reader.next_step(), Step::NeedMore);
        reader.feed(b"a");
        assert!(matches!(reader.next_step(), Step::Fatal(r) if r.status == 431));
    }

    #[test]
    fn targets_that_are_not_paths_are_refused_and_the_connection_goes_on() {
        for raw in [
            &b"CONNECT localhost:25 HTTP/1.1\r\nHost: localhost:25\r\n\r\n"[..],
            b"GET evil.com HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET localhost:8025 HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET https://localhost/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET http://user@localhost/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"CONNECT /health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.test\r\n\r\n",
        ] {
            let all = steps(&[raw, b"GET /next HTTP/1.1\r\n\r\n"].concat());
            let text = String::from_utf8_lossy(raw);
            assert_eq!(all.len(), 4, "{text}: {all:?}");
            let Step::Head(head) = &all[0] else {
                panic!("{text}: {all:?}")
            };
            let refusal = head.refusal.as_ref().expect(&text);
            assert_eq!(refusal.status, 400, "{text}");
            // The request handed on is never one warp cannot take.
            assert!(head.to_request().uri().path_and_query().is_some());
            assert!(matches!(&all[2], Step::Head(h) if h.target == "/next" && h.refusal.is_none()));
        }
        assert!(
            refused(b"CONNECT localhost:25 HTTP/1.1\r\n\r\n")
                .error
                .contains("CONNECT")
        );
    }

    #[test]
    fn absolute_form_is_served_with_its_authority_as_host() {
        let head =
            head(b"GET http://localhost:8025/health?x=1 HTTP/1.1\r\nHost: evil.test\r\n\r\n");
        assert_eq!(head.refusal, None);
        assert_eq!(head.target, "/health?x=1");
        let request = head.to_request();
        assert_eq!(request.uri(), "/health?x=1");
        let hosts: Vec<_> = request.headers().get_all("host").iter().collect();
        assert_eq!(hosts, ["localhost:8025"]);
        let head = self::head(b"GET HTTP://evil.test HTTP/1.1\r\n\r\n");
        assert_eq!(head.refusal, None);
        assert_eq!(head.target, "/");
        assert_eq!(head.headers[0].1, "evil.test");
        // Found by the fuzz target: the empty path of an absolute URI is `/`
        // in the request handed on too.
        for raw in [
            &b"GET http://localhost:#8025/x HTTP/1.1\r\n\r\n"[..],
            b"GET http://localhost HTTP/1.1\r\n\r\n",
            b"GET http://localhost?x=1 HTTP/1.1\r\n\r\n",
        ] {
            let request = self::head(raw).to_request();
            assert!(request.uri().path().starts_with('/'), "{:?}", request.uri());
        }
    }

    #[test]
    fn expect_continue_only_from_http_1_1() {
        let raw = |v: &str| {
            format!("DELETE / HTTP/{v}\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n")
        };
        assert!(head(raw("1.1").as_bytes()).expect_continue);
        assert!(!head(raw("1.0").as_bytes()).expect_continue);
    }

    #[test]
    fn size_limits_of_url_and_headers() {
        let url = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_URL_BYTES));
        assert_eq!(fatal(url.as_bytes()), 414);
        let headers = format!(
            "GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "b".repeat(MAX_HEADER_BYTES)
        );
        assert_eq!(fatal(headers.as_bytes()), 431);
        let huge = format!(
            "GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "b".repeat(MAX_HEAD_BYTES)
        );
        assert_eq!(fatal(huge.as_bytes()), 431);
    }

    #[test]
    fn only_a_post_to_the_large_route_may_have_a_large_body() {
        let route = Some(LargeBodyRoute {
            path: "/api/send",
            limit: 1 << 20,
        });
        let limit = |method, target| LargeBodyRoute::limit_for(route, method, target);
        assert_eq!(limit("POST", "/api/send"), 1 << 20);
        assert_eq!(limit("POST", "/api/send/?from=a"), 1 << 20);
        assert_eq!(limit("GET", "/api/send"), MAX_BODY_BYTES);
        assert_eq!(limit("POST", "/api/sendx"), MAX_BODY_BYTES);
        assert_eq!(limit("POST", "/api/faults"), MAX_BODY_BYTES);
        assert_eq!(
            LargeBodyRoute::limit_for(None, "POST", "/api/send"),
            MAX_BODY_BYTES
        );
        let mut reader = RequestReader::new();
        reader.allow_large_body(route);
        reader.feed(b"POST /api/send HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n");
        assert!(matches!(reader.next_step(), Step::Head(h) if h.body_length == 100_000));
        let mut reader = RequestReader::new();
        reader.allow_large_body(route);
        reader.feed(b"POST /api/faults HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n");
        assert!(matches!(reader.next_step(), Step::Fatal(r) if r.status == 413));
    }
}
