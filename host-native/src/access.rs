//! Access control over HTTP (`--admin-token`): whose request this is.
//!
//! A request carries `Authorization: Bearer <token>` (the admin token or an
//! inbox's) or a browser session's cookie (`mailjar_session`, opened with
//! `POST /api/session`). The admin token is compared in constant time; an
//! inbox token is found by its digest in the core. Everything but `/health`,
//! `/api/openapi.json` and the UI's files needs one of them, and
//! authentication comes before routing: an unknown `/api/*` path without
//! credentials is 401 too.

use mailjar_core::api::same_secret;
use mailjar_core::api::{Digest32, Response, Scope};
use warp::http::{self, HeaderMap};

use crate::sessions::{Holder, Sessions};
use crate::state::Shared;

/// The name of the browser session's cookie.
pub const COOKIE: &str = "mailjar_session";

/// Access control: the admin token and the browser sessions.
pub struct Access {
    admin: String,
    sessions: Sessions,
}

/// Who a request is, once its credentials are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// What it may see.
    pub scope: Scope,
    /// It came with a session cookie, not a bearer token: writes need the cross-site check.
    pub by_cookie: bool,
}

/// The paths served without credentials.
pub fn is_open(path: &str) -> bool {
    matches!(path, "/health" | "/health/" | "/api/openapi.json" | "/") || path.starts_with("/ui/")
}

/// The 401 of a request without valid credentials.
pub fn unauthorized() -> Response {
    let mut response = Response::error(401, "unauthorized");
    response
        .headers
        .push(("www-authenticate", "Bearer".to_owned()));
    response
}

impl Access {
    /// Access control with this admin token and room for `max_sessions` browser sessions.
    pub fn new(admin: String, max_sessions: usize) -> Access {
        Access {
            admin,
            sessions: Sessions::new(max_sessions),
        }
    }

    /// The browser sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Whose token this is: the admin's, an inbox's, or nobody's.
    pub fn holder_of(&self, shared: &std::sync::Arc<Shared>, token: &str) -> Option<Holder> {
        if same_secret(token, &self.admin) {
            return Some(Holder::Admin);
        }
        shared
            .inbox_by_token(token)
            .map(|_| Holder::inbox_token(token))
    }

    /// Checks a request's credentials: its caller, or the 401 to answer.
    pub fn authenticate(
        &self,
        shared: &std::sync::Arc<Shared>,
        headers: &HeaderMap,
    ) -> Result<Caller, Response> {
        if let Some(value) = headers.get(http::header::AUTHORIZATION) {
            let token = bearer(value.as_bytes()).ok_or_else(unauthorized)?;
            let scope = self.scope_of(shared, token).ok_or_else(unauthorized)?;
            return Ok(Caller {
                scope,
                by_cookie: false,
            });
        }
        let id = session_cookie(headers).ok_or_else(unauthorized)?;
        let scope = self
            .sessions
            .scope_of(shared, id)
            .ok_or_else(unauthorized)?;
        Ok(Caller {
            scope,
            by_cookie: true,
        })
    }

    fn scope_of(&self, shared: &std::sync::Arc<Shared>, token: &str) -> Option<Scope> {
        if same_secret(token, &self.admin) {
            return Some(Scope::All);
        }
        shared.inbox_scope(&Digest32::of(token))
    }
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = text.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The value of the session cookie, if the request has one.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// Whether a cookie-authenticated write may go on: it is JSON, or its
/// `Origin` is this server's own (`http(s)://<Host>`). A cross-site form
/// can send neither, and a cross-site script can send JSON only after a
/// preflight the CORS settings refuse.
pub fn same_site_write(headers: &HeaderMap, https: bool) -> bool {
    let json = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if json {
        return true;
    }
    let origin = headers
        .get(http::header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    let host = headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok());
    match (origin, host) {
        (Some(origin), Some(host)) => {
            let scheme = if https { "https" } else { "http" };
            origin.eq_ignore_ascii_case(&format!("{scheme}://{host}"))
        }
        _ => false,
    }
}

/// The 403 of a cross-site cookie-authenticated write.
pub fn cross_site() -> Response {
    Response::error(
        403,
        "cross-site request refused: a POST or DELETE authenticated by the session cookie needs Content-Type: application/json or an Origin of this server",
    )
}

/// What the access check makes of a request: an answer now, or the scope it goes on with.
pub enum Admitted {
    /// Answer this (a 401, a 403, or `/api/session`'s answer).
    Answer(Response),
    /// Hand it to the core in this scope.
    Scope(Scope),
}

/// What the access check looks at in a request.
pub struct Asked<'a> {
    /// The method.
    pub method: &'a http::Method,
    /// The path, as sent.
    pub path: &'a str,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The body (`POST /api/session` reads it).
    pub body: &'a [u8],
    /// The server speaks HTTPS: cookies are `Secure`, the same origin is `https://`.
    pub https: bool,
}

impl Access {
    /// Checks a request before routing: open paths pass, `/api/session` is
    /// answered here, and everything else needs credentials (the cross-site
    /// check first for a cookie-authenticated write).
    pub fn admit(&self, shared: &std::sync::Arc<Shared>, asked: &Asked<'_>) -> Admitted {
        if is_open(asked.path) {
            return Admitted::Scope(Scope::All);
        }
        let write = matches!(*asked.method, http::Method::POST | http::Method::DELETE);
        let by_cookie = !asked.headers.contains_key(http::header::AUTHORIZATION)
            && session_cookie(asked.headers).is_some();
        if write && by_cookie && !same_site_write(asked.headers, asked.https) {
            return Admitted::Answer(cross_site());
        }
        if matches!(asked.path, "/api/session" | "/api/session/") {
            return Admitted::Answer(self.session_route(shared, asked));
        }
        match self.authenticate(shared, asked.headers) {
            Ok(caller) => Admitted::Scope(caller.scope),
            Err(response) => Admitted::Answer(response),
        }
    }

    /// Ends the sessions of an inbox whose token a successful admin request
    /// just rotated, or that it deleted.
    pub fn after(
        &self,
        shared: &std::sync::Arc<Shared>,
        method: &http::Method,
        path: &str,
        status: u16,
    ) {
        let changed = changes_inboxes(method, path, status) && path.starts_with("/api/inboxes/");
        if changed && !self.sessions.is_empty() {
            self.sessions.end_stale(shared);
        }
    }

    /// `POST /api/session` (a token for a cookie) and `DELETE /api/session`.
    fn session_route(&self, shared: &std::sync::Arc<Shared>, asked: &Asked<'_>) -> Response {
        match *asked.method {
            http::Method::POST => self.open_session(shared, asked),
            http::Method::DELETE => {
                let ended = session_cookie(asked.headers).is_some_and(|id| self.sessions.end(id));
                let mut response = Response::json(200, &serde_json::json!({ "ended": ended }));
                response
                    .headers
                    .push(("set-cookie", cookie("", asked.https, true)));
                response
            }
            _ => {
                let mut response = Response::error(405, "method not allowed");
                response.headers.push(("allow", "POST, DELETE".to_owned()));
                response
            }
        }
    }

    fn open_session(&self, shared: &std::sync::Arc<Shared>, asked: &Asked<'_>) -> Response {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Login {
            token: String,
        }
        let json = asked
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Response::error(
                415,
                "POST /api/session takes {\"token\": \"...\"} with Content-Type: application/json",
            );
        }
        let Ok(login) = serde_json::from_slice::<Login>(asked.body) else {
            return Response::error(400, "POST /api/session takes {\"token\": \"...\"}");
        };
        let Some(holder) = self.holder_of(shared, &login.token) else {
            return unauthorized();
        };
        let inbox = match holder {
            Holder::Admin => None,
            Holder::Inbox(_) => shared.inbox_by_token(&login.token),
        };
        let id = self.sessions.open(holder);
        if id.is_empty() {
            return Response::error(503, "no randomness for a session id: use a bearer token");
        }
        let mut response = Response::json(
            200,
            &serde_json::json!({ "admin": holder == Holder::Admin, "inbox": inbox }),
        );
        response
            .headers
            .push(("set-cookie", cookie(&id, asked.https, false)));
        response
    }
}

/// Whether a request that got `status` made, rotated or deleted an inbox.
pub fn changes_inboxes(method: &http::Method, path: &str, status: u16) -> bool {
    status == 200
        && matches!(*method, http::Method::POST | http::Method::DELETE)
        && path.starts_with("/api/inboxes")
}

/// The `Set-Cookie` value of a session (or of its end).
fn cookie(id: &str, https: bool, end: bool) -> String {
    let mut value = format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/");
    if https {
        value.push_str("; Secure");
    }
    if end {
        value.push_str("; Max-Age=0");
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn bearer_tokens_and_cookies_are_read_strictly() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer   abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearerabc"), None);
        let h = headers(&[("cookie", "a=1; mailjar_session=xyz; b=2")]);
        assert_eq!(session_cookie(&h), Some("xyz"));
        let h = headers(&[("cookie", "a=1"), ("cookie", "mailjar_session=q")]);
        assert_eq!(session_cookie(&h), Some("q"));
        assert_eq!(
            session_cookie(&headers(&[("cookie", "mailjar_session=")])),
            None
        );
    }

    #[test]
    fn a_write_is_same_site_by_its_content_type_or_its_origin() {
        let host = ("host", "127.0.0.1:8025");
        assert!(same_site_write(
            &headers(&[host, ("content-type", "Application/JSON; charset=utf-8")]),
            false
        ));
        assert!(same_site_write(
            &headers(&[host, ("origin", "http://127.0.0.1:8025")]),
            false
        ));
        assert!(!same_site_write(
            &headers(&[host, ("origin", "http://127.0.0.1:8025")]),
            true
        ));
        assert!(!same_site_write(
            &headers(&[host, ("origin", "http://evil.test")]),
            false
        ));
        assert!(!same_site_write(
            &headers(&[host, ("content-type", "text/plain")]),
            false
        ));
        assert!(!same_site_write(&headers(&[host]), false));
    }

    #[test]
    fn open_paths_are_few() {
        for path in ["/health", "/api/openapi.json", "/", "/ui/app.js"] {
            assert!(is_open(path), "{path}");
        }
        for path in [
            "/api/emails",
            "/api",
            "/api/nothing",
            "/metrics",
            "/ui",
            "/x",
        ] {
            assert!(!is_open(path), "{path}");
        }
    }
}
