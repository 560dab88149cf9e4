//! `GET /api/emails/:id/checks/links`: each link of a message fetched, on
//! request only, through the address guard ([`super::guard`]).
//!
//! Bounds: at most `--link-check-max-links` links a message (the rest are
//! counted in `skipped`), four at a time; each link has `--link-check-timeout`
//! for all its hops together, at most five redirects, HEAD first (GET when
//! HEAD is refused with 405 or 501); no body is read, so the bytes read per
//! hop are the response head, which hyper caps (~400 KiB).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;

use super::guard::{Guard, NOT_ALLOWED};

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
    /// The client: no redirects of its own, no proxy, names through the guarded resolver.
    pub client: reqwest::Client,
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

    /// One request: HEAD, then GET when HEAD is refused. The status and the
    /// `Location`, if any.
    async fn hop(&self, url: &Url) -> Result<(StatusCode, Option<String>), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("not an http(s) URL: {}", url.scheme()));
        }
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => None,
            None => return Err("no host".to_owned()),
        };
        if literal.is_some_and(|ip| !self.guard.allows(ip)) {
            return Err(NOT_ALLOWED.to_owned());
        }
        let mut response = self.request(Method::HEAD, url).await?;
        if matches!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
        ) {
            response = self.request(Method::GET, url).await?;
        }
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Dropped unread: the body is never downloaded.
        Ok((response.status(), location))
    }

    async fn request(&self, method: Method, url: &Url) -> Result<reqwest::Response, String> {
        self.client
            .request(method, url.clone())
            .send()
            .await
            .map_err(|e| describe(&e))
    }
}

/// The plainest words for a request's failure: the guard's refusal as the
/// API names it, else the innermost cause.
fn describe(error: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    let mut innermost = error.to_string();
    while let Some(e) = source {
        let text = e.to_string();
        if text == NOT_ALLOWED {
            return text;
        }
        innermost = text;
        source = e.source();
    }
    if error.is_timeout() {
        return "timed out".to_owned();
    }
    innermost
}

/// The HTTP client of the links check.
pub fn client(
    resolver: super::guard::GuardedResolver,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(resolver))
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!(
            "mailjar/",
            env!("CARGO_PKG_VERSION"),
            " link check"
        ))
        .build()
        .map_err(|e| e.to_string())
}
