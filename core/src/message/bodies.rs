//! Which parts of a message are its text, its HTML and its attachments.
//!
//! The text and HTML bodies are found as Python's `email` finds them
//! (`get_body`): depth first, past parts marked `Content-Disposition:
//! attachment`, into a multipart/related only through its start part, never
//! into a message/* part. When there is a text/plain body, every other
//! text/plain part not marked as an attachment and without a file name
//! (text, image, text, as Apple Mail sends) is text too, as Node's
//! mailparser has it. Every other single part is an attachment, in the
//! order of the message.

use super::mime::Part;

/// The parts, by index in the tree, that make up a message's bodies and
/// attachments.
pub(super) struct Roles {
    /// The text/plain parts whose text, joined, is the message's text.
    pub text: Vec<usize>,
    /// The text/html part that is the HTML body.
    pub html: Option<usize>,
    /// Every other single part, in order.
    pub attachments: Vec<usize>,
}

/// The roles of the parts of `parts` (as from [`super::mime::parts`]).
pub(super) fn roles(parts: &[Part<'_>]) -> Roles {
    let text = plain_parts(parts);
    let html = first_body(parts, 0, "html");
    let mut body = vec![false; parts.len()];
    for &i in text.iter().chain(&html) {
        body[i] = true;
    }
    let attachments = (0..parts.len())
        .filter(|&i| parts[i].children.is_none() && !body[i])
        .collect();
    Roles {
        text,
        html,
        attachments,
    }
}

/// The text/plain parts that are text, in order: the first body, and every
/// other single text/plain part not marked as an attachment and without a
/// file name.
fn plain_parts(parts: &[Part<'_>]) -> Vec<usize> {
    let first = first_body(parts, 0, "plain");
    (0..parts.len())
        .filter(|&i| {
            let part = &parts[i];
            Some(i) == first
                || part.children.is_none()
                    && part.media.is("text", "plain")
                    && !part.is_attachment()
                    && part.filename().is_none()
                    && first.is_some()
        })
        .collect()
}

/// The first text/`subtype` part at or below `index`, as Python's
/// `get_body((subtype,))` finds it.
fn first_body(parts: &[Part<'_>], index: usize, subtype: &str) -> Option<usize> {
    let part = parts.get(index)?;
    if part.is_attachment() {
        return None;
    }
    match &part.children {
        None => part.media.is("text", subtype).then_some(index),
        Some(_) if part.media.subtype == "related" => {
            first_body(parts, related_start(parts, index)?, subtype)
        }
        Some(children) => children
            .iter()
            .find_map(|&child| first_body(parts, child, subtype)),
    }
}

/// The start part of a multipart/related: the one whose Content-ID its
/// `start` parameter names, else its first (RFC 2387).
fn related_start(parts: &[Part<'_>], index: usize) -> Option<usize> {
    let part = &parts[index];
    let children = part.children.as_deref()?;
    let start = part
        .content_type()
        .and_then(|ct| ct.attribute("start"))
        .map(|s| {
            s.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .trim()
        });
    start
        .and_then(|start| {
            children
                .iter()
                .copied()
                .find(|&c| parts[c].content_id() == Some(start))
        })
        .or_else(|| children.first().copied())
}
