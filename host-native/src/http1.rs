//! A small HTTP/1.1 server connection that drives warp's service.
//!
//! hyper keeps two 8 KiB buffers per connection for the connection's whole
//! life, which makes 10,000 parked waits cost over 160 MiB. The API takes no
//! request bodies and sends small JSON responses, so this driver reads heads
//! with `httparse` into a buffer that grows only as needed, hands each request
//! to the warp filter, and writes the response itself. Every refusal it makes
//! is JSON, like the API's own.
//!
//! What it does: keep-alive (HTTP/1.1 by default, HTTP/1.0 on request;
//! [`IDLE_TIMEOUT`] between requests),
//! pipelined requests answered in order, a deadline for a head once its first
//! byte has arrived, a cap on head size, request bodies up to
//! [`MAX_BODY_BYTES`] read and ignored, `Expect: 100-continue`, HEAD answered
//! without a body, and a client that goes away while its request is in flight
//! drops that request (which cancels a parked wait).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower_service::Service;
use warp::http::{self, HeaderValue};

/// The largest request head accepted, in bytes (431 above it).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The largest request body read and ignored (413 above it).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a connection may sit between requests before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The most header fields in one request (431 above it).
const MAX_HEADERS: usize = 100;
/// The request headers the API looks at; the others are not handed to the filter.
const FORWARDED_HEADERS: [&str; 4] = [
    "host",
    "origin",
    "access-control-request-method",
    "access-control-request-headers",
];
/// The longest request target (path and query) served, in bytes (414 above it).
pub const MAX_URL_BYTES: usize = 8 * 1024;
/// The most header bytes served, names and values (431 above it).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Serves one connection until the client closes it, a request asks to close,
/// a protocol error ends it, or the server shuts down while it is idle.
pub async fn serve_connection<S>(
    mut stream: TcpStream,
    mut service: S,
    mut shutdown: watch::Receiver<bool>,
    head_timeout: Duration,
) -> std::io::Result<()>
where
    S: Service<http::Request<Empty<Bytes>>, Response = warp::reply::Response, Error = Infallible>,
{
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head = match read_head(&mut stream, &mut buf, &mut shutdown, head_timeout).await? {
            Head::Request(head) => head,
            Head::Closed => return Ok(()),
            Head::Refused(status, error) => {
                write_error(&mut stream, status, &error).await?;
                return Ok(());
            }
        };
        // The bytes of a head were consumed; what follows may be a body or the next request.
        let Head1 {
            request,
            consumed,
            keep_alive,
            body_length,
            expect_continue,
        } = *head;
        buf.drain(..consumed);
        if buf.is_empty() {
            // A parked wait should not hold a read buffer.
            buf = Vec::new();
        }
        if body_length > MAX_BODY_BYTES {
            write_error(&mut stream, 413, "request bodies are not accepted").await?;
            return Ok(());
        }
        if body_length > 0 {
            if expect_continue {
                stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            }
            while buf.len() < body_length {
                buf.reserve(body_length - buf.len());
                if stream.read_buf(&mut buf).await? == 0 {
                    return Ok(());
                }
            }
            buf.drain(..body_length);
        }
        let is_head = request.method() == http::Method::HEAD;
        let response = {
            // Boxed: an idle connection should not carry the space of a request in flight.
            let mut call = Box::pin(service.call(request));
            // Watch the socket while the request is in flight: EOF means the client left.
            loop {
                tokio::select! {
                    result = call.as_mut() => match result {
                        Ok(response) => break response,
                        Err(never) => match never {},
                    },
                    ready = stream.readable() => {
                        ready?;
                        match read_ready(&stream, &mut buf)? {
                            // Dropping the call cancels what it waited for.
                            Ready::Closed => return Ok(()),
                            // A flood of pipelined bytes: not a client we serve.
                            Ready::Read if buf.len() > MAX_HEAD_BYTES => return Ok(()),
                            Ready::Read | Ready::Nothing => {}
                        }
                    }
                }
            }
        };
        let (parts, body) = response.into_parts();
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => Bytes::from_static(br#"{"error":"the response body failed"}"#),
        };
        let closing = !keep_alive || *shutdown.borrow();
        let mut out = Vec::with_capacity(256 + body.len());
        write_head(&mut out, parts.status, &parts.headers, body.len(), closing);
        if !is_head {
            out.extend_from_slice(&body);
        }
        stream.write_all(&out).await?;
        if closing {
            return Ok(());
        }
        if buf.is_empty() {
            // An idle connection holds no buffer.
            buf = Vec::new();
        }
    }
}

enum Ready {
    Closed,
    Read,
    Nothing,
}

/// Reads what the socket has without waiting; kept out of the async state so
/// its scratch space does not enlarge every connection.
fn read_ready(stream: &TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Ready> {
    let mut chunk = [0u8; 1024];
    match stream.try_read(&mut chunk) {
        Ok(0) => Ok(Ready::Closed),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(Ready::Read)
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(Ready::Nothing),
        Err(e) => Err(e),
    }
}

/// A parsed request head.
struct Head1 {
    request: http::Request<Empty<Bytes>>,
    /// How many bytes of the buffer the head took.
    consumed: usize,
    keep_alive: bool,
    body_length: usize,
    expect_continue: bool,
}

enum Head {
    Request(Box<Head1>),
    /// The client closed the connection between requests, or the server is shutting down.
    Closed,
    /// The head is refused with this status and error text; the connection closes after it.
    Refused(u16, String),
}

async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    shutdown: &mut watch::Receiver<bool>,
    head_timeout: Duration,
) -> std::io::Result<Head> {
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        if !buf.is_empty() {
            match parse_head(buf) {
                Parsed::Complete(head) => return Ok(Head::Request(head)),
                Parsed::Error(status, text) => return Ok(Head::Refused(status, text)),
                Parsed::Partial if buf.len() >= MAX_HEAD_BYTES => {
                    return Ok(Head::Refused(
                        431,
                        format!("the request head is larger than {MAX_HEAD_BYTES} bytes"),
                    ));
                }
                Parsed::Partial => {}
            }
            deadline.get_or_insert_with(|| tokio::time::Instant::now() + head_timeout);
        }
        buf.reserve(1024);
        let read = tokio::select! {
            read = stream.read_buf(buf) => read?,
            _ = sleep_until(deadline) => {
                return Ok(Head::Refused(408, "the request head did not arrive in time".to_owned()));
            }
            _ = crate::http_server::stopped(shutdown), if buf.is_empty() => return Ok(Head::Closed),
            // A kept-alive connection with nothing to ask is let go after a while.
            _ = tokio::time::sleep(IDLE_TIMEOUT), if buf.is_empty() => return Ok(Head::Closed),
        };
        if read == 0 {
            return Ok(Head::Closed);
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

enum Parsed {
    Complete(Box<Head1>),
    Partial,
    Error(u16, String),
}

fn parse_head(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let consumed = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Error(431, format!("more than {MAX_HEADERS} header fields"));
        }
        Err(e) => return Parsed::Error(400, format!("malformed HTTP request: {e}")),
    };
    let (Some(method), Some(path), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Parsed::Error(400, "malformed HTTP request line".to_owned());
    };
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .version(if version == 0 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        });
    let mut keep_alive = version == 1;
    let mut body_length = 0usize;
    let mut expect_continue = false;
    let mut header_bytes = 0usize;
    for header in parsed.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("connection") {
            let value = String::from_utf8_lossy(header.value).to_ascii_lowercase();
            if value.split(',').any(|t| t.trim() == "close") {
                keep_alive = false;
            } else if value.split(',').any(|t| t.trim() == "keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let Some(length) = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
            else {
                return Parsed::Error(400, "malformed Content-Length".to_owned());
            };
            body_length = length;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Error(
                400,
                "request bodies are not accepted (Transfer-Encoding)".to_owned(),
            );
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = header.value.eq_ignore_ascii_case(b"100-continue");
        }
        // The filter reads only these; a parked wait keeps its request, so the rest is not copied.
        if FORWARDED_HEADERS
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f))
        {
            request = request.header(name, header.value);
        }
        header_bytes += name.len() + header.value.len() + 4;
    }
    // Path and query, the `?` between them not counted.
    if path.len() - usize::from(path.contains('?')) > MAX_URL_BYTES {
        return Parsed::Error(414, format!("the URL is longer than {MAX_URL_BYTES} bytes"));
    }
    if header_bytes > MAX_HEADER_BYTES {
        return Parsed::Error(
            431,
            format!("the request headers are larger than {MAX_HEADER_BYTES} bytes"),
        );
    }
    match request.body(Empty::new()) {
        Ok(request) => Parsed::Complete(Box::new(Head1 {
            request,
            consumed,
            keep_alive,
            body_length,
            expect_continue,
        })),
        Err(e) => Parsed::Error(400, format!("malformed HTTP request: {e}")),
    }
}

fn write_head(
    out: &mut Vec<u8>,
    status: http::StatusCode,
    headers: &http::HeaderMap,
    length: usize,
    closing: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == http::header::CONTENT_LENGTH || name == http::header::CONNECTION {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {length}\r\n").as_bytes());
    if closing {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

async fn write_error(stream: &mut TcpStream, status: u16, error: &str) -> std::io::Result<()> {
    let body = serde_json::json!({ "error": error }).to_string();
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    let mut out = Vec::new();
    write_head(&mut out, status, &headers, body.len(), true);
    out.extend_from_slice(body.as_bytes());
    stream.write_all(&out).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(raw: &[u8]) -> Head1 {
        match parse_head(raw) {
            Parsed::Complete(head) => *head,
            Parsed::Partial => panic!("partial"),
            Parsed::Error(status, text) => panic!("{status} {text}"),
        }
    }

    #[test]
    fn heads_parse_with_keep_alive_rules() {
        let head = complete(b"GET /health?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\nGET /next");
        assert_eq!(head.request.uri(), "/health?x=1");
        assert_eq!(head.consumed, 45);
        assert!(head.keep_alive);
        assert!(!complete(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(!complete(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
        let head =
            complete(b"DELETE / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
        assert_eq!(head.body_length, 5);
        assert!(head.expect_continue);
    }

    #[test]
    fn bad_heads_are_refused_with_a_status() {
        assert!(matches!(parse_head(b"GET / HTTP/1.1\r\n"), Parsed::Partial));
        assert!(matches!(
            parse_head(b"\x01\x02 / HTTP/1.1\r\n\r\n"),
            Parsed::Error(400, _)
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Parsed::Error(400, _)
        ));
        assert!(matches!(
            parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Parsed::Error(400, _)
        ));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(matches!(
            parse_head(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            Parsed::Error(431, _)
        ));
    }

    #[test]
    fn response_heads_carry_length_and_close() {
        let mut out = Vec::new();
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        write_head(&mut out, http::StatusCode::NOT_FOUND, &headers, 12, true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 12\r\nconnection: close\r\n\r\n"
        );
    }
}
