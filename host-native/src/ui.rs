//! The web UI: a page and its assets, compiled into the binary and served at
//! `/` and `/ui/<asset>` (README, "Web UI").
//!
//! The page only talks to the JSON API of the same origin. Its HTML carries a
//! strict Content-Security-Policy (no inline script or style, no plug-ins,
//! framing refused) and HTML mail is shown only inside a sandboxed iframe
//! whose document is `/api/emails/:id/html`, itself under a `sandbox` CSP.

use bytes::Bytes;
use warp::http::{self, HeaderValue, StatusCode};

/// The policy of every HTML response of the UI.
///
/// `frame-src 'self'` lets the page frame `/api/emails/:id/html` (and
/// nothing else); `img-src data:` allows small inline icons; no
/// `'unsafe-inline'` anywhere.
pub const CSP: &str = "default-src 'self'; frame-src 'self'; img-src 'self' data:; \
style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'none'; frame-ancestors 'none'";

/// One compiled-in file of the UI.
struct Asset {
    /// The URL path it is served at.
    path: &'static str,
    /// Its `Content-Type`.
    content_type: &'static str,
    /// Its bytes.
    body: &'static [u8],
}

const INDEX: &[u8] = include_bytes!("../ui/index.html");

/// Every file of the UI; `/` serves the first.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: INDEX,
    },
    Asset {
        path: "/ui/index.html",
        content_type: "text/html; charset=utf-8",
        body: INDEX,
    },
    Asset {
        path: "/ui/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/app.js"),
    },
    Asset {
        path: "/ui/access.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/access.js"),
    },
    Asset {
        path: "/ui/checks.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/checks.js"),
    },
    Asset {
        path: "/ui/release.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/release.js"),
    },
    Asset {
        path: "/ui/transcript.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/transcript.js"),
    },
    Asset {
        path: "/ui/style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../ui/style.css"),
    },
    Asset {
        path: "/ui/favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../ui/favicon.svg"),
    },
];

/// The entity tag of a body: a hash of its bytes, so it changes with the binary's assets.
fn etag(body: &[u8]) -> String {
    // FNV-1a, 64 bits: stable across builds and platforms (std's hasher is not promised to be).
    let hash = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("\"{hash:016x}\"")
}

/// The UI's answer to a request, or None when the path is not one of its
/// files (the API then answers it).
///
/// `if_none_match` is the request's `If-None-Match` value: a match is a 304.
/// Only GET and HEAD are served; another method on a UI path is a 405.
pub fn respond(
    method: &http::Method,
    path: &str,
    if_none_match: Option<&str>,
) -> Option<http::Response<Bytes>> {
    let asset = ASSETS.iter().find(|a| a.path == path)?;
    if method != http::Method::GET && method != http::Method::HEAD {
        let mut response = http::Response::new(Bytes::from_static(
            br#"{"error":"the web UI only answers GET and HEAD"}"#,
        ));
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        let h = response.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(http::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        h.insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        return Some(response);
    }
    let tag = etag(asset.body);
    let fresh = if_none_match.is_some_and(|value| {
        value
            .split(',')
            .any(|t| t.trim() == tag || t.trim() == "*" || t.trim() == format!("W/{tag}"))
    });
    let mut response = if fresh {
        let mut response = http::Response::new(Bytes::new());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        http::Response::new(Bytes::from_static(asset.body))
    };
    let h = response.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    // Revalidated on every load (cheap with the ETag), so a new binary's UI is used at once.
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    if let Ok(value) = HeaderValue::from_str(&tag) {
        h.insert(http::header::ETAG, value);
    }
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    if asset.content_type.starts_with("text/html") {
        h.insert(
            http::header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Option<http::Response<Bytes>> {
        respond(&http::Method::GET, path, None)
    }

    #[test]
    fn serves_the_page_and_its_assets() {
        for asset in ASSETS {
            let response = get(asset.path).expect(asset.path);
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.body().as_ref(), asset.body);
            assert_eq!(
                response.headers()[http::header::CONTENT_TYPE],
                asset.content_type
            );
            assert_eq!(response.headers()["x-content-type-options"], "nosniff");
            let html = asset.content_type.starts_with("text/html");
            assert_eq!(
                response
                    .headers()
                    .contains_key(http::header::CONTENT_SECURITY_POLICY),
                html,
                "{}",
                asset.path
            );
        }
        for path in [
            "/ui/",
            "/ui/missing.js",
            "/index.html",
            "/api/emails",
            "/ui",
        ] {
            assert!(get(path).is_none(), "{path}");
        }
    }

    #[test]
    fn the_page_loads_only_its_own_files() {
        let html = std::str::from_utf8(INDEX).expect("UTF-8");
        assert!(!html.contains("<script>") && !html.contains(" style="));
        assert!(!html.contains("http:") && !html.contains("https:"));
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let js = std::str::from_utf8(asset.body).expect("UTF-8");
            assert!(!js.contains("innerHTML"), "message text is never HTML");
            assert!(!js.contains("eval("));
            // A token lives only in the HttpOnly session cookie.
            assert!(!js.contains("localStorage") && !js.contains("sessionStorage"));
        }
    }

    #[test]
    fn etags_revalidate_and_other_methods_are_refused() {
        let tag = etag(INDEX);
        let response = respond(&http::Method::GET, "/", Some(&tag)).expect("/");
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert!(response.body().is_empty());
        let other = format!("\"x\", {tag}");
        let response = respond(&http::Method::GET, "/", Some(&other)).expect("/");
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        let response = respond(&http::Method::GET, "/", Some("\"stale\"")).expect("/");
        assert_eq!(response.status(), StatusCode::OK);
        assert_ne!(etag(b"a"), etag(b"b"));
        let response = respond(&http::Method::POST, "/", None).expect("/");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(response.headers()[http::header::ALLOW], "GET, HEAD");
    }
}
