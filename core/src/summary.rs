//! A message as a summary: the few fields a list of mail or an event shows,
//! without the bodies or the raw bytes.
//!
//! `GET /api/emails?view=summary` is a list of these, and the event stream
//! sends one per stored message. A summary is built once, at delivery, from
//! what parsing the message found (so off the async workers for a large
//! message, and never by reading the header block again), and kept with the
//! message as JSON: every list (`crate::view::SummaryList`) and subscriber
//! that shows it shares those bytes, and the store counts them in the
//! message's footprint.
//!
//! A summary is bounded whatever the message: `from` and `subject` keep
//! their first [`SUMMARY_TEXT_CHARS`] characters, `cc` as many addresses as
//! fit in that many characters (the last one cut), and `preview` the first
//! [`PREVIEW_CHARS`] characters of the text. Escaped, that is at most about
//! 24 KiB, plus the envelope (which the 256-octet path limit and
//! `--max-recipients` bound).

use bytes::{Bytes, BytesMut};
use serde::Serialize;

use crate::id::MessageId;
use crate::smtp::Envelope;
use crate::timestamp::rfc3339_ms;

/// How many characters of the text `preview` keeps.
pub const PREVIEW_CHARS: usize = 200;

/// How many characters a summary keeps of `from`, of `subject`, and of the
/// `cc` addresses together.
pub const SUMMARY_TEXT_CHARS: usize = 1000;

/// The fields of one summary, in their JSON order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary<'a> {
    id: &'a str,
    received_at: &'a str,
    envelope: &'a Envelope,
    from: &'a str,
    to: &'a [String],
    cc: Vec<&'a str>,
    subject: &'a str,
    size: usize,
    attachment_count: usize,
    has_html: bool,
    preview: String,
    /// False as built: [`with_seen`] writes a seen message's `true` over it.
    seen: bool,
}

/// What a summary is made of, as parsing the message found it.
pub(crate) struct Parts<'a> {
    pub(crate) envelope: &'a Envelope,
    /// The From header as display text; the envelope sender stands in without one.
    pub(crate) from: Option<&'a str>,
    pub(crate) cc: &'a [String],
    pub(crate) subject: &'a str,
    /// The raw message's size.
    pub(crate) size: usize,
    pub(crate) attachment_count: usize,
    pub(crate) has_html: bool,
    /// The text body as UTF-8, not checked (only what the preview reads is
    /// decoded); its line endings do not matter, the preview collapses whitespace.
    pub(crate) text: &'a [u8],
}

/// The id and receive time a summary is built with, until [`stamp`] writes
/// the message's own over them: both have a fixed width.
const PLACEHOLDER_ID: &str = "00000000-0000-0000-0000-000000000000";
const PLACEHOLDER_TIME: &str = "1970-01-01T00:00:00.000Z";
/// Where the id stands in a summary's JSON, and how long its stamp is: the
/// id, what stands between it and the time, and the time.
const ID_AT: usize = br#"{"id":""#.len();
const STAMP_BYTES: usize =
    PLACEHOLDER_ID.len() + br#"","receivedAt":""#.len() + PLACEHOLDER_TIME.len();

/// How a summary as built ends: its `seen`, false.
const UNSEEN_END: &[u8] = b"false}";

/// A summary as a reader is shown it, in two pieces that share the built
/// bytes: the summary itself while the message is unseen; for a seen one,
/// all of it but its closing `false}`, then `true}`. No copy either way.
pub fn with_seen(summary: &Bytes, seen: bool) -> (Bytes, &'static [u8]) {
    match summary.len().checked_sub(UNSEEN_END.len()) {
        Some(cut) if seen && summary.ends_with(UNSEEN_END) => (summary.slice(..cut), b"true}"),
        _ => (summary.clone(), b""),
    }
}

/// [`preview_of`] a whole text (the tests' oracle).
#[cfg(test)]
fn preview(text: &str) -> String {
    preview_of(text.chars())
}

/// The first [`PREVIEW_CHARS`] of these characters with every run of
/// whitespace (line breaks included) as one space, and none at either end;
/// reads no more of them than it keeps, and the whitespace between.
fn preview_of(chars: impl Iterator<Item = char>) -> String {
    let mut out = String::new();
    let mut count = 0;
    let mut space = false;
    for c in chars {
        if c.is_whitespace() {
            space = count > 0;
            continue;
        }
        if space {
            if count + 1 >= PREVIEW_CHARS {
                break;
            }
            out.push(' ');
            count += 1;
            space = false;
        }
        out.push(c);
        count += 1;
        if count == PREVIEW_CHARS {
            break;
        }
    }
    out
}

/// The characters of `bytes` read as UTF-8 a window at a time, so that only
/// what is read is decoded; an invalid sequence is skipped.
fn lazy_chars(bytes: &[u8]) -> impl Iterator<Item = char> + '_ {
    // A preview is 200 characters: most take one window.
    const WINDOW: usize = 1024;
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let window = &bytes[at..bytes.len().min(at + WINDOW)];
            let (valid, skip) = match std::str::from_utf8(window) {
                Ok(text) => (text, 0),
                Err(e) => {
                    // A sequence cut by the window's end is read by the next one.
                    let cut_at_end = e.error_len().is_none() && at + window.len() < bytes.len();
                    let skip = e
                        .error_len()
                        .unwrap_or(usize::from(!cut_at_end) * window.len());
                    let valid = std::str::from_utf8(&window[..e.valid_up_to()]).unwrap_or("");
                    (valid, skip.min(window.len() - valid.len()))
                }
            };
            at += valid.len() + skip;
            if !valid.is_empty() {
                return Some(valid);
            }
        }
        None
    })
    .flat_map(str::chars)
}

/// The first `chars` characters of `text`.
fn cut(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(at, _)| &text[..at])
}

/// The addresses that fit in [`SUMMARY_TEXT_CHARS`] characters, in order;
/// the last one is cut to what room is left.
fn cut_list(addresses: &[String]) -> Vec<&str> {
    let mut room = SUMMARY_TEXT_CHARS;
    let mut kept = Vec::new();
    for address in addresses {
        if room == 0 {
            break;
        }
        let address = cut(address, room);
        room -= address.chars().count();
        kept.push(address);
    }
    kept
}

/// A message's summary JSON (no trailing newline), escaped exactly as
/// `serde_json` escapes, like every other JSON of the API; its id and
/// receive time are placeholders until [`stamp`] writes them.
pub(crate) fn build(parts: &Parts<'_>) -> Bytes {
    let envelope = parts.envelope;
    let summary = Summary {
        id: PLACEHOLDER_ID,
        received_at: PLACEHOLDER_TIME,
        envelope,
        from: cut(parts.from.unwrap_or(&envelope.from), SUMMARY_TEXT_CHARS),
        to: &envelope.to,
        cc: cut_list(parts.cc),
        subject: cut(parts.subject, SUMMARY_TEXT_CHARS),
        size: parts.size,
        attachment_count: parts.attachment_count,
        has_html: parts.has_html,
        preview: preview_of(lazy_chars(parts.text)),
        seen: false,
    };
    // Strings, numbers and booleans: serde_json cannot fail on them.
    let json = serde_json::to_vec(&summary).unwrap_or_default();
    Bytes::from(json.into_boxed_slice())
}

/// Writes the message's id and receive time into its summary, over what
/// was there: O(1) and without allocating when they are already there, for
/// both have a fixed width (a hyphenated UUID, and RFC 3339 with
/// milliseconds of a year from 1970 to 9999).
pub(crate) fn stamp(summary: &mut Bytes, id: MessageId, received_at_ms: u64) {
    use std::io::Write as _;
    let mut stamp = [0u8; STAMP_BYTES];
    let mut rest = &mut stamp[..];
    let formatted = write!(
        rest,
        r#"{id}","receivedAt":"{}"#,
        rfc3339_ms(received_at_ms)
    )
    .is_ok()
        && rest.is_empty();
    let range = ID_AT..ID_AT + STAMP_BYTES;
    match summary.get(range.clone()) {
        Some(now) if formatted && now != stamp => {}
        _ => return,
    }
    // No copy: the summary is not shared before its message is stored.
    let mut bytes = BytesMut::from(std::mem::take(summary));
    bytes[range].copy_from_slice(&stamp);
    *summary = bytes.freeze();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::{Email, Prepared};
    use crate::id::IdGenerator;
    use crate::response::{CHUNK_BYTES, ChunkSource};
    use crate::view::SummaryList;
    use serde_json::Value;
    use std::sync::Arc;

    fn prepared(raw: &[u8]) -> Prepared {
        crate::email::test_prepared(raw)
    }

    fn stored(ids: &mut IdGenerator, raw: &[u8]) -> Arc<Email> {
        Arc::new(Email::new(ids.next(1, [0; 10]), 1, prepared(raw)))
    }

    fn full_view(email: &Arc<Email>) -> Value {
        let mut json = Vec::new();
        let mut source = crate::view::EmailJson::new(email.clone(), false, b"", b"");
        while source.next_chunk(&mut json) {}
        serde_json::from_slice(&json).unwrap()
    }

    #[test]
    fn preview_collapses_whitespace_and_counts_characters() {
        assert_eq!(preview("  a\n\n b\t c  \r\n"), "a b c");
        assert_eq!(preview(""), "");
        let long = "é".repeat(300);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS);
        assert!(long.starts_with(&p));
        // A space at the limit is not kept as the last character.
        let words = format!("{} tail", "x".repeat(PREVIEW_CHARS - 1));
        assert_eq!(preview(&words), "x".repeat(PREVIEW_CHARS - 1));
        let words = format!("{} tail", "x".repeat(PREVIEW_CHARS - 3));
        assert_eq!(preview(&words).chars().count(), PREVIEW_CHARS);
    }

    #[test]
    fn text_is_decoded_lazily_a_window_at_a_time() {
        for pad in 0..4 {
            let text = " ".repeat(1024 * 3 - pad) + &"€😀é x".repeat(100);
            assert_eq!(lazy_chars(text.as_bytes()).collect::<String>(), text);
            assert_eq!(preview_of(lazy_chars(text.as_bytes())), preview(&text));
        }
        // Invalid sequences (which a body's span never holds) are skipped, never a panic or a hang.
        let mut bytes = vec![b'a'; 1023];
        bytes.extend_from_slice(&[0xe2, 0x82, b'b', 0xff, b'c', 0xf0, 0x9f]);
        assert_eq!(
            lazy_chars(&bytes).filter(|c| *c != 'a').collect::<String>(),
            "bc"
        );
    }

    #[test]
    fn a_summary_has_the_fields_of_the_full_view() {
        let mut ids = IdGenerator::new();
        let raw = "From: App <app@x.test>\r\nCc: c@x.test\r\nSubject: Hi \"you\"\r\n\
                   Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
                   Content-Type: text/html\r\n\r\n<p>Hello\r\n  there</p>\r\n--b\r\n\
                   Content-Type: application/pdf; name=a.pdf\r\n\r\nPDF\r\n--b--\r\n";
        let email = stored(&mut ids, raw.as_bytes());
        let bytes = email.summary();
        assert_ne!(bytes.last(), Some(&b'\n'));
        let summary: Value = serde_json::from_slice(&bytes).unwrap();
        let full = full_view(&email);
        for field in [
            "id",
            "receivedAt",
            "envelope",
            "from",
            "to",
            "cc",
            "subject",
            "size",
            "seen",
        ] {
            assert_eq!(summary[field], full[field], "{field}");
        }
        assert_eq!(summary["from"], "App <app@x.test>");
        assert_eq!(summary["attachmentCount"], 1);
        assert_eq!(summary["hasHtml"], true);
        assert_eq!(summary["preview"], preview(full["text"].as_str().unwrap()));
        assert_eq!(summary["preview"], "Hello there");
        // serde_json-exact: as many bytes as serde_json writes for the parsed value.
        assert_eq!(serde_json::to_vec(&summary).unwrap().len(), bytes.len());
        let names: Vec<&String> = summary.as_object().unwrap().keys().collect();
        assert_eq!(names.len(), 12);
        // A seen message's summary shares the built bytes, then says true.
        let (shared, end) = with_seen(&bytes, true);
        assert_eq!(shared.as_ptr(), bytes.as_ptr());
        let seen: Value = serde_json::from_slice(&[&shared[..], end].concat()).unwrap();
        assert_eq!(seen["seen"], true);
        assert_eq!(seen["subject"], summary["subject"]);
        // Without a From header, the envelope sender stands in, as in the full view.
        let bare = stored(&mut ids, b"Subject: s\r\n\r\nplain\r\n");
        let summary: Value = serde_json::from_slice(&bare.summary()).unwrap();
        assert_eq!(summary["from"], "s@x.test");
        assert_eq!(summary["from"], full_view(&bare)["from"]);
        assert_eq!(summary["hasHtml"], false);
        assert_eq!(summary["preview"], "plain");
    }

    #[test]
    fn the_id_and_time_are_the_messages_own_even_when_set_after_it_was_built() {
        let mut ids = IdGenerator::new();
        let mut email = Email::new(ids.next(5, [0; 10]), 5, prepared(b"Subject: s\r\n\r\n"));
        let read = |email: &Email| {
            let value: Value = serde_json::from_slice(&email.summary()).unwrap();
            (value["id"].clone(), value["receivedAt"].clone())
        };
        assert_eq!(
            read(&email),
            (
                email.id.to_string().into(),
                "1970-01-01T00:00:00.005Z".into()
            )
        );
        // A host may give the message its id and time after building it: the store writes them.
        for at in [0, 1_700_000_000_123, u64::MAX] {
            email.id = ids.next(at.min(1 << 47), [7; 10]);
            email.received_at_ms = at;
            let mut store = crate::store::Store::new(Default::default());
            let (kept, _) = store.push(email.clone());
            let time = crate::timestamp::format_rfc3339_ms(at);
            assert_eq!(read(&kept), (kept.id.to_string().into(), time.into()));
            assert_eq!(read(&kept).0, full_view(&kept)["id"]);
        }
    }

    /// A header field `name` of `size` control bytes (six bytes each in JSON), folded.
    fn control_header(name: &str, size: usize) -> String {
        let line: String = (0..900).map(|i| char::from(1 + (i % 8) as u8)).collect();
        let lines = vec![line; size / 900].join("\r\n ");
        format!("{name}: {lines}\r\n")
    }

    #[test]
    fn a_summary_is_bounded_however_large_the_headers() {
        let mut ids = IdGenerator::new();
        let cc: Vec<String> = (0..5000).map(|i| format!("cc{i}@x.test")).collect();
        let raw = format!(
            "From: \"{}\" <a@x.test>\r\n{}Cc: {}\r\n\r\n{}",
            "\u{1}".repeat(200_000),
            control_header("Subject", 200_000),
            cc.join(", "),
            " \r\n".repeat(100_000) + "end"
        );
        let email = stored(&mut ids, raw.as_bytes());
        let bytes = email.summary();
        let summary: Value = serde_json::from_slice(&bytes).unwrap();
        let full = full_view(&email);
        let text = |v: &Value, f: &str| v[f].as_str().unwrap().to_owned();
        for field in ["from", "subject"] {
            assert_eq!(
                text(&summary, field).chars().count(),
                SUMMARY_TEXT_CHARS,
                "{field}"
            );
            assert!(
                text(&full, field).starts_with(&text(&summary, field)),
                "{field}"
            );
        }
        let kept: Vec<&str> = summary["cc"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            kept.iter().map(|a| a.chars().count()).sum::<usize>(),
            SUMMARY_TEXT_CHARS
        );
        let last = kept.len() - 1;
        assert_eq!(kept[..last], cc[..last]);
        assert!(cc[last].starts_with(kept[last]));
        assert_eq!(summary["preview"], "end");
        // 1000 characters of from and subject escaped (six bytes each), 1000 of cc, and the rest.
        assert!(bytes.len() < 16 * 1024, "{}", bytes.len());
    }

    #[test]
    fn the_store_counts_the_summary_it_keeps() {
        let mut ids = IdGenerator::new();
        // Two messages alike but for their From header: what they are counted for differs by
        // the raw bytes and the summary bytes.
        let message =
            |from: &str| format!("From: \"{from}\" <a@x.test>\r\nSubject: s\r\n\r\nbody\r\n");
        let small = stored(&mut ids, message("a").as_bytes());
        let large = stored(&mut ids, message(&"\u{1}".repeat(5000)).as_bytes());
        let raw = large.raw().len() - small.raw().len();
        let summary = large.summary().len() - small.summary().len();
        // The From header's first 1000 characters, six bytes each in JSON.
        assert!(summary > 5 * SUMMARY_TEXT_CHARS, "{summary}");
        assert_eq!(large.footprint() - small.footprint(), raw + summary);
    }

    fn list_json(emails: Vec<Arc<Email>>) -> (Vec<u8>, usize) {
        let (mut out, mut largest) = (Vec::new(), 0);
        let mut list = SummaryList::new(emails.into_iter().map(|e| (e, false)).collect());
        loop {
            let before = out.len();
            if !list.next_chunk(&mut out) {
                return (out, largest);
            }
            largest = largest.max(out.len() - before);
        }
    }

    #[test]
    fn lists_of_summaries_are_valid_json_in_order_in_chunks_of_at_most_chunk_bytes() {
        let mut ids = IdGenerator::new();
        let emails: Vec<_> = (0..500)
            .map(|i| {
                let subject = format!("m{i} {}", "\u{1}".repeat(i));
                stored(
                    &mut ids,
                    format!("Subject: {subject}\r\n\r\nbody {i}\r\n").as_bytes(),
                )
            })
            .collect();
        let (out, largest) = list_json(emails.clone());
        assert!(out.len() > 4 * CHUNK_BYTES);
        assert_eq!(
            largest, CHUNK_BYTES,
            "every chunk but the last is full, none larger"
        );
        let value: Value = serde_json::from_slice(&out).unwrap();
        let got: Vec<&str> = value["emails"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["subject"].as_str().unwrap())
            .collect();
        let want: Vec<&str> = emails.iter().map(|e| e.subject()).collect();
        assert_eq!(got, want);
        let (empty, _) = list_json(Vec::new());
        assert_eq!(empty, br#"{"emails":[]}"#);
    }
}
