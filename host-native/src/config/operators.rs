//! The flags of the operators' features: webhooks and release, with the
//! checks that need nothing but the flags (a host that builds the clients,
//! `crate::webhooks` and `crate::release`, reads them from here).

use std::time::Duration;

use mailjar_core::api::Pattern;
use url::Url;

/// The webhook flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookSettings {
    /// POST `{"event": "stored", "email": <summary>}` to this URL (http or https) for every stored message; repeatable.
    #[arg(long = "webhook", env = "MAILJAR_WEBHOOK", value_name = "URL")]
    pub webhook: Vec<String>,
    /// Sign each webhook body: `X-Mailjar-Signature: sha256=<hex HMAC-SHA256 of the body with this key>`.
    #[arg(
        long,
        env = "MAILJAR_WEBHOOK_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub webhook_secret: Option<String>,
    /// Messages waiting for their webhooks; past it a new one is dropped (counted, logged).
    #[arg(long, env = "MAILJAR_WEBHOOK_QUEUE", default_value_t = 1000)]
    pub webhook_queue: usize,
    /// How long one webhook request may take, from connect to the response's head.
    #[arg(long, env = "MAILJAR_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub webhook_timeout: Duration,
}

impl WebhookSettings {
    /// Checks the URLs and the queue size (at start).
    pub fn validate(&self) -> Result<(), String> {
        if self.webhook_queue == 0 {
            return Err("--webhook-queue must be greater than 0".to_owned());
        }
        for url in &self.webhook {
            webhook_url(url)?;
        }
        Ok(())
    }
}

/// A `--webhook` value as a URL: `http` or `https`, with a host.
pub fn webhook_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("--webhook {text:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("--webhook {text:?}: an http:// or https:// URL"));
    }
    Ok(url)
}

/// When the relay connection uses STARTTLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RelayTls {
    /// When the relay offers it.
    Opportunistic,
    /// Always: a relay that does not offer it is an error.
    Required,
    /// Never.
    Off,
}

/// The relay flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RelaySettings {
    /// The SMTP server that POST /api/emails/:id/release sends to (HOST:PORT). Without it, release is 404.
    #[arg(long, env = "MAILJAR_RELAY", value_name = "HOST:PORT")]
    pub relay: Option<String>,
    /// STARTTLS to the relay: opportunistic (when offered), required, or off.
    #[arg(long, env = "MAILJAR_RELAY_TLS", value_enum, default_value_t = RelayTls::Opportunistic)]
    pub relay_tls: RelayTls,
    /// USER:PASS for AUTH at the relay (split at the first colon).
    #[arg(
        long,
        env = "MAILJAR_RELAY_AUTH",
        value_name = "USER:PASS",
        hide_env_values = true
    )]
    pub relay_auth: Option<String>,
    /// A recipient pattern a release may send to (`bob@x.test`, `*@x.test`, `qa+*@x.test`); repeatable. None: nothing may be released.
    #[arg(long, env = "MAILJAR_RELAY_ALLOW", value_name = "PATTERN")]
    pub relay_allow: Vec<String>,
    /// A PEM certificate to trust for the relay's TLS besides the webpki roots (a private CA, a self-signed relay).
    #[arg(long, env = "MAILJAR_RELAY_CA", value_name = "FILE")]
    pub relay_ca: Option<std::path::PathBuf>,
    /// Release every stored message with a recipient matching this pattern to those recipients, from a bounded queue with retries; repeatable.
    #[arg(long, env = "MAILJAR_RELAY_AUTO", value_name = "PATTERN")]
    pub relay_auto: Vec<String>,
    /// Messages waiting for their --relay-auto release; past it one is dropped (counted, logged).
    #[arg(long, env = "MAILJAR_RELAY_QUEUE", default_value_t = 1000)]
    pub relay_queue: usize,
    /// How long one release may take, connect to the relay's last reply.
    #[arg(long, env = "MAILJAR_RELAY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub relay_timeout: Duration,
}

impl RelaySettings {
    /// Checks the flags (at start): the address, the queue, the patterns,
    /// the credentials' form and the CA file (the transport is built by
    /// `crate::release`).
    pub fn validate(&self) -> Result<(), String> {
        if self.relay.is_none() {
            if !self.relay_allow.is_empty()
                || self.relay_auth.is_some()
                || !self.relay_auto.is_empty()
            {
                return Err(
                    "--relay-allow, --relay-auth and --relay-auto need --relay HOST:PORT"
                        .to_owned(),
                );
            }
            return Ok(());
        }
        self.host_port()?;
        if self.relay_queue == 0 {
            return Err("--relay-queue must be greater than 0".to_owned());
        }
        for pattern in &self.relay_auto {
            Pattern::parse(pattern).map_err(|e| format!("--relay-auto: {e}"))?;
        }
        self.allowed()?;
        if self
            .relay_auth
            .as_ref()
            .is_some_and(|auth| !auth.contains(':'))
        {
            return Err("--relay-auth: USER:PASS".to_owned());
        }
        if let Some(path) = &self.relay_ca {
            std::fs::metadata(path).map_err(|e| format!("--relay-ca {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// `--relay` as its host and port; an error naming it when it is not `HOST:PORT`.
    pub fn host_port(&self) -> Result<Option<(&str, u16)>, String> {
        let Some(address) = &self.relay else {
            return Ok(None);
        };
        address
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
            .filter(|(h, _)| !h.is_empty())
            .map(Some)
            .ok_or_else(|| format!("--relay {address:?}: HOST:PORT"))
    }

    /// The `--relay-allow` patterns.
    pub fn allowed(&self) -> Result<Vec<Pattern>, String> {
        self.relay_allow
            .iter()
            .map(|p| Pattern::parse(p).map_err(|e| format!("--relay-allow: {e}")))
            .collect()
    }
}
