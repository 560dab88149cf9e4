//! Parsing a received message into the fields of a CapturedEmail.
//! (Placeholder until the parser lands.)

use std::collections::BTreeMap;

/// What a message says about itself, parsed once at delivery.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ParsedMessage {
    /// From header.
    pub from: Option<String>,
    /// To header addresses.
    pub to_headers: Vec<String>,
    /// Cc header addresses.
    pub cc: Vec<String>,
    /// Subject.
    pub subject: String,
    /// Date.
    pub date: Option<String>,
    /// Message-ID.
    pub message_id: Option<String>,
    /// Headers.
    pub headers: BTreeMap<String, String>,
    /// Text body.
    pub text: String,
    /// HTML body.
    pub html: String,
    /// Links.
    pub links: Vec<String>,
    /// Codes.
    pub codes: Vec<String>,
    /// Attachments.
    pub attachments: Vec<AttachmentInfo>,
}

/// Metadata of one attachment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentInfo {
    /// File name.
    pub filename: String,
    /// Content type.
    pub content_type: String,
    /// Size.
    pub size: usize,
    /// Content-ID.
    pub content_id: Option<String>,
}

/// Parses `raw`.
pub fn parse(raw: &[u8]) -> ParsedMessage {
    let Some(m) = mail_parser::MessageParser::default().parse(raw) else {
        return ParsedMessage::default();
    };
    ParsedMessage {
        subject: m.subject().unwrap_or("").to_owned(),
        text: m.body_text(0).map(|t| t.into_owned()).unwrap_or_default(),
        to_headers: m
            .to()
            .map(|a| {
                a.iter()
                    .filter_map(|a| a.address().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        ..ParsedMessage::default()
    }
}
