//! JSON string escaping in bounded steps, so a large body becomes JSON a
//! piece at a time instead of in one copy several times its size.
//!
//! The output is byte for byte what `serde_json` writes for the same string.

/// How much input one step escapes, in bytes (at most six times as much output).
pub const STEP_BYTES: usize = 16 * 1024;

/// Appends `text` escaped as the inside of a JSON string (no quotes).
///
/// With `lf_only`, a CR that comes right before an LF is left out (`next` is
/// the byte after `text` in the whole string, so a CR LF pair split across two
/// steps is still seen).
pub fn escape_into(text: &str, lf_only: bool, next: Option<u8>, out: &mut Vec<u8>) {
    let bytes = text.as_bytes();
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' if lf_only && bytes.get(i + 1).copied().or(next) == Some(b'\n') => b"",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[plain_from..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ]);
                plain_from = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain_from..i]);
        out.extend_from_slice(escaped);
        plain_from = i + 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
}

/// Where a step that starts at `start` should end in `bytes`: about
/// [`STEP_BYTES`] on, moved back to the start of a UTF-8 sequence that would
/// otherwise be split (so both halves read as the whole would, even when the
/// bytes are not valid UTF-8).
pub fn step_end(bytes: &[u8], start: usize) -> usize {
    let end = start.saturating_add(STEP_BYTES).min(bytes.len());
    if end == bytes.len() {
        return end;
    }
    for back in 1..=3 {
        let Some(at) = end.checked_sub(back).filter(|at| *at > start) else {
            break;
        };
        if !is_continuation(bytes[at]) {
            let length = match bytes[at] {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => 1,
            };
            return if at + length > end { at } else { end };
        }
    }
    end
}

fn is_continuation(b: u8) -> bool {
    b & 0xc0 == 0x80
}

/// Appends `bytes` read as UTF-8 (each invalid sequence becomes U+FFFD, as
/// `String::from_utf8_lossy` does), escaped as the inside of a JSON string.
pub fn escape_lossy_into(bytes: &[u8], out: &mut Vec<u8>) {
    for chunk in bytes.utf8_chunks() {
        escape_into(chunk.valid(), false, None, out);
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{FFFD}".as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn in_steps_lossy(bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![b'"'];
        let mut at = 0;
        while at < bytes.len() {
            let end = step_end(bytes, at);
            escape_lossy_into(&bytes[at..end], &mut out);
            at = end;
        }
        out.push(b'"');
        out
    }

    fn in_steps_text(text: &str, lf_only: bool) -> Vec<u8> {
        let bytes = text.as_bytes();
        let mut out = vec![b'"'];
        let mut at = 0;
        while at < bytes.len() {
            let end = step_end(bytes, at);
            escape_into(&text[at..end], lf_only, bytes.get(end).copied(), &mut out);
            at = end;
        }
        out.push(b'"');
        out
    }

    #[test]
    fn control_bytes_quotes_and_backslashes_escape_as_serde_json_does() {
        let text: String = (0u8..0x80).map(char::from).collect::<String>() + "é€😀\"\\";
        let mut out = vec![b'"'];
        escape_into(&text, false, None, &mut out);
        out.push(b'"');
        assert_eq!(out, serde_json::to_vec(&text).unwrap());
    }

    #[test]
    fn crlf_becomes_lf_across_a_step_boundary() {
        let mut text = "a".repeat(STEP_BYTES - 1);
        text.push_str("\r\nb\r\rc\r");
        let expected = text.replace("\r\n", "\n");
        assert_eq!(
            in_steps_text(&text, true),
            serde_json::to_vec(&expected).unwrap()
        );
    }

    #[test]
    fn multibyte_characters_on_step_boundaries_survive() {
        for pad in 0..4 {
            let text = "x".repeat(STEP_BYTES - pad) + &"€😀é".repeat(3);
            assert_eq!(
                in_steps_lossy(text.as_bytes()),
                serde_json::to_vec(&text).unwrap()
            );
        }
    }

    #[test]
    fn a_valid_sequence_followed_by_stray_continuation_bytes_is_not_split() {
        let mut input = vec![b'a'; STEP_BYTES - 5];
        input.extend_from_slice(&[0, 0xe0, 0xa0, 0x80, 0x80, 0x80, 0x80]);
        let expected = serde_json::to_vec(&String::from_utf8_lossy(&input)).unwrap();
        assert_eq!(in_steps_lossy(&input), expected);
    }

    proptest! {
        #[test]
        fn stepwise_lossy_escaping_equals_serde_json_of_from_utf8_lossy(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            pad in 0usize..8,
        ) {
            // Put the interesting bytes across the first step boundary.
            let mut input = vec![b'a'; STEP_BYTES - pad];
            input.extend_from_slice(&bytes);
            let expected = serde_json::to_vec(&String::from_utf8_lossy(&input)).unwrap();
            prop_assert_eq!(in_steps_lossy(&input), expected);
        }

        #[test]
        fn stepwise_text_escaping_equals_serde_json(text in "\\PC{0,64}", pad in 0usize..8) {
            let input = "b".repeat(STEP_BYTES - pad) + &text;
            prop_assert_eq!(in_steps_text(&input, false), serde_json::to_vec(&input).unwrap());
        }
    }
}
