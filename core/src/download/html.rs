//! The HTML view's body, made as it is written: the stored HTML body with
//! CRLF read as LF, each `cid:` reference that names an attachment's
//! Content-ID pointing at that attachment's download, and (when remote
//! images are shown) every `<link>` tag made inert.
//!
//! Why `<link>`: a policy that lets images load from anywhere
//! (`img-src http: https:`) lets `<link rel=prefetch>` fetch from anywhere
//! too. CSP no longer has `prefetch-src`; a prefetch is checked against
//! `default-src` or, when some directive is less restrictive, the least
//! restrictive one (Chromium does so), so no policy allows remote images
//! and not prefetches. The view renames the tag (`<x-link`), which no
//! browser fetches for, and the message's own bytes stay as they are in
//! its JSON and raw download.
//!
//! Nothing is copied whole: each chunk reads the stored body (which the
//! store keeps) from where the last one stopped, and looks ahead in it as
//! far as a reference needs. A reference longer than [`MAX_REFERENCE_BYTES`]
//! is left as it is (no Content-ID in real mail comes near), so the work of
//! a chunk is bounded whatever the body holds.
//!
//! Kept by hand: `lol_html`, the streaming HTML rewriter considered, parses
//! the whole document (far more than renaming `cid:` values and `<link`
//! tags needs) and would add much to a wasm that is already at its size
//! target. Covered by the property tests beside it (every chunk size gives
//! the whole-body result).

use crate::email::Email;
use crate::message::AttachmentInfo;

/// The longest `cid:` reference (the text after `cid:`) that is looked up.
pub const MAX_REFERENCE_BYTES: usize = 1024;
/// The most bytes of references one call reads (looked up, percent-decoded).
const MAX_REFERENCE_WORK: usize = 256 * 1024;
/// What an inert `<link` becomes.
const INERT_LINK: &str = "<x-link";

/// What the view changes in the body.
#[derive(Debug)]
pub struct Rewrites {
    /// The message id, for the attachments' URLs.
    id: String,
    /// The indices of the attachments that have a Content-ID, ordered by
    /// Content-ID (compared as [`folded`]) and then by index.
    cids: Vec<u32>,
    /// Whether `<link>` tags are made inert.
    links: bool,
    /// The longest a replacement is written.
    longest: usize,
}

/// A replacement found in the body: `start..end` becomes `with`.
#[derive(Debug, Clone, Copy)]
struct Found {
    start: usize,
    end: usize,
    with: Replacement,
}

#[derive(Debug, Clone, Copy)]
enum Replacement {
    Attachment(u32),
    InertLink,
}

/// Where the view stands in the body.
#[derive(Debug, Default)]
pub struct Cursor {
    /// The body bytes written so far.
    at: usize,
    /// Where the search for the next `:` or `<` goes on: every one before
    /// it has been looked at.
    from: usize,
    /// The next replacement, found ahead of `at`.
    next: Option<Found>,
}

/// The text compared when a reference is looked up: lower case, char by char.
fn folded(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().flat_map(char::to_lowercase)
}

impl Rewrites {
    /// The rewrites of `email`'s HTML view.
    pub fn new(email: &Email, links: bool) -> Rewrites {
        Rewrites::of(email.id.to_string(), email.attachments(), links)
    }

    /// The rewrites of the HTML view of message `id` with these attachments.
    pub fn of(id: String, attachments: &[AttachmentInfo], links: bool) -> Rewrites {
        let mut cids: Vec<u32> = (0..attachments.len() as u32)
            .filter(|&i| attachments[i as usize].content_id.is_some())
            .collect();
        let cid = |i: u32| attachments[i as usize].content_id.as_deref().unwrap_or("");
        cids.sort_by(|&a, &b| folded(cid(a)).cmp(folded(cid(b))).then(a.cmp(&b)));
        let longest = super::attachment_url(&id, u32::MAX as usize)
            .len()
            .max(INERT_LINK.len());
        Rewrites {
            id,
            cids,
            links,
            longest,
        }
    }

    /// Whether the body is written as it is stored (LF for CRLF aside).
    pub fn is_empty(&self) -> bool {
        self.cids.is_empty() && !self.links
    }

    /// The first attachment whose Content-ID is `reference`, case aside.
    fn lookup(&self, attachments: &[AttachmentInfo], reference: &str) -> Option<u32> {
        let cid = |i: u32| {
            attachments
                .get(i as usize)
                .and_then(|a| a.content_id.as_deref())
                .unwrap_or("")
        };
        let first = self
            .cids
            .partition_point(|&i| folded(cid(i)).lt(folded(reference)));
        let i = *self.cids.get(first)?;
        folded(cid(i)).eq(folded(reference)).then_some(i)
    }

    /// The replacement whose `:` or `<` is at `at`, if there is one; `work`
    /// counts the bytes of reference read.
    fn at(
        &self,
        html: &[u8],
        at: usize,
        attachments: &[AttachmentInfo],
        work: &mut usize,
    ) -> Option<Found> {
        if html[at] == b'<' {
            return self.inert_link(html, at);
        }
        if self.cids.is_empty() {
            return None;
        }
        let start = at.checked_sub(3)?;
        if !html[start..at].eq_ignore_ascii_case(b"cid")
            || start
                .checked_sub(1)
                .is_some_and(|p| html[p].is_ascii_alphanumeric())
        {
            return None;
        }
        let from = at + 1;
        let ends = |b: &u8| matches!(b, b'"' | b'\'' | b')' | b'&') || b.is_ascii_whitespace();
        let window = &html[from..html.len().min(from + MAX_REFERENCE_BYTES + 1)];
        *work += window.len();
        let end = if window.first() == Some(&b'<') {
            // `cid:<id>`: up to the closing bracket.
            match window.iter().position(|b| *b == b'>' || ends(b)) {
                Some(p) if window[p] == b'>' => from + p + 1,
                _ => return None,
            }
        } else {
            match window
                .iter()
                .position(|b| ends(b) || matches!(b, b'<' | b'>'))
            {
                Some(p) => from + p,
                None if from + window.len() == html.len() => html.len(),
                None => return None,
            }
        };
        if end - from > MAX_REFERENCE_BYTES {
            return None;
        }
        // Made of bytes up to ASCII delimiters after ASCII `cid:`: whole characters.
        let text = std::str::from_utf8(&html[from..end]).ok()?;
        let decoded = percent_decode_lossy(text);
        let reference = decoded.trim().trim_start_matches('<').trim_end_matches('>');
        if reference.is_empty() {
            return None;
        }
        let index = self.lookup(attachments, reference)?;
        Some(Found {
            start,
            end,
            with: Replacement::Attachment(index),
        })
    }

    /// `<link` as a tag name (ASCII case aside, then a blank, `/` or `>`),
    /// when links are made inert.
    fn inert_link(&self, html: &[u8], at: usize) -> Option<Found> {
        let name = html.get(at + 1..at + 5)?;
        let after = *html.get(at + 5)?;
        let tag = self.links
            && name.eq_ignore_ascii_case(b"link")
            && matches!(after, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ' | b'/' | b'>');
        tag.then_some(Found {
            start: at,
            end: at + 5,
            with: Replacement::InertLink,
        })
    }

    /// What `with` is written as.
    fn write(&self, with: Replacement, out: &mut Vec<u8>) {
        match with {
            Replacement::Attachment(index) => {
                out.extend_from_slice(super::attachment_url(&self.id, index as usize).as_bytes())
            }
            Replacement::InertLink => out.extend_from_slice(INERT_LINK.as_bytes()),
        }
    }
}

impl Cursor {
    /// Appends the next piece of the view of `html` (with CRLF read as LF
    /// when `crlf`) to `out`: at most `room` bytes (at least a replacement's
    /// length); false, appending nothing, once the body is done.
    pub fn fill(
        &mut self,
        html: &[u8],
        crlf: bool,
        rewrites: &Rewrites,
        attachments: &[AttachmentInfo],
        out: &mut Vec<u8>,
        room: usize,
    ) -> bool {
        if self.at >= html.len() {
            return false;
        }
        let limit = out.len() + room.max(rewrites.longest);
        let mut work = 0;
        while out.len() < limit && self.at < html.len() && work < MAX_REFERENCE_WORK {
            let room = limit - out.len();
            if let Some(found) = self.next {
                if self.at < found.start {
                    let to = found.start.min(self.at + room);
                    self.at = copy(html, self.at, to, crlf, out);
                    continue;
                }
                if room < rewrites.longest {
                    break;
                }
                rewrites.write(found.with, out);
                self.at = found.end;
                self.next = None;
                continue;
            }
            // Every `:` and `<` before `want` looked at: a reference found
            // after them starts at or after `want - 3`.
            let want = html.len().min(self.at + room + 3);
            if self.from < want && !rewrites.is_empty() {
                self.next = self.search(html, want, rewrites, attachments, &mut work);
                continue;
            }
            let safe = if self.from >= html.len() || rewrites.is_empty() {
                html.len()
            } else {
                self.from - 3
            };
            let to = safe.min(self.at + room);
            self.at = copy(html, self.at, to, crlf, out);
        }
        true
    }

    /// The first replacement whose `:` or `<` is at or after `from` and
    /// before `want`; `from` moves past what was looked at.
    fn search(
        &mut self,
        html: &[u8],
        want: usize,
        rewrites: &Rewrites,
        attachments: &[AttachmentInfo],
        work: &mut usize,
    ) -> Option<Found> {
        // Only the bytes a replacement can start at: `:` of a `cid:` when
        // there are Content-IDs, `<` of a `<link` when links are made inert.
        let next = |hay: &[u8]| match (rewrites.cids.is_empty(), rewrites.links) {
            (false, true) => memchr::memchr2(b':', b'<', hay),
            (false, false) => memchr::memchr(b':', hay),
            (true, _) => memchr::memchr(b'<', hay),
        };
        while self.from < want && *work < MAX_REFERENCE_WORK {
            let Some(at) = next(&html[self.from..want]).map(|p| self.from + p) else {
                self.from = want;
                return None;
            };
            self.from = at + 1;
            if let Some(found) = rewrites.at(html, at, attachments, work) {
                self.from = found.end;
                return Some(found);
            }
        }
        None
    }
}

/// Copies `html[at..to]` to `out`, CRLF as LF when `crlf`; where it stopped
/// (past `to` by one when a CRLF straddles it: both bytes are read).
fn copy(html: &[u8], mut at: usize, to: usize, crlf: bool, out: &mut Vec<u8>) -> usize {
    if !crlf {
        out.extend_from_slice(&html[at..to]);
        return to;
    }
    while at < to {
        match memchr::memchr(b'\r', &html[at..to]) {
            None => {
                out.extend_from_slice(&html[at..to]);
                return to;
            }
            Some(p) => {
                out.extend_from_slice(&html[at..at + p]);
                let cr = at + p;
                if html.get(cr + 1) == Some(&b'\n') {
                    out.push(b'\n');
                    at = cr + 2;
                } else {
                    out.push(b'\r');
                    at = cr + 1;
                }
            }
        }
    }
    at
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attachment(content_id: Option<&str>) -> AttachmentInfo {
        AttachmentInfo {
            filename: String::new(),
            content_type: "image/png".to_owned(),
            size: 1,
            content_id: content_id.map(str::to_owned),
        }
    }

    /// The view built whole, in two plain passes over the LF text: `cid:`
    /// references as the view was first written (one pass over the `:`),
    /// then `<link` tags. The reference the streamed view must agree with.
    fn whole(html: &str, crlf: bool, attachments: &[AttachmentInfo], links: bool) -> String {
        let html = if crlf {
            html.replace("\r\n", "\n")
        } else {
            html.to_owned()
        };
        let cids: Vec<(usize, &str)> = attachments
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.content_id.as_deref().map(|c| (i, c)))
            .collect();
        let bytes = html.as_bytes();
        let mut out = String::new();
        let (mut copied, mut from) = (0, 0);
        while let Some(found) = bytes[from..]
            .iter()
            .position(|&b| b == b':')
            .map(|p| from + p)
        {
            from = found + 1;
            let Some(start) = found.checked_sub(3) else {
                continue;
            };
            if cids.is_empty()
                || !bytes[start..found].eq_ignore_ascii_case(b"cid")
                || start
                    .checked_sub(1)
                    .is_some_and(|p| bytes[p].is_ascii_alphanumeric())
            {
                continue;
            }
            let ends = |b: &u8| matches!(b, b'"' | b'\'' | b')' | b'&') || b.is_ascii_whitespace();
            let end = if bytes.get(from) == Some(&b'<') {
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
            if end - from > MAX_REFERENCE_BYTES {
                continue;
            }
            let reference = percent_decode_lossy(&html[from..end]);
            let reference = reference
                .trim()
                .trim_start_matches('<')
                .trim_end_matches('>');
            let target = cids.iter().find(|(_, cid)| {
                cid.eq_ignore_ascii_case(reference)
                    || cid.to_lowercase() == reference.to_lowercase()
            });
            if let (false, Some((index, _))) = (reference.is_empty(), target) {
                out.push_str(&html[copied..start]);
                out.push_str(&format!("/api/emails/ID/attachments/{index}"));
                copied = end;
                from = end;
            }
        }
        out.push_str(&html[copied..]);
        if links { inert_links(&out) } else { out }
    }

    /// Every `<link` tag name of `html` as `<x-link`.
    fn inert_links(html: &str) -> String {
        let mut linked = String::new();
        let mut rest = html;
        while let Some(p) = rest.find('<') {
            let tag = rest
                .get(p + 1..p + 5)
                .is_some_and(|n| n.eq_ignore_ascii_case("link"))
                && rest.as_bytes()[p..]
                    .get(5)
                    .is_some_and(|b| b"\t\n\x0c\r /> ".contains(b));
            linked.push_str(&rest[..p]);
            if tag {
                linked.push_str("<x-link");
                rest = &rest[p + 5..];
            } else {
                linked.push('<');
                rest = &rest[p + 1..];
            }
        }
        linked.push_str(rest);
        linked
    }

    /// The view streamed with `room` bytes a call, each call's piece checked.
    fn streamed(
        html: &str,
        crlf: bool,
        attachments: &[AttachmentInfo],
        links: bool,
        room: usize,
    ) -> String {
        let rewrites = Rewrites::of("ID".to_owned(), attachments, links);
        let mut cursor = Cursor::default();
        let mut out = Vec::new();
        loop {
            let before = out.len();
            if !cursor.fill(
                html.as_bytes(),
                crlf,
                &rewrites,
                attachments,
                &mut out,
                room,
            ) {
                assert_eq!(out.len(), before);
                break;
            }
            assert!(out.len() - before <= room.max(rewrites.longest));
        }
        String::from_utf8(out).expect("UTF-8 in, UTF-8 out")
    }

    #[test]
    fn cid_references_become_attachment_urls() {
        let attachments = [
            attachment(Some("logo@x")),
            attachment(None),
            attachment(Some("Pic%1")),
        ];
        let html = r#"<img src="cid:logo@x"><img src='CID:<LOGO@X>'><div style="background:url(cid:pic%251)">acid:logo@x cid:other</div>"#;
        let want = r#"<img src="/api/emails/ID/attachments/0"><img src='/api/emails/ID/attachments/0'><div style="background:url(/api/emails/ID/attachments/2)">acid:logo@x cid:other</div>"#;
        for room in [1, 7, 64, 1 << 16] {
            assert_eq!(streamed(html, false, &attachments, false, room), want);
        }
        assert_eq!(streamed("cid:", false, &attachments, false, 10), "cid:");
        assert_eq!(
            streamed("é:cid:logo@x", false, &attachments, false, 10),
            "é:/api/emails/ID/attachments/0"
        );
        // The first of two attachments with the same Content-ID.
        let twice = [attachment(Some("A")), attachment(Some("a"))];
        assert_eq!(
            streamed("cid:a", false, &twice, false, 10),
            "/api/emails/ID/attachments/0"
        );
    }

    #[test]
    fn links_become_inert_and_crlf_becomes_lf() {
        let html = "<LINK rel=prefetch href=x>\r\n<link\thref=y><linked><link/><link>\r\r\n";
        assert_eq!(
            streamed(html, true, &[], true, 1),
            "<x-link rel=prefetch href=x>\n<x-link\thref=y><linked><x-link/><x-link>\r\n"
        );
        assert_eq!(
            streamed(html, true, &[], false, 1),
            html.replace("\r\n", "\n")
        );
    }

    #[test]
    fn a_reference_longer_than_the_cap_is_left_as_it_is() {
        let long = "a".repeat(MAX_REFERENCE_BYTES + 1);
        let attachments = [attachment(Some(&long)), attachment(Some("b"))];
        let html = format!("cid:{long} cid:b cid:<{long}>");
        assert_eq!(
            streamed(&html, false, &attachments, false, 100),
            format!("cid:{long} /api/emails/ID/attachments/1 cid:<{long}>")
        );
        // A run of references with no end is read once per call, not once per reference.
        let run = "cid:".repeat(200_000);
        let out = streamed(&run, false, &attachments, false, 1 << 16);
        assert_eq!(out, run);
    }

    proptest! {
        #[test]
        fn streamed_in_any_pieces_is_the_whole_view(
            tokens in proptest::collection::vec(prop_oneof![
                Just("cid:"), Just("CID:"), Just("cid:<"), Just(">"), Just("logo@x"), Just("LOGO@X"),
                Just("pic%251"), Just("Pic%1"), Just("%3C"), Just("a"), Just("é"), Just(" "),
                Just("\r\n"), Just("\r"), Just("\n"), Just("\""), Just("'"), Just("&"), Just(":"),
                Just("<"), Just("<link"), Just("<LINK "), Just("<link>"), Just("/"), Just("x"),
            ], 0..80),
            crlf in any::<bool>(),
            links in any::<bool>(),
            with_cids in any::<bool>(),
            room in 1usize..300,
        ) {
            let html: String = tokens.concat();
            let attachments = if with_cids {
                vec![attachment(Some("logo@x")), attachment(None), attachment(Some("Pic%1")), attachment(Some("LOGO@x"))]
            } else {
                vec![attachment(None)]
            };
            prop_assert_eq!(
                streamed(&html, crlf, &attachments, links, room),
                whole(&html, crlf, &attachments, links)
            );
        }
    }
}
