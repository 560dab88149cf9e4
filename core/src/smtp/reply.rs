//! SMTP replies, and how client text may appear in them.

use std::fmt;

/// One SMTP reply: a code and one or more lines of text.
///
/// The lines already carry the enhanced status code where one applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The three-digit reply code.
    pub code: u16,
    /// The text lines, without the code and without CRLF.
    pub lines: Vec<String>,
}

impl Reply {
    /// A one-line reply.
    pub fn new(code: u16, text: impl Into<String>) -> Reply {
        Reply {
            code,
            lines: vec![text.into()],
        }
    }

    /// The reply a host sends when it refuses a connection because too many are open.
    pub fn too_many_connections() -> Reply {
        Reply::new(421, "4.7.0 Too many connections, try again later")
    }

    /// The text lines joined with `\n`.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// Appends the reply as it goes on the wire (`NNN-text\r\n` ... `NNN text\r\n`).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        // Written in place: no string is formatted or allocated per reply.
        let digits;
        let formatted;
        let code: &[u8] = if (100..=999).contains(&self.code) {
            let c = self.code;
            digits = [
                b'0' + (c / 100) as u8,
                b'0' + (c / 10 % 10) as u8,
                b'0' + (c % 10) as u8,
            ];
            &digits
        } else {
            formatted = self.code.to_string();
            formatted.as_bytes()
        };
        let last = self.lines.len().saturating_sub(1);
        if self.lines.is_empty() {
            out.extend_from_slice(code);
            out.extend_from_slice(b" \r\n");
        }
        for (i, line) in self.lines.iter().enumerate() {
            out.extend_from_slice(code);
            out.push(if i == last { b' ' } else { b'-' });
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }

    /// The reply as it goes on the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out);
        out
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.lines.join(" / "))
    }
}

/// The most characters of an EHLO or HELO argument echoed (a domain's longest).
pub(super) const MAX_ECHOED_DOMAIN: usize = 255;

/// Client text echoed in a reply: at most 32 characters, see [`printable`].
pub(super) fn shown(text: &str) -> String {
    printable(text, 32)
}

/// Client text as it may appear in a reply: at most `max` characters, each
/// one that is not printable as `?`.
///
/// Printable is ASCII from space to `~`, and letters and digits of other
/// scripts (an internationalised domain stays readable). Control characters
/// (a bare CR would break the reply's framing, ESC starts terminal escape
/// sequences), format characters such as bidirectional overrides, other
/// spaces and symbols are not.
pub(super) fn printable(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() || (!c.is_ascii() && c.is_alphanumeric()) {
                c
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_of_one_many_and_no_lines() {
        let one = Reply::new(250, "2.1.0 Ok");
        assert_eq!(one.to_bytes(), b"250 2.1.0 Ok\r\n");
        let many = Reply {
            code: 250,
            lines: vec!["mailjar".into(), "PIPELINING".into(), "SIZE 10".into()],
        };
        assert_eq!(
            many.to_bytes(),
            b"250-mailjar\r\n250-PIPELINING\r\n250 SIZE 10\r\n"
        );
        let none = Reply {
            code: 421,
            lines: Vec::new(),
        };
        assert_eq!(none.to_bytes(), b"421 \r\n");
        // Codes outside three digits (no SMTP reply has one) are still written whole.
        assert_eq!(Reply::new(42, "x").to_bytes(), b"42 x\r\n");
        assert_eq!(Reply::new(1000, "x").to_bytes(), b"1000 x\r\n");
        assert_eq!(Reply::new(100, "x").to_bytes(), b"100 x\r\n");
    }
}
