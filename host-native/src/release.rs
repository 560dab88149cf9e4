//! Release (`POST /api/emails/:id/release`): a stored message sent on,
//! byte for byte, to a real SMTP server (`--relay HOST:PORT`).
//!
//! The SMTP client is `lettre`'s tokio transport (with rustls and ring, as
//! the rest of mailjar): STARTTLS when the relay offers it (`--relay-tls
//! required` insists, `off` never asks), AUTH with `--relay-auth`, the raw
//! bytes given to `send_raw` unchanged. The envelope sender is the stored
//! message's; the recipients are the request's, and every one of them must
//! match a `--relay-allow` pattern (the inbox address patterns), else the
//! request is 403 and nothing is sent: mailjar must never become an open
//! relay. Without `--relay-allow` nothing may be released.

use std::sync::Arc;
use std::time::Duration;

use lettre::address::{Address, Envelope};
use lettre::transport::smtp::AsyncSmtpTransport;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncTransport, Tokio1Executor};
use mailjar_core::api::Pattern;
use mailjar_core::api::{ApiError, Request, Response, Scope};
use mailjar_core::id::MessageId;
use mailjar_core::store::Email;

use crate::config::{RelaySettings, RelayTls};

/// Where a release finds stored messages (the server's store; a trait so
/// that release and `--relay-auto` do not depend on the server's state).
pub trait Messages: Send + Sync {
    /// Message `id` as `request`'s scope sees it, or the API's error (404, 401).
    fn email(&self, request: &Request, id: &str) -> Result<Arc<Email>, ApiError>;
    /// Message `id`, if it is still stored.
    fn stored(&self, id: MessageId) -> Option<Arc<Email>>;
}

/// The relay: its transport and the recipients it may be given.
pub struct Relay {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    allow: Vec<Pattern>,
    timeout: Duration,
    /// What `GET /api/relay` says: `--relay` and the `--relay-allow` patterns as given.
    described: serde_json::Value,
}

impl Relay {
    /// The relay these flags describe, None without `--relay`.
    pub fn from_settings(settings: &RelaySettings) -> Result<Option<Arc<Relay>>, String> {
        settings.validate()?;
        let Some((host, port)) = settings.host_port()? else {
            return Ok(None);
        };
        let allow = settings.allowed()?;
        let mut tls = TlsParameters::builder(host.to_owned());
        if let Some(path) = &settings.relay_ca {
            let pem =
                std::fs::read(path).map_err(|e| format!("--relay-ca {}: {e}", path.display()))?;
            let cert = Certificate::from_pem(&pem)
                .map_err(|e| format!("--relay-ca {}: {e}", path.display()))?;
            tls = tls.add_root_certificate(cert);
        }
        let tls = tls
            .build_rustls()
            .map_err(|e| format!("--relay TLS: {e}"))?;
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(port)
            .timeout(Some(settings.relay_timeout))
            .tls(match settings.relay_tls {
                RelayTls::Opportunistic => Tls::Opportunistic(tls),
                RelayTls::Required => Tls::Required(tls),
                RelayTls::Off => Tls::None,
            });
        if let Some(auth) = &settings.relay_auth {
            let (user, password) = auth.split_once(':').ok_or("--relay-auth: USER:PASS")?;
            builder = builder.credentials(Credentials::new(user.to_owned(), password.to_owned()));
        }
        let described = serde_json::json!({
            "address": format!("{host}:{port}"),
            "allow": settings.relay_allow,
            "auto": settings.relay_auto,
        });
        Ok(Some(Arc::new(Relay {
            transport: builder.build(),
            allow,
            timeout: settings.relay_timeout,
            described,
        })))
    }
}

/// Whether `address` matches `pattern` (case-insensitive, as inbox routing matches).
pub fn matches(pattern: &Pattern, address: &str) -> bool {
    let lower = address.trim().to_lowercase();
    let Some((local, domain)) = lower.rsplit_once('@') else {
        return false;
    };
    match pattern {
        Pattern::Exact(exact) => *exact == lower,
        Pattern::Domain(d) => d == domain,
        Pattern::Tagged {
            local: tag,
            domain: d,
        } => d == domain && local.split_once('+').is_some_and(|(t, _)| t == tag),
    }
}

impl Relay {
    /// Whether every recipient is one `--relay-allow` lets through.
    fn allowed<'a>(&self, to: &'a [String]) -> Result<(), &'a str> {
        match to
            .iter()
            .find(|r| !self.allow.iter().any(|p| matches(p, r)))
        {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    /// Sends `raw` unchanged with this envelope: the relay's last reply, or its refusal.
    pub async fn send(&self, from: &str, to: &[String], raw: &[u8]) -> Result<String, String> {
        let parse = |a: &str| {
            a.parse::<Address>()
                .map_err(|e| format!("{a:?} is not an address the relay can take: {e}"))
        };
        let from = if from.is_empty() {
            None
        } else {
            Some(parse(from)?)
        };
        let to = to.iter().map(|a| parse(a)).collect::<Result<Vec<_>, _>>()?;
        let envelope = Envelope::new(from, to).map_err(|e| e.to_string())?;
        // lettre ends DATA with CRLF "." CRLF whatever the text ends with: the
        // text's own last CRLF is that first one, or the relay gets one more.
        let raw = raw.strip_suffix(b"\r\n").unwrap_or(raw);
        let sent = tokio::time::timeout(self.timeout, self.transport.send_raw(&envelope, raw))
            .await
            .map_err(|_| format!("the relay did not finish within {:?}", self.timeout))?;
        match sent {
            Ok(response) => {
                let text: Vec<&str> = response.message().collect();
                Ok(format!("{} {}", response.code(), text.join(" ")))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The JSON body of a release.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    to: Vec<String>,
}

/// Answers `POST /api/emails/:id/release`; None for other paths.
pub async fn route(
    relay: Option<&Relay>,
    shared: &dyn Messages,
    request: &Request,
) -> Option<Response> {
    let path = request.path.as_str();
    let id = match path {
        "/api/relay" | "/api/relay/" => None,
        _ => Some(
            path.strip_prefix("/api/emails/")?
                .strip_suffix("/release")?,
        ),
    };
    let method = if id.is_some() { "POST" } else { "GET" };
    if request.method != method {
        let mut response = Response::error(405, &format!("{path} answers {method} only"));
        response.headers.push(("allow", method.into()));
        return Some(response);
    }
    if request.scope != Scope::All {
        return Some(Response::error(403, "admin token required"));
    }
    let Some(relay) = relay else {
        return Some(Response::error(
            404,
            "no relay configured (--relay HOST:PORT)",
        ));
    };
    Some(match id {
        // Where releases go and which recipients they may name (the UI's form).
        None => Response::json(200, &serde_json::json!({ "relay": relay.described })),
        Some(id) => release(relay, shared, request, id).await,
    })
}

async fn release(relay: &Relay, shared: &dyn Messages, request: &Request, id: &str) -> Response {
    let body: ReleaseBody = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(e) => {
            return Response::error(400, &format!("release takes {{\"to\": [\"...\"]}}: {e}"));
        }
    };
    if body.to.is_empty() {
        return Response::error(400, "release needs at least one recipient in \"to\"");
    }
    if let Err(refused) = relay.allowed(&body.to) {
        return Response::error(
            403,
            &format!("{refused} is not a recipient --relay-allow lets through: nothing was sent"),
        );
    }
    let email = match shared.email(request, id) {
        Ok(email) => email,
        Err(e) => return e.response(),
    };
    match relay
        .send(&email.envelope.from, &body.to, email.raw())
        .await
    {
        Ok(reply) => {
            tracing::info!(%id, recipients = body.to.len(), "message released");
            Response::json(
                200,
                &serde_json::json!({ "released": true, "reply": reply }),
            )
        }
        Err(reply) => {
            tracing::warn!(%id, "release refused: {reply}");
            Response::json(
                502,
                &serde_json::json!({ "error": format!("the relay refused: {reply}"), "reply": reply }),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_match_as_inbox_addresses_do() {
        let p = |t| Pattern::parse(t).unwrap();
        assert!(matches(&p("Bob@X.test"), "bob@x.test"));
        assert!(matches(&p("*@x.test"), "anyone@X.TEST"));
        assert!(!matches(&p("*@x.test"), "a@sub.x.test"));
        assert!(matches(&p("qa+*@x.test"), "qa+1@x.test"));
        assert!(!matches(&p("qa+*@x.test"), "qa@x.test"));
        assert!(!matches(&p("*@x.test"), "no-at-sign"));
    }

    #[test]
    fn the_flags_are_checked() {
        let settings = |relay: Option<&str>, allow: &[&str]| RelaySettings {
            relay: relay.map(str::to_owned),
            relay_tls: RelayTls::Opportunistic,
            relay_auth: None,
            relay_allow: allow.iter().map(|s| s.to_string()).collect(),
            relay_ca: None,
            relay_auto: Vec::new(),
            relay_queue: 10,
            relay_timeout: Duration::from_secs(1),
        };
        assert!(settings(None, &[]).validate().is_ok());
        assert!(settings(None, &["*@x.test"]).validate().is_err());
        assert!(
            settings(Some("127.0.0.1:25"), &["*@x.test"])
                .validate()
                .is_ok()
        );
        assert!(settings(Some("127.0.0.1"), &[]).validate().is_err());
        assert!(settings(Some("h:25"), &["x*y@z"]).validate().is_err());
    }
}
