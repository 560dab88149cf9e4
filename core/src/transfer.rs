//! A part's body with its Content-Transfer-Encoding undone a piece at a
//! time, read straight from the stored raw message: what an attachment
//! download sends, with no decoded copy of the part, and what the parser
//! reads a text body and an attachment's `size` with.
//!
//! The rules are RFC 2045's, lenient as mail readers and Python's `email`
//! are:
//! - base64, as Python's `email` reads it: characters outside the alphabet
//!   (line ends, spaces, anything stray) are skipped; missing padding is
//!   forgiven (a group cut short gives its whole bytes); nothing is read
//!   after the padding that ends a group. A body that cannot be base64 (one
//!   letter left over) is not handed here as base64 at all
//!   (the parser calls it unencoded), so the
//!   bytes sent are those the attachment's `size` counts;
//! - quoted-printable: `=XX` is a byte (hex digits of either case); an `=`
//!   at the end of a line (spaces and tabs may follow it) joins the line to
//!   the next; spaces and tabs at the end of a line are dropped; an `=` that
//!   starts neither stays as written; line ends (CRLF or LF) stay as they are.
//!
//! Each call reads at most [`MAX_INPUT`] bytes of the body, whatever it
//! gives: a body of blanks or stray bytes costs the same time per call as
//! any other, and a decoder keeps a few bytes of state, never a line.
//!
//! Kept by hand: the `base64` crate is strict (a stray character or missing
//! padding is an error, where mail readers go on) and neither it nor the
//! `quoted_printable` crate decodes a piece at a time from a range of the
//! stored message, which is what lets a download hold one chunk. Covered by
//! the `deliver` fuzz target (through the parser) and the chunk-size tests.

use mail_parser::Encoding;

/// The most body bytes one [`TransferDecoder::fill`] reads (or looks ahead over).
pub const MAX_INPUT: usize = 256 * 1024;

/// A body decoded as it is read; see the [module documentation](self).
#[derive(Debug)]
pub struct TransferDecoder {
    encoding: Encoding,
    /// How far into the body it has read.
    at: usize,
    base64: Base64,
    qp: QpStep,
    done: bool,
}

/// A base64 group under way: its sextets so far.
#[derive(Debug, Default)]
struct Base64 {
    bits: u32,
    sextets: u8,
    /// `=` seen since its last letter.
    pads: u8,
}

/// What the quoted-printable decoder is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QpStep {
    /// At the next byte to read.
    Ready,
    /// Blanks from `at` up to `upto` (exclusive) seen so far; after an `=`
    /// (at `at`) when `after_equals`.
    Scanning { upto: usize, after_equals: bool },
    /// Blanks from `at` to `end` that are not at a line end: to give.
    Blanks { end: usize },
}

const fn base64_table() -> [u8; 256] {
    let mut table = [0xff; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
}

static BASE64: [u8; 256] = base64_table();

fn hex(b: Option<&u8>) -> Option<u8> {
    b.and_then(|&b| (b as char).to_digit(16)).map(|d| d as u8)
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The length of the line end at `at` (`\n` or `\r\n`), 0 at the end of
/// the body; None when something else is there.
fn line_end(body: &[u8], at: usize) -> Option<usize> {
    match (body.get(at), body.get(at + 1)) {
        (None, _) => Some(0),
        (Some(b'\n'), _) => Some(1),
        (Some(b'\r'), Some(b'\n')) => Some(2),
        _ => None,
    }
}

impl TransferDecoder {
    /// A decoder at the start of a body in `encoding`.
    pub fn new(encoding: Encoding) -> TransferDecoder {
        TransferDecoder {
            encoding,
            at: 0,
            base64: Base64::default(),
            qp: QpStep::Ready,
            done: false,
        }
    }

    /// Appends the next decoded bytes of `body` (the same bytes at every
    /// call) to `out`, at most `room` (at least 3) of them; false, appending
    /// nothing, once the body is done. May append nothing and return true
    /// (a stretch of bytes that give nothing).
    pub fn fill(&mut self, body: &[u8], out: &mut Vec<u8>, room: usize) -> bool {
        if self.done {
            return false;
        }
        let limit = out.len() + room.max(3);
        let stop = body.len().min(self.at.saturating_add(MAX_INPUT));
        match self.encoding {
            Encoding::None => {
                let end = stop.min(self.at + room);
                out.extend_from_slice(&body[self.at.min(end)..end]);
                self.at = end;
            }
            Encoding::Base64 => self.base64(body, out, limit, stop),
            Encoding::QuotedPrintable => self.quoted_printable(body, out, limit, stop),
        }
        if self.at >= body.len() && self.qp == QpStep::Ready {
            self.done = true;
        }
        true
    }

    fn base64(&mut self, body: &[u8], out: &mut Vec<u8>, limit: usize, stop: usize) {
        let group = &mut self.base64;
        while self.at < stop && out.len() + 3 <= limit {
            let b = body[self.at];
            self.at += 1;
            let value = BASE64[b as usize];
            if value < 64 {
                group.bits = (group.bits << 6) | u32::from(value);
                group.sextets += 1;
                group.pads = 0;
                if group.sextets == 4 {
                    out.extend_from_slice(&group.bits.to_be_bytes()[1..]);
                    *group = Base64::default();
                }
            } else if b == b'=' && group.sextets >= 2 {
                group.pads += 1;
                if group.sextets + group.pads >= 4 {
                    // The padding that ends a group ends the body too.
                    group.flush(out);
                    self.at = body.len();
                    return;
                }
            }
        }
        if self.at >= body.len() {
            group.flush(out);
        }
    }

    fn quoted_printable(&mut self, body: &[u8], out: &mut Vec<u8>, limit: usize, stop: usize) {
        let mut budget = MAX_INPUT;
        while out.len() < limit && budget > 0 {
            match self.qp {
                QpStep::Blanks { end } => {
                    let take = (end - self.at).min(limit - out.len());
                    out.extend_from_slice(&body[self.at..self.at + take]);
                    self.at += take;
                    budget = budget.saturating_sub(take);
                    if self.at == end {
                        self.qp = QpStep::Ready;
                    }
                }
                QpStep::Scanning { upto, after_equals } => {
                    let end = body.len().min(upto + budget);
                    let blanks = body[upto..end].iter().take_while(|&&b| is_blank(b)).count();
                    budget = budget.saturating_sub(blanks + 1);
                    let upto = upto + blanks;
                    if upto == end && end < body.len() {
                        self.qp = QpStep::Scanning { upto, after_equals };
                        continue;
                    }
                    self.qp = QpStep::Ready;
                    match (line_end(body, upto), after_equals) {
                        // A soft line break: the `=`, its blanks and the line end go.
                        (Some(eol), true) => self.at = upto + eol,
                        (None, true) => {
                            out.push(b'=');
                            self.at += 1;
                        }
                        // Blanks at the end of a line go; the line end stays.
                        (Some(_), false) => self.at = upto,
                        (None, false) => self.qp = QpStep::Blanks { end: upto },
                    }
                }
                QpStep::Ready if self.at >= stop => return,
                QpStep::Ready => {
                    let b = body[self.at];
                    budget -= 1;
                    if b == b'=' {
                        match (hex(body.get(self.at + 1)), hex(body.get(self.at + 2))) {
                            (Some(high), Some(low)) => {
                                out.push(high << 4 | low);
                                self.at += 3;
                            }
                            _ => {
                                self.qp = QpStep::Scanning {
                                    upto: self.at + 1,
                                    after_equals: true,
                                }
                            }
                        }
                    } else if is_blank(b) {
                        self.qp = QpStep::Scanning {
                            upto: self.at,
                            after_equals: false,
                        };
                    } else {
                        // Up to the next byte that needs a look: copied as it is.
                        let end = stop.min(self.at + (limit - out.len()));
                        let run = body[self.at..end]
                            .iter()
                            .position(|&b| b == b'=' || is_blank(b))
                            .unwrap_or(end - self.at)
                            .max(1);
                        out.extend_from_slice(&body[self.at..self.at + run]);
                        self.at += run;
                        budget = budget.saturating_sub(run);
                    }
                }
            }
        }
    }
}

impl Base64 {
    /// Gives the whole bytes of the group under way (at its padding or the
    /// end of the body) and starts a new one.
    fn flush(&mut self, out: &mut Vec<u8>) {
        match self.sextets {
            2 => out.push((self.bits >> 4) as u8),
            3 => out.extend_from_slice(&[(self.bits >> 10) as u8, (self.bits >> 2) as u8]),
            _ => {}
        }
        *self = Base64::default();
    }
}

/// The length of `body` decoded, a piece at a time (nothing kept whole).
pub fn decoded_len(body: &[u8], encoding: Encoding) -> usize {
    let mut decoder = TransferDecoder::new(encoding);
    let mut piece = Vec::with_capacity(64 * 1024);
    let mut len = 0;
    while decoder.fill(body, &mut piece, 64 * 1024) {
        len += piece.len();
        piece.clear();
    }
    len
}

/// `body` decoded whole (for a host that wants the bytes in one piece, and tests).
pub fn decode_all(body: &[u8], encoding: Encoding) -> Vec<u8> {
    let mut decoder = TransferDecoder::new(encoding);
    let mut out = Vec::new();
    while decoder.fill(body, &mut out, 64 * 1024) {}
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The quoted-printable rules written line by line, whole: the reference the
    /// streaming decoder must agree with.
    fn qp_whole(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for line in body.split_inclusive(|&b| b == b'\n') {
            let cut = if line.ends_with(b"\r\n") {
                line.len() - 2
            } else if line.ends_with(b"\n") {
                line.len() - 1
            } else {
                line.len()
            };
            let (content, eol) = line.split_at(cut);
            let content = &content[..content
                .iter()
                .rposition(|&b| !is_blank(b))
                .map_or(0, |i| i + 1)];
            let mut i = 0;
            let mut soft = false;
            while i < content.len() {
                if content[i] != b'=' {
                    out.push(content[i]);
                    i += 1;
                } else if let (Some(h), Some(l)) =
                    (hex(content.get(i + 1)), hex(content.get(i + 2)))
                {
                    out.push(h << 4 | l);
                    i += 3;
                } else if i + 1 == content.len() {
                    soft = true;
                    i += 1;
                } else {
                    out.push(b'=');
                    i += 1;
                }
            }
            if !soft {
                out.extend_from_slice(eol);
            }
        }
        out
    }

    /// Decoded with `room` bytes a call, every call's piece checked against it.
    fn decode_in(body: &[u8], encoding: Encoding, room: usize) -> Vec<u8> {
        let mut decoder = TransferDecoder::new(encoding);
        let mut out = Vec::new();
        let mut calls = 0;
        loop {
            let before = out.len();
            let more = decoder.fill(body, &mut out, room);
            assert!(out.len() - before <= room.max(3));
            if !more {
                assert_eq!(out.len(), before, "nothing after the end");
                return out;
            }
            calls += 1;
            assert!(calls < 10 * body.len() + 10, "no progress");
        }
    }

    #[test]
    fn quoted_printable_escapes_soft_breaks_and_blanks() {
        let qp = |s: &str| String::from_utf8(decode_all(s.as_bytes(), Encoding::QuotedPrintable));
        assert_eq!(qp("Caf=C3=A9 caf=c3=a9\r\n").unwrap(), "Café café\r\n");
        assert_eq!(qp("one =\r\ntwo=\nthree= \r\n").unwrap(), "one twothree");
        assert_eq!(
            qp("trailing   \r\nblanks\t\n").unwrap(),
            "trailing\r\nblanks\n"
        );
        // An `=`, one hex digit and the line end is not half an escape.
        assert_eq!(
            qp("https://example.com/?ie=UTF8&psc=1\r\nnext\r\n").unwrap(),
            "https://example.com/?ie=UTF8&psc=1\r\nnext\r\n"
        );
        assert_eq!(qp("x=G1 y==3D z=\tw a=").unwrap(), "x=G1 y== z=\tw a");
        assert_eq!(qp("a\r  \nb  ").unwrap(), "a\r\nb");
    }

    #[test]
    fn base64_skips_what_is_not_base64() {
        assert_eq!(decode_all(b"SGVs\r\nbG8=\r\n", Encoding::Base64), b"Hello");
        assert_eq!(decode_all(b"SGV*sbG8=!", Encoding::Base64), b"Hello");
        // Missing padding is forgiven; nothing is read after the padding that ends a group.
        assert_eq!(decode_all(b"SGVsbG8", Encoding::Base64), b"Hello");
        assert_eq!(decode_all(b"SGVsbG8=", Encoding::Base64), b"Hello");
        assert_eq!(decode_all(b"QQ==QUJD\xff", Encoding::Base64), b"A");
        assert_eq!(decode_all(b"QQ=", Encoding::Base64), b"A");
        // An `=` too early to be padding is skipped, as Python's binascii skips it.
        assert_eq!(decode_all(b"Q=UJD", Encoding::Base64), b"ABC");
        assert_eq!(decode_all(b"", Encoding::Base64), b"");
    }

    #[test]
    fn well_formed_bodies_decode_as_mail_parser_decodes_them() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &data);
        let lines: Vec<u8> = encoded
            .as_bytes()
            .chunks(76)
            .flat_map(|l| [l, b"\r\n"].concat())
            .collect();
        assert_eq!(decode_in(&lines, Encoding::Base64, 100), data);
        let parsed = mail_parser::decoders::base64::base64_decode(&lines).unwrap();
        assert_eq!(parsed, data);
        let text = "Gr=C3=BC=C3=9Fe, soft=\r\nbreak and blanks  \r\nend\r\n";
        assert_eq!(
            decode_in(text.as_bytes(), Encoding::QuotedPrintable, 3),
            "Grüße, softbreak and blanks\r\nend\r\n".as_bytes()
        );
    }

    #[test]
    fn a_long_run_of_blanks_is_read_a_bounded_stretch_a_call() {
        let mut body = vec![b' '; 3 * MAX_INPUT];
        body.extend_from_slice(b"x\r\n");
        body.extend(vec![b'\t'; 2 * MAX_INPUT]);
        body.extend_from_slice(b"=\r\nend");
        let mut decoder = TransferDecoder::new(Encoding::QuotedPrintable);
        let mut out = Vec::new();
        let mut calls = 0;
        while decoder.fill(&body, &mut out, 64 * 1024) {
            calls += 1;
        }
        assert!(calls >= 5, "{calls} calls");
        let mut want = vec![b' '; 3 * MAX_INPUT];
        want.extend_from_slice(b"x\r\n");
        want.extend(vec![b'\t'; 2 * MAX_INPUT]);
        want.extend_from_slice(b"end");
        assert!(out == want);
        let stray = vec![b'!'; 3 * MAX_INPUT];
        let mut decoder = TransferDecoder::new(Encoding::Base64);
        let mut calls = 0;
        while decoder.fill(&stray, &mut out, 64 * 1024) {
            calls += 1;
        }
        assert!(calls >= 3);
    }

    proptest! {
        #[test]
        fn quoted_printable_in_pieces_is_the_whole_rules(
            body in proptest::collection::vec(
                prop_oneof![Just(b'='), Just(b' '), Just(b'\t'), Just(b'\r'), Just(b'\n'),
                            Just(b'A'), Just(b'f'), Just(b'3'), Just(b'g'), any::<u8>()],
                0..200),
            room in 1usize..40,
        ) {
            prop_assert_eq!(decode_in(&body, Encoding::QuotedPrintable, room), qp_whole(&body));
        }

        #[test]
        fn base64_in_pieces_is_base64_whole(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            noise in proptest::collection::vec((0usize..400, prop_oneof![Just(b'\r'), Just(b'\n'), Just(b' '), Just(b'!'), Just(0xffu8)]), 0..20),
            room in 1usize..40,
        ) {
            let mut body = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &data).into_bytes();
            for (at, b) in noise {
                let at = at.min(body.len());
                body.insert(at, b);
            }
            prop_assert_eq!(decode_in(&body, Encoding::Base64, room), data);
        }

        #[test]
        fn unencoded_bodies_come_as_they_are(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            room in 1usize..40,
        ) {
            prop_assert_eq!(decode_in(&body, Encoding::None, room), body);
        }
    }
}
