//! The HTTP API: warp hands every request to the core's [`Api`](mailjar_core::api::Api).

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mailjar_core::api::{Body, Request, Response, Scope, Subscription};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, watch};
use warp::Filter;
use warp::http::{self, StatusCode};

use crate::access::Admitted;
use crate::events::EventStream;
use crate::http1::{self, LiveBody};
use crate::state::{Answer, Shared};
use crate::tls::Tls;

/// What the HTTP side needs.
#[derive(Clone)]
pub struct HttpContext {
    /// The API.
    pub shared: Arc<Shared>,
    /// Whether the listener is bound to loopback: then only loopback `Host` names are served.
    pub loopback_only: bool,
    /// How long a client may take to send a request head once it has started.
    pub head_timeout: Duration,
    /// Host names served besides loopback ones, lower-cased.
    pub allowed_hosts: Vec<String>,
    /// Origins given CORS access; `*` for any. Empty: no CORS.
    pub cors_origins: Vec<String>,
    /// Becomes true when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// Whether the web UI is served at `/` (false with `--no-ui`).
    pub ui: bool,
    /// Access control (`--admin-token`); None: every request sees everything.
    pub access: Option<Arc<crate::access::Access>>,
    /// The API is served over HTTPS (session cookies are `Secure`).
    pub https: bool,
    /// With `--relay`: where `POST /api/emails/:id/release` sends.
    pub relay: Option<Arc<crate::release::Relay>>,
    /// `POST /api/send`'s limits.
    pub send: crate::send::SendOptions,
    /// The checks on a message that need the network (`/api/emails/:id/checks/{links,spam,auth}`).
    pub checks: Arc<crate::checks::Checks>,
}

/// The warp filter that serves the whole API.
pub fn routes(
    context: HttpContext,
) -> impl Filter<Extract = (http::Response<Bytes>,), Error = Infallible> + Clone + Send + Sync + 'static
{
    // Shared, not copied: every connection clones the filter, and every
    // request its context (a parked wait holds one for its whole wait).
    let context = Arc::new(context);
    warp::method()
        .and(warp::path::full())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<http1::RequestBody>())
        .then(
            move |method: http::Method,
                  path: warp::path::FullPath,
                  query: String,
                  headers: http::HeaderMap,
                  body: Option<http1::RequestBody>| {
                let context = context.clone();
                async move {
                    let cors = cors_origin(&context, &headers);
                    let refusal = refuse(&context, &headers);
                    let last_event_id = headers
                        .get("last-event-id")
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                    let content_type = headers
                        .get(http::header::CONTENT_TYPE)
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                    // The web UI's files, behind the same Host guard as the API.
                    let page = context.ui.then(|| {
                        let tag = headers.get(http::header::IF_NONE_MATCH);
                        let tag = tag.and_then(|v| v.to_str().ok());
                        crate::ui::respond(&method, path.as_str(), tag)
                    });
                    let body = body.map(|b| b.0).unwrap_or_default();
                    let preflight_asked = method == http::Method::OPTIONS && cors.is_some();
                    let admitted = match (&refusal, &context.access) {
                        (None, Some(access)) if !preflight_asked => {
                            admit(&context, access, &method, path.as_str(), &headers, &body)
                        }
                        _ => Admitted::Scope(Scope::All),
                    };
                    // A parked wait should not keep a copy of the headers alive.
                    drop(headers);
                    let mut response = match (refusal, admitted, page.flatten()) {
                        (Some(refusal), _, _) => json(refusal),
                        (None, _, _) if preflight_asked => preflight(),
                        (None, Admitted::Answer(answer), _) => json(answer),
                        (None, _, Some(page)) => page,
                        (None, Admitted::Scope(scope), None) => {
                            let request = Request {
                                method: method.as_str().to_owned(),
                                path: path.as_str().to_owned(),
                                query,
                                last_event_id,
                                content_type,
                                body,
                                scope,
                                entropy: crate::state::request_entropy(&method),
                            };
                            to_core(&context, &method, &request).await
                        }
                    };
                    let status = response.status().as_u16();
                    context.shared.metrics.http_request(path.as_str(), status);
                    if let Some(origin) = cors {
                        let h = response.headers_mut();
                        h.insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
                        h.insert(http::header::VARY, http::HeaderValue::from_static("Origin"));
                    }
                    response
                }
            },
        )
}

/// Checks a request's credentials before routing ([`crate::access::Access::admit`]).
fn admit(
    context: &HttpContext,
    access: &crate::access::Access,
    method: &http::Method,
    path: &str,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Admitted {
    let asked = crate::access::Asked {
        method,
        path,
        headers,
        body,
        https: context.https,
    };
    access.admit(&context.shared, &asked)
}

/// Hands a request to the core and makes its answer an HTTP response.
async fn to_core(
    context: &HttpContext,
    method: &http::Method,
    request: &Request,
) -> http::Response<Bytes> {
    // The checks that need the network, in the request's scope; the rest is the core's.
    if let Some(answer) = crate::checks::route(&context.checks, &context.shared, request).await {
        return json(answer);
    }
    if let Some(answer) =
        crate::metrics::route(&context.shared.metrics, || context.shared.gauges(), request)
    {
        return json(answer);
    }
    if let Some(answer) = crate::send::route(&context.shared, context.send, request).await {
        return json(answer);
    }
    let relay = context.relay.as_deref();
    if let Some(answer) = crate::release::route(relay, context.shared.as_ref(), request).await {
        return json(answer);
    }
    let mut answer = respond(context, request).await;
    if let Answer::Response(response) = &mut answer {
        let metrics = &context.shared.metrics;
        metrics.answered(&request.method, &request.path, response);
        add_health_lines(&context.shared, &request.path, response);
    }
    if let (Some(access), Answer::Response(response)) = (&context.access, &mut answer) {
        after_access(context, access, method, &request.path, response).await;
    }
    if let Answer::Response(response) = &mut answer
        && matches!(request.path.as_str(), "/health" | "/health/")
    {
        say_http_tls(response, context.https);
    }
    match answer {
        Answer::Response(response) => json(response),
        Answer::Subscribe(subscription) => event_stream(context, subscription),
    }
}

/// After a request that may have changed inboxes: their sessions end with
/// their token, and with `--data-dir` the change is on disk before the
/// answer (503 when the disk refused it).
async fn after_access(
    context: &HttpContext,
    access: &crate::access::Access,
    method: &http::Method,
    path: &str,
    response: &mut Response,
) {
    access.after(&context.shared, method, path, response.status);
    if !crate::access::changes_inboxes(method, path, response.status) {
        return;
    }
    if path.starts_with("/api/inboxes/") {
        // A rotation or a deletion ended the inbox's event streams in the core: they close now.
        context.shared.subscriptions_ended();
    }
    if let Err(e) = context.shared.save_inboxes().await {
        tracing::warn!("inboxes not written to disk: {e}");
        *response = error(
            503,
            &format!(
                "the inboxes changed in memory but not on disk: {e}; a restart brings back the inboxes as they were"
            ),
        );
    }
}

/// Adds `"httpTls": true|false` to a `/health` answer. The core writes
/// `/health` and knows nothing of the transport; its answer is one JSON
/// object, so the member goes in after its opening brace.
fn say_http_tls(response: &mut Response, https: bool) {
    let Body::Full(body) = &response.body else {
        return;
    };
    if response.status != 200 || !body.starts_with(b"{\"") {
        return;
    }
    let member: &[u8] = if https {
        b"{\"httpTls\":true,"
    } else {
        b"{\"httpTls\":false,"
    };
    let mut out = Vec::with_capacity(body.len() + member.len());
    out.extend_from_slice(member);
    out.extend_from_slice(&body[1..]);
    response.body = Body::Full(Bytes::from(out));
}

/// Adds `webhooks` and `relay` (when configured) to a `/health` answer.
fn add_health_lines(shared: &Shared, path: &str, response: &mut Response) {
    if !matches!(path, "/health" | "/health/") || response.status != 200 {
        return;
    }
    let lines = [
        ("webhooks", shared.webhooks.get().map(|w| w.health())),
        ("relay", shared.relay_auto.get().map(|r| r.health())),
    ];
    if lines.iter().all(|(_, line)| line.is_none()) {
        return;
    }
    let Body::Full(body) = &response.body else {
        return;
    };
    let Ok(serde_json::Value::Object(mut health)) = serde_json::from_slice(body) else {
        return;
    };
    for (name, line) in lines {
        if let Some(line) = line {
            health.insert(name.to_owned(), line);
        }
    }
    *response = Response::json(200, &health);
}

fn error(status: u16, text: &str) -> Response {
    Response::error(status, text)
}

/// Why a request is refused before it reaches the API, if it is.
fn refuse(context: &HttpContext, headers: &http::HeaderMap) -> Option<Response> {
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok());
    if context.loopback_only && !host.is_some_and(|h| is_allowed_host(h, &context.allowed_hosts)) {
        return Some(error(
            403,
            "this server only answers requests addressed to localhost (the Host header is not a loopback name; see --allowed-host)",
        ));
    }
    None
}

/// The `Access-Control-Allow-Origin` value for this request, when its origin is allowed.
fn cors_origin(context: &HttpContext, headers: &http::HeaderMap) -> Option<http::HeaderValue> {
    let origin = headers.get(http::header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    context
        .cors_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(text))
        .then(|| origin.clone())
}

/// The answer to a CORS preflight from an allowed origin.
fn preflight() -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::new());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let h = response.headers_mut();
    h.insert(
        http::header::ACCESS_CONTROL_ALLOW_METHODS,
        http::HeaderValue::from_static("GET, POST, DELETE, PATCH"),
    );
    h.insert(
        http::header::ACCESS_CONTROL_ALLOW_HEADERS,
        http::HeaderValue::from_static("content-type, authorization"),
    );
    h.insert(
        http::header::ACCESS_CONTROL_MAX_AGE,
        http::HeaderValue::from_static("600"),
    );
    response
}

/// Whether a `Host` header names this machine (localhost, a *.localhost
/// name, a loopback IP) or an allowed name, with any port.
///
/// The value is read strictly as RFC 3986 `host [":" port]`: a registered
/// name (letters, digits, `-`, `.`, `_`), an IPv4 address, or an IPv6 address
/// in brackets, then optionally `:` and 1 to 5 digits up to 65535. Anything
/// else (userinfo, a path, an empty or non-numeric port, zone ids) is not
/// this machine.
fn is_allowed_host(host: &str, allowed: &[String]) -> bool {
    let Some(name) = host_name(host) else {
        return false;
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        || allowed.contains(&name)
}

/// The host of a `Host` value (without brackets for IPv6), or None when the
/// value is not `host [":" port]`.
fn host_name(host: &str) -> Option<&str> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let (ip, after) = rest.split_once(']')?;
            ip.parse::<std::net::Ipv6Addr>().ok()?;
            let port = match after {
                "" => None,
                after => Some(after.strip_prefix(':')?),
            };
            (ip, port)
        }
        None => match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    if let Some(port) = port {
        let digits =
            !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
        if !digits || port.parse::<u32>().ok()? > 65535 {
            return None;
        }
    }
    let registered = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    if host.starts_with('[') || (!name.is_empty() && name.bytes().all(registered)) {
        Some(name)
    } else {
        None
    }
}

/// Opens an event stream: `text/event-stream`, written as events happen.
fn event_stream(context: &HttpContext, subscription: Subscription) -> http::Response<Bytes> {
    let stream = EventStream::new(context.shared.clone(), subscription);
    let mut response = http::Response::builder()
        .status(StatusCode::OK)
        .header(
            http::header::CONTENT_TYPE,
            "text/event-stream; charset=utf-8",
        )
        .header(http::header::CACHE_CONTROL, "no-store")
        .header("x-content-type-options", "nosniff")
        // Proxies that buffer (nginx) must pass events through as they come.
        .header("x-accel-buffering", "no")
        .body(Bytes::new())
        .unwrap_or_else(|_| http::Response::new(Bytes::new()));
    response
        .extensions_mut()
        .insert(LiveBody::new(Box::new(stream)));
    response
}

/// Answers a request, waiting for a delivery or the deadline when the core parks
/// it; dropped (the client left, the server stops), the request is cancelled.
async fn respond(context: &HttpContext, request: &Request) -> Answer {
    let mut shutdown = context.shutdown.clone();
    tokio::select! {
        // Boxed apart: the work a request may run is not carried by a parked wait.
        answer = Box::pin(context.shared.handle(request)) => answer,
        _ = stopped(&mut shutdown) => {
            Answer::Response(Response::error(503, "the server is shutting down"))
        }
    }
}

/// Resolves once the server shuts down (or is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|down| *down).await;
}

fn json(response: Response) -> http::Response<Bytes> {
    let mut builder = http::Response::builder()
        .status(StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(http::header::CONTENT_TYPE, response.content_type.as_ref())
        .header(http::header::CACHE_CONTROL, "no-store")
        .header("x-content-type-options", "nosniff");
    for (name, value) in &response.headers {
        // The core's headers replace the defaults above (its nosniff is not sent twice).
        if let (Some(h), Ok(name), Ok(value)) = (
            builder.headers_mut(),
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) {
            h.insert(name, value);
        }
    }
    let (body, streamed) = match response.body {
        Body::Full(bytes) => (bytes, None),
        // The driver writes it chunk by chunk beside warp's (empty) body.
        Body::Stream(source) => (Bytes::new(), Some(crate::http1::StreamedBody::new(source))),
    };
    let mut response = builder.body(body).unwrap_or_else(|_| {
        http::Response::new(Bytes::from_static(br#"{"error":"bad response"}"#))
    });
    if let Some(streamed) = streamed {
        response.extensions_mut().insert(streamed);
    }
    response
}

/// Serves HTTP/1.1 until shutdown; open connections finish their current request.
///
/// Each connection is driven by [`crate::http1`], which hands requests to the
/// warp filter. At most `options.connections.max()` are open at once; past
/// it a new connection takes the slot of the kept-alive connection that has
/// been idle longest (see [`http1::HttpConnections::reclaim`]), and without
/// one it is answered 503 `{"error"}` and closed. With `tls` (`--http-tls`)
/// every connection is HTTPS ([`crate::http_tls`]).
pub async fn serve(
    listener: TcpListener,
    context: HttpContext,
    options: http1::HttpOptions,
    tls: Option<Tls>,
) {
    let mut shutdown = context.shutdown.clone();
    let timeouts = http1::Timeouts {
        head: context.head_timeout,
        body: options.body_timeout,
        idle: http1::IDLE_TIMEOUT,
        write_stall: http1::WRITE_STALL_TIMEOUT,
    };
    let large_body = options.large_body;
    let service = warp::service(routes(context));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("HTTP accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let _ = stream.set_nodelay(true);
        // Taken here, in accept order; over the cap the connection's own task
        // waits for an idle one to give way, so the accept loop never waits.
        let slot = options.connections.try_open();
        let accepted = Accepted {
            stream,
            peer,
            connections: options.connections.clone(),
            tls: tls.clone(),
            large_body: large_body.clone(),
        };
        tokio::spawn(connection(
            accepted,
            slot,
            service.clone(),
            shutdown.clone(),
            timeouts,
        ));
    }
}

/// A connection just accepted, and what its task needs to serve it.
struct Accepted {
    stream: TcpStream,
    peer: std::net::SocketAddr,
    connections: http1::HttpConnections,
    tls: Option<Tls>,
    /// `POST /api/send`'s larger bodies, charged to `--max-inflight-bytes`.
    large_body: Option<http1::LargeBody>,
}

/// Serves one connection in its own task: over the cap it waits for an
/// idle connection's slot or is refused; under TLS it makes its handshake
/// while it holds its slot.
async fn connection<S>(
    accepted: Accepted,
    slot: Option<OwnedSemaphorePermit>,
    service: S,
    shutdown: watch::Receiver<bool>,
    timeouts: http1::Timeouts,
) where
    S: tower_service::Service<
            http::Request<http_body_util::Empty<Bytes>>,
            Response = warp::reply::Response,
            Error = Infallible,
        >,
{
    let Accepted {
        stream,
        peer,
        connections,
        tls,
        large_body,
    } = accepted;
    let slot = match slot {
        Some(slot) => slot,
        None => match connections.reclaim().await {
            Some(slot) => slot,
            None => {
                tracing::warn!(%peer, "too many HTTP connections: refused");
                let refusal = http1::Refusal {
                    status: 503,
                    error: format!(
                        "too many HTTP connections (at most {}; see --max-http-connections)",
                        connections.max()
                    ),
                };
                match &tls {
                    Some(tls) => crate::http_tls::refuse(tls, stream, &connections, &refusal).await,
                    None => http1::refuse_connection(stream, &connections, &refusal).await,
                }
                return;
            }
        },
    };
    let idle = connections.idle();
    let served = match &tls {
        None => {
            http1::serve_connection(stream, service, shutdown, timeouts, idle, large_body).await
        }
        Some(tls) => match crate::http_tls::open(tls, stream, &connections).await {
            Some(stream) => {
                http1::serve_connection(stream, service, shutdown, timeouts, idle, large_body).await
            }
            None => Ok(()),
        },
    };
    if let Err(e) = served {
        tracing::debug!(%peer, "HTTP connection ended: {e}");
    }
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_host_names() {
        for host in [
            "localhost",
            "localhost:8025",
            "127.0.0.1:8025",
            "[::1]:8025",
            "[::1]",
            "app.localhost",
            "LOCALHOST.",
            "127.1.2.3",
            "localhost:0",
            "localhost:65535",
            "[::1]:65535",
        ] {
            assert!(is_allowed_host(host, &[]), "{host}");
        }
        for host in [
            "evil.test",
            "evil.test:8025",
            "10.0.0.1",
            "localhost.evil.test",
            "[::2]:80",
            "",
            // Not `host [":" port]` (issue 9, finding 12).
            "localhost:80@evil.com",
            "user@localhost",
            "localhost:evil",
            "127.0.0.1:99999999",
            "127.0.0.1:65536",
            "localhost:",
            "[::1]:",
            "localhost/path",
            "localhost:80/",
            "[::1]x",
            "[::1",
            "[localhost]",
            "[fe80::1%25lo]",
            "localhost:80:80",
            "localhost ",
            " localhost",
            "local%68ost",
        ] {
            assert!(!is_allowed_host(host, &[]), "{host}");
        }
        assert!(is_allowed_host("mailjar:8025", &["mailjar".to_owned()]));
    }

    #[test]
    fn health_says_whether_it_is_served_over_tls() {
        let health = serde_json::json!({"ok": true, "messages": 0});
        for https in [true, false] {
            let mut response = Response::json(200, &health);
            say_http_tls(&mut response, https);
            let Body::Full(body) = &response.body else {
                panic!("a full body");
            };
            let read: serde_json::Value = serde_json::from_slice(body).expect("JSON");
            assert_eq!(read["httpTls"], https);
            assert_eq!(read["messages"], 0);
        }
        // An error is left as it is.
        let mut refused = Response::error(503, "down");
        say_http_tls(&mut refused, true);
        let Body::Full(body) = &refused.body else {
            panic!("a full body");
        };
        assert!(!String::from_utf8_lossy(body).contains("httpTls"));
    }
}
