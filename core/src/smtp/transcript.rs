//! The SMTP dialogue of a session, as each message keeps it
//! (`GET /api/emails/:id/transcript`).
//!
//! The session records every line it reads and every reply line it queues in
//! one buffer, with the milliseconds since the connection opened. Message
//! text (DATA, BDAT chunks) is one line saying how many bytes it was, and an
//! AUTH exchange keeps its mechanism but never its payload (user names,
//! passwords and tokens are `<credentials elided>`). The buffer holds at
//! most [`MAX_TRANSCRIPT_BYTES`]; past that one marker line ends it.
//!
//! A message is handed the dialogue from the greeting to its own 250: the
//! lines before the session's first MAIL FROM (greeting, EHLO, STARTTLS,
//! AUTH), then those since the session's previous message. So a session that
//! sends many messages gives each a transcript of the same small size, not
//! one that grows with the session.
//!
//! Recording costs no allocation per line: each line is appended to the one
//! buffer, whose capacity never passes the limit.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::reply::Reply;

/// The most bytes a transcript holds (its encoded lines), the end marker included.
pub const MAX_TRANSCRIPT_BYTES: usize = 64 * 1024;

/// The line that ends a transcript that reached [`MAX_TRANSCRIPT_BYTES`].
const TRUNCATED: &[u8] = b"<transcript truncated: at most 64 KiB a session>";

/// What replaces an AUTH payload.
const ELIDED: &[u8] = b"<credentials elided>";

/// Per line: milliseconds (u32), direction (one byte), length (u16), all little-endian.
const HEADER: usize = 7;

/// Who sent a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client (`"c"` in the JSON).
    Client,
    /// The server (`"s"` in the JSON).
    Server,
}

/// One line of a transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// Milliseconds since the connection opened.
    pub ms: u32,
    /// Who sent it.
    pub dir: Direction,
    /// The line without its CRLF, as sent (message text and credentials elided).
    pub text: &'a [u8],
}

/// The dialogue of the session that delivered a message; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Transcript {
    bytes: Box<[u8]>,
}

impl Transcript {
    /// A transcript from what [`Transcript::as_bytes`] gave (a stored copy);
    /// `None` when the bytes are not a whole transcript.
    pub fn from_bytes(bytes: &[u8]) -> Option<Transcript> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let len = usize::from(u16::from_le_bytes([*rest.get(5)?, *rest.get(6)?]));
            rest = rest.get(HEADER + len..)?;
        }
        Some(Transcript {
            bytes: bytes.into(),
        })
    }

    /// The encoded lines, to keep a copy (see [`Transcript::from_bytes`]).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes it holds, for the store's accounting.
    pub fn footprint(&self) -> usize {
        self.bytes.len()
    }

    /// Whether no line was recorded (a message that came by another way than SMTP).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Its lines, in order.
    pub fn lines(&self) -> impl Iterator<Item = Line<'_>> {
        let mut rest: &[u8] = &self.bytes;
        std::iter::from_fn(move || {
            if rest.len() < HEADER {
                return None;
            }
            let ms = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let dir = match rest[4] {
                b'c' => Direction::Client,
                _ => Direction::Server,
            };
            let len = usize::from(u16::from_le_bytes([rest[5], rest[6]]));
            let text = rest.get(HEADER..HEADER + len)?;
            rest = &rest[HEADER + len..];
            Some(Line { ms, dir, text })
        })
    }
}

/// `[{"ms", "dir": "c"|"s", "line"}, ...]`; text that is not UTF-8 is shown with U+FFFD.
impl Serialize for Transcript {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for line in self.lines() {
            seq.serialize_element(&line)?;
        }
        seq.end()
    }
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("ms", &self.ms)?;
        let dir = match self.dir {
            Direction::Client => "c",
            Direction::Server => "s",
        };
        map.serialize_entry("dir", dir)?;
        map.serialize_entry("line", &String::from_utf8_lossy(self.text))?;
        map.end()
    }
}

/// A session's recording (see the [module documentation](self)).
#[derive(Debug, Clone, Default)]
pub(super) struct Recorder {
    buf: Vec<u8>,
    /// When the connection opened, in the host's milliseconds (a host that
    /// does not call `open` starts it at the first input).
    opened_at: Option<u64>,
    /// The time of the input being read.
    now: u64,
    /// Where the session's first MAIL FROM begins: a message's transcript
    /// keeps what is before it, and what came since the previous message.
    mark: Option<usize>,
    /// Where the last line begins.
    last: usize,
    /// The limit was reached: the marker is written and nothing more is.
    full: bool,
    /// Message text read since its command, not yet written as its line.
    text_bytes: u64,
}

impl Recorder {
    /// The connection opened at `now_ms`.
    pub(super) fn open(&mut self, now_ms: u64) {
        self.opened_at = Some(now_ms);
        self.now = now_ms;
    }

    /// What comes next was read (or happened) at `now_ms`.
    pub(super) fn at(&mut self, now_ms: u64) {
        self.opened_at.get_or_insert(now_ms);
        self.now = now_ms;
    }

    /// A command line from the client (without CRLF); `auth_answer` when it
    /// answers an AUTH challenge, so it is all credentials.
    pub(super) fn client(&mut self, line: &[u8], auth_answer: bool) {
        if auth_answer {
            return self.line(Direction::Client, &[ELIDED]);
        }
        match auth_payload(line) {
            Some(kept) => self.line(Direction::Client, &[&line[..kept], b" ", ELIDED]),
            None => self.line(Direction::Client, &[line]),
        }
    }

    /// A command line over the line limit, dropped unread.
    pub(super) fn overlong(&mut self) {
        self.line(Direction::Client, &[b"<line over the length limit elided>"]);
    }

    /// Each line of a reply, as it goes on the wire.
    pub(super) fn reply(&mut self, reply: &Reply) {
        let mut code = [b'0'; 3];
        let digits = reply.code.min(999);
        code[0] += (digits / 100) as u8;
        code[1] += (digits / 10 % 10) as u8;
        code[2] += (digits % 10) as u8;
        let last = reply.lines.len().saturating_sub(1);
        if reply.lines.is_empty() {
            self.line(Direction::Server, &[&code]);
        }
        for (i, text) in reply.lines.iter().enumerate() {
            let sep: &[u8] = if i == last { b" " } else { b"-" };
            self.line(Direction::Server, &[&code, sep, text.as_bytes()]);
        }
    }

    /// `n` more bytes of message text were read.
    pub(super) fn text(&mut self, n: usize) {
        self.text_bytes += n as u64;
    }

    /// The message text (or a BDAT chunk) ended: one line says how long it was.
    pub(super) fn text_end(&mut self) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = std::mem::take(&mut self.text_bytes);
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.line(
            Direction::Client,
            &[b"<message text elided: ", &digits[at..], b" bytes>"],
        );
    }

    /// A MAIL FROM was just recorded: the session's first marks where its
    /// transactions begin.
    pub(super) fn mail(&mut self) {
        if self.mark.is_none() {
            self.mark = Some(self.last);
        }
    }

    /// The transcript a message keeps, up to its `accepted` reply; the
    /// session then forgets the lines of this transaction.
    pub(super) fn take(&mut self, accepted: &Reply) -> Transcript {
        self.reply(accepted);
        let transcript = Transcript {
            bytes: self.buf.as_slice().into(),
        };
        if let Some(mark) = self.mark {
            self.buf.truncate(mark);
            self.last = mark;
            self.full = false;
        }
        transcript
    }

    /// Appends one line made of `parts`, or the end marker when it would pass the limit.
    fn line(&mut self, dir: Direction, parts: &[&[u8]]) {
        if self.full {
            return;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let room = MAX_TRANSCRIPT_BYTES - HEADER - TRUNCATED.len();
        if self.buf.len() + HEADER + len > room {
            self.full = true;
            return self.push(Direction::Server, &[TRUNCATED]);
        }
        self.push(dir, parts);
    }

    fn push(&mut self, dir: Direction, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let needed = self.buf.len() + HEADER + len;
        if needed > self.buf.capacity() {
            // Doubling, but never past the limit: a session holds at most that.
            let target = needed
                .max(self.buf.capacity() * 2)
                .clamp(256, MAX_TRANSCRIPT_BYTES);
            self.buf.reserve_exact(target.max(needed) - self.buf.len());
        }
        self.last = self.buf.len();
        let since = self.now.saturating_sub(self.opened_at.unwrap_or(self.now));
        let ms = u32::try_from(since).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&ms.to_le_bytes());
        self.buf.push(match dir {
            Direction::Client => b'c',
            Direction::Server => b's',
        });
        // At most the limit, so it fits.
        self.buf
            .extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_le_bytes());
        for part in parts {
            self.buf.extend_from_slice(part);
        }
    }

    /// The bytes the recording holds now (its capacity).
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.buf.capacity()
    }
}

/// For `AUTH <mechanism> <initial response>`: how much of the line to keep
/// (the verb and the mechanism); `None` for any other line.
fn auth_payload(line: &[u8]) -> Option<usize> {
    let verb = line.get(..5)?;
    if !verb.eq_ignore_ascii_case(b"AUTH ") {
        return None;
    }
    let rest = &line[5..];
    let start = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let end = rest[start..]
        .iter()
        .position(u8::is_ascii_whitespace)
        .map(|e| start + e)?;
    // Something follows the mechanism: that is the payload.
    rest[end..]
        .iter()
        .any(|b| !b.is_ascii_whitespace())
        .then_some(5 + end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(t: &Transcript) -> Vec<(u32, Direction, String)> {
        t.lines()
            .map(|l| (l.ms, l.dir, String::from_utf8_lossy(l.text).into_owned()))
            .collect()
    }

    #[test]
    fn auth_payloads_are_elided_and_mechanisms_kept() {
        let mut r = Recorder::default();
        r.open(100);
        r.client(b"AUTH PLAIN AHVzZXIAc2VjcmV0", false);
        r.at(150);
        r.client(b"auth login dXNlcg==", false);
        r.client(b"c2VjcmV0", true);
        r.client(b"AUTH PLAIN", false);
        let t = r.take(&Reply::new(250, "ok"));
        let lines = texts(&t);
        assert_eq!(
            lines[0],
            (
                0,
                Direction::Client,
                "AUTH PLAIN <credentials elided>".into()
            )
        );
        assert_eq!(
            lines[1],
            (
                50,
                Direction::Client,
                "auth login <credentials elided>".into()
            )
        );
        assert_eq!(lines[2].2, "<credentials elided>");
        assert_eq!(lines[3].2, "AUTH PLAIN");
        assert_eq!(lines[4], (50, Direction::Server, "250 ok".into()));
        assert!(!t.as_bytes().windows(8).any(|w| w == b"c2VjcmV0"));
    }

    #[test]
    fn a_session_holds_at_most_the_limit_and_ends_with_the_marker() {
        let mut r = Recorder::default();
        let line = vec![b'x'; 1000];
        for _ in 0..100 {
            r.client(&line, false);
        }
        assert!(r.held_bytes() <= MAX_TRANSCRIPT_BYTES, "{}", r.held_bytes());
        let t = r.take(&Reply::new(250, "ok"));
        assert!(t.footprint() <= MAX_TRANSCRIPT_BYTES);
        let last = t.lines().last().map(|l| l.text.to_vec());
        assert_eq!(last.as_deref(), Some(TRUNCATED));
        assert_eq!(Transcript::from_bytes(t.as_bytes()), Some(t.clone()));
        assert_eq!(Transcript::from_bytes(&t.as_bytes()[..10]), None);
    }

    #[test]
    fn later_messages_keep_the_session_start_not_earlier_transactions() {
        let mut r = Recorder::default();
        r.reply(&Reply::new(220, "hi"));
        r.client(b"EHLO c", false);
        for n in 0..3 {
            r.client(b"MAIL FROM:<a@b>", false);
            r.mail();
            r.client(b"DATA", false);
            r.text(10 + n);
            r.text_end();
            let t = r.take(&Reply::new(250, "accepted"));
            let lines: Vec<String> = texts(&t).into_iter().map(|l| l.2).collect();
            assert_eq!(
                lines,
                [
                    "220 hi",
                    "EHLO c",
                    "MAIL FROM:<a@b>",
                    "DATA",
                    &format!("<message text elided: {} bytes>", 10 + n),
                    "250 accepted"
                ]
            );
        }
    }
}
