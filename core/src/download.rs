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
//! Decoding an attachment and rewriting the HTML grow with the message: they
//! run in a [`crate::job::Job`], outside the host's lock, and re-read the raw
//! bytes (no decoded copy is kept in the store).

use std::borrow::Cow;
use std::sync::Arc;

use crate::email::Email;
use crate::error::ApiError;
use crate::response::{Body, CHUNK_BYTES, ChunkSource, Response};

/// The Content-Security-Policy of an attachment.
pub const ATTACHMENT_CSP: &str = "sandbox";
/// The Content-Security-Policy of the HTML view.
pub const HTML_CSP: &str =
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:";
/// The Content-Security-Policy of the HTML view with `remoteImages=true`.
pub const HTML_CSP_REMOTE_IMAGES: &str =
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data: http: https:";

/// The raw bytes of a message, a chunk at a time, from the stored message itself.
pub struct RawBytes {
    email: Arc<Email>,
    at: usize,
}

impl ChunkSource for RawBytes {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let raw = self.email.raw();
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
        Body::Stream(Box::new(RawBytes { email, at: 0 })),
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

/// The decoded bytes of attachment `index` (as in the message's
/// `attachments`) and its charset parameter, read again from the raw bytes:
/// linear in the message's size. None when there is no such attachment.
/// The Content-Transfer-Encoding is undone, the charset left as sent (a
/// file's bytes are the sender's, so a text attachment comes in its own
/// charset).
pub fn attachment_bytes(email: &Email, index: usize) -> Option<(Vec<u8>, Option<String>)> {
    email.attachments().get(index)?;
    let raw = email.raw();
    let source = crate::message::attachment_source(raw, index)?;
    Some((
        crate::message::decode_attachment(raw, &source),
        source.charset,
    ))
}

/// `GET /api/emails/:id/attachments/:index`, for an index already checked
/// against the stored metadata; re-parses the raw bytes (run outside the lock).
pub fn attachment_response(email: &Email, index: usize) -> Result<Response, ApiError> {
    let missing = || ApiError::NotFound(format!("message {} has no attachment {index}", email.id));
    let info = email.attachments().get(index).ok_or_else(missing)?;
    let (bytes, charset) = attachment_bytes(email, index).ok_or_else(missing)?;
    let content_type = download_content_type(&info.content_type, charset.as_deref());
    let fallback = format!("attachment-{index}");
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
        Body::Full(bytes::Bytes::from(bytes)),
    ))
}

/// Decodes `%XX` escapes, leaving anything malformed as it is.
fn percent_decode_lossy(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `html` with each `cid:` reference that names an attachment's Content-ID
/// (with or without `<>`, case-insensitively, percent-decoded) replaced by
/// that attachment's URL; other references stay as they are. Linear.
pub fn rewrite_cids(html: &str, id: &str, content_ids: &[(usize, String)]) -> String {
    let mut out = String::with_capacity(html.len());
    let bytes = html.as_bytes();
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = memchr::memmem::find(&bytes[from..], b":").map(|p| from + p) {
        from = found + 1;
        let Some(start) = found.checked_sub(3) else {
            continue;
        };
        if !bytes[start..found].eq_ignore_ascii_case(b"cid")
            || start
                .checked_sub(1)
                .is_some_and(|p| bytes[p].is_ascii_alphanumeric())
        {
            continue;
        }
        let ends = |b: &u8| matches!(b, b'"' | b'\'' | b')' | b'&') || b.is_ascii_whitespace();
        let end = if bytes.get(from) == Some(&b'<') {
            // `cid:<id>`: up to the closing bracket.
            match bytes[from..].iter().position(|b| *b == b'>' || ends(b)) {
                Some(p) if bytes[from + p] == b'>' => from + p + 1,
                _ => continue,
            }
        } else {
            bytes[from..]
                .iter()
                .position(|b| ends(b) || matches!(b, b'<' | b'>'))
                .map_or(bytes.len(), |p| from + p)
        };
        let reference = percent_decode_lossy(&html[from..end]);
        let reference = reference
            .trim()
            .trim_start_matches('<')
            .trim_end_matches('>');
        if reference.is_empty() {
            continue;
        }
        let target = content_ids.iter().find(|(_, cid)| {
            cid.eq_ignore_ascii_case(reference) || cid.to_lowercase() == reference.to_lowercase()
        });
        if let Some((index, _)) = target {
            out.push_str(&html[copied..start]);
            out.push_str(&attachment_url(id, *index));
            copied = end;
            from = end;
        }
    }
    out.push_str(&html[copied..]);
    out
}

/// `GET /api/emails/:id/html`: the HTML body with `cid:` references
/// rewritten, under a policy that runs no script (run outside the lock).
pub fn html_response(email: &Email, remote_images: bool) -> Result<Response, ApiError> {
    let html = email.html();
    if html.is_empty() {
        return Err(ApiError::NotFound(format!(
            "message {} has no HTML body",
            email.id
        )));
    }
    let content_ids: Vec<(usize, String)> = email
        .attachments()
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.content_id.clone().map(|cid| (i, cid)))
        .collect();
    let id = email.id.to_string();
    let body = if content_ids.is_empty() {
        html.into_owned()
    } else {
        rewrite_cids(&html, &id, &content_ids)
    };
    let csp = if remote_images {
        HTML_CSP_REMOTE_IMAGES
    } else {
        HTML_CSP
    };
    Ok(Response::download(
        Cow::Borrowed("text/html; charset=utf-8"),
        vec![
            ("content-security-policy", csp.to_owned()),
            ("x-content-type-options", "nosniff".to_owned()),
        ],
        Body::Full(bytes::Bytes::from(body)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::Prepared;
    use crate::id::IdGenerator;
    use crate::smtp::{Envelope, Incoming};

    fn stored(raw: &[u8]) -> Arc<Email> {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: raw.to_vec(),
            helo: None,
            session: Default::default(),
        });
        Arc::new(Email::new(IdGenerator::new().next(1, [0; 10]), 1, prepared))
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

    #[test]
    fn cid_references_become_attachment_urls() {
        let cids = vec![(0, "logo@x".to_owned()), (2, "Pic%1".to_owned())];
        let html = r#"<img src="cid:logo@x"><img src='CID:<LOGO@X>'><div style="background:url(cid:pic%251)">acid:logo@x cid:other</div>"#;
        let got = rewrite_cids(html, "ID", &cids);
        assert_eq!(
            got,
            r#"<img src="/api/emails/ID/attachments/0"><img src='/api/emails/ID/attachments/0'><div style="background:url(/api/emails/ID/attachments/2)">acid:logo@x cid:other</div>"#
        );
        assert_eq!(rewrite_cids("cid:", "ID", &cids), "cid:");
        assert_eq!(
            rewrite_cids("é:cid:logo@x", "ID", &cids),
            "é:/api/emails/ID/attachments/0"
        );
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
