//! The summary of a stored message: what a list row or an event needs, without the bodies.

use bytes::Bytes;
use serde::Serialize;

use crate::email::Email;
use crate::smtp::Envelope;
use crate::view::format_rfc3339_ms;

/// How many characters of `text` a summary's `preview` keeps.
pub const PREVIEW_CHARS: usize = 200;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary<'a> {
    id: String,
    received_at: String,
    envelope: &'a Envelope,
    from: String,
    to: &'a [String],
    cc: &'a [Box<str>],
    subject: &'a str,
    size: usize,
    attachment_count: usize,
    has_html: bool,
    preview: String,
}

/// The JSON object of one message's summary.
pub fn summary_json(email: &Email) -> Bytes {
    let text = email.text();
    let summary = Summary {
        id: email.id.to_string(),
        received_at: format_rfc3339_ms(email.received_at_ms),
        envelope: &email.envelope,
        from: email
            .header_fields()
            .from
            .unwrap_or_else(|| email.envelope.from.clone()),
        to: &email.envelope.to,
        cc: email.cc(),
        subject: email.subject(),
        size: email.raw().len(),
        attachment_count: email.attachments().len(),
        has_html: !email.html().is_empty(),
        preview: text.chars().take(PREVIEW_CHARS).collect(),
    };
    Bytes::from(serde_json::to_vec(&summary).unwrap_or_else(|_| b"{}".to_vec()))
}
