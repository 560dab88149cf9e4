//! `POST /api/send`: a message stored as if it had come over SMTP, without SMTP.
//!
//! A JSON body (`{"from", "to", "cc"?, "bcc"?, "subject", "text"?, "html"?,
//! "headers"?, "attachments"?}`) is built into MIME with `mail-builder`
//! (Stalwart's, the same authors as the `mail-parser` the core reads mail
//! with); a `message/rfc822` body is the raw message itself, its envelope
//! from `?from=` and repeated `?to=`. Either way the message goes the way an
//! SMTP message goes ([`Shared::deliver_durable`]): routed to the inboxes its
//! recipients match, on disk before the answer with `--data-dir`, counted in
//! `/metrics`. Its `smtp` is null: no session delivered it.
//!
//! The body may be larger than other requests' (see [`body_limit`]); the
//! HTTP driver charges it to `--max-inflight-bytes` while it is handled.

use std::sync::Arc;

use base64::Engine as _;
use mail_builder::MessageBuilder;
use mail_builder::headers::address::Address;
use mail_builder::headers::raw::Raw;
use mailjar_core::api::{Request, Response, Scope};
use mailjar_core::smtp::{Envelope, Incoming};

use crate::state::Shared;

/// The path of the route.
pub const PATH: &str = "/api/send";

/// Bodies at least this large are built on the blocking pool.
const BUILD_INLINE_BYTES: usize = 64 * 1024;

/// What the route needs from the settings.
#[derive(Debug, Clone, Copy)]
pub struct SendOptions {
    /// `--max-message-bytes`: larger messages are 413.
    pub max_message_bytes: usize,
    /// `--unrouted reject`: a recipient no inbox takes is refused.
    pub reject_unrouted: bool,
}

/// The largest request body `POST /api/send` reads: a message of
/// `max_message_bytes` sent as base64 in JSON (4/3 of it) and 64 KiB for
/// the rest of the JSON. A body within it may still build a message over
/// `max_message_bytes`: that is 413 too.
pub fn body_limit(max_message_bytes: usize) -> usize {
    (max_message_bytes / 3 + 1)
        .saturating_mul(4)
        .saturating_add(64 * 1024)
}

/// The JSON form of a message to send.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    from: String,
    #[serde(default)]
    to: Vec<String>,
    #[serde(default)]
    cc: Vec<String>,
    #[serde(default)]
    bcc: Vec<String>,
    #[serde(default)]
    subject: String,
    text: Option<String>,
    html: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    attachments: Vec<Attachment>,
}

/// One attachment of [`Message`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Attachment {
    filename: String,
    content_type: Option<String>,
    /// Base64 (standard alphabet, padding optional).
    content: String,
}

/// Answers `POST /api/send`; None for other paths.
pub async fn route(
    shared: &Arc<Shared>,
    options: SendOptions,
    request: &Request,
) -> Option<Response> {
    if !matches!(request.path.as_str(), PATH | "/api/send/") {
        return None;
    }
    if request.method != "POST" {
        let mut response = Response::error(405, "/api/send answers POST only");
        response.headers.push(("allow", "POST".into()));
        return Some(response);
    }
    if request.scope != Scope::All {
        return Some(Response::error(403, "admin token required"));
    }
    Some(match send(shared, options, request).await {
        Ok(response) | Err(response) => response,
    })
}

async fn send(
    shared: &Arc<Shared>,
    options: SendOptions,
    request: &Request,
) -> Result<Response, Response> {
    let media = request
        .content_type
        .as_deref()
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let incoming = match media.as_str() {
        "application/json" => {
            let body = request.body.clone();
            if body.len() >= BUILD_INLINE_BYTES {
                tokio::task::spawn_blocking(move || from_json(&body))
                    .await
                    .map_err(|_| Response::error(500, "building the message failed"))??
            } else {
                from_json(&body)?
            }
        }
        "message/rfc822" => from_raw(&request.query, request.body.to_vec())?,
        _ => {
            return Err(Response::error(
                415,
                "POST /api/send takes Content-Type: application/json (a message to build) or message/rfc822 (a raw message, envelope in ?from= and ?to=)",
            ));
        }
    };
    check(shared, options, &incoming)?;
    match shared.deliver_durable(incoming).await {
        Ok(id) => Ok(Response::json(
            200,
            &serde_json::json!({ "id": id.to_string() }),
        )),
        Err(e) => Err(Response::error(
            503,
            &format!("the message was not stored: {e}"),
        )),
    }
}

/// What SMTP would refuse: no recipient, too large, a recipient no inbox takes.
fn check(shared: &Arc<Shared>, options: SendOptions, incoming: &Incoming) -> Result<(), Response> {
    if incoming.envelope.to.is_empty() {
        return Err(Response::error(
            400,
            "no recipient: give to, cc or bcc (or ?to= with message/rfc822)",
        ));
    }
    if incoming.raw.len() > options.max_message_bytes {
        return Err(Response::error(
            413,
            &format!(
                "the message is {} bytes, more than --max-message-bytes ({} bytes)",
                incoming.raw.len(),
                options.max_message_bytes
            ),
        ));
    }
    if options.reject_unrouted
        && let Some(unrouted) = incoming
            .envelope
            .to
            .iter()
            .find(|to| !shared.takes_recipient(to, None))
    {
        return Err(Response::error(
            400,
            &format!("no inbox takes {unrouted} (--unrouted reject)"),
        ));
    }
    Ok(())
}

/// A raw message with the envelope of `?from=` and every `?to=`.
fn from_raw(query: &str, raw: Vec<u8>) -> Result<Incoming, Response> {
    let mut from = None;
    let mut to = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "from" if from.is_none() => from = Some(value.into_owned()),
            "to" => to.push(value.into_owned()),
            other => {
                return Err(Response::error(
                    400,
                    &format!(
                        "unknown or repeated query parameter {other:?}: message/rfc822 takes ?from= once and ?to= (repeatable)"
                    ),
                ));
            }
        }
    }
    let from = from.ok_or_else(|| {
        Response::error(
            400,
            "message/rfc822 needs ?from= (the envelope sender; empty for <>)",
        )
    })?;
    for address in std::iter::once(&from).chain(&to) {
        envelope_address(address)?;
    }
    Ok(incoming(from, to, raw))
}

/// The message a JSON body describes, built into MIME.
fn from_json(body: &[u8]) -> Result<Incoming, Response> {
    let message: Message = serde_json::from_slice(body)
        .map_err(|e| Response::error(400, &format!("POST /api/send: {e}")))?;
    let (from_name, from) = mailbox(&message.from)?;
    let mut builder = MessageBuilder::new()
        .from(Address::new_address(from_name, from.clone()))
        .subject(message.subject.clone());
    for (field, list) in [("to", &message.to), ("cc", &message.cc)] {
        if list.is_empty() {
            continue;
        }
        let addresses = list
            .iter()
            .map(|a| mailbox(a).map(|(name, address)| Address::new_address(name, address)))
            .collect::<Result<Vec<_>, _>>()?;
        let list = Address::new_list(addresses);
        builder = if field == "to" {
            builder.to(list)
        } else {
            builder.cc(list)
        };
    }
    for (name, value) in &message.headers {
        header_field(name, value)?;
        builder = builder.header(name.clone(), Raw::new(value.clone()));
    }
    if let Some(text) = &message.text {
        builder = builder.text_body(text.clone());
    }
    if let Some(html) = &message.html {
        builder = builder.html_body(html.clone());
    }
    for (i, attachment) in message.attachments.iter().enumerate() {
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(attachment.content.trim_end_matches('='))
            .map_err(|e| {
                Response::error(400, &format!("attachments[{i}].content is not base64: {e}"))
            })?;
        let content_type = attachment
            .content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".to_owned());
        header_field("Content-Type", &content_type)?;
        header_field("filename", &attachment.filename)?;
        builder = builder.attachment(content_type, attachment.filename.clone(), bytes);
    }
    let raw = builder
        .write_to_vec()
        .map_err(|e| Response::error(500, &format!("building the message failed: {e}")))?;
    let mut to = Vec::new();
    for address in message.to.iter().chain(&message.cc).chain(&message.bcc) {
        to.push(mailbox(address)?.1);
    }
    Ok(incoming(from, to, raw))
}

fn incoming(from: String, to: Vec<String>, raw: Vec<u8>) -> Incoming {
    Incoming {
        envelope: Envelope { from, to },
        raw,
        ..Incoming::default()
    }
}

/// `"Name <a@b>"` or `"a@b"`: the display name and the address.
fn mailbox(text: &str) -> Result<(Option<String>, String), Response> {
    let text = text.trim();
    let (name, address) = match text.strip_suffix('>').and_then(|t| t.rsplit_once('<')) {
        Some((name, address)) => {
            let name = name.trim().trim_matches('"').trim();
            ((!name.is_empty()).then(|| name.to_owned()), address.trim())
        }
        None => (None, text),
    };
    if address.is_empty() {
        return Err(Response::error(400, &format!("{text:?} is not an address")));
    }
    envelope_address(address)?;
    Ok((name, address.to_owned()))
}

/// An address as SMTP would take it in MAIL or RCPT: no spaces, brackets or control bytes.
fn envelope_address(address: &str) -> Result<(), Response> {
    let bad = |c: char| c.is_control() || c.is_whitespace() || matches!(c, '<' | '>');
    if address.len() > 320 || address.chars().any(bad) {
        return Err(Response::error(
            400,
            &format!("{address:?} is not an address"),
        ));
    }
    Ok(())
}

/// A header field that cannot break out of its line (no CR or LF) with a name that is a token.
fn header_field(name: &str, value: &str) -> Result<(), Response> {
    let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
    if !name_ok || value.contains(['\r', '\n']) {
        return Err(Response::error(
            400,
            &format!(
                "header {name:?}: a name without ':' or spaces, and a value without line breaks"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailboxes_are_read_with_or_without_a_name() {
        assert_eq!(mailbox("a@b.test").ok(), Some((None, "a@b.test".into())));
        assert_eq!(
            mailbox("\"Ann B\" <a@b.test>").ok(),
            Some((Some("Ann B".into()), "a@b.test".into()))
        );
        assert!(mailbox("a b@c").is_err());
        assert!(mailbox("<>").is_err());
        assert!(header_field("X-Ok", "v").is_ok());
        assert!(header_field("X-Bad", "v\r\nBcc: x").is_err());
        assert!(header_field("X Bad", "v").is_err());
    }

    #[test]
    fn the_body_limit_covers_a_base64_message() {
        let max = 25 * 1024 * 1024;
        let encoded = base64::engine::general_purpose::STANDARD.encode(vec![0u8; max]);
        assert!(body_limit(max) >= encoded.len() + 1024);
    }
}
