//! The options of `new Session(config)` and `new Api(config)`: serde types
//! (their TypeScript declarations are generated from them, `src/types.rs`),
//! read by `src/read.rs` (a wrong type or an unknown key is a `TypeError`),
//! then checked here (a value out of range is a `RangeError`).

use mailjar_core::api::{self, Address};
use mailjar_core::smtp;
use mailjar_core::store::StoreLimits;
use serde::Deserialize;
use wasm_bindgen::JsValue;

use crate::js::{count, range_error, whole_number};
use crate::read::{Number, Strings};

/// Limits and names of an SMTP session; every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[cfg_attr(test, derive(ts_rs::TS), ts(optional_fields))]
pub struct SessionConfig {
    /// The name the server gives itself in the greeting and the EHLO reply (default "mailjar").
    hostname: Option<String>,
    /// The largest message accepted, in bytes (552 above it; default 25 MiB).
    max_message_bytes: Option<Number>,
    /// The most recipients per message (452 above it; default 1000).
    max_recipients: Option<Number>,
    /// The longest command line in bytes, without CRLF (500 above it; default 4096).
    max_line_bytes: Option<Number>,
    /// Bad commands in a row before 421 and close (default 20).
    max_errors: Option<Number>,
    /// The host can upgrade: EHLO advertises STARTTLS and STARTTLS answers 220 (default false: 454).
    starttls: Option<bool>,
    /// MAIL before TLS is 530 5.7.0 (default false).
    require_tls: Option<bool>,
    /// MAIL before a successful AUTH is 530 5.7.0 (default false).
    require_auth: Option<bool>,
    /// "USER:PASS" pairs AUTH checks (535 5.7.8 on a mismatch; split at the first colon); none accepts any credentials.
    auth: Option<Strings>,
}

impl SessionConfig {
    /// The core's session config, or a `RangeError` naming the value out of range.
    pub fn into_core(self) -> Result<smtp::Config, JsValue> {
        let mut c = smtp::Config::default();
        if let Some(hostname) = self.hostname {
            if hostname.is_empty() || hostname.contains(|ch: char| ch.is_control()) {
                return Err(range_error(
                    "config.hostname must be a non-empty name without control characters",
                ));
            }
            c.hostname = hostname;
        }
        let limits = [
            (
                "config.maxMessageBytes",
                self.max_message_bytes,
                &mut c.max_message_bytes,
            ),
            (
                "config.maxRecipients",
                self.max_recipients,
                &mut c.max_recipients,
            ),
            (
                "config.maxLineBytes",
                self.max_line_bytes,
                &mut c.max_line_bytes,
            ),
            ("config.maxErrors", self.max_errors, &mut c.max_errors),
        ];
        for (name, value, slot) in limits {
            if let Some(Number(n)) = value {
                *slot = count(n, name, 1)?;
            }
        }
        c.security = smtp::Security {
            starttls: self.starttls.unwrap_or(false),
            require_tls: self.require_tls.unwrap_or(false),
            require_auth: self.require_auth.unwrap_or(false),
            ..smtp::Security::default()
        };
        if let Some(Strings(pairs)) = self.auth {
            c.security.credentials = smtp::Credentials::parse(&pairs).map_err(range_error)?;
        }
        Ok(c)
    }
}

/// What the API reports about the server it runs in; every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[cfg_attr(test, derive(ts_rs::TS), ts(optional_fields))]
pub struct ApiConfig {
    /// The recipient domain (default "local.test").
    domain: Option<String>,
    /// The HTTP host /health reports (default "127.0.0.1").
    api_host: Option<String>,
    /// The HTTP port /health reports (default 8025).
    api_port: Option<Number>,
    /// The SMTP host /health reports (default "127.0.0.1").
    smtp_host: Option<String>,
    /// The SMTP port /health reports (default 1025).
    smtp_port: Option<Number>,
    /// The most messages kept; the oldest are evicted first (default 100000).
    max_messages: Option<Number>,
    /// The most bytes kept (default 512 MiB).
    max_store_bytes: Option<Number>,
    /// The message size limit /health reports (default 25 MiB).
    max_message_bytes: Option<Number>,
    /// The recipient limit /health reports (default 1000).
    max_recipients: Option<Number>,
    /// The most fault rules held at once (default 1000).
    max_faults: Option<Number>,
    /// Seeds the fault rules' probability rolls, for repeatable runs (default: Math.random()).
    fault_seed: Option<Number>,
}

impl ApiConfig {
    /// The core's API config and the fault seed, or a `RangeError` naming the value out of range.
    pub fn into_core(self) -> Result<(api::ApiConfig, Option<u64>), JsValue> {
        let mut c = api::ApiConfig::default();
        if let Some(domain) = self.domain {
            c.domain = domain;
        }
        address(&mut c.api, self.api_host, self.api_port, "config.apiPort")?;
        address(
            &mut c.smtp,
            self.smtp_host,
            self.smtp_port,
            "config.smtpPort",
        )?;
        let mut store = StoreLimits::default();
        let counts = [
            (
                "config.maxMessages",
                self.max_messages,
                &mut store.max_messages,
                1,
            ),
            (
                "config.maxStoreBytes",
                self.max_store_bytes,
                &mut store.max_bytes,
                1,
            ),
            (
                "config.maxMessageBytes",
                self.max_message_bytes,
                &mut c.max_message_bytes,
                1,
            ),
            (
                "config.maxRecipients",
                self.max_recipients,
                &mut c.max_recipients,
                1,
            ),
            ("config.maxFaults", self.max_faults, &mut c.max_faults, 0),
        ];
        for (name, value, slot, min) in counts {
            if let Some(Number(n)) = value {
                *slot = count(n, name, min)?;
            }
        }
        c.store = store;
        let seed = self
            .fault_seed
            .map(|Number(n)| whole_number(n, "config.faultSeed", 0, 1 << 53))
            .transpose()?;
        Ok((c, seed))
    }
}

/// Sets the host and port /health reports for one listener.
fn address(
    address: &mut Address,
    host: Option<String>,
    port: Option<Number>,
    port_name: &str,
) -> Result<(), JsValue> {
    if let Some(host) = host {
        address.host = host;
    }
    if let Some(Number(port)) = port {
        address.port = whole_number(port, port_name, 0, 65535)? as u16;
    }
    Ok(())
}
