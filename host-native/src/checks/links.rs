//! `GET /api/emails/:id/checks/links`: each link of a message fetched, on
//! request only, through the address guard ([`super::guard`]).
//!
//! Bounds: at most `--link-check-max-links` links a message (the rest are
//! counted in `skipped`), four at a time; each link has `--link-check-timeout`
//! for all its hops together, at most five redirects, HEAD first (GET when
//! HEAD is refused with 405 or 501); no body is read, so the bytes read per
//! hop are the response head, which hyper caps (~400 KiB).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use http_body_util::Empty;
use hyper::{Method, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde::Serialize;
use tokio::net::TcpStream;
use url::Url;

use super::guard::{Guard, GuardedResolver, NOT_ALLOWED};

/// Most redirects followed per link.
pub const MAX_REDIRECTS: usize = 5;
/// Links checked at once for one request.
const CONCURRENCY: usize = 4;

/// The answer of the links check.
#[derive(Debug, Serialize)]
pub struct LinksReport {
    /// One entry per link checked, in the message's order.
    pub links: Vec<LinkResult>,
    /// Links past `--link-check-max-links`, not checked.
    pub skipped: usize,
}

/// What one link gave.
#[derive(Debug, Serialize)]
pub struct LinkResult {
    /// The link as written in the message.
    pub url: String,
    /// The final status, after redirects; null on an error.
    pub status: Option<u16>,
    /// Why there is no status, e.g. `address not allowed`, `timed out`.
    pub error: Option<String>,
    /// The URLs redirected to, in order.
    pub redirects: Vec<String>,
    /// How long the link took, all hops, in milliseconds.
    pub ms: u64,
}

/// What the links check needs.
pub struct LinkChecker {
    /// TLS for https links: the webpki roots, ring, no client certificate.
    pub tls: Arc<rustls::ClientConfig>,
    /// Where names are looked up, each address through the guard.
    pub resolver: GuardedResolver,
    /// The guard, for links written with an IP address (no name to resolve).
    pub guard: Guard,
    /// The time for one link, all its hops.
    pub timeout: Duration,
    /// Most links checked a message.
    pub max_links: usize,
}

impl LinkChecker {
    /// Checks the links, at most [`LinkChecker::max_links`] of them.
    pub async fn check(self: &Arc<Self>, links: Vec<String>) -> LinksReport {
        let skipped = links.len().saturating_sub(self.max_links);
        let results = futures_util::stream::iter(links.into_iter().take(self.max_links))
            .map(|url| {
                let checker = self.clone();
                async move { checker.one(url).await }
            })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        LinksReport {
            links: results,
            skipped,
        }
    }

    async fn one(&self, url: String) -> LinkResult {
        let started = Instant::now();
        let mut redirects = Vec::new();
        let outcome = tokio::time::timeout(self.timeout, self.follow(&url, &mut redirects)).await;
        let (status, error) = match outcome {
            Ok(Ok(status)) => (Some(status), None),
            Ok(Err(e)) => (None, Some(e)),
            Err(_) => (
                None,
                Some(format!("timed out after {} ms", self.timeout.as_millis())),
            ),
        };
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        LinkResult {
            url,
            status,
            error,
            redirects,
            ms,
        }
    }

    /// Follows redirects by hand, so each hop's address goes through the guard.
    async fn follow(&self, url: &str, redirects: &mut Vec<String>) -> Result<u16, String> {
        let mut current = Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        loop {
            let (status, location) = self.hop(&current).await?;
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                return Ok(status.as_u16());
            };
            if redirects.len() == MAX_REDIRECTS {
                return Err(format!("more than {MAX_REDIRECTS} redirects"));
            }
            current = current
                .join(&location)
                .map_err(|e| format!("bad redirect location: {e}"))?;
            redirects.push(current.to_string());
        }
    }

    /// One hop: HEAD, then GET when HEAD is refused, both to the addresses
    /// the guard allowed for this hop. The status and the `Location`, if any.
    async fn hop(&self, url: &Url) -> Result<(StatusCode, Option<String>), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("not an http(s) URL: {}", url.scheme()));
        }
        let ips = match url.host() {
            Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            Some(url::Host::Domain(name)) => self.resolver.resolve(name).await?,
            None => return Err("no host".to_owned()),
        };
        if ips.iter().any(|ip| !self.guard.allows(*ip)) {
            return Err(NOT_ALLOWED.to_owned());
        }
        let mut answer = self.request(Method::HEAD, url, &ips).await?;
        if matches!(
            answer.0,
            StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
        ) {
            answer = self.request(Method::GET, url, &ips).await?;
        }
        Ok(answer)
    }

    /// One request on a connection of its own to one of `ips`: its status
    /// and `Location`. The body is never read.
    async fn request(
        &self,
        method: Method,
        url: &Url,
        ips: &[IpAddr],
    ) -> Result<(StatusCode, Option<String>), String> {
        let port = url
            .port_or_known_default()
            .ok_or("no port for this scheme")?;
        let tcp = connect(ips, port).await?;
        let target = &url[url::Position::BeforePath..url::Position::AfterQuery];
        let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
        let request = hyper::Request::builder()
            .method(method)
            .uri(if target.is_empty() { "/" } else { target })
            .header(header::HOST, authority)
            .header(header::USER_AGENT, USER_AGENT)
            .body(Empty::<bytes::Bytes>::new())
            .map_err(|e| format!("not a valid request: {e}"))?;
        if url.scheme() == "http" {
            return send(TokioIo::new(tcp), request).await;
        }
        let name = match url.host() {
            Some(url::Host::Domain(name)) => ServerName::try_from(name.to_owned())
                .map_err(|e| format!("not a TLS server name: {e}"))?,
            Some(url::Host::Ipv4(ip)) => ServerName::IpAddress(IpAddr::V4(ip).into()),
            Some(url::Host::Ipv6(ip)) => ServerName::IpAddress(IpAddr::V6(ip).into()),
            None => return Err("no host".to_owned()),
        };
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        send(TokioIo::new(tls), request).await
    }
}

const USER_AGENT: &str = concat!("mailjar/", env!("CARGO_PKG_VERSION"), " link check");

/// A TCP connection to the first of `ips` that answers.
async fn connect(ips: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut last = "no address".to_owned();
    for ip in ips {
        match TcpStream::connect(SocketAddr::new(*ip, port)).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// Ends the connection's task when the request is dropped (answered, or timed out).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `request` over HTTP/1.1 on `io`; hyper caps the response head (~400 KiB).
async fn send<I>(
    io: I,
    request: hyper::Request<Empty<bytes::Bytes>>,
) -> Result<(StatusCode, Option<String>), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let location = response
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Dropped unread: the body is never downloaded.
    Ok((response.status(), location))
}
