//! The command line: every flag also reads a `MAILJAR_*` environment variable.

use std::net::IpAddr;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use mailjar_core::smtp::{Credentials, Security};

use crate::tls::TlsOptions;

mod operators;
pub use operators::{RelaySettings, RelayTls, WebhookSettings, webhook_url};

/// Browser sessions kept at once by default (`--max-sessions`).
pub const DEFAULT_MAX_SESSIONS: usize = 1000;

/// Capture email from applications under test and read it back over a JSON HTTP API.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "mailjar",
    version,
    about,
    after_help = "Commands:\n  health  exit 0 when the /health of the mailjar at --http-host/--http-port answers 200 (see `mailjar health --help`)"
)]
pub struct Settings {
    /// Address the SMTP listener binds to. Loopback unless you ask otherwise.
    #[arg(long, env = "MAILJAR_SMTP_HOST", default_value = "127.0.0.1")]
    pub smtp_host: IpAddr,
    /// SMTP port; 0 picks a free one (see /health).
    #[arg(long, env = "MAILJAR_SMTP_PORT", default_value_t = 1025)]
    pub smtp_port: u16,
    /// Address the HTTP API binds to. Loopback unless you ask otherwise.
    #[arg(long, env = "MAILJAR_HTTP_HOST", default_value = "127.0.0.1")]
    pub http_host: IpAddr,
    /// HTTP API port; 0 picks a free one (see /health).
    #[arg(long, env = "MAILJAR_HTTP_PORT", default_value_t = 8025)]
    pub http_port: u16,
    /// The recipient domain reported by /health and used as the SMTP host name.
    #[arg(long, env = "MAILJAR_DOMAIN", default_value = "local.test")]
    pub domain: String,
    /// Largest message accepted over SMTP (552 above it).
    #[arg(long, env = "MAILJAR_MAX_MESSAGE_BYTES", default_value = "25MiB", value_parser = parse_bytes)]
    pub max_message_bytes: usize,
    /// Most recipients per message (452 above it).
    #[arg(long, env = "MAILJAR_MAX_RECIPIENTS", default_value_t = 1000)]
    pub max_recipients: usize,
    /// Longest SMTP command line in bytes (500 above it).
    #[arg(long, env = "MAILJAR_MAX_LINE_BYTES", default_value_t = 4096)]
    pub max_line_bytes: usize,
    /// Bad SMTP commands in a row before the connection is closed with 421.
    #[arg(long, env = "MAILJAR_MAX_ERRORS", default_value_t = 20)]
    pub max_errors: usize,
    /// Idle time after which an SMTP connection is closed with 421.
    #[arg(long, env = "MAILJAR_IDLE_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// How long one SMTP command line may take to arrive, from its first byte (421 after).
    #[arg(long, env = "MAILJAR_SMTP_COMMAND_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub smtp_command_timeout: Duration,
    /// How long one message's text may take to arrive, from the 354 or the first BDAT (421 after).
    #[arg(long, env = "MAILJAR_SMTP_DATA_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub smtp_data_timeout: Duration,
    /// Most bytes of message text and envelopes being received over all SMTP connections (452 4.3.1 past it).
    #[arg(long, env = "MAILJAR_MAX_INFLIGHT_BYTES", default_value = "256MiB", value_parser = parse_bytes)]
    pub max_inflight_bytes: usize,
    /// How long an HTTP client may take to send a request head once it has started (408 after).
    #[arg(long, env = "MAILJAR_HTTP_HEAD_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http_head_timeout: Duration,
    /// How long an HTTP client may take to send a request body once its head has arrived (408 after, and the connection closes).
    #[arg(long, env = "MAILJAR_HTTP_BODY_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http_body_timeout: Duration,
    /// Most HTTP connections open at once (above it a new one takes the slot of a kept-alive connection idle for 100 ms or more, else it is answered 503 and closed).
    #[arg(long, env = "MAILJAR_MAX_HTTP_CONNECTIONS", default_value_t = 1000)]
    pub max_http_connections: usize,
    /// Most SMTP connections open at once (421 at accept above it).
    #[arg(long, env = "MAILJAR_MAX_CONNECTIONS", default_value_t = 1000)]
    pub max_connections: usize,
    /// Most messages kept; the oldest are evicted first.
    #[arg(long, env = "MAILJAR_MAX_MESSAGES", default_value_t = 100_000)]
    pub max_messages: usize,
    /// Most bytes kept (raw messages plus parsed text); the oldest are evicted first.
    #[arg(long, env = "MAILJAR_MAX_STORE_BYTES", default_value = "512MiB", value_parser = parse_bytes)]
    pub max_store_bytes: usize,
    /// Most HTTP waits parked at once; past it a new wait gets 503 "too many waits".
    #[arg(long, env = "MAILJAR_MAX_WAITS", default_value_t = mailjar_core::api::DEFAULT_MAX_WAITS)]
    pub max_waits: usize,
    /// Most event streams (GET /api/events) open at once, and never more than half of --max-http-connections (the rest is kept for the API and the UI); past it a new one gets 503 "too many subscribers".
    #[arg(long, env = "MAILJAR_MAX_SUBSCRIBERS", default_value_t = mailjar_core::api::DEFAULT_MAX_SUBSCRIBERS)]
    pub max_subscribers: usize,
    /// How far an event stream may fall behind, in message ids, before it gets `overflow` and is closed (at least 1000).
    #[arg(long, env = "MAILJAR_EVENT_BUFFER", default_value_t = mailjar_core::api::DEFAULT_EVENT_BUFFER)]
    pub event_buffer: usize,
    /// The most matching time one request's subjectPattern may cost over its life (400 "subjectPattern too expensive" after).
    #[arg(long, env = "MAILJAR_PATTERN_BUDGET", default_value = "250ms", value_parser = humantime::parse_duration)]
    pub pattern_budget: Duration,
    /// Most fault rules (POST /api/faults) held at once; past it a new one gets 503.
    #[arg(long, env = "MAILJAR_MAX_FAULTS", default_value_t = mailjar_core::api::DEFAULT_MAX_FAULTS)]
    pub max_faults: usize,
    /// How long a shutdown waits for messages in flight.
    #[arg(long, env = "MAILJAR_SHUTDOWN_GRACE", default_value = "1500ms", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Origins allowed to call the API from a browser (CORS), e.g. http://localhost:3000; repeat or comma-separate; `*` allows any. None by default.
    #[arg(
        long = "cors-origin",
        env = "MAILJAR_CORS_ORIGIN",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Extra Host names the API answers while it listens on loopback (localhost and loopback IPs always work); repeat or comma-separate.
    #[arg(
        long = "allowed-host",
        env = "MAILJAR_ALLOWED_HOST",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Do not serve the web UI at `/` (its paths are then 404 like any unknown path).
    #[arg(long, env = "MAILJAR_NO_UI")]
    pub no_ui: bool,
    /// PEM certificate chain for STARTTLS and --smtps-port (with --tls-key).
    #[arg(long, env = "MAILJAR_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "MAILJAR_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Make a self-signed certificate at start (for localhost, 127.0.0.1, ::1 and --domain) and turn TLS on.
    #[arg(long, env = "MAILJAR_TLS_SELF_SIGNED")]
    pub tls_self_signed: bool,
    /// Write the certificate in use (PEM) to FILE before the listeners accept, for clients to trust.
    #[arg(long, env = "MAILJAR_TLS_CERT_OUT", value_name = "FILE")]
    pub tls_cert_out: Option<std::path::PathBuf>,
    /// Serve the HTTP API and the web UI over TLS (HTTPS) with the certificate of --tls-cert/--tls-key or --tls-self-signed; session cookies are then `Secure`.
    #[arg(long, env = "MAILJAR_HTTP_TLS")]
    pub http_tls: bool,
    /// Port of an implicit-TLS SMTP listener (SMTPS, on --smtp-host; 0 picks a free one); needs TLS configured.
    #[arg(long, env = "MAILJAR_SMTPS_PORT")]
    pub smtps_port: Option<u16>,
    /// Port of a POP3 listener (on --smtp-host; 0 picks a free one; off by default): read captured mail with any mail client.
    #[arg(long, env = "MAILJAR_POP3_PORT")]
    pub pop3_port: Option<u16>,
    /// Port of an implicit-TLS POP3 listener (POP3S, on --smtp-host; 0 picks a free one); needs TLS configured.
    #[arg(long, env = "MAILJAR_POP3S_PORT")]
    pub pop3s_port: Option<u16>,
    /// Port of an IMAP listener (on --smtp-host; 0 picks a free one; off by default): read captured mail with any mail client, IDLE included.
    #[arg(long, env = "MAILJAR_IMAP_PORT")]
    pub imap_port: Option<u16>,
    /// Port of an implicit-TLS IMAP listener (IMAPS, on --smtp-host; 0 picks a free one); needs TLS configured.
    #[arg(long, env = "MAILJAR_IMAPS_PORT")]
    pub imaps_port: Option<u16>,
    /// Largest IMAP command, literals included (a bigger literal is refused before it is sent).
    #[arg(long, env = "MAILJAR_IMAP_MAX_COMMAND_BYTES", default_value = "64KiB", value_parser = parse_bytes)]
    pub imap_max_command_bytes: usize,
    /// Idle time after which an IMAP connection is closed (IDLE included: clients renew it within 29 minutes).
    #[arg(long, env = "MAILJAR_IMAP_IDLE_TIMEOUT", default_value = "30m", value_parser = humantime::parse_duration)]
    pub imap_idle_timeout: Duration,
    /// Answer MAIL before STARTTLS with 530 5.7.0; needs TLS configured.
    #[arg(long, env = "MAILJAR_REQUIRE_TLS")]
    pub require_tls: bool,
    /// How long a TLS handshake may take (STARTTLS or SMTPS); then the connection is closed.
    #[arg(long, env = "MAILJAR_TLS_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_handshake_timeout: Duration,
    /// USER:PASS that AUTH accepts (535 5.7.8 otherwise); repeatable, split at the first colon. None: any credentials.
    #[arg(long = "auth", env = "MAILJAR_AUTH", value_name = "USER:PASS")]
    pub auth: Vec<String>,
    /// Answer MAIL without a successful AUTH with 530 5.7.0.
    #[arg(long, env = "MAILJAR_REQUIRE_AUTH")]
    pub require_auth: bool,
    /// Keep every message in DIR/mailjar.db (SQLite) so it survives a restart or a crash; memory only without it.
    #[arg(long, env = "MAILJAR_DATA_DIR")]
    pub data_dir: Option<std::path::PathBuf>,
    /// Share the messages with every mailjar given the same PostgreSQL database (postgres:// or postgresql:// URL; no TLS to the database yet): one service over several nodes. Exclusive with --data-dir.
    #[arg(long, env = "MAILJAR_DATABASE_URL", value_name = "URL")]
    pub database: Option<String>,
    /// With --data-dir: every transaction syncs the disk (SQLite synchronous=FULL) before its 250s, so acknowledged mail survives a power cut too, not only a crash.
    #[arg(long, env = "MAILJAR_FSYNC")]
    pub fsync: bool,
    /// Evict messages this old (24h, 90m, 2s), from memory and disk; off by default.
    #[arg(long, env = "MAILJAR_MAX_AGE", value_parser = humantime::parse_duration)]
    pub max_age: Option<Duration>,
    /// Turn access control on: every HTTP request but /health, /api/openapi.json and the UI's files needs `Authorization: Bearer` with this token (at least 16 characters) or an inbox's token; inboxes can then be made (POST /api/inboxes).
    #[arg(
        long,
        env = "MAILJAR_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// Most browser sessions (POST /api/session) open at once; past it a new one ends the oldest.
    #[arg(long, env = "MAILJAR_MAX_SESSIONS", default_value_t = DEFAULT_MAX_SESSIONS)]
    pub max_sessions: usize,
    /// What becomes of mail no inbox's addresses match: `admin` keeps it for the admin token only, `reject` answers its RCPT with 550 5.1.1 (unless the session authenticated as an inbox).
    #[arg(long, env = "MAILJAR_UNROUTED", value_enum, default_value_t = Unrouted::Admin)]
    pub unrouted: Unrouted,
    /// A load balancer's address or CIDR (repeatable): SMTP connections from it must start with a PROXY v1 or v2 header, whose client address becomes `smtp.remoteAddr`; connections from elsewhere, and malformed or late headers (--smtp-command-timeout), are closed without a greeting.
    #[arg(
        long = "proxy-protocol",
        env = "MAILJAR_PROXY_PROTOCOL",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub proxy_protocol: Vec<String>,
    /// Print one JSON line on stdout once both listeners are bound: {"smtp": "127.0.0.1:PORT", "http": "http://127.0.0.1:PORT"}, plus "smtps", "pop3", "pop3s", "imap" and "imaps" with their flags.
    #[arg(long)]
    pub ready_json: bool,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long, env = "MAILJAR_LOG", default_value = "info")]
    pub log: String,
    /// The checks' flags (below).
    #[command(flatten)]
    pub checks: CheckSettings,
    /// The webhooks' flags (`--webhook` and the rest).
    #[command(flatten)]
    pub webhooks: WebhookSettings,
    /// The relay's flags (`--relay` and the rest).
    #[command(flatten)]
    pub relay: RelaySettings,
}

/// What becomes of mail that no inbox's addresses match (`--unrouted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Unrouted {
    /// Kept, for the admin token only.
    Admin,
    /// Its RCPT is answered 550 5.1.1.
    Reject,
}

/// Parses `1048576`, `512KiB`, `25MiB`, `1GB` and the like.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("{text:?} is not a size such as 25MiB: {e}"))?;
    usize::try_from(size.as_u64()).map_err(|_| format!("{text:?} is too large"))
}

impl Settings {
    /// The settings from the command line and the `MAILJAR_*` environment,
    /// where an empty variable counts as unset (`MAILJAR_DATA_DIR=` in a
    /// compose file means memory only, not "a value is required"). Exits with
    /// clap's message and status 2 on a bad command line, as `parse` does.
    pub fn from_command_line() -> Settings {
        let empty = |name: &std::ffi::OsStr| std::env::var_os(name).is_some_and(|v| v.is_empty());
        let command = Settings::command().mut_args(|arg| {
            if arg.get_env().is_some_and(empty) {
                arg.env(None)
            } else {
                arg
            }
        });
        Settings::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
    }

    /// How many event streams may be open at once: `--max-subscribers`, and
    /// never more than half of `--max-http-connections`. A stream holds its
    /// connection for as long as its client listens and is never reclaimed
    /// like an idle one, so the other half is kept for `/health`, DELETE and the UI.
    pub fn stream_slots(&self) -> usize {
        self.max_subscribers.min(self.max_http_connections / 2)
    }

    /// The HTTP connections event streams can never take.
    pub fn reserved_http_connections(&self) -> usize {
        self.max_http_connections - self.stream_slots()
    }

    /// Checks what clap cannot: limits that must be positive and consistent.
    pub fn validate(&self) -> Result<(), String> {
        self.proxy_protocol()?;
        let positive = [
            ("--max-message-bytes", self.max_message_bytes),
            ("--max-recipients", self.max_recipients),
            ("--max-line-bytes", self.max_line_bytes),
            ("--max-errors", self.max_errors),
            ("--max-connections", self.max_connections),
            ("--max-http-connections", self.max_http_connections),
            ("--max-messages", self.max_messages),
            ("--max-store-bytes", self.max_store_bytes),
            ("--max-waits", self.max_waits),
            ("--max-subscribers", self.max_subscribers),
            ("--max-inflight-bytes", self.max_inflight_bytes),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be greater than 0"));
        }
        if self.event_buffer < mailjar_core::api::MIN_EVENT_BUFFER {
            return Err(format!(
                "--event-buffer must be at least {}: one deleted event lists up to that many ids",
                mailjar_core::api::MIN_EVENT_BUFFER
            ));
        }
        if self.max_line_bytes < 512 {
            return Err("--max-line-bytes must be at least 512 (RFC 5321)".to_owned());
        }
        if !(1024..=u32::MAX as usize).contains(&self.imap_max_command_bytes) {
            return Err("--imap-max-command-bytes must be between 1KiB and 4GiB".to_owned());
        }
        if self.imap_idle_timeout.is_zero() {
            return Err("--imap-idle-timeout must be greater than 0".to_owned());
        }
        if self.max_message_bytes > self.max_store_bytes {
            return Err(format!(
                "--max-message-bytes ({}) must not exceed --max-store-bytes ({}): an accepted message must fit in the store",
                self.max_message_bytes, self.max_store_bytes
            ));
        }
        if self.max_message_bytes > self.max_inflight_bytes {
            return Err(format!(
                "--max-message-bytes ({}) must not exceed --max-inflight-bytes ({}): a message that big could never be received",
                self.max_message_bytes, self.max_inflight_bytes
            ));
        }
        if self.smtp_command_timeout.is_zero() {
            return Err("--smtp-command-timeout must be greater than 0".to_owned());
        }
        if self.smtp_data_timeout.is_zero() {
            return Err("--smtp-data-timeout must be greater than 0".to_owned());
        }
        if self.idle_timeout.is_zero() {
            return Err("--idle-timeout must be greater than 0".to_owned());
        }
        if self.pattern_budget.is_zero() {
            return Err("--pattern-budget must be greater than 0".to_owned());
        }
        if self.http_head_timeout.is_zero() {
            return Err("--http-head-timeout must be greater than 0".to_owned());
        }
        if self.http_body_timeout.is_zero() {
            return Err("--http-body-timeout must be greater than 0".to_owned());
        }
        self.validate_tls()?;
        if self.max_age.is_some_and(|d| d.as_millis() == 0) {
            return Err("--max-age must be at least 1ms".to_owned());
        }
        self.validate_access()?;
        if let Some(url) = &self.database {
            if self.data_dir.is_some() {
                return Err("--database and --data-dir are exclusive: keep the messages in PostgreSQL (--database) or in a local SQLite file (--data-dir), not both".to_owned());
            }
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err("--database takes a postgres:// or postgresql:// URL".to_owned());
            }
        }
        if self.fsync && self.data_dir.is_none() {
            return Err("--fsync needs --data-dir".to_owned());
        }
        self.webhooks.validate()?;
        self.relay.validate()?;
        Ok(())
    }
}

/// The access-control flags.
impl Settings {
    /// Checks `--admin-token`, `--max-sessions` and `--unrouted` (part of [`Settings::validate`]).
    fn validate_access(&self) -> Result<(), String> {
        let min = mailjar_core::api::MIN_ADMIN_TOKEN_CHARS;
        if let Some(token) = &self.admin_token
            && (token.chars().count() < min || token.trim() != token)
        {
            return Err(format!(
                "--admin-token must be at least {min} characters, without spaces at either end (e.g. `openssl rand -base64 24`)"
            ));
        }
        if self.max_sessions == 0 {
            return Err("--max-sessions must be greater than 0".to_owned());
        }
        if self.unrouted == Unrouted::Reject && self.admin_token.is_none() {
            return Err(
                "--unrouted reject needs --admin-token (inboxes exist only with access control)"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// Whether anyone who reaches the HTTP port reads every message: a
    /// non-loopback `--http-host` without `--admin-token`.
    pub fn open_to_the_network(&self) -> bool {
        self.admin_token.is_none() && !self.http_host.is_loopback()
    }
}

/// The TLS and AUTH flags.
impl Settings {
    /// What `--proxy-protocol` says: `None` without it.
    pub fn proxy_protocol(&self) -> Result<Option<crate::proxy_protocol::ProxyProtocol>, String> {
        crate::proxy_protocol::ProxyProtocol::new(&self.proxy_protocol, self.smtp_command_timeout)
    }

    /// What the TLS flags say, for [`crate::tls::load`].
    pub fn tls_options(&self) -> TlsOptions {
        TlsOptions {
            self_signed: self.tls_self_signed,
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            cert_out: self.tls_cert_out.clone(),
            domain: self.domain.clone(),
            handshake_timeout: self.tls_handshake_timeout,
        }
    }

    /// What the SMTP sessions offer and demand (STARTTLS, `--require-tls`, `--auth`, `--require-auth`).
    pub fn security(&self) -> Security {
        Security {
            starttls: self.tls_options().enabled(),
            require_tls: self.require_tls,
            require_auth: self.require_auth,
            // Checked by validate() before the server is built.
            credentials: Credentials::parse(&self.auth).unwrap_or_default(),
        }
    }

    /// Checks the TLS and AUTH flags together (part of [`Settings::validate`]).
    fn validate_tls(&self) -> Result<(), String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => return Err("--tls-cert needs --tls-key".to_owned()),
            (None, Some(_)) => return Err("--tls-key needs --tls-cert".to_owned()),
            _ => {}
        }
        if self.tls_self_signed && self.tls_cert.is_some() {
            return Err("--tls-self-signed and --tls-cert exclude each other".to_owned());
        }
        if !self.tls_options().enabled() {
            for (flag, set) in [
                ("--require-tls", self.require_tls),
                ("--smtps-port", self.smtps_port.is_some()),
                ("--pop3s-port", self.pop3s_port.is_some()),
                ("--imaps-port", self.imaps_port.is_some()),
                ("--tls-cert-out", self.tls_cert_out.is_some()),
                ("--http-tls", self.http_tls),
            ] {
                if set {
                    return Err(format!(
                        "{flag} needs TLS configured: add --tls-self-signed or --tls-cert FILE --tls-key FILE"
                    ));
                }
            }
        }
        if self.tls_handshake_timeout.is_zero() {
            return Err("--tls-handshake-timeout must be greater than 0".to_owned());
        }
        Credentials::parse(&self.auth)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let s = Settings::parse_from(["mailjar"]);
        assert_eq!(s.smtp_port, 1025);
        assert_eq!(s.http_port, 8025);
        assert!(s.smtp_host.is_loopback() && s.http_host.is_loopback());
        assert_eq!(s.max_message_bytes, 25 * 1024 * 1024);
        assert_eq!(s.max_store_bytes, 512 * 1024 * 1024);
        assert_eq!(s.idle_timeout, Duration::from_secs(300));
        assert_eq!(s.smtp_command_timeout, Duration::from_secs(60));
        assert_eq!(s.smtp_data_timeout, Duration::from_secs(600));
        assert_eq!(s.max_inflight_bytes, 256 * 1024 * 1024);
        assert_eq!(s.http_body_timeout, Duration::from_secs(10));
        assert_eq!(s.max_http_connections, 1000);
        assert_eq!(s.max_subscribers, 500);
        assert_eq!(
            (s.stream_slots(), s.reserved_http_connections()),
            (500, 500)
        );
        assert_eq!(s.event_buffer, 100_000);
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn sizes_and_limits_are_checked() {
        let s = Settings::parse_from([
            "mailjar",
            "--max-store-bytes",
            "256MiB",
            "--max-message-bytes",
            "1000",
        ]);
        assert_eq!(s.max_store_bytes, 256 * 1024 * 1024);
        assert_eq!(s.max_message_bytes, 1000);
        let s = Settings::parse_from(["mailjar", "--max-store-bytes", "1MiB"]);
        assert!(s.validate().unwrap_err().contains("--max-message-bytes"));
        assert!(Settings::try_parse_from(["mailjar", "--max-store-bytes", "lots"]).is_err());
        let s = Settings::parse_from(["mailjar", "--max-inflight-bytes", "16MiB"]);
        assert!(s.validate().unwrap_err().contains("--max-inflight-bytes"));
        let s = Settings::parse_from(["mailjar", "--smtp-command-timeout", "0s"]);
        assert!(s.validate().unwrap_err().contains("--smtp-command-timeout"));
        let s = Settings::parse_from(["mailjar", "--smtp-data-timeout", "0s"]);
        assert!(s.validate().unwrap_err().contains("--smtp-data-timeout"));
        let s = Settings::parse_from(["mailjar", "--max-http-connections", "0"]);
        assert!(s.validate().unwrap_err().contains("--max-http-connections"));
        let s = Settings::parse_from(["mailjar", "--http-body-timeout", "0s"]);
        assert!(s.validate().unwrap_err().contains("--http-body-timeout"));
        let s = Settings::parse_from(["mailjar", "--event-buffer", "999"]);
        assert!(s.validate().unwrap_err().contains("--event-buffer"));
        let s = Settings::parse_from(["mailjar", "--max-subscribers", "0"]);
        assert!(s.validate().unwrap_err().contains("--max-subscribers"));
        // Streams never take more than half the HTTP connections.
        let s = Settings::parse_from(["mailjar", "--max-http-connections", "40"]);
        assert_eq!((s.stream_slots(), s.reserved_http_connections()), (20, 20));
        let s = Settings::parse_from(["mailjar", "--max-subscribers", "5"]);
        assert_eq!((s.stream_slots(), s.reserved_http_connections()), (5, 995));
        let s = Settings::parse_from(["mailjar", "--max-age", "0s"]);
        assert!(s.validate().unwrap_err().contains("--max-age"));
        let s = Settings::parse_from(["mailjar", "--max-age", "24h"]);
        assert_eq!(s.max_age, Some(Duration::from_secs(86_400)));
        let s = Settings::parse_from(["mailjar", "--fsync"]);
        assert!(s.validate().unwrap_err().contains("--data-dir"));
        let s = Settings::parse_from(["mailjar", "--http-body-timeout", "2s"]);
        assert_eq!(s.http_body_timeout, Duration::from_secs(2));
    }

    #[test]
    fn access_flags_are_checked() {
        let s = Settings::parse_from(["mailjar", "--admin-token", "short"]);
        assert!(s.validate().unwrap_err().contains("--admin-token"));
        let s = Settings::parse_from(["mailjar", "--admin-token", "0123456789abcdef"]);
        assert_eq!(s.validate(), Ok(()));
        assert!(!s.open_to_the_network());
        let s = Settings::parse_from(["mailjar", "--unrouted", "reject"]);
        assert!(s.validate().unwrap_err().contains("--admin-token"));
        let s = Settings::parse_from(["mailjar", "--http-host", "0.0.0.0"]);
        assert!(s.open_to_the_network());
        assert!(!Settings::parse_from(["mailjar"]).open_to_the_network());
    }
}

/// The flags of the checks a tester runs on a message (`/api/emails/:id/checks/...`).
#[derive(Debug, Clone, clap::Args)]
pub struct CheckSettings {
    /// Let the link check fetch loopback, private, link-local and this server's own addresses (refused by default: a hostile message's links would make mailjar reach inside the network).
    #[arg(long, env = "MAILJAR_LINK_CHECK_ALLOW_PRIVATE")]
    pub link_check_allow_private: bool,
    /// How long the link check spends on one link, all its redirects together.
    #[arg(long, env = "MAILJAR_LINK_CHECK_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub link_check_timeout: Duration,
    /// Most links the link check fetches for one message (the rest are counted as skipped).
    #[arg(long, env = "MAILJAR_LINK_CHECK_MAX_LINKS", default_value_t = 50)]
    pub link_check_max_links: usize,
    /// SpamAssassin's spamd (HOST:PORT) for the spam check; without it the check answers 404.
    #[arg(long, env = "MAILJAR_SPAMASSASSIN")]
    pub spamassassin: Option<String>,
    /// DNS server (IP:PORT) for the authentication and link checks; default: the system's resolver.
    #[arg(long, env = "MAILJAR_DNS")]
    pub dns: Option<std::net::SocketAddr>,
}
