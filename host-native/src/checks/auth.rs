//! `GET /api/emails/:id/checks/auth`: DKIM signatures verified, SPF and DMARC
//! evaluated for the envelope sender and the connecting address, with
//! `mail-auth` (Stalwart's implementation of RFC 6376, 7208 and 7489, used
//! by its mail server and checked against the RFCs' test suites: the one
//! well-kept Rust crate that does all three). DNS goes through its hickory
//! resolver: `--dns HOST:PORT`, else the system's resolver configuration.
//! Result words are RFC 8601's.

use std::net::{IpAddr, SocketAddr};

use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{AuthenticatedMessage, DkimResult, DmarcResult, MessageAuthenticator, SpfResult};
use serde::Serialize;

/// The answer of the authentication check.
#[derive(Debug, Serialize)]
pub struct AuthReport {
    /// One entry per DKIM-Signature field.
    pub dkim: Vec<Dkim>,
    /// SPF for the envelope sender (the HELO name for a null sender) and the connecting address.
    pub spf: Verdict,
    /// DMARC for the From domain.
    pub dmarc: Dmarc,
}

/// One DKIM signature's verification.
#[derive(Debug, Serialize)]
pub struct Dkim {
    /// Its `d=`.
    pub domain: String,
    /// Its `s=`.
    pub selector: String,
    /// `pass`, `fail`, `neutral`, `temperror`, `permerror` or `none`.
    pub result: &'static str,
    /// Why, when it did not pass.
    pub reason: Option<String>,
}

/// An SPF result.
#[derive(Debug, Serialize)]
pub struct Verdict {
    /// `pass`, `fail`, `softfail`, `neutral`, `temperror`, `permerror` or `none`.
    pub result: &'static str,
    /// The domain evaluated.
    pub domain: String,
    /// Why it could not be evaluated, if so.
    pub reason: Option<String>,
}

/// A DMARC result.
#[derive(Debug, Serialize)]
pub struct Dmarc {
    /// `pass`, `fail`, `temperror`, `permerror` or `none`.
    pub result: &'static str,
    /// The domain's policy: `none`, `quarantine` or `reject`.
    pub policy: String,
    /// The From domain.
    pub domain: String,
}

/// What the message's SMTP session said of it.
pub struct Session<'a> {
    /// MAIL FROM ("" for the null sender).
    pub mail_from: &'a str,
    /// HELO/EHLO name, if any.
    pub helo: Option<&'a str>,
    /// The client's address, `ip:port`, if known.
    pub remote_addr: Option<&'a str>,
    /// This server's name (SPF's `%{r}`).
    pub host_domain: &'a str,
}

/// Checks `raw`; `Err` when the message has no header block to read.
pub async fn check(
    authenticator: &MessageAuthenticator,
    raw: &[u8],
    session: &Session<'_>,
) -> Result<AuthReport, String> {
    let message = AuthenticatedMessage::parse(raw).ok_or("the message has no header block")?;
    let dkim_output = authenticator.verify_dkim(&message).await;
    let dkim = dkim_output
        .iter()
        .map(|output| {
            let signature = output.signature();
            let (result, reason) = dkim_words(output.result());
            Dkim {
                domain: signature.map(|s| s.d.clone()).unwrap_or_default(),
                selector: signature.map(|s| s.s.clone()).unwrap_or_default(),
                result,
                reason,
            }
        })
        .collect();
    let ip = session.remote_addr.and_then(|a| {
        a.parse::<SocketAddr>()
            .map(|s| s.ip())
            .ok()
            .or_else(|| a.parse::<IpAddr>().ok())
    });
    let helo = session.helo.unwrap_or("");
    let mail_from_domain = match session.mail_from.rsplit_once('@') {
        Some((_, domain)) => domain,
        None => helo,
    };
    let spf_output = match ip {
        Some(ip) => {
            let host = session.host_domain;
            // The MAIL FROM identity; the HELO one for the null sender (RFC 7208 2.4).
            let params = if session.mail_from.is_empty() {
                SpfParameters::verify_ehlo(ip, helo, host)
            } else {
                SpfParameters::verify_mail_from(ip, helo, host, session.mail_from)
            };
            authenticator.verify_spf(params).await
        }
        None => mail_auth::SpfOutput::new(mail_from_domain.to_owned()),
    };
    let spf = Verdict {
        result: spf_word(spf_output.result()),
        domain: spf_output.domain().to_owned(),
        reason: ip
            .is_none()
            .then(|| "the connecting address is not known".to_owned()),
    };
    let dmarc_output = authenticator
        .verify_dmarc(DmarcParameters::new(
            &message,
            &dkim_output,
            mail_from_domain,
            &spf_output,
        ))
        .await;
    let dmarc = Dmarc {
        result: dmarc_word(&dmarc_output),
        policy: dmarc_output.policy().to_string(),
        domain: dmarc_output.domain().to_owned(),
    };
    Ok(AuthReport { dkim, spf, dmarc })
}

fn dkim_words(result: &DkimResult) -> (&'static str, Option<String>) {
    match result {
        DkimResult::Pass => ("pass", None),
        DkimResult::Fail(e) => ("fail", Some(e.to_string())),
        // A body that no longer matches its signature failed verification
        // (RFC 8601 2.7.1); mail-auth, like Gmail, calls it neutral.
        DkimResult::Neutral(
            e @ mail_auth::Error::Dkim(mail_auth::dkim::DkimError::FailedBodyHashMatch),
        ) => ("fail", Some(e.to_string())),
        DkimResult::Neutral(e) => ("neutral", Some(e.to_string())),
        DkimResult::TempError(e) => ("temperror", Some(e.to_string())),
        DkimResult::PermError(e) => ("permerror", Some(e.to_string())),
        DkimResult::None => ("none", None),
    }
}

fn spf_word(result: SpfResult) -> &'static str {
    match result {
        SpfResult::Pass => "pass",
        SpfResult::Fail => "fail",
        SpfResult::SoftFail => "softfail",
        SpfResult::Neutral => "neutral",
        SpfResult::TempError => "temperror",
        SpfResult::PermError => "permerror",
        SpfResult::None => "none",
    }
}

/// DMARC passes when an aligned DKIM or SPF result passes (RFC 7489 4.2).
fn dmarc_word(output: &mail_auth::DmarcOutput) -> &'static str {
    let results = [output.dkim_result(), output.spf_result()];
    if results.iter().any(|r| matches!(r, DmarcResult::Pass)) {
        "pass"
    } else if results
        .iter()
        .any(|r| matches!(r, DmarcResult::TempError(_)))
    {
        "temperror"
    } else if results
        .iter()
        .any(|r| matches!(r, DmarcResult::PermError(_)))
    {
        "permerror"
    } else if output.dmarc_record().is_some()
        || results.iter().any(|r| matches!(r, DmarcResult::Fail(_)))
    {
        "fail"
    } else {
        "none"
    }
}
