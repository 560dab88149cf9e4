//! Downloads of a stored message: its raw bytes, an attachment's decoded
//! bytes, and its HTML body made safe to view.
//!
//! The headers are security decisions: nothing downloaded here may run as a
//! page of the API's origin. A raw message and an attachment come as
//! attachments (`Content-Disposition: attachment`) with `nosniff`; an
//! attachment also has `Content-Security-Policy: sandbox`, so an HTML
//! attachment opened directly has an opaque origin and runs no script; the
//! HTML view has a policy that allows no script and no remote resource
//! (unless remote images are asked for).
//!
//! Nothing is built whole: every body is streamed a chunk at a time
//! ([`CHUNK_BYTES`]) from the stored raw bytes, so a client that does not
//! read holds one chunk. An attachment is found in the raw bytes once, by a
//! [`crate::job::Job`] outside the host's lock, then decoded as it is
//! written ([`crate::transfer`]); the HTML view reads the stored HTML body and
//! rewrites it as it goes ([`html`]).
//!
//! A download does not keep its message: each chunk looks it up through a
//! weak reference. When the message has been deleted (or evicted) since the
//! download began, the body ends there, cut short
//! ([`ChunkSource::cut_short`]): the host ends the response without its last
//! chunk, so the client sees an incomplete download, and a stalled reader
//! never holds deleted mail.

pub mod html;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Weak};

use crate::email::Email;
use crate::error::ApiError;
use crate::message::AttachmentSource;
use crate::response::{Body, CHUNK_BYTES, ChunkSource, Response};

/// The Content-Security-Policy of an attachment.
pub const ATTACHMENT_CSP: &str = "sandbox";
/// The Content-Security-Policy of the HTML view.
pub const HTML_CSP: &str =
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:";
/// The Content-Security-Policy of the HTML view with `remoteImages=true`:
/// images from anywhere, nothing else. A prefetch is allowed by it too (see
/// [`html`]), so that view also makes `<link>` tags inert.
pub const HTML_CSP_REMOTE_IMAGES: &str =
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data: http: https:";

/// A body read from a stored message it does not keep: `read` makes the
/// next chunk from the message while it is still stored.
struct FromMessage<S> {
    email: Weak<Email>,
    state: S,
    cut: bool,
}

/// How a [`FromMessage`] makes its chunks.
trait Piece: Send {
    /// Appends the next piece of the body made from `email` to `out`;
    /// false, appending nothing, once the body is complete.
    fn read(&mut self, email: &Email, out: &mut Vec<u8>) -> bool;
}

impl<S: Piece + 'static> FromMessage<S> {
    fn boxed(email: &Arc<Email>, state: S) -> Box<dyn ChunkSource> {
        Box::new(FromMessage {
            email: Arc::downgrade(email),
            state,
            cut: false,
        })
    }
}

impl<S: Piece> ChunkSource for FromMessage<S> {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        if self.cut {
            return false;
        }
        match self.email.upgrade() {
            Some(email) => self.state.read(&email, out),
            None => {
                self.cut = true;
                false
            }
        }
    }

    fn cut_short(&self) -> bool {
        self.cut
    }
}

/// The raw bytes of a message from `at` on.
struct RawBytes {
    at: usize,
}

impl Piece for RawBytes {
    fn read(&mut self, email: &Email, out: &mut Vec<u8>) -> bool {
        let raw = email.raw();
        if self.at >= raw.len() {
            return false;
        }
        let end = raw.len().min(self.at + CHUNK_BYTES);
        out.extend_from_slice(&raw[self.at..end]);
        self.at = end;
        true
    }
}

/// `GET /api/emails/:id/raw`: the bytes exactly as received, streamed.
pub fn raw_response(email: Arc<Email>) -> Response {
    let disposition = format!("attachment; filename=\"{}.eml\"", email.id);
    Response::download(
        Cow::Borrowed("message/rfc822"),
        vec![
            ("content-disposition", disposition),
            ("x-content-type-options", "nosniff".to_owned()),
        ],
        Body::Stream(FromMessage::boxed(&email, RawBytes { at: 0 })),
    )
}

/// The path of attachment `index` of message `id`, from the server root.
pub fn attachment_url(id: &str, index: usize) -> String {
    format!("/api/emails/{id}/attachments/{index}")
}

/// A path segment as an attachment index: decimal digits, no sign, no
/// leading zero; None for anything else.
pub fn parse_index(segment: &str) -> Option<usize> {
    let canonical = !segment.is_empty()
        && segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    canonical.then(|| segment.parse().ok()).flatten()
}

/// Whether `s` is an RFC 9110 token (the characters of a MIME type's parts).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The Content-Type to send for a declared `type/subtype`: itself when both
/// halves are tokens (with the part's charset for `text/*` when that is a
/// token too), else `application/octet-stream`.
pub fn download_content_type(declared: &str, charset: Option<&str>) -> String {
    let valid = declared
        .split_once('/')
        .is_some_and(|(t, s)| is_token(t) && is_token(s));
    if !valid {
        return "application/octet-stream".to_owned();
    }
    match charset.map(str::trim) {
        Some(charset) if declared.starts_with("text/") && is_token(charset) => {
            format!("{declared}; charset={charset}")
        }
        _ => declared.to_owned(),
    }
}

/// `Content-Disposition: attachment` for a file name (RFC 6266): an ASCII
/// `filename="..."` fallback and the exact name as `filename*=UTF-8''...`.
/// Directories in the name are dropped; an empty name becomes `fallback`.
pub fn content_disposition(filename: &str, fallback: &str) -> String {
    let base = filename
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('.');
    let name = if base.is_empty() { fallback } else { base };
    let ascii: String = name
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' && c != '%' => c,
            _ => '_',
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// Finds attachment `index` (as in the message's `attachments`) in the raw
/// bytes: linear in the message, run outside the lock. None when there is
/// no such attachment.
pub fn locate(email: &Email, index: usize) -> Option<AttachmentSource> {
    email.attachments().get(index)?;
    crate::message::attachment_source(email.raw(), index)
}

/// The decoded bytes of attachment `index` and its charset parameter, built
/// whole (for a host that answers in one piece). None when there is no such
/// attachment.
pub fn attachment_bytes(email: &Email, index: usize) -> Option<(Vec<u8>, Option<String>)> {
    let located = locate(email, index)?;
    let body = email.raw().get(located.body)?;
    Some((
        crate::transfer::decode_all(body, located.encoding),
        located.charset,
    ))
}

/// An attachment's body decoded as it is written.
struct AttachmentBytes {
    body: Range<usize>,
    decoder: crate::transfer::TransferDecoder,
}

impl Piece for AttachmentBytes {
    fn read(&mut self, email: &Email, out: &mut Vec<u8>) -> bool {
        let body = email.raw().get(self.body.clone()).unwrap_or_default();
        self.decoder.fill(body, out, CHUNK_BYTES)
    }
}

/// `GET /api/emails/:id/attachments/:index`, for an index already checked
/// against the stored metadata: finds the part in the raw bytes (run
/// outside the lock), then streams it decoded.
pub fn attachment_response(email: &Arc<Email>, index: usize) -> Result<Response, ApiError> {
    let missing = || ApiError::NotFound(format!("message {} has no attachment {index}", email.id));
    let info = email.attachments().get(index).ok_or_else(missing)?;
    let located = locate(email, index).ok_or_else(missing)?;
    let content_type = download_content_type(&info.content_type, located.charset.as_deref());
    let fallback = format!("attachment-{index}");
    let body = AttachmentBytes {
        body: located.body,
        decoder: crate::transfer::TransferDecoder::new(located.encoding),
    };
    Ok(Response::download(
        Cow::Owned(content_type),
        vec![
            (
                "content-disposition",
                content_disposition(&info.filename, &fallback),
            ),
            ("x-content-type-options", "nosniff".to_owned()),
            ("content-security-policy", ATTACHMENT_CSP.to_owned()),
        ],
        Body::Stream(FromMessage::boxed(email, body)),
    ))
}

/// The HTML view as it is written.
struct HtmlView {
    rewrites: html::Rewrites,
    cursor: html::Cursor,
}

impl Piece for HtmlView {
    fn read(&mut self, email: &Email, out: &mut Vec<u8>) -> bool {
        let (source, crlf) = email.html_source();
        self.cursor.fill(
            source.as_bytes(),
            crlf,
            &self.rewrites,
            email.attachments(),
            out,
            CHUNK_BYTES,
        )
    }
}

/// `GET /api/emails/:id/html`: the HTML body with `cid:` references
/// rewritten (and, with remote images, `<link>` tags made inert), under a
/// policy that runs no script; streamed from the stored body.
pub fn html_response(email: &Arc<Email>, remote_images: bool) -> Result<Response, ApiError> {
    if email.html_source().0.is_empty() {
        return Err(ApiError::NotFound(format!(
            "message {} has no HTML body",
            email.id
        )));
    }
    let csp = if remote_images {
        HTML_CSP_REMOTE_IMAGES
    } else {
        HTML_CSP
    };
    let view = HtmlView {
        rewrites: html::Rewrites::new(email, remote_images),
        cursor: html::Cursor::default(),
    };
    Ok(Response::download(
        Cow::Borrowed("text/html; charset=utf-8"),
        vec![
            ("content-security-policy", csp.to_owned()),
            ("x-content-type-options", "nosniff".to_owned()),
        ],
        Body::Stream(FromMessage::boxed(email, view)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::IdGenerator;

    fn stored(raw: &[u8]) -> Arc<Email> {
        crate::email::test_email(&mut IdGenerator::new(), raw)
    }

    #[test]
    fn raw_streams_every_byte_in_bounded_chunks() {
        let mut raw = b"Subject: bin\r\n\r\n".to_vec();
        raw.extend((0..200_000u32).map(|i| (i * 7 % 256) as u8));
        let email = stored(&raw);
        let response = raw_response(email.clone());
        assert_eq!(response.content_type, "message/rfc822");
        assert_eq!(
            response.header("content-disposition"),
            Some(format!("attachment; filename=\"{}.eml\"", email.id).as_str())
        );
        assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
        let Body::Stream(mut source) = response.body else {
            panic!("raw must stream");
        };
        let mut out = Vec::new();
        loop {
            let before = out.len();
            if !source.next_chunk(&mut out) {
                break;
            }
            assert!(out.len() - before <= CHUNK_BYTES);
        }
        assert_eq!(out, raw);
    }

    #[test]
    fn indexes_are_canonical_decimals() {
        assert_eq!(parse_index("0"), Some(0));
        assert_eq!(parse_index("12"), Some(12));
        for bad in ["", "01", "-1", "+1", "1.0", "x", "99999999999999999999999"] {
            assert_eq!(parse_index(bad), None, "{bad}");
        }
    }

    #[test]
    fn content_types_that_do_not_parse_become_octet_stream() {
        assert_eq!(
            download_content_type("application/pdf", None),
            "application/pdf"
        );
        assert_eq!(
            download_content_type("text/plain", Some("iso-8859-1")),
            "text/plain; charset=iso-8859-1"
        );
        assert_eq!(
            download_content_type("text/plain", Some("a b")),
            "text/plain"
        );
        assert_eq!(
            download_content_type("image/png", Some("utf-8")),
            "image/png"
        );
        for bad in ["", "pdf", "a/b c", "a/", "/b", "text/html;x", "a/b\r\nx"] {
            assert_eq!(
                download_content_type(bad, None),
                "application/octet-stream",
                "{bad}"
            );
        }
    }

    #[test]
    fn dispositions_have_an_ascii_fallback_and_the_exact_name() {
        assert_eq!(
            content_disposition("report.pdf", "x"),
            "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"
        );
        assert_eq!(
            content_disposition("Résumé \"final\".pdf", "x"),
            "attachment; filename=\"R_sum_ _final_.pdf\"; filename*=UTF-8''R%C3%A9sum%C3%A9%20%22final%22.pdf"
        );
        assert_eq!(
            content_disposition("../../etc/passwd", "x"),
            "attachment; filename=\"passwd\"; filename*=UTF-8''passwd"
        );
        assert_eq!(
            content_disposition("", "attachment-3"),
            "attachment; filename=\"attachment-3\"; filename*=UTF-8''attachment-3"
        );
        let header = content_disposition("a\r\nb\u{7f}%.txt", "x");
        assert!(
            header.bytes().all(|b| (b' '..=b'~').contains(&b)),
            "{header}"
        );
    }

    #[test]
    fn attachments_decode_their_transfer_encoding_and_keep_their_charset() {
        let raw = "Subject: a\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
                   Content-Type: text/plain\r\n\r\nbody\r\n--b\r\n\
                   Content-Type: application/pdf; name=\"r.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\n\
                   JVBERi0xLjQK\r\n--b\r\n\
                   Content-Type: text/plain; charset=iso-8859-1\r\nContent-Disposition: attachment; filename=l.txt\r\n\
                   Content-Transfer-Encoding: quoted-printable\r\n\r\ncaf=E9\r\n--b--\r\n";
        let email = stored(raw.as_bytes());
        assert_eq!(email.attachments().len(), 2);
        let pdf = attachment_response(&email, 0).unwrap();
        assert_eq!(pdf.content_type, "application/pdf");
        assert_eq!(pdf.header("content-security-policy"), Some("sandbox"));
        assert_eq!(pdf.header("x-content-type-options"), Some("nosniff"));
        assert!(
            pdf.header("content-disposition")
                .unwrap()
                .contains("filename=\"r.pdf\"")
        );
        assert_eq!(pdf.body.collect(), b"%PDF-1.4\n");
        let latin = attachment_response(&email, 1).unwrap();
        assert_eq!(latin.content_type, "text/plain; charset=iso-8859-1");
        assert_eq!(latin.body.collect(), b"caf\xe9");
        assert!(attachment_response(&email, 2).is_err());
    }

    /// Every chunk of a streamed body, each checked against the bound.
    fn chunks(body: Body) -> (Vec<u8>, Box<dyn ChunkSource>) {
        let Body::Stream(mut source) = body else {
            panic!("downloads stream");
        };
        let mut out = Vec::new();
        loop {
            let before = out.len();
            if !source.next_chunk(&mut out) {
                return (out, source);
            }
            assert!(out.len() - before <= CHUNK_BYTES);
        }
    }

    #[test]
    fn a_download_sends_the_bytes_the_attachment_size_counts() {
        let bodies: [&[u8]; 8] = [
            b"SGVsbG8=\r\n",
            b"SGVsbG8\r\n",
            b"QQ==QUJD\r\n",
            b"Q=UJD\r\n",
            b"not base64 at all!\r\n",
            b"SGVsb\r\n",
            b"S\r\n",
            b"\r\n",
        ];
        for body in bodies {
            let mut raw = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
                Content-Type: text/plain\r\n\r\nhi\r\n--b\r\n\
                Content-Type: application/pdf; name=\"r.pdf\"\r\n\
                Content-Transfer-Encoding: base64\r\n\r\n"
                .to_vec();
            raw.extend_from_slice(body);
            raw.extend_from_slice(b"--b--\r\n");
            let email = stored(&raw);
            let (bytes, _) = attachment_bytes(&email, 0).expect("an attachment");
            let source = crate::message::attachment_source(&raw, 0).expect("its source");
            assert_eq!(
                bytes,
                crate::message::decode_attachment(&raw, &source),
                "{body:?}"
            );
            assert_eq!(bytes.len(), email.attachments()[0].size, "{body:?}");
        }
    }

    #[test]
    fn large_attachments_and_html_views_stream_in_bounded_chunks() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 256) as u8).collect();
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &data);
        let lines: String = encoded
            .as_bytes()
            .chunks(76)
            .map(|l| format!("{}\r\n", std::str::from_utf8(l).unwrap()))
            .collect();
        let html: String = (0..20_000)
            .map(|i| format!("<p>{i} <img src=\"cid:img1\"></p>\r\n"))
            .collect();
        let raw = format!(
            "Subject: big\r\nContent-Type: multipart/related; boundary=b\r\n\r\n--b\r\n\
             Content-Type: text/html\r\n\r\n{html}--b\r\n\
             Content-Type: application/octet-stream\r\nContent-ID: <img1>\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{lines}--b--\r\n"
        );
        let email = stored(raw.as_bytes());
        let (got, source) = chunks(attachment_response(&email, 0).unwrap().body);
        assert!(got == data && !source.cut_short());
        let (got, _) = chunks(html_response(&email, false).unwrap().body);
        let url = format!("/api/emails/{}/attachments/0", email.id);
        let want = html
            .trim_end_matches("\r\n")
            .replace("\r\n", "\n")
            .replace("cid:img1", &url);
        assert!(got == want.as_bytes());
    }

    #[test]
    fn a_download_whose_message_is_deleted_ends_cut_short() {
        let mut raw = b"Subject: x\r\nContent-Type: text/html\r\n\r\n".to_vec();
        raw.extend(std::iter::repeat_n(b'x', 3 * CHUNK_BYTES));
        let downloads: [fn(&Arc<Email>) -> Body; 2] = [
            |email| raw_response(email.clone()).body,
            |email| html_response(email, true).unwrap().body,
        ];
        for download in downloads {
            // The store's reference: the download keeps none.
            let email = stored(&raw);
            let Body::Stream(mut source) = download(&email) else {
                panic!("downloads stream");
            };
            let mut out = Vec::new();
            assert!(source.next_chunk(&mut out));
            assert_eq!(Arc::strong_count(&email), 1);
            // Another holder (a list being written) keeps it: the download goes on.
            let listed = email.clone();
            drop(email);
            assert!(source.next_chunk(&mut out));
            drop(listed);
            let before = out.len();
            assert!(!source.next_chunk(&mut out), "the message is gone");
            assert!(out.len() == before && source.cut_short());
            assert!(!source.next_chunk(&mut out) && source.cut_short());
        }
        let email = stored(&raw);
        let (whole, source) = chunks(raw_response(email.clone()).body);
        assert!(whole == raw && !source.cut_short());
    }

    #[test]
    fn the_html_view_has_a_policy_and_a_message_without_html_is_404() {
        let raw = "Subject: h\r\nContent-Type: multipart/related; boundary=b\r\n\r\n--b\r\n\
                   Content-Type: text/html\r\n\r\n<img src=\"cid:img1\"><script>x()</script>\r\n--b\r\n\
                   Content-Type: image/png\r\nContent-ID: <img1>\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw==\r\n--b--\r\n";
        let email = stored(raw.as_bytes());
        let response = html_response(&email, false).unwrap();
        assert_eq!(response.content_type, "text/html; charset=utf-8");
        assert_eq!(response.header("content-security-policy"), Some(HTML_CSP));
        let body = String::from_utf8(response.body.collect()).unwrap();
        assert!(
            body.contains(&format!("src=\"/api/emails/{}/attachments/0\"", email.id)),
            "{body}"
        );
        let remote = html_response(&email, true).unwrap();
        assert_eq!(
            remote.header("content-security-policy"),
            Some(HTML_CSP_REMOTE_IMAGES)
        );
        let plain = stored(b"Subject: p\r\n\r\ntext only\r\n");
        assert_eq!(html_response(&plain, false).unwrap_err().status(), 404);
    }
}
